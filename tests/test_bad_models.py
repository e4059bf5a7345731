"""Bad models and bad inputs: each a TesseraError subclass whose message names the culprit."""

import numpy as np
import onnx
import pytest
import qdq_models
from onnx import helper, numpy_helper
from onnxruntime.quantization import QuantType

from sw_driver import InferenceSession
from sw_driver.errors import (
    InputError,
    MissingInitializerError,
    ModelLoadError,
    NotQuantizedError,
    QuantizationError,
    TesseraError,
    UnsupportedModelError,
    UnsupportedOperatorError,
)

SEED = 44


@pytest.fixture(scope="module")
def lenet(tmp_path_factory):
    """(float model, QDQ path, per-sample input shape) of the LeNet-like test model."""
    return qdq_models.build("lenet", SEED, tmp_path_factory.mktemp("qdq"))


@pytest.fixture(scope="module")
def session(lenet):
    return InferenceSession(lenet[1])


def _write(tmp_path, name, data):
    path = tmp_path / name
    path.write_bytes(data)
    return path


# -- files --------------------------------------------------------------------------------

def test_truncated_file(lenet, tmp_path):
    data = lenet[1].read_bytes()
    for cut in (len(data) // 2, len(data) - 3, 7):
        path = _write(tmp_path, f"cut{cut}.onnx", data[:cut])
        with pytest.raises(ModelLoadError, match=str(path)):
            InferenceSession(path)


def test_corrupt_file(lenet, tmp_path):
    rng = np.random.default_rng(SEED)
    data = bytearray(lenet[1].read_bytes())
    for trial in range(5):
        corrupt = bytearray(data)
        corrupt[100:140] = rng.integers(0, 256, 40, dtype=np.uint8).tobytes()
        path = _write(tmp_path, f"corrupt{trial}.onnx", bytes(corrupt))
        with pytest.raises(ModelLoadError, match=str(path)):
            InferenceSession(path)


@pytest.mark.parametrize("content", [b"", b"this is not an ONNX model\n",
                                     b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4])
def test_not_onnx(tmp_path, content):
    path = _write(tmp_path, "model.onnx", content)
    with pytest.raises(ModelLoadError, match=str(path)):
        InferenceSession(path)


def test_missing_file(tmp_path):
    with pytest.raises(ModelLoadError, match="nowhere.onnx"):
        InferenceSession(tmp_path / "nowhere.onnx")


def test_missing_initializer(lenet):
    model = onnx.load(lenet[1])
    keep = [t for t in model.graph.initializer if t.name != "conv2_W_quantized"]
    del model.graph.initializer[:]
    model.graph.initializer.extend(keep)
    with pytest.raises(MissingInitializerError,
                       match=r"\('conv2_W_quantized'\) of node 'conv2_W_DequantizeLinear'"):
        InferenceSession(model.SerializeToString())


# -- models the importer refuses ----------------------------------------------------------

def test_float_model_is_refused_with_a_hint(lenet):
    with pytest.raises(NotQuantizedError, match="float model.*tessera quantize"):
        InferenceSession(lenet[0].SerializeToString())


def test_partly_float_model_names_the_node(lenet):
    # Replace conv2's weight DequantizeLinear by a float initializer of the same name.
    model = onnx.load(lenet[1])
    nodes = [n for n in model.graph.node if n.name != "conv2_W_DequantizeLinear"]
    w_name = next(n for n in model.graph.node if n.name == "conv2").input[1]
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    model.graph.initializer.append(
        numpy_helper.from_array(np.zeros((12, 6, 3, 3), np.float32), w_name))
    with pytest.raises(NotQuantizedError, match=r"node 'conv2' \(Conv\): weight"):
        InferenceSession(model.SerializeToString())


def test_unsupported_operators_are_all_listed(lenet):
    model = onnx.load(lenet[1])
    # Two unsupported nodes after the classifier, in one error.
    out = model.graph.output[0].name
    model.graph.node.extend([
        helper.make_node("Sigmoid", [out], ["s"], name="squash"),
        helper.make_node("LRN", ["s"], ["t"], name="norm", size=3),
    ])
    model.graph.output[0].name = "t"
    with pytest.raises(UnsupportedOperatorError) as info:
        InferenceSession(model.SerializeToString())
    assert info.value.nodes == [("squash", "Sigmoid"), ("norm", "LRN")]
    assert "'squash' (Sigmoid)" in str(info.value) and "'norm' (LRN)" in str(info.value)
    assert "2 node(s)" in str(info.value)


def test_uint8_activations_are_refused(lenet, tmp_path):
    model, _, shape = lenet
    path = qdq_models.quantize(model, shape, SEED, tmp_path, activation_type=QuantType.QUInt8)
    with pytest.raises(UnsupportedModelError, match="int8 activations"):
        InferenceSession(path)


def test_matmul_of_two_activations_imports_as_an_integer_matmul(tmp_path):
    # Attention-style scores: proj = x @ W, then proj @ x, two activations multiplied. Once
    # refused, it is now an integer MatMul of two int8 tensors
    # (tests/test_sequence_ort.py checks its values against onnxruntime).
    rng = np.random.default_rng(SEED)
    nodes = [helper.make_node("MatMul", ["x", "w"], ["proj"], name="proj"),
             helper.make_node("MatMul", ["proj", "x"], ["y"], name="scores")]
    model = qdq_models.float_model(nodes, ["N", 8, 8], ["N", 8, 8],
                                   {"w": rng.standard_normal((8, 8))}, "two_activations")
    path = qdq_models.quantize(model, (8, 8), SEED, tmp_path)
    layers = {layer.name: layer for layer in InferenceSession(path).graph.layers}
    assert layers["scores"].op == "MatMul" and layers["scores"].inputs == (
        "proj_QuantizeLinear_Output", "x_QuantizeLinear_Output")


@pytest.mark.parametrize("scale", [1e-30, 1e30])
def test_unrepresentable_scale_names_the_node(lenet, scale):
    model = onnx.load(lenet[1])
    conv = next(n for n in model.graph.node if n.name == "conv2")
    q = next(n for n in model.graph.node
             if n.op_type == "QuantizeLinear" and n.input[0] == conv.output[0])
    for t in model.graph.initializer:
        if t.name == q.input[1]:
            t.CopyFrom(numpy_helper.from_array(np.array(scale, np.float32), t.name))
    with pytest.raises(QuantizationError, match=r"node 'conv2' \(Conv\).*cannot be represented"):
        InferenceSession(model.SerializeToString())


# -- feeds --------------------------------------------------------------------------------

def test_wrong_input_name(session, lenet):
    x = np.zeros((1, *lenet[2]), np.float32)
    with pytest.raises(InputError, match=r"unknown \['image'\], missing \['x'\]"):
        session.run(None, {"image": x})


@pytest.mark.parametrize("shape", [(1, 1, 16), (1, 2, 16, 16), (1, 1, 16, 15), (0, 1, 16, 16)])
def test_wrong_input_shape(session, shape):
    with pytest.raises(InputError, match=r"input 'x' has shape .*expects \['N', 1, 16, 16\]"):
        session.run(None, {"x": np.zeros(shape, np.float32)})


@pytest.mark.parametrize("dtype", [np.float64, np.int8, np.float16])
def test_wrong_input_dtype(session, lenet, dtype):
    with pytest.raises(InputError, match=r"input 'x' has dtype .*tensor\(float\)"):
        session.run(None, {"x": np.zeros((1, *lenet[2]), dtype)})


@pytest.mark.parametrize("value", [np.nan, np.inf, -np.inf])
def test_non_finite_input(session, lenet, value):
    x = np.zeros((2, *lenet[2]), np.float32)
    x[1, 0, 3, 4] = value
    with pytest.raises(InputError, match=r"input 'x' holds a non-finite value .*\(1, 0, 3, 4\)"):
        session.run(None, {"x": x})


def test_wrong_output_name(session, lenet):
    with pytest.raises(InputError, match="unknown output name"):
        session.run(["logits"], {"x": np.zeros((1, *lenet[2]), np.float32)})


def test_every_error_is_a_tessera_error():
    for cls in (InputError, MissingInitializerError, ModelLoadError, NotQuantizedError,
                QuantizationError, UnsupportedModelError, UnsupportedOperatorError):
        assert issubclass(cls, TesseraError)
