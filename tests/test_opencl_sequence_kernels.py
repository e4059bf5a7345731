"""The sequence-model OpenCL kernels (``sw_driver/opencl/sequence.cl``) against the golden
functions: batched act x act MatMul (``models.sequence`` + ``models.requant``) and the
integer-only Softmax, GELU and LayerNorm (``models.intonly``). Bit-exact, seeded (the seed
is in every failure message and printed), edge cases included.

Skipped as a whole when no OpenCL platform is present.
"""

import numpy as np
import pytest

from models import intonly
from models.requant import quantize_multiplier, requantize
from models.sequence import matmul_int
from sw_driver.opencl import NoPlatformError, OpenCLRuntime, list_devices
from sw_driver.opencl import sequence_kernels as sk

try:
    list_devices()
except NoPlatformError as _exc:
    pytest.skip(f"no OpenCL platform with a device: {_exc}", allow_module_level=True)


@pytest.fixture(scope="module")
def rt():
    return OpenCLRuntime()


def assert_same(got, want, seed, what):
    """Exact equality of values and dtype; a failure names the seed, the case and the first
    differing index with both values."""
    got, want = np.asarray(got), np.asarray(want)
    print(f"seed {seed}: {what}")
    assert got.shape == want.shape, f"seed {seed}, {what}: shape {got.shape} != {want.shape}"
    assert got.dtype == want.dtype, f"seed {seed}, {what}: dtype {got.dtype} != {want.dtype}"
    if not np.array_equal(got, want):
        index = tuple(int(i) for i in np.argwhere(got != want)[0])
        count = int((got != want).sum())
        pytest.fail(f"seed {seed}, {what}: {count} elements differ; first at {index}: "
                    f"OpenCL {int(got[index])}, golden {int(want[index])}")


def _int8(rng, shape):
    return rng.integers(-128, 128, shape, dtype=np.int8)


# ---------------------------------------------------------------- batched MatMul

def _golden_matmul(a, za, b, zb, m, n, zy, lo=-128, hi=127):
    return requantize(matmul_int(a, za, b, zb), m, n, zy, lo, hi)


# (a shape, b shape): heads x sequence as in attention, broadcasting batches, plain 2-D,
# degenerate 1-long dimensions.
MATMUL_SHAPES = [
    ((4, 2, 17, 16), (4, 2, 16, 17)),   # Q @ K^T: batch x heads x tokens x head size
    ((4, 2, 17, 17), (4, 2, 17, 16)),   # attention @ V
    ((3, 1, 5, 8), (1, 4, 8, 6)),       # both operands broadcast
    ((2, 3, 7, 9), (9, 4)),             # b shared by every batch element
    ((5, 3), (3, 11)),
    ((2, 3, 5), (5, 40)),               # two 16-column vectors and a tail of 8
    ((1, 1), (1, 1)),
]


@pytest.mark.parametrize("a_shape, b_shape", MATMUL_SHAPES)
def test_batched_matmul_random(rt, rng, seed, a_shape, b_shape):
    a, b = _int8(rng, a_shape), _int8(rng, b_shape)
    za, zb, zy = (int(v) for v in rng.integers(-128, 128, 3))
    m, n = quantize_multiplier(float(rng.uniform(1e-4, 3e-2)))
    lo, hi = sorted(int(v) for v in rng.integers(-128, 128, 2))
    got = sk.batched_matmul_requant(rt, a, b, a_zero_point=za, b_zero_point=zb,
                                    multiplier=m, shift=n, y_zero_point=zy, lo=lo, hi=hi)
    assert_same(got, _golden_matmul(a, za, b, zb, m, n, zy, lo, hi), seed,
                f"matmul {a_shape} x {b_shape}, zero points {za} {zb} {zy}, M {m} n {n}, "
                f"clamp [{lo}, {hi}]")


def test_batched_matmul_extremes(rt, seed):
    # The largest products (|(-128) - 127| * |127 - (-128)|) with a multiplier that lands
    # the sums across both clamps, and a tie-heavy shift.
    a = np.full((2, 3, 4), -128, np.int8)
    a[0, 1] = 127
    b = np.full((2, 4, 5), 127, np.int8)
    b[1, :, 2] = -128
    for za, zb, (m, n) in [(127, -128, quantize_multiplier(2.0**-18)),
                           (-128, 127, (1 << 30, 1)), (0, 0, (1 << 30, 62))]:
        got = sk.batched_matmul_requant(rt, a, b, a_zero_point=za, b_zero_point=zb,
                                        multiplier=m, shift=n, y_zero_point=-7)
        assert_same(got, _golden_matmul(a, za, b, zb, m, n, -7), seed,
                    f"extreme matmul, zero points {za} {zb}, M {m} n {n}")


def test_batched_matmul_long_reduction(rt, rng, seed):
    # K beyond the kernel's 32768-product int32 chunk: the chunk sums are carried in 64 bits
    # (16 vector columns and 3 single ones).
    k = 40000
    a, b = _int8(rng, (2, k)), _int8(rng, (k, 19))
    m, n = quantize_multiplier(1e-5)
    got = sk.batched_matmul_requant(rt, a, b, a_zero_point=3, b_zero_point=-2,
                                    multiplier=m, shift=n, y_zero_point=0)
    assert_same(got, _golden_matmul(a, 3, b, -2, m, n, 0), seed, f"matmul with K = {k}")


def test_batched_matmul_int32_overflow_is_reported(rt):
    k = 40000  # 40000 * 255 * 255 > 2**31
    a = np.full((1, k), -128, np.int8)
    for columns in (1, 16):  # the single-column and the vector path
        b = np.full((k, columns), 127, np.int8)
        with pytest.raises(ValueError, match="leaves the int32 range"):
            matmul_int(a, 127, b, -128)
        with pytest.raises(OverflowError, match="overflowed"):
            sk.batched_matmul_requant(rt, a, b, a_zero_point=127, b_zero_point=-128,
                                      multiplier=1 << 30, shift=40, y_zero_point=0)
    # The flag is cleared by the read that reported it: the next product is fine.
    got = sk.batched_matmul_requant(rt, a[:, :4], b[:4], a_zero_point=0, b_zero_point=0,
                                    multiplier=1 << 30, shift=20, y_zero_point=0)
    assert_same(got, _golden_matmul(a[:, :4], 0, b[:4], 0, 1 << 30, 20, 0), 0,
                "matmul after an overflow")


def test_device_chain_matmul_gelu_layernorm(rt, rng, seed):
    # DeviceTensor in, DeviceTensor out: three layers enqueued back to back, one read.
    a, b = _int8(rng, (3, 2, 9, 8)), _int8(rng, (3, 2, 8, 12))
    m, n = quantize_multiplier(4e-3)
    gp = intonly.gelu_params(0.05, -4, 0.04, 6)
    lp = intonly.layernorm_params(0.04, rng.uniform(0.5, 2, 12), rng.normal(0, 0.5, 12),
                                  0.03, -3)
    y = sk.batched_matmul_requant(rt, rt.to_device(a), rt.to_device(b), a_zero_point=1,
                                  b_zero_point=-2, multiplier=m, shift=n, y_zero_point=-4)
    y = sk.intonly_layernorm(rt, sk.intonly_gelu(rt, y, gp), lp)
    assert type(y).__name__ == "DeviceTensor"
    want = intonly.layernorm(intonly.gelu(_golden_matmul(a, 1, b, -2, m, n, -4), gp), lp)
    assert_same(y.get(), want, seed, "matmul -> gelu -> layernorm on the device")


def test_batched_matmul_bad_arguments(rt):
    a, b = np.zeros((2, 3, 4), np.int8), np.zeros((2, 5, 6), np.int8)
    kw = dict(a_zero_point=0, b_zero_point=0, multiplier=1 << 30, shift=20, y_zero_point=0)
    with pytest.raises(ValueError, match=r"cannot multiply shapes \[2, 3, 4\] and \[2, 5, 6\]"):
        sk.batched_matmul_requant(rt, a, b, **kw)
    with pytest.raises(ValueError, match="do not broadcast"):
        sk.batched_matmul_requant(rt, a, np.zeros((3, 4, 6), np.int8), **kw)
    with pytest.raises(ValueError, match="must have dtype int8"):
        sk.batched_matmul_requant(rt, a.astype(np.int16), np.zeros((4, 2), np.int8), **kw)
    with pytest.raises(ValueError, match=r"shift\[0\] = 63 is outside"):
        sk.batched_matmul_requant(rt, a, np.zeros((4, 2), np.int8), **{**kw, "shift": 63})
    with pytest.raises(ValueError, match="a_zero_point must be an integer in"):
        sk.batched_matmul_requant(rt, a, np.zeros((4, 2), np.int8),
                                  **{**kw, "a_zero_point": 128})


# ---------------------------------------------------------------- integer-only Softmax

@pytest.mark.parametrize("out_dtype", ["uint8", "int8"])
@pytest.mark.parametrize("length", [1, 17, 64, 301])
def test_softmax_int8_random(rt, rng, seed, length, out_dtype):
    x = _int8(rng, (3, 5, length))
    x_scale = float(rng.choice([0.003, 0.08, 0.5]))
    p = intonly.softmax_params(x_scale, out_dtype=out_dtype)
    assert_same(sk.intonly_softmax(rt, x, p), intonly.softmax(x, p), seed,
                f"softmax int8 length {length} x_scale {x_scale} {out_dtype}")


def test_softmax_int32_extremes(rt, rng, seed):
    # Accumulator inputs over the whole accepted range; one row holds both ends, so that
    # x - max reaches -(2**31 - 1) and every exponential but one underflows to 0.
    x = rng.integers(intonly.SOFTMAX_X_MIN, intonly.SOFTMAX_X_MAX + 1, (16, 40))
    x[0, 3], x[0, 7] = intonly.SOFTMAX_X_MIN, intonly.SOFTMAX_X_MAX
    x[1] = rng.integers(-1000, 1000, 40)  # a row of small differences
    for x_scale in (2.0**-31, 1e-6, 0.3):
        p = intonly.softmax_params(x_scale, y_scale=1 / 200, out_dtype="int8")
        assert_same(sk.intonly_softmax(rt, x, p), intonly.softmax(x, p), seed,
                    f"softmax int32 extremes, x_scale {x_scale}")


def test_softmax_all_equal_rows_and_one_hot(rt, seed):
    x = np.zeros((4, 33), np.int8)
    x[1] = -128
    x[2] = 127
    x[3, 5] = 127  # one large value among zeros
    x[3, 6] = -128
    p = intonly.softmax_params(0.5)
    got = sk.intonly_softmax(rt, x, p)
    assert_same(got, intonly.softmax(x, p), seed, "softmax all-equal and one-hot rows")
    assert (got[:3] == got[0, 0]).all()  # all-equal rows are uniform


def test_softmax_long_row_and_int16(rt, rng, seed):
    length = intonly.SOFTMAX_MAX_LENGTH
    x = rng.integers(-(1 << 15), 1 << 15, (2, length)).astype(np.int16)  # widened to int32
    p = intonly.softmax_params(2e-4)
    assert_same(sk.intonly_softmax(rt, x, p), intonly.softmax(x, p), seed,
                f"softmax int16 rows of {length}")


def test_softmax_bad_input(rt):
    p = intonly.softmax_params(0.1)
    with pytest.raises(ValueError, match=r"x\[0, 1\] = 1073741824 is outside the expected "
                                         r"range \[-1073741824, 1073741823\]"):
        sk.intonly_softmax(rt, np.array([[0, 1 << 30]]), p)
    with pytest.raises(ValueError, match="expected 1..65536"):
        sk.intonly_softmax(rt, np.zeros((1, 65537), np.int8), p)
    with pytest.raises(ValueError, match="at least one axis"):
        sk.intonly_softmax(rt, np.array(3), p)
    with pytest.raises(ValueError, match="numpy.ndarray of integers"):
        sk.intonly_softmax(rt, np.zeros(3, np.float32), p)
    with pytest.raises(ValueError, match="SoftmaxParams"):
        sk.intonly_softmax(rt, np.zeros(3, np.int8), intonly.gelu_params(1, 0, 1, 0))


# ---------------------------------------------------------------- integer-only GELU

@pytest.mark.parametrize("x_scale, x_zero_point, y_scale, y_zero_point",
                         [(0.05, 0, 0.03, -20), (0.2, -128, 0.1, 127), (0.01, 127, 0.002, 0),
                          (0.03125, 13, 0.015625, -64)])
def test_gelu_int8_exhaustive(rt, seed, x_scale, x_zero_point, y_scale, y_zero_point):
    x = np.arange(-128, 128, dtype=np.int8).reshape(4, 64)
    p = intonly.gelu_params(x_scale, x_zero_point, y_scale, y_zero_point)
    for lo, hi in ((-128, 127), (y_zero_point, 127), (-50, 30)):
        if lo > hi:
            continue
        assert_same(sk.intonly_gelu(rt, x, p, lo, hi), intonly.gelu(x, p, lo, hi), seed,
                    f"gelu every int8, scales {x_scale} {y_scale}, zero points "
                    f"{x_zero_point} {y_zero_point}, clamp [{lo}, {hi}]")


def test_gelu_int16_random_and_extremes(rt, rng, seed):
    x = rng.integers(intonly.GELU_X_MIN, intonly.GELU_X_MAX + 1, 5000).astype(np.int16)
    x[:4] = [intonly.GELU_X_MIN, intonly.GELU_X_MAX, 0, -1]
    for x_scale, zx in ((1e-3, -128), (3e-4, 127), (0.05, 0)):
        p = intonly.gelu_params(x_scale, zx, 0.02, 3)
        assert_same(sk.intonly_gelu(rt, x, p), intonly.gelu(x, p), seed,
                    f"gelu int16 random, x_scale {x_scale}, zero point {zx}")
    wide = x.astype(np.int64)  # any integer dtype in range: checked, then read as int16
    p = intonly.gelu_params(1e-3, 0, 0.02, 3)
    assert_same(sk.intonly_gelu(rt, wide, p), intonly.gelu(wide, p), seed, "gelu int64 input")


def test_gelu_bad_input(rt):
    p = intonly.gelu_params(0.05, 0, 0.03, 0)
    with pytest.raises(ValueError, match=r"x\[1\] = 32768 is outside"):
        sk.intonly_gelu(rt, np.array([0, 1 << 15]), p)
    with pytest.raises(ValueError, match="lo must not exceed hi"):
        sk.intonly_gelu(rt, np.zeros(3, np.int8), p, 5, 4)


# ---------------------------------------------------------------- integer-only LayerNorm

def _ln_params(rng, length, eps=1e-5, x_scale=0.05):
    gamma = rng.uniform(0.2, 2.5, length) * rng.choice([-1, 1], length)
    beta = rng.normal(0, 0.5, length)
    return intonly.layernorm_params(x_scale, gamma, beta, 0.04, int(rng.integers(-20, 20)),
                                    eps)


@pytest.mark.parametrize("length", [1, 2, 7, 64, 257])
def test_layernorm_random(rt, rng, seed, length):
    x = _int8(rng, (3, 4, length))
    p = _ln_params(rng, length)
    lo, hi = sorted(int(v) for v in rng.integers(-128, 128, 2))
    assert_same(sk.intonly_layernorm(rt, x, p, lo, hi), intonly.layernorm(x, p, lo, hi),
                seed, f"layernorm length {length}, clamp [{lo}, {hi}]")


def test_layernorm_long_rows_and_extremes(rt, rng, seed):
    length = intonly.LAYERNORM_MAX_LENGTH
    x = _int8(rng, (4, length))
    x[1] = np.where(np.arange(length) % 2, 127, -128)  # the largest variance
    x[2] = -128
    x[2, 0] = 127  # one outlier
    x[3] = 127  # all equal: the variance is 0 and epsilon alone sets the scale
    for eps, x_scale in ((1e-5, 0.05), (1e-12, 1.0), (0.5, 1e-2)):
        p = _ln_params(rng, length, eps, x_scale)
        assert_same(sk.intonly_layernorm(rt, x, p), intonly.layernorm(x, p), seed,
                    f"layernorm rows of {length}, eps {eps}, x_scale {x_scale}")


def test_layernorm_all_equal_rows(rt, rng, seed):
    x = np.repeat(np.arange(-128, 128, 17, dtype=np.int8)[:, None], 48, axis=1)
    p = _ln_params(rng, 48)
    got = sk.intonly_layernorm(rt, x, p)
    assert_same(got, intonly.layernorm(x, p), seed, "layernorm all-equal rows")
    assert (got == got[0]).all()  # (x - mean) is 0 in every row: beta alone remains


def test_layernorm_bad_input(rt, rng):
    p = _ln_params(rng, 8)
    with pytest.raises(ValueError, match="has length 9; the layer's gamma and beta expect 8"):
        sk.intonly_layernorm(rt, np.zeros((2, 9), np.int8), p)
    with pytest.raises(ValueError, match=r"x\[0, 0\] = 128 is outside"):
        sk.intonly_layernorm(rt, np.full((1, 8), 128), p)


def test_device_inputs_must_be_in_range_by_their_dtype(rt):
    # A device tensor is not read back to check it: only dtypes whose every value is
    # accepted may come in that way.
    p = intonly.softmax_params(0.1)
    wide = rt.to_device(np.array([[0, 1 << 30]], np.int32))
    with pytest.raises(ValueError, match=r"x on the device must have dtype int8 \(values in "
                                         r"\[-1073741824, 1073741823\] without a check\), "
                                         r"not int32"):
        sk.intonly_softmax(rt, wide, p)
    # An int32 NumPy array is checked on the host instead.
    with pytest.raises(ValueError, match=r"x\[0, 1\] = 1073741824 is outside"):
        sk.intonly_softmax(rt, np.array([[0, 1 << 30]], np.int32), p)
    gp = intonly.gelu_params(0.05, 0, 0.03, 0)
    x16 = np.array([-(1 << 15), (1 << 15) - 1, 7], np.int16)
    assert_same(sk.intonly_gelu(rt, rt.to_device(x16), gp).get(), intonly.gelu(x16, gp), 0,
                "gelu of an int16 device tensor")
