"""The zoo's tiny ViT (models/zoo/vit_qdq.onnx) end to end on the CPU provider against
onnxruntime's unfused QDQ session, in the ORT-compatible mode."""

import json

import numpy as np
import onnx
from onnx import numpy_helper

from models.zoo.digits import load_digits_split
from models.zoo.reference import onnxruntime_session
from sw_driver import InferenceSession
from tessera.cli import main

VIT_QDQ = "models/zoo/vit_qdq.onnx"
VIT_JSON = "models/zoo/vit.json"


def _output_scale(model):
    (dq,) = [n for n in model.graph.node if n.output[0] == model.graph.output[0].name]
    assert dq.op_type == "DequantizeLinear"
    init = {t.name: t for t in model.graph.initializer}
    return float(numpy_helper.to_array(init[dq.input[1]]))


def test_vit_matches_onnxruntime_on_the_digits_test_split():
    model = onnx.load(VIT_QDQ)
    name = model.graph.input[0].name
    _, _, x, y = load_digits_split()
    x = x.astype(np.float32).reshape(len(x), 1, 8, 8)
    ours = InferenceSession(VIT_QDQ, providers=["cpu"]).run(None, {name: x})[0]
    ref = onnxruntime_session(VIT_QDQ).run(None, {name: x})[0]
    lsb = np.rint(np.abs(ours.astype(np.float64) - ref) / _output_scale(model))
    top1 = float(np.mean(ours.argmax(1) == ref.argmax(1)))
    accuracy = float(np.mean(ours.argmax(1) == y))
    print(f"vit: {lsb.size} logits, {100 * np.mean(lsb == 0):.3f}% equal, "
          f"{100 * np.mean(lsb <= 1):.3f}% within 1 LSB, max {int(lsb.max())} LSB; top-1 "
          f"agreement {100 * top1:.2f}%, accuracy {100 * accuracy:.2f}%")
    assert np.mean(lsb <= 1) >= 0.99
    assert top1 >= 0.995
    # The shipped record says what onnxruntime's QDQ model scores; we score the same.
    recorded = json.load(open(VIT_JSON))["qdq_accuracy"]
    assert abs(accuracy - recorded) <= 1 / len(y)


def test_tessera_run_vit_on_digits(capsys):
    assert main(["run", VIT_QDQ, "--dataset", "digits", "--providers", "cpu",
                 "--batch", "150"]) == 0
    out = capsys.readouterr().out
    assert "450 samples in 3 batch(es)" in out
    assert "accuracy on digits" in out and "96.89" in out
    # The profile lists the sequence layers the CPU provider ran.
    assert "Softmax" in out and "Erf" in out and "Expand" in out
