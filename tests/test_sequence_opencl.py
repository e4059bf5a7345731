"""The zoo's sequence models on ["opencl", "cpu"]: the GEMMs (weight Dense and the attention
MatMuls of two activations) on OpenCL, the float sequence layers refused there with the
reason and run on the CPU provider, bit-identical to "cpu" alone."""

import numpy as np
import pytest

from models.zoo.digits import load_digits_split
from sw_driver import InferenceSession
from sw_driver.opencl import NoPlatformError, list_devices

try:
    list_devices()
except NoPlatformError as _exc:
    pytest.skip(f"no OpenCL platform with a device: {_exc}", allow_module_level=True)

FLOAT_MATH_REASON = ("is float32 math of the ORT-compatible mode; OpenCL's exp/tanh/erf do not "
                     "round as NumPy's do")


def _digits(count=64):
    _, _, x, _ = load_digits_split()
    return x.astype(np.float32).reshape(len(x), 1, 8, 8)[:count]


@pytest.mark.parametrize("path, on_opencl, refused", [
    ("models/zoo/vit_qdq.onnx", {"Dense": 14, "MatMul": 4}, ("LayerNormalization", "Erf")),
    ("models/zoo/rowgru_qdq.onnx", {"Dense": 1}, ("GRU",)),
])
def test_sequence_models_on_opencl_match_cpu(path, on_opencl, refused):
    x = _digits()
    want = InferenceSession(path, providers=["cpu"]).run(None, {"input": x})[0]
    session = InferenceSession(path, providers=["opencl", "cpu"])
    got = session.run(None, {"input": x})[0]
    np.testing.assert_array_equal(got, want)
    rows = session.profile()
    for op, count in on_opencl.items():
        placed = [r["provider"] for r in rows if r["op"] == op]
        assert placed == ["opencl"] * count, f"{op}: {placed}"
    for op in refused:
        op_rows = [r for r in rows if r["op"] == op]
        assert op_rows, op
        for row in op_rows:
            assert row["provider"] == "cpu"
            (fallback,) = row["fell_back_from"]
            assert fallback["provider"] == "opencl"
            assert fallback["why"].startswith(f"{op} {FLOAT_MATH_REASON}"), fallback["why"]
    # The float Softmax at a model's edge is the provider's host code, as for CNNs.
    for row in rows:
        if row["op"] == "Softmax":
            assert row["provider"] == "opencl" and "run on the host" in row["reason"]


def test_integer_mode_vit_on_opencl_matches_cpu():
    # sequence_mode="integer": Softmax, LayerNorm and GELU are the integer-only layers, and
    # they run on the OpenCL kernels too.
    path = "models/zoo/vit_qdq.onnx"
    x = _digits()
    want = InferenceSession(path, providers=["cpu"], sequence_mode="integer").run(
        None, {"input": x})[0]
    session = InferenceSession(path, providers=["opencl", "cpu"], sequence_mode="integer")
    got = session.run(None, {"input": x})[0]
    np.testing.assert_array_equal(got, want)
    placed = {}
    for row in session.profile():
        placed.setdefault(row["op"], []).append(row["provider"])
    for op, count in {"Dense": 14, "MatMul": 4, "IntSoftmax": 2, "IntLayerNorm": 5,
                      "IntGelu": 2}.items():
        assert placed[op] == ["opencl"] * count, f"{op}: {placed.get(op)}"


@pytest.mark.parametrize("shape, axis, coerce_2d", [
    ((3, 2, 5, 17), -1, False), ((3, 2, 5, 17), 2, False), ((3, 2, 5, 17), 0, False),
    ((3, 4, 6), 1, True), ((3, 4, 6), -1, True)])
def test_int_layers_on_opencl_match_cpu(rng, seed, shape, axis, coerce_2d):
    # The provider's runners, every axis case of IntSoftmax, against the CPU provider's.
    from models import intonly
    from sw_driver import graph as g
    from sw_driver.providers.cpu import CPUProvider
    from sw_driver.providers.opencl import OpenCLProvider

    opencl, cpu = OpenCLProvider(), CPUProvider()
    x = rng.integers(-128, 128, shape, dtype=np.int8)
    last = shape[-1]
    layers = [
        g.IntSoftmax("sm", ("x",), "y", axis=axis, coerce_2d=coerce_2d,
                     params=intonly.softmax_params(0.07, 1 / 256, -128, "int8")),
        g.IntLayerNorm("ln", ("x",), "y", lo=-100, hi=120, params=intonly.layernorm_params(
            0.05, rng.uniform(0.5, 2, last), rng.normal(0, 0.3, last), 0.04, 3)),
        g.IntGelu("gelu", ("x",), "y", lo=-128, hi=90,
                  params=intonly.gelu_params(0.05, -3, 0.03, -60)),
    ]
    for layer in layers:
        want = cpu.run(layer, [x])
        got = opencl.run(layer, [x])
        assert got.dtype == want.dtype == np.int8
        assert np.array_equal(got, want), (f"seed {seed}: {layer.op} on {shape}, axis {axis}, "
                                           f"coerce_2d {coerce_2d}: {np.sum(got != want)} "
                                           f"elements differ")


def test_attention_matmul_overflow_on_opencl_is_an_error():
    # Not a model: the provider's MatMul runner fed operands whose product leaves int32.
    from sw_driver import graph as g
    from sw_driver.providers.opencl import OpenCLProvider

    provider = OpenCLProvider()
    layer = g.MatMul("scores", ("a", "b"), "y", a_zero_point=127, b_zero_point=-128,
                     multiplier=1 << 30, shift=40)
    k = 40000
    with pytest.raises(OverflowError, match=r"overflowed.*\['scores'\]"):
        provider.run(layer, [np.full((1, k), -128, np.int8), np.full((k, 1), 127, np.int8)])


def test_bench_records_rates_agreement_and_placement(tmp_path, monkeypatch):
    # The benchmark at a token size (one short repeat, batch 2): what it writes, not speed.
    import json

    from bench import bench_sequence_opencl
    from tessera import results

    monkeypatch.setattr(results, "RESULTS", tmp_path)
    monkeypatch.setattr(results, "WRITTEN", [])
    path = bench_sequence_opencl.main(batches=(2,), repeats=1, min_seconds=0.001)
    document = json.loads(path.read_text())
    values = {m["name"]: m["value"] for m in document["metrics"]}
    for runner in ("tessera_opencl_cpu", "tessera_cpu", "tessera_integer_opencl_cpu",
                   "tessera_integer_cpu", "onnxruntime_1thread", "onnxruntime_2thread"):
        assert values[f"vit_batch2_{runner}"] > 0
    assert values["vit_batch2_logits_equal_onnxruntime_unfused"] == 1.0
    assert values["attention_matmul_8x4x128x64_kernel"] > 0
    assert document["ops_on_opencl"] == ["Dense", "Dequantize", "MatMul", "Quantize",
                                         "Reshape", "Softmax"]
    # In integer mode the residual, bias and scaling Adds are integer Adds, which OpenCL runs.
    assert document["integer_ops_on_opencl"] == [
        "Add", "Dense", "Dequantize", "IntGelu", "IntLayerNorm", "IntSoftmax", "MatMul", "Quantize",
        "Reshape"]
    assert document["placement"]["MatMul"]["opencl"]["layers"] == 4
    assert document["placement"]["LayerNormalization"] == {
        "cpu": {"layers": 5, "seconds": document["placement"]["LayerNormalization"]["cpu"][
            "seconds"]}}
