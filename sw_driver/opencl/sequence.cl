// Sequence-model kernels: the batched activation x activation MatMul of models/sequence.py
// and the integer-only Softmax, GELU and LayerNorm of models/intonly.py.
//
// Every value below is an integer and every step is the golden recipe's own step (same
// widths, same floors, same round-half-to-even), so the kernels are bit-exact by
// construction; tests/test_opencl_sequence_kernels.py compares them with the golden
// functions. Comments give the ranges that keep each 64-bit product exact (derived in
// models/intonly.py's docstrings).

// rounding_shift of models/requant.py with a 64-bit multiplier: the caller keeps
// |value * multiplier| + 2^(shift-1) below 2^63 and shift in [1, 62].
inline long tessera_rshift64(long value, long multiplier, int shift)
{
    const long p = value * multiplier;
    return (p + (1L << (shift - 1)) - 1 + ((p >> shift) & 1)) >> shift;
}

// ------------------------------------------------------------------ batched MatMul
//
// y[b, m, n] = requantize(sum_k (a[b, m, k] - za) * (bm[b, k, n] - zb)). The batch may
// broadcast (NumPy matmul rules): the host gives each output batch element the element
// offset of its a and b matrices.
//
// One work-item per output row (b, m): attention matrices are small (17 x 17 for the zoo
// ViT), and a row walks k once per 16 columns with a row of b read as one int16 vector, so
// a CPU device runs the inner loop on SIMD lanes; a one-work-item-per-output version was
// 2x slower on PoCL. Columns beyond the last full 16 are summed one by one.
//
// 255 * 255 * 32768 < 2^31: sums are taken in int over chunks of 32768 products and the
// chunk sums carried in 64 bits. Where a total leaves int32 (the golden matmul_int raises
// there) the status flag is set and the host raises at the next read.
// dims: M, K, N, batch * M (< 2^31, checked by the host); q: za, zb, zy, lo, hi,
// multiplier, shift.
#define MATMUL_CHUNK 32768

inline char matmul_output(long acc, const int8 q, __global int *status)
{
    if (acc < INT_MIN || acc > INT_MAX)
        status[0] = 1;
    return (char)tessera_requantize(acc, q.s5, q.s6, q.s2, q.s3, q.s4);
}

__kernel void batched_matmul_requant(__global const char *a, __global const char *bm,
                                     __global char *y, __global const int *a_off,
                                     __global const int *b_off, __global int *status,
                                     const int4 dims, const int8 q)
{
    const int row = get_global_id(0);
    if (row >= dims.s3)
        return;
    const int M = dims.s0, K = dims.s1, N = dims.s2;
    const int batch = row / M, m = row - batch * M;
    __global const char *ar = a + a_off[batch] + (size_t)m * K;
    __global const char *br = bm + b_off[batch];
    __global char *yr = y + (size_t)row * N;
    int n0 = 0;
    for (; n0 + 16 <= N; n0 += 16) {
        long16 acc = 0;
        for (int k0 = 0; k0 < K; k0 += MATMUL_CHUNK) {
            const int kend = min(K, k0 + MATMUL_CHUNK);
            int16 part = 0;
            for (int k = k0; k < kend; ++k)
                part += ((int)ar[k] - q.s0)
                        * (convert_int16(vload16(0, br + (size_t)k * N + n0)) - q.s1);
            acc += convert_long16(part);
        }
        const long sums[16] = {acc.s0, acc.s1, acc.s2, acc.s3, acc.s4, acc.s5, acc.s6,
                               acc.s7, acc.s8, acc.s9, acc.sa, acc.sb, acc.sc, acc.sd,
                               acc.se, acc.sf};
        for (int t = 0; t < 16; ++t)
            yr[n0 + t] = matmul_output(sums[t], q, status);
    }
    for (; n0 < N; ++n0) {
        long acc = 0;
        for (int k0 = 0; k0 < K; k0 += MATMUL_CHUNK) {
            const int kend = min(K, k0 + MATMUL_CHUNK);
            int part = 0;
            for (int k = k0; k < kend; ++k)
                part += ((int)ar[k] - q.s0) * ((int)br[(size_t)k * N + n0] - q.s1);
            acc += part;
        }
        yr[n0] = matmul_output(acc, q, status);
    }
}

// ------------------------------------------------------------------ integer-only Softmax
//
// One work-item per row of `len` values (models/intonly.py softmax, its recipe line by
// line). The exponentials are computed twice (for the row sum, then for the output)
// rather than stored: no scratch buffer, and the recomputation is cheap integer work.
// p: exp multiplier, exp shift, output multiplier, output shift; q: zy, lo, hi (the output
// type's range: 0..255 for uint8, -128..127 for int8; stored as its low byte).
#define EXP_FRAC_BITS 16
#define EXP2_C0 537796887L
#define EXP2_C1 353065787L
#define EXP2_C2 181027199L
#define SOFTMAX_RECIP_BITS 61
#define SOFTMAX_PROB_BITS 15

inline long intonly_exp(long d, long m_e, int n_e)
{
    // d in [-(2^31 - 1), 0] and m_e < 2^31: the product is below 2^62.
    const long t = tessera_rshift64(d, m_e, n_e);
    const long k = -(t >> EXP_FRAC_BITS);
    const long f = t & ((1L << EXP_FRAC_BITS) - 1);
    const long poly = EXP2_C0 + (((EXP2_C1 + ((EXP2_C2 * f) >> EXP_FRAC_BITS)) * f)
                                 >> EXP_FRAC_BITS);
    return poly >> min(k, 31L);
}

#define INTONLY_SOFTMAX(NAME, T)                                                            \
__kernel void NAME(__global const T *x, __global uchar *y, const int rows, const int len,   \
                   const long4 p, const int4 q)                                             \
{                                                                                           \
    const int r = get_global_id(0);                                                         \
    if (r >= rows)                                                                          \
        return;                                                                             \
    __global const T *xr = x + (size_t)r * len;                                             \
    __global uchar *yr = y + (size_t)r * len;                                               \
    long top = xr[0];                                                                       \
    for (int i = 1; i < len; ++i)                                                           \
        top = max(top, (long)xr[i]);                                                        \
    long total = 0; /* < 2^47 for len <= 2^16 */                                            \
    for (int i = 0; i < len; ++i)                                                           \
        total += intonly_exp(xr[i] - top, p.s0, (int)p.s1);                                 \
    const long recip = (1L << SOFTMAX_RECIP_BITS) / total; /* < 2^32 */                     \
    for (int i = 0; i < len; ++i) {                                                         \
        const long e = intonly_exp(xr[i] - top, p.s0, (int)p.s1);                           \
        const long prob = tessera_rshift64(e, recip,                                        \
                                           SOFTMAX_RECIP_BITS - SOFTMAX_PROB_BITS);         \
        const long v = tessera_rshift64(prob, p.s2, (int)p.s3) + q.s0;                      \
        yr[i] = (uchar)clamp(v, (long)q.s1, (long)q.s2);                                    \
    }                                                                                       \
}

INTONLY_SOFTMAX(intonly_softmax_i8, char)
INTONLY_SOFTMAX(intonly_softmax_i32, int)

// ------------------------------------------------------------------ integer-only GELU
//
// Element-wise (models/intonly.py gelu). q: zx, erf multiplier, erf shift, out multiplier,
// out shift, zy, lo, hi.
#define GELU_FRAC_BITS 14

#define INTONLY_GELU(NAME, T)                                                               \
__kernel void NAME(__global const T *x, __global char *y, const int count, const int8 q)   \
{                                                                                           \
    const int i = get_global_id(0);                                                         \
    if (i >= count)                                                                         \
        return;                                                                             \
    const long one = 1L << GELU_FRAC_BITS;                                                  \
    const long d = (long)x[i] - q.s0; /* |d| <= 2^15 + 128 */                               \
    const long v = tessera_rshift64(d, q.s1, q.s2);                                         \
    const long t = min(v < 0 ? -v : v, one);                                                \
    const long a = tessera_rshift64(t, 2 * one - t, GELU_FRAC_BITS);                        \
    const long sign = (v > 0) - (v < 0);                                                    \
    const long g = d * (one + sign * a); /* |g| < 2^31 */                                   \
    y[i] = (char)tessera_requantize(g, q.s3, q.s4, q.s5, q.s6, q.s7);                       \
}

INTONLY_GELU(intonly_gelu_i8, char)
INTONLY_GELU(intonly_gelu_i16, short)

// ------------------------------------------------------------------ integer-only LayerNorm
//
// One work-item per row of `len` int8 values (models/intonly.py layernorm); gamma and
// beta are folded into the per-channel sign, bias, multiplier and shift tables.
// q: zy, lo, hi; eps: the epsilon term E.
#define LAYERNORM_EPS_BITS 22
#define LAYERNORM_NORM_BITS 16

// floor(sqrt(value)) for value in [0, 2^62): the golden's 31-step restoring method.
inline long intonly_isqrt(long rem)
{
    long root = 0, bit = 1L << 60;
    for (int i = 0; i < 31; ++i) {
        const long trial = root + bit;
        if (rem >= trial) {
            rem -= trial;
            root = (root >> 1) + bit;
        } else {
            root >>= 1;
        }
        bit >>= 2;
    }
    return root;
}

__kernel void intonly_layernorm_i8(__global const char *x, __global char *y,
                                   __global const int *sign, __global const int *bias,
                                   __global const int *mult, __global const int *shift,
                                   const int rows, const int len, const long eps,
                                   const int4 q)
{
    const int r = get_global_id(0);
    if (r >= rows)
        return;
    __global const char *xr = x + (size_t)r * len;
    __global char *yr = y + (size_t)r * len;
    long s1 = 0, s2 = 0;  // |s1| <= 2^19, s2 <= 2^26 for len <= 2^12
    for (int i = 0; i < len; ++i) {
        const long v = xr[i];
        s1 += v;
        s2 += v * v;
    }
    const long w = len * s2 - s1 * s1;  // len^2 * variance, [0, 2^38]
    const long big = max((w << LAYERNORM_EPS_BITS) + eps, 1L);  // < 2^62
    const int bits = 64 - (int)clz(big);
    const int j = (62 - bits) / 2;  // bits <= 62, so this is the golden's floor
    const long recip = (1L << 62) / intonly_isqrt(big << (2 * j));
    const int norm_shift = 62 - LAYERNORM_NORM_BITS - LAYERNORM_EPS_BITS / 2 - j;  // >= 5
    for (int i = 0; i < len; ++i) {
        const long c = len * (long)xr[i] - s1;  // |c| <= 2^20, recip <= 2^32
        const long n = tessera_rshift64(c, recip, norm_shift);
        const long acc = sign[i] * n + bias[i];  // inside int32 (bias checked on the host)
        yr[i] = (char)tessera_requantize(acc, mult[i], shift[i], q.s0, q.s1, q.s2);
    }
}
