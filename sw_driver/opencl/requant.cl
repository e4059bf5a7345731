// Tessera's requantization (models/requant.py), shared by every kernel.
//
// y = clamp(z + ((acc * M + 2^(n-1)) >> n), lo, hi): a 64-bit product (|acc * M| < 2^62 for
// an int32 acc and M < 2^31, so adding 2^(n-1) <= 2^61 cannot overflow) and an arithmetic
// shift (OpenCL C fills vacated bits with the sign for signed operands), i.e. rounding to
// nearest with ties toward +inf. n is in [1, 62], checked by the host.

inline long tessera_rounding_shift(long value, int multiplier, int shift)
{
    return (value * (long)multiplier + (1L << (shift - 1))) >> shift;
}

inline int tessera_requantize(long acc, int multiplier, int shift, int zero_point,
                              int lo, int hi)
{
    // |shifted| <= 2^61, so adding the zero point before clamping cannot overflow.
    long y = tessera_rounding_shift(acc, multiplier, shift) + zero_point;
    return (int)clamp(y, (long)lo, (long)hi);
}
