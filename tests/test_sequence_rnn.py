"""ONNX GRU and LSTM in the ORT-compatible mode (float32 recurrence between dequantized
inputs and quantized outputs, ``models.sequence``) against onnxruntime's unfused QDQ
session, and the zoo's row-by-row GRU end to end."""

import json

import numpy as np
import onnx
import pytest
import qdq_models
from onnx import TensorProto, helper, numpy_helper

from models.zoo.digits import load_digits_split
from models.zoo.reference import onnxruntime_session
from sw_driver import InferenceSession
from sw_driver.errors import LayerError, UnsupportedModelError

SEED = 1617
BATCH, T, D, H = qdq_models.CALIBRATION_BATCH, 6, 5, 7


def _rnn_model(rng, op, direction, lengths, initial):
    dirs = 2 if direction == "bidirectional" else 1
    gates = 3 if op == "GRU" else 4
    inits = {"W": rng.standard_normal((dirs, gates * H, D)) * 0.5,
             "R": rng.standard_normal((dirs, gates * H, H)) * 0.4,
             "B": rng.standard_normal((dirs, 2 * gates * H)) * 0.1,
             "shape": np.array([BATCH, dirs * H]),
             "head_W": rng.standard_normal((dirs * H, 4)), "head_B": np.zeros(4)}
    tensors = [numpy_helper.from_array(np.asarray(v).astype(
        np.int64 if np.asarray(v).dtype.kind in "iu" else np.float32), k)
        for k, v in inits.items()]
    rnn_inputs = ["xt", "W", "R", "B", "", ""]
    if lengths:
        tensors.append(numpy_helper.from_array(
            rng.integers(1, T + 1, BATCH).astype(np.int32), "lens"))
        rnn_inputs[4] = "lens"
    if initial:
        tensors.append(numpy_helper.from_array(
            (rng.standard_normal((dirs, BATCH, H)) * 0.5).astype(np.float32), "h0"))
        rnn_inputs[5] = "h0"
    extra = {"linear_before_reset": 1} if op == "GRU" and direction == "forward" else {}
    nodes = [
        helper.make_node("Transpose", ["x"], ["xt"], name="time_major", perm=[1, 0, 2]),
        helper.make_node(op, rnn_inputs, ["seq_out", "last"], name="rnn", hidden_size=H,
                         direction=direction, **extra),
        helper.make_node("Transpose", ["last"], ["last_t"], name="batch_major",
                         perm=[1, 0, 2]),
        helper.make_node("Reshape", ["last_t", "shape"], ["flat"], name="flat"),
        helper.make_node("Gemm", ["flat", "head_W", "head_B"], ["y"], name="head"),
    ]
    graph = helper.make_graph(
        nodes, f"{op}_{direction}", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                   [BATCH, T, D])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [BATCH, 4])], tensors)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


@pytest.mark.parametrize("op", ["GRU", "LSTM"])
@pytest.mark.parametrize("direction,lengths,initial", [
    ("forward", False, False), ("reverse", True, True), ("bidirectional", True, True)])
def test_rnn_matches_onnxruntime(op, direction, lengths, initial, tmp_path):
    model = _rnn_model(np.random.default_rng(SEED), op, direction, lengths, initial)
    path = qdq_models.quantize(model, (T, D), SEED + 1, tmp_path)
    layers = InferenceSession(str(path), providers=["cpu"]).graph.layers
    assert any(layer.op == op for layer in layers)
    x = np.random.default_rng(SEED + 2).standard_normal((BATCH, T, D)).astype(np.float32)
    ours = InferenceSession(str(path), providers=["cpu"]).run(None, {"x": x})[0]
    ref = onnxruntime_session(path).run(None, {"x": x})[0]
    q = onnx.load(path)
    (dq,) = [n for n in q.graph.node if n.output[0] == "y"]
    scale = float(numpy_helper.to_array(
        next(t for t in q.graph.initializer if t.name == dq.input[1])))
    lsb = np.rint(np.abs(ours.astype(np.float64) - ref) / scale)
    print(f"seed {SEED} {op} {direction}: {100 * np.mean(lsb == 0):.2f}% equal, max "
          f"{int(lsb.max())} LSB")
    assert len(np.unique(ref)) > 10
    assert np.mean(lsb <= 1) >= 0.99, f"seed {SEED}: first beyond 1 LSB at " \
        f"{np.argwhere(lsb > 1)[0]}"


def test_rnn_with_clip_is_refused_naming_the_node(tmp_path):
    model = _rnn_model(np.random.default_rng(SEED), "GRU", "forward", False, False)
    path = qdq_models.quantize(model, (T, D), SEED + 1, tmp_path)
    q = onnx.load(path)
    rnn = next(n for n in q.graph.node if n.op_type == "GRU")
    rnn.attribute.append(helper.make_attribute("clip", 3.0))
    with pytest.raises(UnsupportedModelError, match=r"node 'rnn' \(GRU\): clip=3.0 is not "
                                                    r"supported"):
        InferenceSession(q.SerializeToString())


def test_zoo_rowgru_matches_onnxruntime():
    path = "models/zoo/rowgru_qdq.onnx"
    name = onnx.load(path).graph.input[0].name
    _, _, x, y = load_digits_split()
    x = x.astype(np.float32).reshape(len(x), 1, 8, 8)
    ours = InferenceSession(path, providers=["cpu"]).run(None, {name: x})[0]
    ref = onnxruntime_session(path).run(None, {name: x})[0]
    top1 = float(np.mean(ours.argmax(1) == ref.argmax(1)))
    accuracy = float(np.mean(ours.argmax(1) == y))
    print(f"rowgru: {100 * np.mean(ours == ref):.2f}% of logits equal, top-1 agreement "
          f"{100 * top1:.2f}%, accuracy {100 * accuracy:.2f}%")
    assert top1 >= 0.995
    recorded = json.load(open("models/zoo/rowgru.json"))["qdq_accuracy"]
    assert abs(accuracy - recorded) <= 1 / len(y)


def test_sequence_length_beyond_the_input_names_the_layer(tmp_path):
    model = _rnn_model(np.random.default_rng(SEED), "LSTM", "forward", True, False)
    path = qdq_models.quantize(model, (T, D), SEED + 1, tmp_path)
    q = onnx.load(path)
    lens = next(t for t in q.graph.initializer if t.name == "lens")
    lens.CopyFrom(numpy_helper.from_array(np.full(BATCH, T + 3, np.int32), "lens"))
    session = InferenceSession(q.SerializeToString(), providers=["cpu"])
    with pytest.raises(LayerError, match=rf"layer 'rnn:\d' \(LSTM\) .*sequence_lens \[9, "
                                         rf".* must hold {BATCH} lengths in \[1, {T}\]"):
        session.run(None, {"x": np.zeros((BATCH, T, D), np.float32)})
