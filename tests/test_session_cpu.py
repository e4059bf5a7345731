"""``sw_driver.InferenceSession`` on the CPU provider against onnxruntime.

Each model is a small random float network (``tests/qdq_models.py``) quantized by
``quantize_static`` (QDQ, per-channel int8 weights, int8 activations) with a seeded
calibration reader. Both runtimes get the same seeded float inputs; the outputs are compared
in the output's int8 domain (float difference / output scale). Contract checked: top-1
agrees on every sample and at least 99 % of output elements are within 1 LSB. The reference
is onnxruntime's unoptimized QDQ graph, the same on every CPU; its default fused int8 kernels
are compared too where they are known exact (``bench.ort_cpu``). The fast CPU kernels are
checked bit for bit against the golden model.
"""

import numpy as np
import pytest
import qdq_models

from bench.ort_cpu import fused_int8_gemm_is_exact
from models import conv as golden
from models.eltwise import add as golden_add
from models.requant import requantize
from sw_driver import InferenceSession
from sw_driver.providers import cpu_kernels
from sw_driver.providers.cpu import CPUProvider

MODEL_SEEDS = {"lenet": 101, "residual": 202, "separable": 303}
BATCH = 32


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """Every test model built and quantized once: name -> (float model, QDQ path, shape)."""
    tmp = tmp_path_factory.mktemp("qdq")
    return {name: qdq_models.build(name, seed, tmp) for name, seed in MODEL_SEEDS.items()}


def _lsb_diff(ours, theirs, scale):
    return np.rint(np.abs(ours.astype(np.float64) - theirs.astype(np.float64)) / scale)


@pytest.mark.parametrize("name", list(MODEL_SEEDS))
@pytest.mark.parametrize("optimized", [True, False], ids=["ort-fused", "ort-unfused"])
def test_matches_onnxruntime(built, name, optimized):
    exact, why = fused_int8_gemm_is_exact()
    if optimized and not exact:
        pytest.skip(f"onnxruntime's fused int8 kernels are not exact on this CPU: {why}")
    _, path, shape = built[name]
    seed = MODEL_SEEDS[name] + 7
    x = np.random.default_rng(seed).standard_normal((BATCH, *shape)).astype(np.float32)
    session = InferenceSession(path, providers=["cpu"])
    (ours,) = session.run(None, {"x": x})
    (theirs,) = qdq_models.ort_session(path, optimized).run(None, {"x": x})
    what = f"model={name} model_seed={MODEL_SEEDS[name]} input_seed={seed} batch={BATCH} " \
           f"onnxruntime={'fused' if optimized else 'unfused'}"
    assert ours.dtype == theirs.dtype == np.float32, what
    assert ours.shape == theirs.shape, f"{what}: shape {ours.shape} != {theirs.shape}"

    out_scale = session.graph.layers[-1].scale  # the final Dequantize
    diff = _lsb_diff(ours, theirs, out_scale)
    within = float((diff <= 1).mean())
    exact = float((diff == 0).mean())
    top1 = float((ours.argmax(axis=1) == theirs.argmax(axis=1)).mean())
    print(f"{what}: exact {exact:.2%}, within 1 LSB {within:.2%}, max {int(diff.max())} LSB, "
          f"top-1 agreement {top1:.2%} over {diff.size} elements")
    first = tuple(int(i) for i in np.argwhere(diff > 1)[0]) if (diff > 1).any() else None
    detail = (f"first index off by more than 1 LSB {first}: ours {ours[first]!r}, "
              f"onnxruntime {theirs[first]!r}" if first else "")
    assert within >= 0.99, f"{what}: only {within:.2%} within 1 LSB; {detail}"
    mismatch = np.argwhere(ours.argmax(axis=1) != theirs.argmax(axis=1))
    assert top1 == 1.0, (
        f"{what}: top-1 differs on {len(mismatch)} samples; first sample "
        f"{int(mismatch[0][0])}: ours {ours[mismatch[0][0]]}, onnxruntime "
        f"{theirs[mismatch[0][0]]}")


@pytest.mark.parametrize("batch", [1, 3])
def test_batch_sizes_and_output_names(built, batch):
    _, path, shape = built["lenet"]
    x = np.random.default_rng(batch).standard_normal((batch, *shape)).astype(np.float32)
    session = InferenceSession(path)
    (all_outputs,) = session.run(None, {"x": x})
    (named,) = session.run(["y"], {"x": x})
    assert all_outputs.shape == (batch, 10)
    np.testing.assert_array_equal(all_outputs, named)


def test_inputs_outputs_like_onnxruntime(built):
    _, path, _ = built["separable"]
    ours = InferenceSession(path)
    theirs = qdq_models.ort_session(path)
    for mine, ref in ((ours.get_inputs(), theirs.get_inputs()),
                      (ours.get_outputs(), theirs.get_outputs())):
        assert [(a.name, a.shape, a.type) for a in mine] == \
               [(b.name, b.shape, b.type) for b in ref]


def test_profile_names_every_layer(built):
    _, path, shape = built["residual"]
    session = InferenceSession(path, providers=["CPUExecutionProvider"])
    assert session.profile() == []
    session.run(None, {"x": np.zeros((2, *shape), np.float32)})
    profile = session.profile()
    assert [p["layer"] for p in profile] == [layer.name for layer in session.graph.layers]
    for entry in profile:
        assert set(entry) == {"layer", "op", "provider", "seconds", "bytes", "reason"}
        assert entry["provider"] == "cpu" and entry["bytes"] == 0 and entry["seconds"] >= 0
        assert "cpu" in entry["reason"]
    assert "Add" in {p["op"] for p in profile}


# -- the fast kernels are the golden model, bit for bit ---------------------------------

CONV_CASES = [
    # (seed, N, C, O, H, W, k, stride, pads, dilation, groups)
    (1, 2, 3, 8, 9, 9, 3, 1, (1, 1, 1, 1), 1, 1),
    (2, 1, 16, 4, 8, 7, 5, 2, (2, 1, 0, 2), 1, 1),
    (3, 2, 8, 8, 10, 10, 3, 1, (1, 1, 1, 1), 1, 8),      # depthwise
    (4, 1, 4, 8, 9, 9, 3, 2, (1, 1, 1, 1), 1, 4),        # depthwise, channel multiplier 2
    (5, 1, 6, 6, 12, 12, 3, 1, (2, 2, 2, 2), 2, 3),      # grouped, dilated
    (6, 1, 130, 5, 5, 5, 3, 1, (1, 1, 1, 1), 1, 1),      # K = 1170 > CHUNK: split sum
    (7, 1, 300, 3, 3, 3, 3, 1, (0, 0, 0, 0), 1, 1),      # K = 2700: three chunks
]


@pytest.mark.parametrize("case", CONV_CASES, ids=[f"seed{c[0]}" for c in CONV_CASES])
@pytest.mark.parametrize("values", ["random", "extreme"])
def test_fast_conv_is_golden(case, values, monkeypatch):
    # Exercise the fast path even where the provider would hand short reductions to golden.
    monkeypatch.setattr(cpu_kernels, "SHORT_REDUCTION", 0)
    seed, n, c, o, h, w, k, stride, pads, dil, groups = case
    rng = np.random.default_rng(seed)
    if values == "random":
        x = rng.integers(-128, 128, (n, c, h, w), dtype=np.int8)
        wt = rng.integers(-128, 128, (o, c // groups, k, k), dtype=np.int8)
        zx = int(rng.integers(-128, 128))
    else:  # the largest products and sums the int8 domain allows
        x = np.full((n, c, h, w), 127, np.int8)
        wt = np.full((o, c // groups, k, k), -128, np.int8)
        zx = -128
    bias = rng.integers(-2**20, 2**20, o, dtype=np.int32)
    args = dict(x_zero_point=zx, stride=(stride, stride), padding=pads, dilation=(dil, dil),
                groups=groups)
    expected = golden.conv2d(x, wt, bias, **args)
    actual = cpu_kernels.conv2d(x, wt, bias, **args)
    bad = np.argwhere(actual != expected)
    assert not bad.size, (
        f"seed={seed} case={case} values={values}: first difference at {tuple(bad[0])}: "
        f"fast {actual[tuple(bad[0])]}, golden {expected[tuple(bad[0])]}")


@pytest.mark.parametrize("k", [1, 1024, 1025, 3000])
def test_fast_dense_is_golden(k):
    rng = np.random.default_rng(k)
    for x, w, zx in (
        (rng.integers(-128, 128, (5, k), dtype=np.int8),
         rng.integers(-128, 128, (7, k), dtype=np.int8), int(rng.integers(-128, 128))),
        (np.full((2, k), -128, np.int8), np.full((3, k), -128, np.int8), 127),
    ):
        bias = rng.integers(-2**20, 2**20, w.shape[0], dtype=np.int32)
        expected = golden.dense(x, w, bias, x_zero_point=zx)
        actual = cpu_kernels.dense(x, w, bias, x_zero_point=zx)
        bad = np.argwhere(actual != expected)
        assert not bad.size, (f"seed={k} K={k}: first difference at {tuple(bad[0])}: fast "
                              f"{actual[tuple(bad[0])]}, golden {expected[tuple(bad[0])]}")


def test_fast_kernels_raise_the_golden_errors():
    x = np.full((1, 1, 3, 3), 127, np.int8)
    w = np.full((1, 1, 3, 3), 127, np.int8)
    with pytest.raises(OverflowError, match="outside int32"):
        cpu_kernels.conv2d(x, w, np.array([2**31 - 1], np.int32), x_zero_point=0)
    with pytest.raises(ValueError, match="does not fit"):
        cpu_kernels.conv2d(x, np.zeros((1, 1, 5, 5), np.int8), None, x_zero_point=0)


# -- the fused Conv + requantization path and the Add table are the golden model --------

REQUANT_CASES = CONV_CASES + [
    # (seed, N, C, O, H, W, k, stride, pads, dilation, groups): reductions around CHUNK
    (8, 1, 64, 4, 5, 5, 4, 1, (1, 2, 2, 1), 1, 1),       # K = 1024 = CHUNK: one chunk
    (9, 1, 41, 4, 5, 5, 5, 1, (2, 2, 2, 2), 1, 1),       # K = 1025: two chunks
    (10, 1, 120, 3, 5, 5, 5, 2, (2, 2, 2, 2), 1, 1),     # K = 3000: three chunks, strided
    (11, 3, 5, 7, 11, 6, 3, 2, (0, 1, 1, 0), 2, 1),      # dilated (per-tap im2col)
]


def _requant_params(rng, o):
    m = rng.integers(1 << 30, 1 << 31, o, dtype=np.int64)
    n = rng.integers(18, 53, o, dtype=np.int64)
    # Exact ties (acc * M = odd multiple of 2**(n-1)) and the largest float shift, 52.
    m[0], n[0] = 1 << 30, 31
    if o > 1:
        n[1] = 52
    zy = int(rng.integers(-128, 128))
    lo, hi = sorted(int(v) for v in rng.integers(-128, 128, 2))
    return m, n, zy, lo, hi


def _fused_or_general(x, wt, bias, m, n, zy, lo, hi, args):
    """What the provider's ``_conv`` does: the fused path, else fast conv + golden requant."""
    y = cpu_kernels.conv2d_requant(x, wt, bias, multiplier=m, shift=n, y_zero_point=zy,
                                   lo=lo, hi=hi, **args)
    if y is not None:
        return y, True
    return requantize(cpu_kernels.conv2d(x, wt, bias, **args), m, n, zy, lo, hi, axis=1), False


@pytest.mark.parametrize("case", REQUANT_CASES, ids=[f"seed{c[0]}" for c in REQUANT_CASES])
@pytest.mark.parametrize("values", ["random", "extreme", "small"])
def test_fused_conv_requant_is_golden(case, values):
    seed, n, c, o, h, w, k, stride, pads, dil, groups = case
    rng = np.random.default_rng(seed)
    if values == "extreme":  # the largest sums: beyond 2**21, so the general path runs
        x = np.full((n, c, h, w), 127, np.int8)
        wt = np.full((o, c // groups, k, k), -128, np.int8)
        zx = -128
    else:
        span = 128 if values == "random" else 3  # "small": |acc| < 2**21 even for K = 3000
        x = rng.integers(-span, span, (n, c, h, w), dtype=np.int8)
        wt = rng.integers(-128, 128, (o, c // groups, k, k), dtype=np.int8)
        zx = int(rng.integers(-span, span))
    bias = rng.integers(-2**15, 2**15, o, dtype=np.int32)
    m, shift, zy, lo, hi = _requant_params(rng, o)
    if values == "small":  # channel 0 (acc / 2) unclamped: many exact ties reach the output
        bias[0], zy, lo, hi = 0, 0, -128, 127
    args = dict(x_zero_point=zx, stride=(stride, stride), padding=pads, dilation=(dil, dil),
                groups=groups)
    acc = golden.conv2d(x, wt, bias, **args)
    expected = requantize(acc, m, shift, zy, lo, hi, axis=1)
    # As the next layer sees it: an NHWC-backed input (a transposed view) works the same.
    for xin in (x, np.ascontiguousarray(x.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)):
        actual, fused = _fused_or_general(xin, wt, bias, m, shift, zy, lo, hi, args)
        what = f"seed={seed} case={case} values={values} fused={fused}"
        bad = np.argwhere(actual != expected)
        assert not bad.size, (f"{what}: first difference at {tuple(bad[0])}: fast "
                              f"{actual[tuple(bad[0])]}, golden {expected[tuple(bad[0])]}")
        if values == "small" and groups == 1:
            assert fused, what  # the fused path ran (its float64 exactness conditions hold)


def test_fused_conv_requant_declines_outside_its_exact_range():
    rng = np.random.default_rng(12)
    x = rng.integers(-128, 128, (1, 4, 6, 6), dtype=np.int8)
    w = rng.integers(-128, 128, (3, 4, 3, 3), dtype=np.int8)
    args = dict(x_zero_point=0, stride=(1, 1), padding=(1, 1, 1, 1), dilation=(1, 1),
                groups=1, y_zero_point=0, lo=-128, hi=127)
    m = np.full(3, 1 << 30, np.int64)
    ok = cpu_kernels.conv2d_requant(x, w, None, multiplier=m, shift=np.full(3, 40), **args)
    assert ok is not None
    # A shift above 52, a bias past 2**21, an out-of-range multiplier or groups > 1: None.
    assert cpu_kernels.conv2d_requant(x, w, None, multiplier=m, shift=np.full(3, 53),
                                      **args) is None
    assert cpu_kernels.conv2d_requant(x, w, np.full(3, 2**21, np.int32), multiplier=m,
                                      shift=np.full(3, 40), **args) is None
    assert cpu_kernels.conv2d_requant(x, w, None, multiplier=m - 1, shift=np.full(3, 40),
                                      **args) is None
    assert cpu_kernels.conv2d_requant(x, w[:, :2], None, multiplier=m, shift=np.full(3, 40),
                                      **{**args, "groups": 2}) is None


@pytest.mark.parametrize("seed", [21, 22, 23])
def test_add_table_is_golden(seed):
    rng = np.random.default_rng(seed)
    sa, sb, sy = (float(v) for v in rng.uniform(0.01, 0.2, 3))
    za, zb, zy = (int(v) for v in rng.integers(-128, 128, 3))
    lo, hi = sorted(int(v) for v in rng.integers(-128, 128, 2))
    values = np.arange(-128, 128, dtype=np.int8)
    a = np.repeat(values, 256).reshape(16, 16, 16, 16)   # every pair once
    b = np.tile(values, 256).reshape(16, 16, 16, 16)
    # Also NHWC-backed views, as the fused convolution returns them.
    for a_in, b_in in ((a, b), (a.transpose(0, 3, 1, 2), b.transpose(0, 3, 1, 2))):
        expected = golden_add(a_in, sa, za, b_in, sb, zb, sy, zy, lo, hi)
        actual = cpu_kernels.add(a_in, sa, za, b_in, sb, zb, sy, zy, lo, hi)
        assert actual.dtype == np.int8 and actual.shape == expected.shape
        assert np.array_equal(actual, expected), f"seed={seed}"
    # Broadcasting or a bad parameter: None, so that the golden function runs (and raises).
    assert cpu_kernels.add(a, sa, za, b[:1], sb, zb, sy, zy, lo, hi) is None
    assert cpu_kernels.add(a, sa, 200, b, sb, zb, sy, zy, lo, hi) is None
    assert cpu_kernels.add(a, -1.0, za, b, sb, zb, sy, zy, lo, hi) is None


@pytest.mark.parametrize("name", list(MODEL_SEEDS))
def test_fast_provider_is_golden_provider(built, name):
    _, path, shape = built[name]
    seed = MODEL_SEEDS[name] + 11
    x = np.random.default_rng(seed).standard_normal((5, *shape)).astype(np.float32)
    fast = InferenceSession(path, providers=[CPUProvider(fast=True)])
    slow = InferenceSession(path, providers=[CPUProvider(fast=False)])
    feed = {fast.get_inputs()[0].name: x}
    for want, got in zip(slow.run(None, feed), fast.run(None, feed), strict=True):
        assert np.array_equal(want, got), f"model={name} input_seed={seed}"


def test_fused_conv_constants_follow_parameter_changes():
    # The per-layer constants are cached; an in-place change of the weights, bias,
    # multiplier or shift must still give the golden result (seed 13).
    rng = np.random.default_rng(13)
    x = rng.integers(-128, 128, (2, 4, 6, 6), dtype=np.int8)
    w = rng.integers(-128, 128, (3, 4, 3, 3), dtype=np.int8)
    bias = rng.integers(-2**15, 2**15, 3, dtype=np.int32)
    m = rng.integers(1 << 30, 1 << 31, 3, dtype=np.int64)
    shift = np.full(3, 24, np.int64)
    args = dict(x_zero_point=5, stride=(1, 1), padding=(1, 1, 1, 1), dilation=(1, 1),
                groups=1)
    for change in (None, "w", "bias", "m", "shift"):
        if change == "w":
            w[0, 0, 0, 0] ^= 0x40
        elif change == "bias":
            bias[1] += 1000
        elif change == "m":
            m[2] -= 12345
        elif change == "shift":
            shift[0] += 1
        expected = requantize(golden.conv2d(x, w, bias, **args), m, shift, 3, -128, 127)
        actual = cpu_kernels.conv2d_requant(x, w, bias, multiplier=m, shift=shift,
                                            y_zero_point=3, lo=-128, hi=127, **args)
        assert np.array_equal(actual, expected), f"seed=13 after changing {change}"
