"""``sw_driver.InferenceSession`` on the CPU provider against onnxruntime.

Each model is a small random float network (``tests/qdq_models.py``) quantized by
``quantize_static`` (QDQ, per-channel int8 weights, int8 activations) with a seeded
calibration reader. Both runtimes get the same seeded float inputs; the outputs are compared
in the output's int8 domain (float difference / output scale). Contract checked: top-1
agrees on every sample and at least 99 % of output elements are within 1 LSB. Both
onnxruntime's default (fused integer kernels) and unoptimized (QDQ float reference) graphs
are compared. The fast CPU kernels are checked bit for bit against the golden model.
"""

import numpy as np
import pytest
import qdq_models

from models import conv as golden
from sw_driver import InferenceSession
from sw_driver.providers import cpu_kernels

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
