"""Real PyTorch exports quantized by onnxruntime, against onnxruntime's unfused QDQ session.

The models under ``tests/data/torch_exports/`` were made by ``models/zoo/torch_exports.py``
(run by hand with a PyTorch install; ``versions.json`` names torch, onnx, onnxruntime and the
seed): ``nn.TransformerEncoderLayer`` (ReLU/GELU, post-/pre-norm), ``nn.MultiheadAttention``,
``nn.GRU`` and a bidirectional ``nn.LSTM``, exported by the TorchScript exporter (opset 17,
dynamic batch) and quantized by ``quantize_static``. They import unchanged: shape arithmetic
(Shape, Gather, Mod, Cast, ConstantOfShape) runs as the ORT-compatible mode's float/integer
ops. Target: at least 99% of outputs within 1 LSB of onnxruntime. PyTorch is not
imported here.
"""

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from assertions import assert_within_one_lsb
from onnx import numpy_helper

from models import sequence
from models.zoo.reference import onnxruntime_session
from sw_driver import InferenceSession
from sw_driver.errors import QuantizationError

DATA = Path(__file__).parent / "data" / "torch_exports"
SEED = 1617
SAMPLES = 32
MODELS = ("encoder_gelu_postnorm", "encoder_gelu_prenorm", "encoder_relu_postnorm",
          "encoder_relu_prenorm", "mha", "gru", "lstm_bidirectional")

#: The share of outputs within 1 LSB of onnxruntime in ``sequence_mode="integer"`` that the
#: test holds each model to; measured with seed 1617, 32 samples (2026-11-23):
#: gelu post-norm 99.036%, gelu pre-norm 99.805%, relu post-norm 99.402%, relu pre-norm
#: 99.927%, mha 99.780%, gru and lstm 100% (no Softmax/LayerNorm/GELU to replace). Only
#: Softmax and GELU become integer-only: PyTorch's LayerNorm bias stays float in the QDQ
#: model, so LayerNorm stays float32 (test_integer_mode_semantics_per_node).
INTEGER_WITHIN_ONE_LSB = {
    "encoder_gelu_postnorm": 0.985, "encoder_gelu_prenorm": 0.995,
    "encoder_relu_postnorm": 0.99, "encoder_relu_prenorm": 0.995, "mha": 0.995,
    "gru": 1.0, "lstm_bidirectional": 1.0,
}


def _path(name):
    return DATA / f"{name}.onnx"


def _output_scale(path):
    model = onnx.load(path)
    (dq,) = [n for n in model.graph.node if n.output[0] == model.graph.output[0].name]
    assert dq.op_type == "DequantizeLinear"
    init = {t.name: t for t in model.graph.initializer}
    return float(numpy_helper.to_array(init[dq.input[1]]))


def _inputs(name, seed=SEED):
    shape = json.loads((DATA / "versions.json").read_text())["models"][name]["input_shape"]
    rng = np.random.default_rng(seed)
    return rng.standard_normal((SAMPLES, *shape[1:])).astype(np.float32)


def _lsb(name, ours, ref):
    assert ours.shape == ref.shape and ours.dtype == np.float32
    return np.rint(np.abs(ours.astype(np.float64) - ref) / _output_scale(_path(name)))


def _reference(name, x):
    return onnxruntime_session(_path(name)).run(None, {"x": x})[0]


def test_versions_file_names_the_tools_and_seed():
    meta = json.loads((DATA / "versions.json").read_text())
    assert {"torch", "onnx", "onnxruntime", "seed", "opset"} <= set(meta)
    assert meta["opset"] == 17 and meta["exporter"] == "torchscript"
    assert sorted(meta["models"]) == sorted([*MODELS, "mha_causal"])


@pytest.mark.parametrize("name", MODELS)
def test_ort_mode_matches_onnxruntime_unfused_within_one_lsb(name):
    x = _inputs(name)
    ours = InferenceSession(str(_path(name)), providers=["cpu"]).run(None, {"x": x})[0]
    ref = _reference(name, x)
    lsb = _lsb(name, ours, ref)
    within = float(np.mean(lsb <= 1))
    agree = float(np.mean(ours.argmax(-1) == ref.argmax(-1)))
    print(f"seed {SEED} {name}: {lsb.size} outputs, {100 * np.mean(lsb == 0):.3f}% equal, "
          f"{100 * within:.3f}% within 1 LSB, max {int(lsb.max())} LSB, "
          f"argmax agreement {100 * agree:.2f}%")
    assert_within_one_lsb(lsb, ours, ref, f"seed {SEED} {name}")
    # Argmax over the last axis (model width, or the 10-way head of the RNNs) per token.
    assert agree >= 0.99


@pytest.mark.parametrize("name", MODELS)
def test_integer_mode_runs_and_stays_near_onnxruntime(name):
    x = _inputs(name)
    session = InferenceSession(str(_path(name)), providers=["cpu"], sequence_mode="integer")
    ours = session.run(None, {"x": x})[0]
    lsb = _lsb(name, ours, _reference(name, x))
    within = float(np.mean(lsb <= 1))
    print(f"seed {SEED} {name} integer mode: {100 * within:.3f}% within 1 LSB of "
          f"onnxruntime, max {int(lsb.max())} LSB")
    assert np.all(np.isfinite(ours))
    assert within >= INTEGER_WITHIN_ONE_LSB[name], (
        f"seed {SEED} {name}: {100 * within:.3f}% within 1 LSB in integer mode, below the "
        f"measured bound {100 * INTEGER_WITHIN_ONE_LSB[name]:.1f}%")


def test_causal_mask_quantized_with_an_infinite_scale_is_refused_by_name():
    # quantize_static gives the -inf mask Add an infinite scale; onnxruntime runs it anyway
    # and its attention scores are then meaningless, so Tessera refuses the model.
    with pytest.raises(QuantizationError, match=r"mha_causal.onnx: node "
                                                r"'onnx::Add_182_DequantizeLinear' "
                                                r"\(DequantizeLinear\): scale inf of constant "
                                                r"'onnx::Add_182_quantized' is not positive "
                                                r"and finite"):
        InferenceSession(str(_path("mha_causal")), providers=["cpu"])


def test_integer_mode_semantics_per_node():
    session = InferenceSession(str(_path("encoder_gelu_postnorm")), providers=["cpu"],
                               sequence_mode="integer")
    semantics = {type(layer).__name__: session.graph.semantics.get(layer.name, ("",))[0]
                 for layer in session.graph.layers
                 if type(layer).__name__ in ("IntSoftmax", "IntGelu")
                 or layer.op == "LayerNormalization"}
    assert semantics == {"IntSoftmax": "integer-only", "IntGelu": "integer-only",
                         "FloatOp": "float"}


def test_shape_arithmetic_ops_are_onnx_integer_ops():
    # PyTorch's MultiheadAttention export: embed // heads, (x % 2) + 1, casts of shapes.
    got = sequence.float_op("Div", [np.array([32, -7], np.int64), np.array(2, np.int64)])
    np.testing.assert_array_equal(got, [16, -3])  # truncation toward zero
    assert got.dtype == np.int64
    got = sequence.float_op("Mul", [np.array([3], np.int64), np.array([4], np.int64)])
    assert got.dtype == np.int64 and got.tolist() == [12]
    np.testing.assert_array_equal(sequence.float_op("Mod", [np.array([-7, 7]), np.array(3)]),
                                  [2, 1])  # the divisor's sign, ONNX fmod=0
    np.testing.assert_array_equal(
        sequence.float_op("Mod", [np.array([-7.5]), np.array(2.0)], {"fmod": 1}), [-1.5])
    cast = sequence.float_op("Cast", [np.array([16], np.int64)], {"to": 1})
    assert cast.dtype == np.float32 and cast.tolist() == [16.0]
    filled = sequence.float_op("ConstantOfShape", [np.array([2, 3], np.int64)],
                               {"value": np.array([0.5], np.float32)})
    assert filled.dtype == np.float32 and filled.shape == (2, 3) and np.all(filled == 0.5)
    with pytest.raises(ValueError, match=r"Cast: to=16 is not supported"):
        sequence.float_op("Cast", [np.array([1.0])], {"to": 16})
    with pytest.raises(ValueError, match=r"Mod: integer modulo by zero"):
        sequence.float_op("Mod", [np.array([1]), np.array([0])])
    with pytest.raises(ValueError, match=r"Div: integer division by zero"):
        sequence.float_op("Div", [np.array([1]), np.array([0])])


@pytest.mark.parametrize("name, dense, matmul", [
    ("encoder_gelu_postnorm", 4, 2), ("encoder_relu_prenorm", 4, 2), ("mha", 2, 2)])
def test_transformers_on_opencl_match_cpu(name, dense, matmul):
    from sw_driver.opencl import NoPlatformError, list_devices

    try:
        list_devices()
    except NoPlatformError as exc:
        pytest.skip(f"no OpenCL platform with a device: {exc}")
    x = _inputs(name)
    want = InferenceSession(str(_path(name)), providers=["cpu"]).run(None, {"x": x})[0]
    session = InferenceSession(str(_path(name)), providers=["opencl", "cpu"])
    np.testing.assert_array_equal(session.run(None, {"x": x})[0], want)
    rows = session.profile()
    # The projections (Dense) and Q.K^T, attn.V (activation x activation MatMul) run on
    # the batched GEMM kernels; the float ops fall back to the CPU with a reason.
    for op, count in (("Dense", dense), ("MatMul", matmul)):
        assert [r["provider"] for r in rows if r["op"] == op] == ["opencl"] * count, op
