// Tessera's requantization (models/requant.py), shared by every kernel.
//
// y = clamp(z + round_half_even(acc * M / 2^n), lo, hi): a 64-bit product p (|acc * M| < 2^62
// for an int32 acc and M < 2^31, so adding 2^(n-1) <= 2^61 cannot overflow) and an
// arithmetic shift (OpenCL C fills vacated bits with the sign for signed operands).
// Adding 2^(n-1) - 1 plus bit n of p rounds to nearest with ties to even, as ONNX
// QuantizeLinear does. n is in [1, 62], checked by the host.

inline long tessera_rounding_shift(long value, int multiplier, int shift)
{
    const long p = value * (long)multiplier;
    return (p + (1L << (shift - 1)) - 1 + ((p >> shift) & 1)) >> shift;
}

inline int tessera_requantize(long acc, int multiplier, int shift, int zero_point,
                              int lo, int hi)
{
    // |shifted| <= 2^61, so adding the zero point before clamping cannot overflow.
    long y = tessera_rounding_shift(acc, multiplier, shift) + zero_point;
    return (int)clamp(y, (long)lo, (long)hi);
}
