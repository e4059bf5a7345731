"""Tessera's own quantizer (``sw_driver.quantize``), with onnxruntime as the reference.

Contract checked: on the digits CNN (calibrated on the training split) the Tessera-int8
accuracy of our QDQ model is within 1 point of float, and onnxruntime runs the same file
with the same top-1 on >= 99 % of the test split (the whole-model contract, >= 99.5 % top-1
and >= 99 % of elements within 1 LSB, is asserted too); on the random zoo models and the
small test models the whole-model contract holds on seeded random inputs. Errors name the
problem in one line.
"""

import numpy as np
import onnx
import pytest
import qdq_models
from onnx import helper
from zoo_helpers import accuracy, assert_agree, compare

from models.zoo import DIGITS_FLOAT, DIGITS_QDQ, digits, random_models
from sw_driver.errors import (
    ModelLoadError,
    TesseraError,
    UnsupportedModelError,
    UnsupportedOperatorError,
)
from sw_driver.quantize import (
    CalibrationError,
    activation_qparams,
    quantize,
    weight_qparams,
)


@pytest.fixture(scope="module")
def split():
    return digits.load_digits_split()


@pytest.mark.parametrize("method", ["minmax", "percentile"])
def test_digits_accuracy_and_onnxruntime(split, method):
    x_train, _, x_test, y_test = split
    model = quantize(str(DIGITS_FLOAT), x_train, method=method).SerializeToString()
    (logits,) = qdq_models.ort_session(str(DIGITS_FLOAT)).run(None, {"input": x_test})
    float_acc = accuracy(logits, y_test)
    figures = compare(model, x_test, what=f"digits, Tessera quantizer ({method})")
    ours, theirs = accuracy(figures["ours"], y_test), accuracy(figures["theirs"], y_test)
    (reference,) = qdq_models.ort_session(str(DIGITS_QDQ)).run(None, {"input": x_test})
    print(f"digits test accuracy ({method}): float {float_acc:.2%}, Tessera quantizer + "
          f"Tessera int8 {ours:.2%}, same file on onnxruntime {theirs:.2%}; onnxruntime's "
          f"own quantizer {accuracy(reference, y_test):.2%}")
    assert abs(ours - float_acc) <= 0.01, f"{method}: int8 {ours:.2%} vs float {float_acc:.2%}"
    assert figures["top1"] >= 0.99
    assert_agree(figures, f"digits {method}")


RANDOM_CASES = ["resnet8", "dwsep", "lenet", "residual", "separable"]


@pytest.mark.parametrize("name", RANDOM_CASES)
def test_random_models_agree_with_onnxruntime(name):
    if name in random_models.MODELS:
        model = random_models.float_model(name)
        calibration = random_models.calibration_data(name)
        x = random_models.random_inputs(np.random.default_rng(11), 128)
        input_name = "input"
    else:  # the runtime tests' small models: MatMul, Reshape, Softmax, AveragePool, Clip
        model, shape = qdq_models.MODELS[name](np.random.default_rng(21))
        rng = np.random.default_rng(22)
        calibration = rng.standard_normal((32, *shape)).astype(np.float32)
        x = rng.standard_normal((128, *shape)).astype(np.float32)
        input_name = "x"
    method = "percentile" if name in ("dwsep", "residual") else "minmax"
    qdq = quantize(model, calibration, method=method).SerializeToString()
    figures = compare(qdq, x, input_name, what=f"{name} ({method}, Tessera quantizer)")
    assert_agree(figures, f"{name} {method}")


def test_qparams():
    scale, zero_point = activation_qparams(0.0, 6.0)
    assert np.isclose(scale, 6 / 255) and zero_point == -128       # ReLU: full int8 range
    scale, zero_point = activation_qparams(0.5, 2.0)                # widened to hold 0
    assert np.isclose(scale, 2 / 255) and zero_point == -128
    scale, zero_point = activation_qparams(-1.0, 1.0)
    assert zero_point in (-1, 0) and np.isclose(scale, 2 / 255)
    assert activation_qparams(0.0, 0.0) == (np.float32(1.0), -128)
    w = np.array([[1.0, -0.5], [0.0, 0.0], [-2.0, 1.0]], np.float32)
    q, scale = weight_qparams(w, axis=0)
    assert q.dtype == np.int8 and scale.dtype == np.float32
    np.testing.assert_array_equal(q, [[127, -64], [0, 0], [-127, 64]])
    np.testing.assert_allclose(scale, [1 / 127, 1.0, 2 / 127])


def test_output_is_qdq_and_keeps_names(split):
    model = quantize(str(DIGITS_FLOAT), split[0][:16])
    ops = [n.op_type for n in model.graph.node]
    assert ops.count("QuantizeLinear") == 7 and "Relu" in ops  # input + 6 layers
    assert [i.name for i in model.graph.input] == ["input"]
    assert [o.name for o in model.graph.output] == ["logits"]
    onnx.checker.check_model(model)


@pytest.mark.parametrize("data, message", [
    (np.zeros((0, 1, 8, 8), np.float32), "is empty"),
    (np.zeros((4, 1, 7, 8), np.float32), r"shape \[4, 1, 7, 8\]; the model expects"),
    (np.zeros((1, 8, 8), np.float32), "the model expects"),
    (np.full((2, 1, 8, 8), np.nan, np.float32), "NaN or Inf"),
    (np.array([["a"]]), "dtype"),
    ({"wrong": np.zeros((1, 1, 8, 8), np.float32)}, r"unknown \['wrong'\], missing"),
])
def test_bad_calibration_is_clear(data, message):
    with pytest.raises(CalibrationError, match=message) as info:
        quantize(str(DIGITS_FLOAT), data)
    assert isinstance(info.value, TesseraError) and "\n" not in str(info.value)


def test_unknown_method(split):
    with pytest.raises(CalibrationError, match="unknown calibration method 'kl'"):
        quantize(str(DIGITS_FLOAT), split[0][:4], method="kl")


def _model(nodes, inits=None):
    return qdq_models.float_model(nodes, ["N", 2, 4, 4], ["N", 2, 2, 2], inits or {})


def test_bad_models_are_clear(tmp_path):
    data = np.zeros((2, 2, 4, 4), np.float32)
    with pytest.raises(UnsupportedModelError, match="already quantized"):
        quantize(str(DIGITS_QDQ), np.zeros((1, 1, 8, 8), np.float32))
    sigmoid = _model([helper.make_node("Sigmoid", ["x"], ["s"], name="sig"),
                      helper.make_node("MaxPool", ["s"], ["y"], kernel_shape=[2, 2],
                                       strides=[2, 2])])
    with pytest.raises(UnsupportedOperatorError, match="'sig' \\(Sigmoid\\)"):
        quantize(sigmoid, data)
    loose_relu = _model([helper.make_node("MaxPool", ["x"], ["p"], kernel_shape=[2, 2],
                                          strides=[2, 2]),
                         helper.make_node("Relu", ["p"], ["y"], name="late_relu")])
    with pytest.raises(UnsupportedModelError, match="'late_relu'.*must directly follow"):
        quantize(loose_relu, data)
    junk = tmp_path / "junk.onnx"
    junk.write_bytes(b"not a model at all")
    with pytest.raises(ModelLoadError):
        quantize(str(junk), data)
