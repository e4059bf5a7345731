// The benchmark's peer: the obvious int8 convolution, one work-item per output
// (n, o, i, j), looping over every input channel and kernel tap straight from global
// memory, with the same bias + requantization epilogue as Tessera's kernel. Stride 1,
// symmetric padding, NCHW / OIHW; bit-exact with models/ for those shapes.

__kernel void naive_conv(__global const char *x, __global const char *w,
                         __global const int *bias, __global const int *mult,
                         __global const int *shift, __global char *y,
                         const int C, const int H, const int W, const int O,
                         const int KH, const int KW, const int pad,
                         const int zx, const int zy)
{
    const int j = get_global_id(0), i = get_global_id(1), no = get_global_id(2);
    const int n = no / O, o = no - n * O;
    const int oh = H + 2 * pad - KH + 1, ow = W + 2 * pad - KW + 1;
    if (i >= oh || j >= ow)
        return;
    int acc = 0;
    for (int c = 0; c < C; ++c)
        for (int u = 0; u < KH; ++u)
            for (int v = 0; v < KW; ++v) {
                const int iy = i + u - pad, ix = j + v - pad;
                if (iy >= 0 && iy < H && ix >= 0 && ix < W)
                    acc += (x[((n * C + c) * H + iy) * W + ix] - zx)
                           * w[((o * C + c) * KH + u) * KW + v];
            }
    // Tessera's rounding (models/requant.py): nearest, ties to even.
    const long p = (long)(acc + bias[o]) * mult[o];
    const long scaled = (p + (1L << (shift[o] - 1)) - 1 + ((p >> shift[o]) & 1)) >> shift[o];
    y[((n * O + o) * oh + i) * ow + j] = (char)clamp(scaled + zy, -128L, 127L);
}
