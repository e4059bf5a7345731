// Convolution (and dense, as a 1x1 convolution of a 1x1 image) as an implicit GEMM.
//
//   acc[o, col] = bias[o] + sum_k wt[k, o] * xcol[k, col]
//
// with k = (c, u, v) over Cg * KH * KW and col = (n, i, j) over N * OH * OW, so the whole
// batch is one launch. xcol is never materialized: each work-item walks k for its own
// column and reads the NCHW input directly (the address generator), with out-of-image taps
// read as 0 (the padding value x_zero_point, after subtracting it).
//
// Tiling: a work-group of WG work-items owns TO output channels x WG columns. The weight
// tile (TK x TO) is shared by all of them and staged in local memory; every work-item keeps
// TO int32 accumulators as two int16 vectors and does two vector multiply-adds per gathered
// input value. A column is read by one work-item only, so staging it in local memory too
// would add a copy and a barrier without any reuse: on PoCL that doubled the time per
// tile. On a CPU device the vectors map onto SIMD registers; on a GPU the local weight reads
// are broadcasts.
//
// With the 2x2 max pool fused, a column is one pooled output and the work-item computes its
// four convolution outputs; requantization is monotonic (M > 0), so the max of the
// requantized values equals the golden max_pool2d(requantize(conv2d(...)), 2, 2).
//
// Geometry (int16 g) and quantization (int8 q) travel as two vector arguments so that one
// launch sets few arguments.

// Variants (one kernel each, see the end of this file; runtime.py picks one per layer):
// - TO, the output-channel tile: 32 (two int16 accumulator vectors per output), or 16 (one)
//   for layers with at most 16 output channels per group, which would leave half of a 32
//   tile idle. The host pads each group's output channels to the layer's tile.
// - Without a fused pool, a work-item computes 1 or 8 horizontally adjacent outputs
//   (`_row8`): each weight vector read from local memory then serves 8 gathered inputs,
//   which on PoCL made 3x3 layers 1.4x to 2.2x faster (1x1 layers were slower).
#define TO_MAX 32
#define TK 32
#define WG 64

#define G_N g.s0
#define G_C g.s1
#define G_H g.s2
#define G_W g.s3
#define G_CG g.s4
#define G_OG g.s5
#define G_OGPAD g.s6
#define G_KH g.s7
#define G_KW g.s8
#define G_SH g.s9
#define G_SW g.sa
#define G_PT g.sb
#define G_PL g.sc
#define G_DH g.sd
#define G_DW g.se
#define G_OH g.sf
#define Q_OW q.s0
#define Q_ZX q.s1
#define Q_ZY q.s2
#define Q_LO q.s3
#define Q_HI q.s4
#define Q_O q.s5
#define Q_K q.s6

inline void conv_tile(__global const char *x, __global const char *wt,
                      __global const int *bias, __global const int *mult,
                      __global const int *shift, __global char *y, __global int *status,
                      const int16 g, const int8 q, const int pool, const int TO,
                      const int hn, __local int *ws)
{
    // TO, pool and hn are constants at every call site, so the branches on them fold away.
    // A work-item computes `quads` convolution outputs: the 2x2 window of a fused pool, or
    // hn (1 or 8, at most 8) horizontal neighbours hn * j + t, t < hn.
    const int quads = pool ? 4 : hn;
    const int lid = get_local_id(0);
    const int grp = get_group_id(2);
    const int o0 = get_group_id(1) * TO;
    // Stored output size: the convolution's, or the pooled one (floor, as max_pool2d).
    const int out_h = pool ? G_OH / 2 : G_OH, out_w = pool ? Q_OW / 2 : Q_OW;
    const int per_image = out_h * out_w;
    // Columns per row of the launch: stored outputs, or groups of hn of them (the last
    // group of a row may be partial).
    const int col_w = pool ? out_w : (out_w + hn - 1) / hn;
    const int col = get_global_id(0);
    const bool col_ok = col < G_N * out_h * col_w;
    const int n = col / (out_h * col_w);
    const int pc = col - n * (out_h * col_w);
    const int i = pc / col_w, j = pc - i * col_w;
    const int p = i * out_w + j;  // the stored position when hn == 1
    const int K = Q_K;
    __global const char *xb = x + ((size_t)n * G_C + (size_t)grp * G_CG) * G_H * G_W;
    __global const char *wg = wt + (size_t)grp * K * G_OGPAD + o0;

    int16 acc_lo[8] = {0}, acc_hi[8] = {0};
    int c = 0, u = 0, v = 0;  // k = (c * KH + u) * KW + v, advanced without divisions
    for (int k0 = 0; k0 < K; k0 += TK) {
        for (int r = 0; r < TK * TO / WG; ++r) {
            const int e = lid + r * WG;
            const int kk = e / TO, ol = e % TO;
            ws[e] = k0 + kk < K ? wg[(size_t)(k0 + kk) * G_OGPAD + ol] : 0;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        const int kend = min(TK, K - k0);
        for (int kk = 0; kk < kend; ++kk) {
            const int16 w_lo = vload16(0, ws + kk * TO);
            const int16 w_hi = TO > 16 ? vload16(1, ws + kk * TO) : (int16)0;
            for (int t = 0; t < quads; ++t) {
                const int oi = pool ? 2 * i + (t >> 1) : i;
                const int oj = pool ? 2 * j + (t & 1) : hn * j + t;
                const int iy = oi * G_SH - G_PT + u * G_DH, ix = oj * G_SW - G_PL + v * G_DW;
                int val = 0;
                // (A neighbour beyond the row reads in-image values or zeros; it is never
                // stored.)
                if (col_ok && iy >= 0 && iy < G_H && ix >= 0 && ix < G_W)
                    val = xb[((size_t)c * G_H + iy) * G_W + ix] - Q_ZX;
                // |val * w| <= 255 * 128 and the host keeps K <= 65793: no partial sum
                // leaves int32.
                acc_lo[t] += w_lo * val;
                if (TO > 16)
                    acc_hi[t] += w_hi * val;
            }
            if (++v == G_KW) {
                v = 0;
                if (++u == G_KH) {
                    u = 0;
                    ++c;
                }
            }
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (!col_ok)
        return;

    int accs[8][TO_MAX];
    for (int t = 0; t < quads; ++t) {
        vstore16(acc_lo[t], 0, accs[t]);
        if (TO > 16)
            vstore16(acc_hi[t], 1, accs[t]);
    }
    if (hn > 1 && !pool) {
        for (int r = 0; r < TO && o0 + r < G_OG; ++r) {
            const int oc = grp * G_OGPAD + o0 + r;
            for (int t = 0; t < hn && hn * j + t < out_w; ++t) {
                long total = (long)bias[oc] + accs[t][r];
                if (total != (long)(int)total) {
                    status[0] = 1;
                    total = 0;
                }
                y[((size_t)n * Q_O + grp * G_OG + o0 + r) * per_image + i * out_w + hn * j + t]
                    = (char)tessera_requantize(total, mult[oc], shift[oc], Q_ZY, Q_LO, Q_HI);
            }
        }
        return;
    }
    for (int r = 0; r < TO && o0 + r < G_OG; ++r) {
        const int oc = grp * G_OGPAD + o0 + r;  // index into the padded per-channel tables
        int best = -129;
        for (int t = 0; t < quads; ++t) {
            long total = (long)bias[oc] + accs[t][r];
            if (total != (long)(int)total) {
                status[0] = 1;  // the golden model raises OverflowError here
                total = 0;
            }
            best = max(best, tessera_requantize(total, mult[oc], shift[oc], Q_ZY, Q_LO, Q_HI));
        }
        y[((size_t)n * Q_O + grp * G_OG + o0 + r) * per_image + p] = (char)best;
    }
}

#define CONV_KERNEL(NAME, POOL, TILE, HN)                                                   \
    __kernel __attribute__((reqd_work_group_size(WG, 1, 1)))                                \
    void NAME(__global const char *x, __global const char *wt, __global const int *bias,    \
              __global const int *mult, __global const int *shift, __global char *y,        \
              __global int *status, const int16 g, const int8 q)                            \
    {                                                                                        \
        __local int ws[TK * TILE];                                                           \
        conv_tile(x, wt, bias, mult, shift, y, status, g, q, POOL, TILE, HN, ws);           \
    }

CONV_KERNEL(conv_requant, 0, 32, 1)
CONV_KERNEL(conv_requant_row8, 0, 32, 8)
CONV_KERNEL(conv_requant_pool2, 1, 32, 1)
CONV_KERNEL(conv_requant_o16, 0, 16, 1)
CONV_KERNEL(conv_requant_o16_row8, 0, 16, 8)
CONV_KERNEL(conv_requant_pool2_o16, 1, 16, 1)
