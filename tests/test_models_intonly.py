"""Tests of models.intonly: integer-only softmax, GELU and LayerNorm against the float ops.

Every bound the module states is checked twice: that no measured error exceeds it, and that
it is not loose (on inputs that reach the worst case, the measured maximum comes close).
Measured maxima are printed with the seed (``pytest -s`` shows them).
"""

import ast
import inspect
import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from models import intonly
from models.intonly import (
    EXP2_POLY_REL_ERROR,
    GELU_APPROX_ERROR,
    GELU_ERF_CLIP,
    gelu,
    gelu_error_bound,
    gelu_params,
    isqrt,
    layernorm,
    layernorm_error_bound,
    layernorm_params,
    softmax,
    softmax_error_bound,
    softmax_params,
)
from models.requant import requantize, rounding_shift

PROPERTY = settings(max_examples=200, deadline=None, derandomize=True, database=None)

_erf = np.vectorize(math.erf)


# --- float references (float64) -----------------------------------------------------------

def _softmax_real(x, x_scale):
    v = x.astype(np.float64) * x_scale
    e = np.exp(v - v.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def _gelu_real(v):
    return v / 2 * (1 + _erf(v / math.sqrt(2)))


def _layernorm_real(x, x_scale, x_zero_point, gamma, beta, eps):
    v = x_scale * (x.astype(np.float64) - x_zero_point)
    mean = v.mean(axis=-1, keepdims=True)
    var = ((v - mean) ** 2).mean(axis=-1, keepdims=True)
    return (v - mean) / np.sqrt(var + eps) * gamma + beta


def _lsb_error(y, real_lsb, lo, hi):
    """``|y - clamp(real_lsb)|``: clamping is 1-Lipschitz, so the bound survives it."""
    return np.abs(y.astype(np.float64) - np.clip(real_lsb, lo, hi))


# --- building blocks -----------------------------------------------------------------------

def test_exp2_polynomial_exhaustive():
    f = np.arange(1 << 16, dtype=np.int64)
    p = intonly._exp2_fraction(f)
    assert p.dtype == np.int64
    assert p.min() == intonly.EXP2_COEFFS[0] and p.max() < 2**31
    rel = np.abs(p / (2.0**29 * 2.0 ** (f / 2**16)) - 1)
    print(f"exp2 polynomial: max relative error {rel.max():.6e} (stated {EXP2_POLY_REL_ERROR})")
    assert rel.max() <= EXP2_POLY_REL_ERROR
    assert rel.max() >= 0.999 * EXP2_POLY_REL_ERROR  # the stated figure is the real one


def test_gelu_erf_approximation_error_is_the_stated_one():
    x = np.linspace(0, 8, 160_001)
    t = np.minimum(x / math.sqrt(2) / GELU_ERF_CLIP, 1)
    err = x / 2 * np.abs(t * (2 - t) - _erf(x / math.sqrt(2)))
    print(f"gelu approximation: max {err.max():.7f} at x = {x[err.argmax()]:.4f}")
    assert GELU_APPROX_ERROR - 1e-6 <= err.max() <= GELU_APPROX_ERROR


def test_isqrt_is_floor_sqrt(rng, seed):
    print(f"seed {seed}")
    small = np.arange(1 << 16, dtype=np.int64)
    big = rng.integers(0, 2**62, size=4000, dtype=np.int64)
    squares = np.array([k * k + d for k in (1, 2**20 + 7, 2**31 - 1) for d in (-1, 0, 1)
                        if k * k + d < 2**62], dtype=np.int64)
    for values in (small, big, squares, np.array([0, 1, 2**62 - 1], dtype=np.int64)):
        got = isqrt(values)
        want = np.array([math.isqrt(int(v)) for v in values], dtype=np.int64)
        bad = np.flatnonzero(got != want)
        assert bad.size == 0, (int(values[bad[0]]), int(got[bad[0]]), int(want[bad[0]]))


def test_isqrt_rejects_out_of_range():
    with pytest.raises(ValueError, match=r"value\[1\] = -1 is outside the expected range"):
        isqrt(np.array([4, -1]))
    with pytest.raises(ValueError, match="value must be an integer"):
        isqrt(np.array([4.0]))


def test_bit_length_matches_python():
    values = np.array([1, 2, 3, 4, 255, 256, 2**31, 2**61 + 5, 2**62 - 1], dtype=np.int64)
    assert intonly._bit_length(values).tolist() == [int(v).bit_length() for v in values]


# --- softmax -------------------------------------------------------------------------------

def _check_softmax(x, x_scale, y_scale, out_dtype="uint8"):
    params = softmax_params(x_scale, y_scale, out_dtype=out_dtype)
    y = softmax(x, params)
    info = np.iinfo(out_dtype)
    real = params.y_zero_point + _softmax_real(x, x_scale) / y_scale
    err = _lsb_error(y, real, info.min, info.max)
    return err.max(), softmax_error_bound(x.shape[-1], y_scale), y


@pytest.mark.parametrize("low, high, x_scale", [
    (-128, 127, 0.05), (-128, 127, 0.2), (-2**15, 2**15 - 1, 1e-3),
    (-2**30, 2**30 - 1, 2e-8), (-2**30, 2**30 - 1, 1e-6)])
@pytest.mark.parametrize("length", [1, 7, 64, 197])
def test_softmax_within_bound_random(rng, seed, low, high, x_scale, length):
    x = rng.integers(low, high, size=(64, length), endpoint=True)
    worst, bound, _ = _check_softmax(x, x_scale, 1 / 256)
    print(f"seed {seed}: softmax N={length} s={x_scale}: max {worst:.4f} LSB, bound {bound:.4f}")
    assert worst <= bound, (seed, worst, bound)
    assert bound < 1.0  # the stated consequence: within 1 LSB of the float softmax


def test_softmax_bound_is_tight(rng, seed):
    """Two-element rows near a tie put the polynomial's +eps and -eps at p = 1/2, the worst
    case of the bound's ``delta / 2`` term; a fine output scale makes that term dominate."""
    x = np.stack([np.zeros(4000, np.int64), -rng.integers(1, 2000, 4000)], axis=1)
    y_scale = 2.0**-14
    worst, bound, _ = _fine_softmax(x, 1e-5, y_scale)
    print(f"seed {seed}: softmax tightness: max {worst:.3f} LSB of 2**-14, bound {bound:.3f}")
    assert 0.9 * bound <= worst <= bound


def _fine_softmax(x, x_scale, y_scale):
    """Softmax's Q15 probability (the stage before the 8-bit output, which cannot show the
    polynomial's error) rounded to an output scale of 2**-14, against the float softmax."""
    p = intonly._softmax_probability(x, softmax_params(x_scale))
    y = rounding_shift(p, np.int64(1 << 30), np.int64(31))  # 2**-15 / 2**-14 = 1/2
    real = _softmax_real(x, x_scale) / y_scale
    return np.abs(y - real).max(), softmax_error_bound(x.shape[-1], y_scale), y


def test_softmax_is_its_probability_requantized(rng):
    """softmax = the project's requantization of the Q15 probability (int8: exactly
    models.requant.requantize), so the tightness test above measures softmax's own path."""
    x = rng.integers(-3000, 3000, size=(50, 9))
    params = softmax_params(1e-3, out_dtype="int8")
    p = intonly._softmax_probability(x, params)
    assert p.min() >= 0 and p.max() <= 2**15
    want = requantize(p, params.out_multiplier, params.out_shift, params.y_zero_point)
    assert np.array_equal(softmax(x, params), want)


@PROPERTY
@given(st.lists(st.integers(-128, 127), min_size=1, max_size=40),
       st.floats(1e-3, 2.0), st.sampled_from(["uint8", "int8"]))
def test_softmax_property(values, x_scale, out_dtype):
    x = np.array([values], dtype=np.int64)
    worst, bound, y = _check_softmax(x, x_scale, 1 / 256, out_dtype)
    assert worst <= bound, (values, x_scale, worst, bound)
    # Softmax is monotonic: a larger input never gets a smaller probability.
    order = np.argsort(x[0], kind="stable")
    assert (np.diff(y[0][order].astype(np.int64)) >= 0).all()


def test_softmax_uint8_and_int8_differ_by_the_zero_point(rng):
    x = rng.integers(-128, 128, size=(8, 33))
    u = softmax(x, softmax_params(0.1)).astype(np.int64)
    s = softmax(x, softmax_params(0.1, out_dtype="int8")).astype(np.int64)
    assert (u - s == 128).all()


def test_softmax_one_hot_and_uniform():
    p = softmax_params(1.0)
    assert softmax(np.array([[100, -100]]), p).tolist() == [[255, 0]]  # 1.0 clamps to 255
    assert softmax(np.full((1, 4), 5), p).tolist() == [[64, 64, 64, 64]]
    assert softmax(np.array([[7]]), p).tolist() == [[255]]


def test_softmax_bad_input():
    params = softmax_params(0.1)
    with pytest.raises(ValueError, match=r"x\[0, 1\] = 1073741824 is outside the expected "
                                         r"range \[-1073741824, 1073741823\]"):
        softmax(np.array([[0, 2**30]]), params)
    with pytest.raises(ValueError, match="x must be an integer or an array of integers"):
        softmax(np.array([[0.5]]), params)
    with pytest.raises(ValueError, match="last axis of x has length 65537; expected 1..65536"):
        softmax(np.zeros((1, 65537), np.int8), params)
    with pytest.raises(ValueError, match="x must have at least one axis"):
        softmax(np.int8(3), params)
    with pytest.raises(ValueError, match="out_dtype must be 'uint8' or 'int8'"):
        softmax_params(0.1, out_dtype="int16")
    with pytest.raises(ValueError, match=r"y_zero_point must be an integer in \[0, 255\]"):
        softmax_params(0.1, y_zero_point=-1)
    with pytest.raises(ValueError, match=r"softmax x_scale \* 2\*\*16 / ln\(2\) cannot"):
        softmax_params(1e6)


# --- GELU ----------------------------------------------------------------------------------

def _check_gelu(x, x_scale, x_zero_point, y_scale, y_zero_point, lo=-128, hi=127):
    params = gelu_params(x_scale, x_zero_point, y_scale, y_zero_point)
    y = gelu(x, params, lo, hi)
    real = x_scale * (x.astype(np.float64) - x_zero_point)
    err = _lsb_error(y, y_zero_point + _gelu_real(real) / y_scale, lo, hi)
    bound = gelu_error_bound(y_scale, np.abs(real).max())
    return err.max(), bound, y


@pytest.mark.parametrize("x_scale, x_zero_point, y_scale, y_zero_point", [
    (0.05, 0, 0.03, -10), (0.03, 20, 0.02, -20), (0.1, -5, 0.1, -2), (0.02, 0, 0.01, -100)])
def test_gelu_int8_exhaustive(x_scale, x_zero_point, y_scale, y_zero_point):
    x = np.arange(-128, 128)
    worst, bound, y = _check_gelu(x, x_scale, x_zero_point, y_scale, y_zero_point)
    print(f"gelu s={x_scale} z={x_zero_point}: max {worst:.4f} LSB, bound {bound:.4f}")
    assert worst <= bound
    assert y.dtype == np.int8


def test_gelu_int16_random_and_tight(rng, seed):
    """int16 inputs with a fine output scale sample GELU densely around its worst point
    (x near 1.2), where the approximation's own error dominates the bound."""
    x = rng.integers(-2**15, 2**15, size=20000)
    x_scale, y_scale = 1e-4, 2e-4
    params = gelu_params(x_scale, 0, y_scale, 0)
    y = gelu(x, params, -128, 127)
    # The output saturates at 127 * 2e-4 = 0.025: compare a wider window through int64 math.
    real = x_scale * x
    err = _lsb_error(y, _gelu_real(real) / y_scale, -128, 127)
    bound = gelu_error_bound(y_scale, np.abs(real).max())
    print(f"seed {seed}: gelu int16: max {err.max():.4f} LSB, bound {bound:.4f}")
    assert err.max() <= bound
    # Tightness where the error peaks: inputs 1.0..1.4 (outputs 0.84..1.29), output scale
    # 0.006 with zero point -128 (0..1.53 representable; bound 3.8 LSB).
    x = rng.integers(10_000, 14_000, size=4000)
    y_scale = 0.006
    params = gelu_params(x_scale, 0, y_scale, -128)
    y = gelu(x, params)
    err = _lsb_error(y, -128 + _gelu_real(x_scale * x) / y_scale, -128, 127)
    bound = gelu_error_bound(y_scale, 1.4)
    print(f"seed {seed}: gelu near its worst point: max {err.max():.4f} LSB, bound {bound:.4f}")
    assert 0.95 * bound <= err.max() <= bound


@PROPERTY
@given(st.lists(st.integers(-128, 127), min_size=1, max_size=64),
       st.floats(1e-3, 0.5), st.integers(-128, 127), st.floats(1e-3, 0.5),
       st.integers(-128, 127))
def test_gelu_property(values, x_scale, x_zero_point, y_scale, y_zero_point):
    x = np.array(values)
    worst, bound, _ = _check_gelu(x, x_scale, x_zero_point, y_scale, y_zero_point)
    assert worst <= bound, (values, worst, bound)


def test_gelu_bad_input():
    params = gelu_params(0.1, 0, 0.1, 0)
    with pytest.raises(ValueError, match=r"x\[1\] = 32768 is outside the expected range "
                                         r"\[-32768, 32767\]"):
        gelu(np.array([0, 2**15]), params)
    with pytest.raises(ValueError, match=r"x_zero_point must be an integer in \[-128, 127\]"):
        gelu_params(0.1, 300, 0.1, 0)
    with pytest.raises(ValueError, match=r"gelu x_scale / \(2\*\*15 \* y_scale\) cannot"):
        gelu_params(1e-9, 0, 10.0, 0)
    with pytest.raises(ValueError, match="lo must not exceed hi"):
        gelu(np.array([1]), params, lo=5, hi=4)


# --- LayerNorm -----------------------------------------------------------------------------

def _check_layernorm(x, x_scale, x_zero_point, gamma, beta, y_scale, y_zero_point,
                     eps=1e-5):
    params = layernorm_params(x_scale, gamma, beta, y_scale, y_zero_point, eps)
    y = layernorm(x, params)
    real = _layernorm_real(x, x_scale, x_zero_point, gamma, beta, eps)
    err = _lsb_error(y, y_zero_point + real / y_scale, -128, 127)
    return err.max(), layernorm_error_bound(gamma, y_scale), y


@pytest.mark.parametrize("length", [1, 2, 32, 768, 4096])
def test_layernorm_within_bound_random(rng, seed, length):
    gamma = rng.uniform(0.2, 2.0, length) * rng.choice([-1, 1], length)
    beta = rng.uniform(-1, 1, length)
    x = rng.integers(-128, 128, size=(32, length))
    x[0] = 7  # a constant row: variance 0, the result is beta
    x[1, :] = 0
    x[1, 0] = 1  # the smallest nonzero variance
    worst, bound, y = _check_layernorm(x, 0.05, 3, gamma, beta, 0.04, -5)
    print(f"seed {seed}: layernorm N={length}: max {worst:.4f} LSB, bound {bound:.4f}")
    assert worst <= bound
    if length >= 32:
        # With many distinct outputs the final rounding alone costs nearly half an LSB: the
        # bound (0.5 + a hundredth or less) is not loose. (N = 2 rows normalize to +-1 only.)
        assert worst >= 0.45


@PROPERTY
@given(st.integers(1, 48).flatmap(lambda n: st.tuples(
    st.lists(st.integers(-128, 127), min_size=n, max_size=n),
    st.lists(st.floats(0.05, 3.0), min_size=n, max_size=n),
    st.lists(st.floats(-2.0, 2.0), min_size=n, max_size=n))),
    st.floats(1e-3, 0.5), st.floats(0.01, 0.5), st.sampled_from([1e-5, 1e-3, 0.1]))
def test_layernorm_property(row, x_scale, y_scale, eps):
    values, gamma, beta = (np.array(v) for v in row)
    worst, bound, _ = _check_layernorm(values[None, :], x_scale, 0, gamma, beta, y_scale, 0,
                                       eps)
    assert worst <= bound, (row, worst, bound)


def test_layernorm_eps_dominates_small_variance():
    """A large eps against a tiny variance is where E's 22 fractional bits matter."""
    x = np.array([[0, 1]])
    worst, bound, _ = _check_layernorm(x, 1e-3, 0, np.array([1.0, 1.0]), np.zeros(2),
                                       2.0**-7, 0, eps=2.5e-7)
    assert worst <= bound


def test_layernorm_bad_input():
    params = layernorm_params(0.1, np.ones(4), np.zeros(4), 0.1, 0)
    with pytest.raises(ValueError, match="last axis of x has length 3; the layer's gamma and "
                                         "beta expect 4"):
        layernorm(np.zeros((2, 3), np.int8), params)
    with pytest.raises(ValueError, match=r"x\[0, 2\] = 200 is outside"):
        layernorm(np.array([[0, 0, 200, 0]]), params)
    with pytest.raises(ValueError, match=r"gamma\[1\] = 0 cannot be folded"):
        layernorm_params(0.1, [1.0, 0.0], [0.0, 0.0], 0.1, 0)
    with pytest.raises(ValueError, match=r"beta\[0\] / gamma\[0\] = .* is too large"):
        layernorm_params(0.1, [1e-4, 1.0], [100.0, 0.0], 0.1, 0)
    with pytest.raises(ValueError, match="gamma and beta must have the same length"):
        layernorm_params(0.1, [1.0, 1.0], [0.0], 0.1, 0)
    with pytest.raises(ValueError, match="last axis of gamma has length 4097"):
        layernorm_params(0.1, np.ones(4097), np.zeros(4097), 0.1, 0)
    with pytest.raises(ValueError, match=r"eps / x_scale\*\*2 = .* is too large"):
        layernorm_params(1e-12, np.ones(4), np.zeros(4), 0.1, 0, eps=1e-5)
    with pytest.raises(ValueError, match=r"layernorm \|gamma\| / \(2\*\*16 \* y_scale\): "
                                         r"real_multiplier\[1\] = .* is too small"):
        layernorm_params(0.1, [1.0, 1e-7], [0.0, 0.0], 0.1, 0)


# --- exactness -----------------------------------------------------------------------------

def test_integer_functions_are_deterministic_and_integer(rng):
    """On int64 arrays the results are integer typed, identical on a rerun and row by row
    independent of the batch they come in (no hidden state, no float reduction order)."""
    x = rng.integers(-128, 128, size=(16, 24)).astype(np.int64)
    cases = [
        (softmax, softmax_params(0.07), np.uint8),
        (gelu, gelu_params(0.07, 3, 0.05, -20), np.int8),
        (layernorm, layernorm_params(0.07, rng.uniform(0.5, 1.5, 24), rng.uniform(-1, 1, 24),
                                     0.05, 0), np.int8),
    ]
    for function, params, dtype in cases:
        first = function(x, params)
        assert first.dtype == dtype, function.__name__
        assert np.array_equal(first, function(x.copy(), params)), function.__name__
        rows = np.stack([function(x[i:i + 1], params)[0] for i in range(len(x))])
        assert np.array_equal(first, rows), function.__name__
        assert np.array_equal(first, function(x.astype(np.int16), params)), function.__name__


#: Functions on the data path: integer NumPy only, checked in their source.
_INTEGER_PATH = ("softmax", "_softmax_probability", "gelu", "layernorm", "isqrt",
                 "_exp2_fraction", "_bit_length")
_FLOAT_NAMES = {"exp", "log", "log2", "sqrt", "erf", "tanh", "float16", "float32", "float64",
                "floating", "round", "rint", "floor", "ceil", "true_divide", "divide",
                "float", "math"}


def _float_uses(source):
    """What in ``source`` could make or need a float: ``/``, ``**``, float literals, float
    functions and types."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Div, ast.Pow)):
            found.append(f"{type(node.op).__name__} on line {node.lineno}")
        elif isinstance(node, ast.AugAssign) and isinstance(node.op, (ast.Div, ast.Pow)):
            found.append(f"{type(node.op).__name__}= on line {node.lineno}")
        elif isinstance(node, ast.Constant) and isinstance(node.value, float):
            found.append(f"float literal {node.value!r}")
        elif isinstance(node, ast.Attribute) and node.attr in _FLOAT_NAMES:
            found.append(f".{node.attr}")
        elif isinstance(node, ast.Name) and node.id in _FLOAT_NAMES:
            found.append(node.id)
    return found


def test_float_check_finds_floats():
    source = "def f(x):\n    y = x / 2\n    y **= 2\n    return np.sqrt(y) + math.pi + 0.5\n"
    assert sorted(_float_uses(source)) == [".sqrt", "Div on line 2", "Pow= on line 3",
                                           "float literal 0.5", "math"]


@pytest.mark.parametrize("name", _INTEGER_PATH)
def test_data_path_uses_integer_operations_only(name):
    assert _float_uses(inspect.getsource(getattr(intonly, name))) == [], name


# --- the benchmark -------------------------------------------------------------------------

def test_bench_intonly_records_errors_within_the_bounds(tmp_path, monkeypatch):
    from bench import bench_intonly
    from tessera import results

    monkeypatch.setattr(results, "RESULTS", tmp_path)
    monkeypatch.setattr(results, "WRITTEN", [])
    path = bench_intonly.main(scale=64)
    document = json.loads(path.read_text())
    assert path.name == "intonly_error.json" and document["seed"] == bench_intonly.SEED
    metrics = {entry["name"]: entry for entry in document["metrics"]}
    assert len(metrics) == 9
    for op in ("softmax_n64", "gelu_int8", "layernorm_n256"):
        worst = metrics[f"{op}_max_abs_error"]
        assert 0.4 <= worst["value"] <= worst["target"], worst
        assert worst["peer_value"] <= 0.5
        assert 0 < metrics[f"{op}_mean_abs_error"]["value"] < worst["value"]
        assert 0.5 < metrics[f"{op}_equal_to_rounded_float"]["value"] <= 1
