"""Tiny float ONNX models built with ``onnx.helper`` and quantized by ``quantize_static``.

Shared by the host-runtime tests (importer, CPU session, bad models). Everything is seeded:
the same seed gives the same weights, calibration data and therefore the same QDQ model.
"""

import logging

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from onnxruntime.quantization import (
    CalibrationDataReader,
    QuantFormat,
    QuantType,
    quantize_static,
)

from models.zoo.reference import onnxruntime_session

OPSET = 13
IR_VERSION = 8  # onnx writes a newer IR than this onnxruntime loads; 8 covers opset 13
CALIBRATION_BATCHES = 4
CALIBRATION_BATCH = 8

# quantize_static logs a "consider pre-processing" warning on every call; it is advice for
# real models, not a problem with these tiny graphs.
logging.getLogger().setLevel(logging.ERROR)


def float_model(nodes, input_shape, output_shape, initializers, name="tessera_test"):
    """A float32 model with input ``x`` and output ``y``; int64 arrays stay int64."""
    inits = []
    for key, value in initializers.items():
        value = np.asarray(value)
        dtype = np.int64 if value.dtype.kind in "iu" else np.float32
        inits.append(numpy_helper.from_array(value.astype(dtype), key))
    graph = helper.make_graph(
        nodes, name,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(input_shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(output_shape))],
        inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                              ir_version=IR_VERSION)
    onnx.checker.check_model(model)
    return model


def _weights(rng, *shape):
    fan_in = int(np.prod(shape[1:]))
    return rng.standard_normal(shape) * (1.5 / np.sqrt(fan_in))


def _conv(name, x, y, k, pads=(0, 0, 0, 0), stride=1, group=1):
    return helper.make_node("Conv", [x, f"{name}_W", f"{name}_B"], [y], name=name,
                            kernel_shape=[k, k], pads=list(pads), strides=[stride, stride],
                            group=group)


def lenet(rng):
    """Conv+Relu -> MaxPool -> Conv+Relu -> GlobalAveragePool -> Flatten -> Gemm."""
    nodes = [
        _conv("conv1", "x", "c1", 3, (1, 1, 1, 1)),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node("MaxPool", ["r1"], ["p1"], name="pool1", kernel_shape=[2, 2],
                         strides=[2, 2]),
        _conv("conv2", "p1", "c2", 3),
        helper.make_node("Relu", ["c2"], ["r2"], name="relu2"),
        helper.make_node("GlobalAveragePool", ["r2"], ["g"], name="gap"),
        helper.make_node("Flatten", ["g"], ["f"], name="flatten"),
        helper.make_node("Gemm", ["f", "fc_W", "fc_B"], ["y"], name="fc", transB=1),
    ]
    inits = {"conv1_W": _weights(rng, 6, 1, 3, 3), "conv1_B": rng.standard_normal(6) * 0.1,
             "conv2_W": _weights(rng, 12, 6, 3, 3), "conv2_B": rng.standard_normal(12) * 0.1,
             "fc_W": _weights(rng, 10, 12), "fc_B": rng.standard_normal(10) * 0.1}
    return float_model(nodes, ["N", 1, 16, 16], ["N", 10], inits, "lenet"), (1, 16, 16)


def residual(rng):
    """Conv+Relu -> (Conv+Relu -> Conv) + skip -> Relu -> AveragePool -> Flatten -> Gemm."""
    nodes = [
        _conv("stem", "x", "s", 3, (1, 1, 1, 1)),
        helper.make_node("Relu", ["s"], ["sr"], name="stem_relu"),
        _conv("body1", "sr", "b1", 3, (1, 1, 1, 1)),
        helper.make_node("Relu", ["b1"], ["b1r"], name="body1_relu"),
        _conv("body2", "b1r", "b2", 3, (1, 1, 1, 1)),
        helper.make_node("Add", ["b2", "sr"], ["a"], name="residual_add"),
        helper.make_node("Relu", ["a"], ["ar"], name="add_relu"),
        helper.make_node("AveragePool", ["ar"], ["ap"], name="avgpool", kernel_shape=[3, 3],
                         strides=[2, 2], pads=[1, 1, 1, 1]),
        helper.make_node("Flatten", ["ap"], ["f"], name="flatten"),
        helper.make_node("Gemm", ["f", "fc_W", "fc_B"], ["y"], name="fc", transB=1),
    ]
    inits = {"stem_W": _weights(rng, 8, 3, 3, 3), "stem_B": rng.standard_normal(8) * 0.1,
             "body1_W": _weights(rng, 8, 8, 3, 3), "body1_B": rng.standard_normal(8) * 0.1,
             "body2_W": _weights(rng, 8, 8, 3, 3), "body2_B": rng.standard_normal(8) * 0.1,
             "fc_W": _weights(rng, 10, 8 * 5 * 5), "fc_B": rng.standard_normal(10) * 0.1}
    return float_model(nodes, ["N", 3, 10, 10], ["N", 10], inits, "residual"), (3, 10, 10)


def separable(rng):
    """Strided Conv+Relu -> depthwise Conv+Clip(0, 6) -> pointwise Conv+Relu ->
    GlobalAveragePool -> Flatten -> MatMul -> Reshape -> Softmax."""
    nodes = [
        _conv("stem", "x", "s", 3, (1, 1, 1, 1), stride=2),
        helper.make_node("Relu", ["s"], ["sr"], name="stem_relu"),
        _conv("dw", "sr", "d", 3, (1, 1, 1, 1), group=8),
        helper.make_node("Clip", ["d", "clip_lo", "clip_hi"], ["dr"], name="dw_relu6"),
        _conv("pw", "dr", "p", 1),
        helper.make_node("Relu", ["p"], ["pr"], name="pw_relu"),
        helper.make_node("GlobalAveragePool", ["pr"], ["g"], name="gap"),
        helper.make_node("Flatten", ["g"], ["f"], name="flatten"),
        helper.make_node("MatMul", ["f", "fc_W"], ["m"], name="fc"),
        helper.make_node("Reshape", ["m", "shape"], ["logits"], name="reshape"),
        helper.make_node("Softmax", ["logits"], ["y"], name="softmax", axis=1),
    ]
    inits = {"stem_W": _weights(rng, 8, 3, 3, 3), "stem_B": rng.standard_normal(8) * 0.1,
             "dw_W": _weights(rng, 8, 1, 3, 3), "dw_B": rng.standard_normal(8) * 0.1,
             "clip_lo": np.float32(0), "clip_hi": np.float32(6),
             "pw_W": _weights(rng, 16, 8, 1, 1), "pw_B": rng.standard_normal(16) * 0.1,
             "fc_W": _weights(rng, 10, 16).T * 4, "shape": np.array([-1, 10])}
    return float_model(nodes, ["N", 3, 16, 16], ["N", 10], inits, "separable"), (3, 16, 16)


def wide_kernels(rng):
    """Conv 7x7 s2 + Relu -> Conv 5x5 + Relu -> Conv 1x1 (no activation) -> AveragePool 2x2
    -> Conv 3x3 s2 + Relu -> Flatten -> Gemm, on a non-square 20x23 input.

    Kernels, strides, a linear 1x1 layer and a 2x2 average pool that the other models do not
    have: the shapes where rounding ties and padding rules show.
    """
    nodes = [
        _conv("c7", "x", "a", 7, (3, 3, 3, 3), stride=2),
        helper.make_node("Relu", ["a"], ["ar"], name="c7_relu"),
        _conv("c5", "ar", "b", 5, (2, 2, 2, 2)),
        helper.make_node("Relu", ["b"], ["br"], name="c5_relu"),
        _conv("c1", "br", "c", 1),
        helper.make_node("AveragePool", ["c"], ["p"], name="avgpool", kernel_shape=[2, 2],
                         strides=[2, 2]),
        _conv("c3", "p", "d", 3, (1, 1, 1, 1), stride=2),
        helper.make_node("Relu", ["d"], ["dr"], name="c3_relu"),
        helper.make_node("Flatten", ["dr"], ["f"], name="flatten"),
        helper.make_node("Gemm", ["f", "fc_W", "fc_B"], ["y"], name="fc", transB=1),
    ]
    inits = {"c7_W": _weights(rng, 8, 3, 7, 7), "c7_B": rng.standard_normal(8) * 0.1,
             "c5_W": _weights(rng, 12, 8, 5, 5), "c5_B": rng.standard_normal(12) * 0.1,
             "c1_W": _weights(rng, 12, 12, 1, 1), "c1_B": rng.standard_normal(12) * 0.1,
             "c3_W": _weights(rng, 16, 12, 3, 3), "c3_B": rng.standard_normal(16) * 0.1,
             "fc_W": _weights(rng, 10, 16 * 3 * 3), "fc_B": rng.standard_normal(10) * 0.1}
    return float_model(nodes, ["N", 3, 20, 23], ["N", 10], inits, "wide_kernels"), (3, 20, 23)


MODELS = {"lenet": lenet, "residual": residual, "separable": separable,
          "wide_kernels": wide_kernels}


class _Reader(CalibrationDataReader):
    def __init__(self, shape, rng):
        self._batches = iter([{"x": rng.standard_normal((CALIBRATION_BATCH, *shape))
                               .astype(np.float32)} for _ in range(CALIBRATION_BATCHES)])

    def get_next(self):
        return next(self._batches, None)


def quantize(model, input_shape, seed, tmp_dir, activation_type=QuantType.QInt8):
    """``quantize_static`` (QDQ, per-channel, int8) with seeded calibration; the QDQ path."""
    float_path = tmp_dir / f"{model.graph.name}_float.onnx"
    qdq_path = tmp_dir / f"{model.graph.name}_qdq.onnx"
    onnx.save(model, float_path)
    quantize_static(str(float_path), str(qdq_path),
                    _Reader(input_shape, np.random.default_rng(seed)),
                    quant_format=QuantFormat.QDQ, per_channel=True,
                    weight_type=QuantType.QInt8, activation_type=activation_type)
    return qdq_path


def build(name, seed, tmp_dir):
    """Float model, its QDQ path and the per-sample input shape for model ``name``."""
    model, shape = MODELS[name](np.random.default_rng(seed))
    return model, quantize(model, shape, seed + 1, tmp_dir), shape


def ort_session(model, optimized=False):
    """onnxruntime on one thread.

    The default, graph optimizations off (DequantizeLinear -> float op -> QuantizeLinear),
    is the reference every Tessera test compares with: it is the same on every CPU.
    ``optimized=True`` is onnxruntime's own default, which fuses QDQ groups into int8
    kernels whose results depend on the CPU (``bench.ort_cpu``).
    """
    return onnxruntime_session(model, optimized=optimized)
