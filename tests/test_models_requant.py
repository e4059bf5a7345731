"""Tests of models.requant: multiplier decomposition, requantization, activation ranges."""

import math
from fractions import Fraction

import numpy as np
import pytest
from assertions import assert_exact
from hypothesis import given, settings
from hypothesis import strategies as st

from models.requant import (
    INT32_MAX,
    INT32_MIN,
    MULTIPLIER_MAX,
    MULTIPLIER_MIN,
    SHIFT_MAX,
    SHIFT_MIN,
    activation_range,
    quantize_multiplier,
    requantize,
    rounding_shift,
)

# derandomize: the same examples on every run, so CI failures reproduce locally.
PROPERTY = settings(max_examples=300, deadline=None, derandomize=True, database=None)

REAL_MIN = 2.0**-32
REAL_MAX = 2.0**30 * (1 - 2.0**-31)  # just below the first value that needs shift 0




def _round_half_even(acc, m, n):
    """``acc * m / 2**n`` rounded half to even, exactly (``round`` of a Fraction is)."""
    return round(Fraction(acc * m, 1 << n))


def _reference(acc, m, n, z, lo, hi):
    """The contract with exact rationals, independent of the shift-and-add implementation."""
    return min(max(z + _round_half_even(acc, m, n), lo), hi)


# --- quantize_multiplier -------------------------------------------------------------------

@PROPERTY
@given(st.floats(min_value=REAL_MIN, max_value=REAL_MAX, allow_nan=False))
def test_quantize_multiplier_range_and_accuracy(real):
    m, n = quantize_multiplier(real)
    assert isinstance(m, int) and isinstance(n, int)
    assert MULTIPLIER_MIN <= m <= MULTIPLIER_MAX, (real, m)
    assert SHIFT_MIN <= n <= SHIFT_MAX, (real, n)
    error = abs(Fraction(m, 1 << n) - Fraction(real))
    assert error <= Fraction(real) / 2**31, (real, m, n, float(error / Fraction(real)))


@PROPERTY
@given(st.lists(st.floats(min_value=REAL_MIN, max_value=REAL_MAX), min_size=1, max_size=16))
def test_quantize_multiplier_vectorised_matches_scalar(reals):
    m, n = quantize_multiplier(np.array(reals))
    assert m.dtype == np.int64 and n.dtype == np.int64
    assert m.shape == n.shape == (len(reals),)
    for i, real in enumerate(reals):
        assert (int(m[i]), int(n[i])) == quantize_multiplier(real), (i, real)


@pytest.mark.parametrize("real, expected", [
    (0.5, (1 << 30, 31)),
    (1.0, (1 << 30, 30)),
    (0.75, (3 << 29, 31)),
    (2.0**-32, (1 << 30, 62)),
    # Rounds up to 2**31 at shift 63; the carry renormalises it to 2**30 at shift 62.
    (2.0**-32 * (1 - 2.0**-40), (1 << 30, 62)),
    (2.0**30 - 1, ((1 << 31) - 2, 1)),
    (1 - 2.0**-33, (1 << 30, 30)),
])
def test_quantize_multiplier_exact_values(real, expected):
    assert quantize_multiplier(real) == expected


def test_quantize_multiplier_keeps_shape():
    m, n = quantize_multiplier(np.full((2, 3), 0.25))
    assert m.shape == n.shape == (2, 3)
    assert (m == 1 << 30).all() and (n == 32).all()


@pytest.mark.parametrize("value, match", [
    (0.0, r"real_multiplier = 0\.0 is not a positive finite number; expected 2\*\*-32"),
    (-0.5, r"real_multiplier = -0\.5 is not a positive finite number"),
    (math.nan, r"real_multiplier = nan is not a positive finite number"),
    (math.inf, r"real_multiplier = inf is not a positive finite number"),
    (1e-12, r"real_multiplier = 1e-12 is too small: it needs a right shift of 70, outside "
            r"the supported 1\.\.62"),
    (2.0**-33, r"too small: it needs a right shift of 63"),
    (2.0**30, r"real_multiplier = 1073741824\.0 is too large: it needs a right shift of 0"),
    (1e12, r"too large.*expected 2\*\*-32 <= real_multiplier < 2\*\*30"),
    ("abc", r"real_multiplier must be a float or an array of floats"),
])
def test_quantize_multiplier_rejects(value, match):
    with pytest.raises(ValueError, match=match):
        quantize_multiplier(value)


def test_quantize_multiplier_error_names_channel():
    with pytest.raises(ValueError, match=r"real_multiplier\[2\] = 1e-15 is too small"):
        quantize_multiplier([0.5, 0.25, 1e-15, 3.0])
    with pytest.raises(ValueError, match=r"real_multiplier\[1, 0\] = -1\.0 is not a positive"):
        quantize_multiplier([[0.5, 0.5], [-1.0, 0.5]])


# --- requantize ----------------------------------------------------------------------------

int32s = st.integers(INT32_MIN, INT32_MAX)
multipliers = st.integers(MULTIPLIER_MIN, MULTIPLIER_MAX)
shifts = st.integers(SHIFT_MIN, SHIFT_MAX)
int8s = st.integers(-128, 127)


@PROPERTY
@given(st.lists(int32s, min_size=1, max_size=32), multipliers, shifts, int8s, int8s, int8s)
def test_requantize_matches_python_ints(accs, m, n, z, a, b):
    lo, hi = min(a, b), max(a, b)
    got = requantize(np.array(accs, dtype=np.int32), m, n, z, lo, hi, axis=0)
    assert got.dtype == np.int8
    expected = [_reference(acc, m, n, z, lo, hi) for acc in accs]
    assert_exact(got, np.array(expected), f"M={m} n={n} z={z} lo={lo} hi={hi}")


@PROPERTY
@given(int32s, multipliers, shifts)
def test_rounding_is_nearest_ties_to_even(acc, m, n):
    """The unclamped result is acc * M / 2**n rounded to nearest, ties to the even integer
    (ONNX QuantizeLinear's rule)."""
    got = int(rounding_shift(np.int64(acc), np.int64(m), np.int64(n)))
    exact = Fraction(acc * m, 1 << n)
    assert abs(got - exact) <= Fraction(1, 2), (acc, m, n)
    if abs(got - exact) == Fraction(1, 2):
        assert got % 2 == 0, (acc, m, n, got)


@pytest.mark.parametrize("m, n", [(MULTIPLIER_MIN, 31), (MULTIPLIER_MIN, 32), (3 << 29, 33)])
def test_ties_go_to_even(m, n):
    """Multipliers that make exact ties common (M * 2**-n is 1/2, 1/4, 3/16): every tie of
    acc * M / 2**n in -64..64 lands on the even neighbour, as QuantizeLinear rounds."""
    accs = np.arange(-64, 65)
    got = rounding_shift(accs.astype(np.int64), np.int64(m), np.int64(n))
    expected = np.array([_round_half_even(int(a), m, n) for a in accs])
    assert_exact(got, expected, f"M={m} n={n}")
    ties = [int(a) for a in accs if Fraction(int(a) * m, 1 << n).denominator == 2]
    assert ties, "the case must contain ties"
    assert all(int(got[a + 64]) % 2 == 0 for a in ties)


@PROPERTY
@given(st.integers(-(1 << 20), 1 << 20),
       st.floats(min_value=2.0**-20, max_value=1.0, allow_nan=False), int8s)
def test_requantize_within_rounding_bound_of_float(acc, real, z):
    """Against the float product: 1/2 LSB of rounding plus the multiplier's 2**-31 error."""
    m, n = quantize_multiplier(real)
    got = int(requantize(np.array([acc], dtype=np.int32), m, n, 0, -128, 127, axis=0)[0])
    ideal = acc * real
    if -128 <= ideal <= 127:
        assert abs(got - ideal) <= 0.5 + abs(ideal) * 2.0**-31 + 1e-9, (acc, real, got)
    got_z = int(requantize(np.array([acc], dtype=np.int32), m, n, z, axis=0)[0])
    assert got_z == min(max(z + int(rounding_shift(np.int64(acc), m, n)), -128), 127)


EXTREME_ACCS = [INT32_MIN, INT32_MIN + 1, -(1 << 30), -3, -1, 0, 1, 3, 1 << 30, INT32_MAX]
EXTREME_MS = [MULTIPLIER_MIN, MULTIPLIER_MIN + 1, (3 << 29), MULTIPLIER_MAX - 1, MULTIPLIER_MAX]
EXTREME_NS = [1, 2, 30, 31, 32, 40, 47, 55, 61, 62]


@pytest.mark.parametrize("n", EXTREME_NS)
def test_requantize_extremes_do_not_overflow(n):
    """acc at the int32 limits times M near 2**31, every shift class: no int64 overflow."""
    for m in EXTREME_MS:
        acc = np.array(EXTREME_ACCS, dtype=np.int32)
        raw = rounding_shift(acc.astype(np.int64), np.int64(m), np.int64(n))
        expected_raw = [_round_half_even(int(a), m, n) for a in EXTREME_ACCS]
        assert_exact(raw, np.array(expected_raw, dtype=object).astype(np.int64),
                      f"raw M={m} n={n}")
        for z in (-128, 0, 127):
            got = requantize(acc, m, n, z, axis=0)
            expected = [_reference(int(a), m, n, z, -128, 127) for a in EXTREME_ACCS]
            assert_exact(got, np.array(expected), f"M={m} n={n} z={z}")


def test_requantize_extreme_values_by_hand():
    # The largest products at shift 62: -2**31 * (2**31 - 1) / 2**62 = -(1 - 2**-31) -> -1
    # and (2**31 - 1)**2 / 2**62 = 1 - 2**-30 + 2**-62 -> 1.
    assert requantize(np.int32(INT32_MIN), MULTIPLIER_MAX, 62, 0) == -1
    assert requantize(np.int32(INT32_MAX), MULTIPLIER_MAX, 62, 0) == 1
    # -2**31 * 2**30 / 2**62 = -0.5 exactly: a tie, which goes to the even 0.
    assert requantize(np.int32(INT32_MIN), MULTIPLIER_MIN, 62, 0) == 0
    assert requantize(np.int32(INT32_MIN), MULTIPLIER_MIN, 61, 0) == -1
    assert requantize(np.int32(INT32_MIN), MULTIPLIER_MIN, 60, 0) == -2
    # Shift 1: huge results clamp; the largest positive product is (2**31 - 1)**2.
    assert requantize(np.int32(INT32_MAX), MULTIPLIER_MAX, 1, 0) == 127
    assert requantize(np.int32(INT32_MIN), MULTIPLIER_MAX, 1, 0) == -128
    # Shift 40: 2**31-1 times about 2**31 over 2**40 is about 2**22: clamps; small accs do not.
    assert requantize(np.int32(1 << 9), MULTIPLIER_MIN, 40, 0) == 0  # 2**39 / 2**40 = 0.5
    assert requantize(np.int32(3 << 9), MULTIPLIER_MIN, 40, 0) == 2  # 1.5 -> 2
    assert requantize(np.int32(-(1 << 9)), MULTIPLIER_MIN, 40, 0) == 0  # -0.5 -> 0


@pytest.mark.parametrize("acc, expected", [(1, 0), (-1, 0), (3, 2), (-3, -2), (5, 2), (-5, -2),
                                           (7, 4), (-7, -4)])
def test_requantize_ties_go_to_even(acc, expected):
    # M / 2**n = 2**30 / 2**31 = 0.5, so odd accumulators land exactly on ties.
    assert requantize(np.int32(acc), MULTIPLIER_MIN, 31, 0) == expected


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("layout, axis", [("nchw", 1), ("dense", 1), ("nhwc", -1), ("cn", 0)])
def test_requantize_per_channel_axis(seed, layout, axis):
    rng = np.random.default_rng(seed)
    shape = {"nchw": (2, 5, 3, 4), "dense": (6, 5), "nhwc": (2, 3, 4, 5), "cn": (5, 7)}[layout]
    acc = rng.integers(-(1 << 20), 1 << 20, size=shape, dtype=np.int32)
    real = rng.uniform(1e-4, 0.01, size=5)
    m, n = quantize_multiplier(real)
    z = int(rng.integers(-128, 128))
    got = requantize(acc, m, n, z, axis=axis)
    moved = np.moveaxis(acc, axis, -1)
    expected = np.empty(moved.shape, dtype=np.int64)
    for index in np.ndindex(moved.shape):
        c = index[-1]
        expected[index] = _reference(int(moved[index]), int(m[c]), int(n[c]), z, -128, 127)
    assert_exact(got, np.moveaxis(expected, -1, axis), f"seed={seed} layout={layout}")


def test_requantize_accepts_any_integer_dtype_in_range():
    for dtype in (np.int8, np.int16, np.int32, np.int64, np.uint16):
        acc = np.arange(0, 100, 7).astype(dtype)
        # Per-tensor parameters need no valid axis: the default axis=1 is fine for 1-D acc.
        got = requantize(acc, MULTIPLIER_MIN, 31, -5)
        assert_exact(got, np.array([_reference(int(a), MULTIPLIER_MIN, 31, -5, -128, 127)
                                     for a in acc]), f"dtype={dtype}")


@pytest.mark.parametrize("kwargs, match", [
    (dict(acc=np.array([1 << 31])), r"acc\[0\] = 2147483648 is outside the expected range "
                                    r"\[-2147483648, 2147483647\]"),
    (dict(acc=np.array([[0, -(1 << 31) - 1]])), r"acc\[0, 1\] = -2147483649 is outside"),
    (dict(acc=np.array([2**64 - 1], dtype=np.uint64)), r"acc\[0\] = 18446744073709551615"),
    (dict(acc=np.array([1.5])), r"acc must be an integer or an array of integers, not float64"),
    (dict(multiplier=(1 << 30) - 1), r"multiplier = 1073741823 is outside the expected range "
                                     r"\[1073741824, 2147483647\]"),
    (dict(multiplier=1 << 31), r"multiplier = 2147483648 is outside"),
    (dict(shift=0), r"shift = 0 is outside the expected range \[1, 62\]"),
    (dict(shift=63), r"shift = 63 is outside the expected range \[1, 62\]"),
    (dict(shift=[31, 31, 0]), r"shift\[2\] = 0 is outside"),
    (dict(multiplier=[1 << 30] * 2), r"multiplier must be a scalar or have shape \(3,\) to "
                                     r"match axis 1 of acc, not shape \(2,\)"),
    (dict(zero_point=128), r"zero_point must be an integer in \[-128, 127\], not 128"),
    (dict(zero_point=1.0), r"zero_point must be an integer in \[-128, 127\], not 1\.0"),
    (dict(lo=5, hi=4), r"lo must not exceed hi, got lo=5 and hi=4"),
    (dict(hi=200), r"hi must be an integer in \[-128, 127\], not 200"),
    (dict(axis=4, multiplier=[1 << 30] * 3),
     r"axis must be an integer in \[-2, 1\] for per-channel parameters and acc of shape "
     r"\(2, 3\), not 4"),
])
def test_requantize_rejects(kwargs, match):
    args = dict(acc=np.zeros((2, 3), dtype=np.int32), multiplier=1 << 30, shift=31,
                zero_point=0)
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        requantize(**args)


# --- activation_range ----------------------------------------------------------------------

@pytest.mark.parametrize("kind, zero_point, scale, expected", [
    (None, 3, 0.1, (-128, 127)),
    ("relu", -128, 0.05, (-128, 127)),
    ("relu", 10, 0.05, (10, 127)),
    ("relu6", -128, 6 / 255, (-128, 127)),
    ("relu6", -10, 0.1, (-10, 50)),
    ("relu6", 0, 0.01, (0, 127)),       # 6 / 0.01 = 600 is beyond int8: clamped
    ("relu6", -128, 0.048, (-128, -3)),  # 6 / 0.048 = 125
    ("relu6", 0, 0.8, (0, 8)),          # 6 / 0.8 = 7.5: half to even -> 8
    ("relu6", 0, 6 / 8.5, (0, 8)),      # 8.5 -> 8 (half to even)
])
def test_activation_range(kind, zero_point, scale, expected):
    assert activation_range(kind, zero_point, scale) == expected


def test_activation_range_fusion_is_exact():
    """Clamping quantized values equals quantizing clamped real values (monotonicity)."""
    rng = np.random.default_rng(7)
    for trial in range(50):
        scale = float(rng.uniform(0.005, 0.2))
        z = int(rng.integers(-128, 128))
        real = rng.uniform(-20, 20, size=200)

        def quantize(v, scale=scale, z=z):
            return np.clip(np.rint(v / scale) + z, -128, 127)

        lo, hi = activation_range("relu6", z, scale)
        assert_exact(np.clip(quantize(real), lo, hi), quantize(np.clip(real, 0, 6)),
                      f"seed=7 trial={trial} scale={scale} z={z}")


@pytest.mark.parametrize("args, match", [
    (("gelu", 0, 0.1), r"kind must be None, 'relu' or 'relu6', not 'gelu'"),
    (("relu", 0, 0.0), r"scale must be a positive finite float, not 0\.0"),
    (("relu", 0, math.nan), r"scale must be a positive finite float"),
    (("relu", 0, "x"), r"scale must be a positive finite float, not 'x'"),
    (("relu", -129, 0.1), r"zero_point must be an integer in \[-128, 127\], not -129"),
])
def test_activation_range_rejects(args, match):
    with pytest.raises(ValueError, match=match):
        activation_range(*args)
