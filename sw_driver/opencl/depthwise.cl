// Depthwise convolution (groups == C, one KH x KW filter per channel) with the fused
// requantization and optional 2x2 max pool: one work-item per output. Each output needs
// only KH * KW products, so there is no reduction worth tiling; neighbouring work-items
// read neighbouring input bytes. Uses the g / q argument layout of conv.cl (G_CG, G_OG,
// G_OGPAD and Q_K unused).

inline int depthwise_at(__global const char *xp, __global const char *wc, const int16 g,
                        const int zx, const int oi, const int oj)
{
    const int iy0 = oi * G_SH - G_PT, ix0 = oj * G_SW - G_PL;
    int acc = 0;
    for (int u = 0; u < G_KH; ++u) {
        const int iy = iy0 + u * G_DH;
        if (iy < 0 || iy >= G_H)
            continue;
        for (int v = 0; v < G_KW; ++v) {
            const int ix = ix0 + v * G_DW;
            if (ix >= 0 && ix < G_W)
                acc += (xp[iy * G_W + ix] - zx) * wc[u * G_KW + v];
        }
    }
    return acc;
}

inline void depthwise_body(__global const char *x, __global const char *w,
                           __global const int *bias, __global const int *mult,
                           __global const int *shift, __global char *y,
                           __global int *status, const int16 g, const int8 q, const int pool)
{
    const int plane = get_global_id(1);  // n * C + c
    const int c = plane % G_C;
    const int oh = pool ? G_OH / 2 : G_OH, ow = pool ? Q_OW / 2 : Q_OW;
    const int p = get_global_id(0);
    if (p >= oh * ow)
        return;
    const int i = p / ow, j = p - i * ow;
    __global const char *xp = x + (size_t)plane * G_H * G_W;
    __global const char *wc = w + (size_t)c * G_KH * G_KW;
    const long b = bias[c];
    const int m = mult[c], sh = shift[c];
    int best = -129;
    for (int quad = 0; quad < (pool ? 4 : 1); ++quad) {
        const int oi = pool ? 2 * i + (quad >> 1) : i, oj = pool ? 2 * j + (quad & 1) : j;
        long total = b + depthwise_at(xp, wc, g, Q_ZX, oi, oj);
        if (total != (long)(int)total) {
            status[0] = 1;  // the golden model raises OverflowError here
            total = 0;
        }
        best = max(best, tessera_requantize(total, m, sh, Q_ZY, Q_LO, Q_HI));
    }
    y[(size_t)plane * oh * ow + p] = (char)best;
}

__kernel void depthwise_requant(__global const char *x, __global const char *w,
                                __global const int *bias, __global const int *mult,
                                __global const int *shift, __global char *y,
                                __global int *status, const int16 g, const int8 q)
{
    depthwise_body(x, w, bias, mult, shift, y, status, g, q, 0);
}

__kernel void depthwise_requant_pool2(__global const char *x, __global const char *w,
                                      __global const int *bias, __global const int *mult,
                                      __global const int *shift, __global char *y,
                                      __global int *status, const int16 g, const int8 q)
{
    depthwise_body(x, w, bias, mult, shift, y, status, g, q, 1);
}
