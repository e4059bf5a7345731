// Residual add of two int8 tensors with their own scales (models/eltwise.py, TFLite's ADD):
// both inputs move to a common domain with 20 fractional bits, are added exactly and
// requantized once. q (int16): za, zb, zy, lo, hi, Ma, na, Mb, nb, My, ny.
// |x - z| << 20 < 2^28 and M < 2^31, so every product is below 2^59; |a1 + b1| < 2^28.

__kernel void add_requant(__global const char *a, __global const char *b, __global char *y,
                          const int count, const int16 q)
{
    const int i = get_global_id(0);
    if (i >= count)
        return;
    const long a1 = tessera_rounding_shift((long)(a[i] - q.s0) << 20, q.s5, q.s6);
    const long b1 = tessera_rounding_shift((long)(b[i] - q.s1) << 20, q.s7, q.s8);
    y[i] = (char)tessera_requantize(a1 + b1, q.s9, q.sa, q.s2, q.s3, q.s4);
}
