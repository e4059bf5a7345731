// Pooling on int8 NCHW planes (models/pool.py): one work-item per output for max and
// average pooling, one work-group per plane for the global average.
// Window geometry p (int16): H, W, KH, KW, SH, SW, PT, PL, OH, OW, zx, zy, lo, hi,
// count_include_pad.

#define P_H p.s0
#define P_W p.s1
#define P_KH p.s2
#define P_KW p.s3
#define P_SH p.s4
#define P_SW p.s5
#define P_PT p.s6
#define P_PL p.s7
#define P_OH p.s8
#define P_OW p.s9
#define P_ZX p.sa
#define P_ZY p.sb
#define P_LO p.sc
#define P_HI p.sd
#define P_INCLUDE_PAD p.se

__kernel void max_pool(__global const char *x, __global char *y, const int16 p)
{
    const int plane = get_global_id(1), o = get_global_id(0);
    if (o >= P_OH * P_OW)
        return;
    const int i = o / P_OW, j = o - i * P_OW;
    __global const char *xp = x + (size_t)plane * P_H * P_W;
    // Padding never wins: the host keeps every pad below the kernel, so each window holds
    // a real element and -129 (below every int8) is always replaced.
    int best = -129;
    for (int u = 0; u < P_KH; ++u) {
        const int iy = i * P_SH - P_PT + u;
        if (iy < 0 || iy >= P_H)
            continue;
        for (int v = 0; v < P_KW; ++v) {
            const int ix = j * P_SW - P_PL + v;
            if (ix >= 0 && ix < P_W)
                best = max(best, (int)xp[iy * P_W + ix]);
        }
    }
    y[(size_t)plane * P_OH * P_OW + o] = (char)best;
}

// table_m / table_n are indexed by the window's element count (1 .. KH*KW): the (M, n) of
// quantize_multiplier(x_scale / (y_scale * count)), computed on the host for the counts
// that occur. Padding adds 0 to the sum (the real value 0).
__kernel void avg_pool(__global const char *x, __global char *y,
                       __global const int *table_m, __global const int *table_n,
                       const int16 p)
{
    const int plane = get_global_id(1), o = get_global_id(0);
    if (o >= P_OH * P_OW)
        return;
    const int i = o / P_OW, j = o - i * P_OW;
    __global const char *xp = x + (size_t)plane * P_H * P_W;
    int sum = 0, count = 0;
    for (int u = 0; u < P_KH; ++u) {
        const int iy = i * P_SH - P_PT + u;
        if (iy < 0 || iy >= P_H)
            continue;
        for (int v = 0; v < P_KW; ++v) {
            const int ix = j * P_SW - P_PL + v;
            if (ix >= 0 && ix < P_W) {
                sum += xp[iy * P_W + ix] - P_ZX;
                ++count;
            }
        }
    }
    if (P_INCLUDE_PAD)
        count = P_KH * P_KW;
    y[(size_t)plane * P_OH * P_OW + o] =
        (char)tessera_requantize(sum, table_m[count], table_n[count], P_ZY, P_LO, P_HI);
}

#define GAP_WI 64

// q (int8): HW, zx, zy, lo, hi, M, n. |sum| <= 255 * HW fits int32 (host checks HW).
__kernel __attribute__((reqd_work_group_size(GAP_WI, 1, 1)))
void global_avg_pool(__global const char *x, __global char *y, const int8 q)
{
    __local int partial[GAP_WI];
    const int plane = get_group_id(0), lid = get_local_id(0);
    const int hw = q.s0, zx = q.s1;
    __global const char *xp = x + (size_t)plane * hw;
    int sum = 0;
    for (int t = lid; t < hw; t += GAP_WI)
        sum += xp[t] - zx;
    partial[lid] = sum;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int width = GAP_WI / 2; width > 0; width /= 2) {
        if (lid < width)
            partial[lid] += partial[lid + width];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (lid == 0)
        y[plane] = (char)tessera_requantize(partial[0], q.s5, q.s6, q.s2, q.s3, q.s4);
}
