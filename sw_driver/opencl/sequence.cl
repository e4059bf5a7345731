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
// y[b, m, n] = requantize(sum_k (a[b, m, k] - za) * (bm[b, k, n] - zb)), one work-item per
// output. The batch may broadcast (NumPy matmul rules): the host gives each output batch
// element the element offset of its a and b matrices. The sum is kept in 64 bits; where it
// leaves int32 (the golden matmul_int raises there) the status flag is set and the host
// raises at the next read.
// dims: M, K, N; q: za, zb, zy, lo, hi, multiplier, shift.
__kernel void batched_matmul_requant(__global const char *a, __global const char *bm,
                                     __global char *y, __global const int *a_off,
                                     __global const int *b_off, __global int *status,
                                     const int4 dims, const int8 q)
{
    const int n = get_global_id(0), m = get_global_id(1), batch = get_global_id(2);
    const int M = dims.s0, K = dims.s1, N = dims.s2;
    if (n >= N || m >= M)
        return;
    __global const char *ar = a + a_off[batch] + (size_t)m * K;
    __global const char *bc = bm + b_off[batch] + n;
    // 255 * 255 * K stays inside int32 for K <= 33025: accumulate in int over chunks of
    // that length and carry the chunk sums in 64 bits.
    long acc = 0;
    for (int k0 = 0; k0 < K; k0 += 32768) {
        const int kend = min(K, k0 + 32768);
        int part = 0;
        for (int k = k0; k < kend; ++k)
            part += ((int)ar[k] - q.s0) * ((int)bc[(size_t)k * N] - q.s1);
        acc += part;
    }
    if (acc < INT_MIN || acc > INT_MAX)
        status[0] = 1;
    y[((size_t)batch * M + m) * N + n] =
        (char)tessera_requantize(acc, q.s5, q.s6, q.s2, q.s3, q.s4);
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
