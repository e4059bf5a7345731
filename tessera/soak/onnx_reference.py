"""The ONNX QDQ semantics of a soak case: a one-node QDQ model run by onnxruntime.

:func:`qdq_model` writes what ``quantize_static`` would around one operator:
``DequantizeLinear`` of the int8 input(s), the float operator (its int8 weights and int32
bias, at scale ``s_x * s_w[c]``, behind their own ``DequantizeLinear``), an optional
``Relu`` or ``Clip(0, 6)``, and ``QuantizeLinear`` with the output's scale and zero point.
:func:`onnxruntime_output` runs it with every graph optimization off
(``ORT_DISABLE_ALL``: no fusion into integer kernels, so the float operator really runs
between the DequantizeLinear and QuantizeLinear nodes) on one thread and returns the int8
output, which is the reference the golden models are compared with.
"""

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from models.zoo.reference import onnxruntime_session
from sw_driver import graph as g
from sw_driver.shapes import infer_shapes

__all__ = ["IR_VERSION", "OPSET", "onnxruntime_output", "qdq_model"]

#: Opset 13 has per-axis DequantizeLinear; IR 8 is what this onnxruntime loads for it (the
#: same pair as tests/qdq_models.py).
OPSET = 13
IR_VERSION = 8


class _Builder:
    def __init__(self):
        self.nodes, self.initializers = [], []

    def constant(self, name, value):
        self.initializers.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def node(self, op, inputs, output, **attributes):
        self.nodes.append(helper.make_node(op, list(inputs), [output], **attributes))
        return output

    def dequantize(self, name, scale, zero_point, axis=None):
        """``name`` -> ``name_dq``; ``zero_point`` carries its dtype (int8, or int32 for a
        bias), ``scale`` and ``zero_point`` are scalars or per-``axis`` vectors."""
        scale = self.constant(f"{name}_scale", np.asarray(scale, np.float32))
        zero = self.constant(f"{name}_zero_point", np.asarray(zero_point))
        options = {} if axis is None else {"axis": axis}
        return self.node("DequantizeLinear", [name, scale, zero], f"{name}_dq", **options)


def _int8_scalar(value):
    return np.int8(value)


def _weights(builder, case, weight, axis):
    """DequantizeLinear of the int8 weight (and of the int32 bias when there is one)."""
    layer, quant = case.layer, case.quant
    builder.constant("W", weight)
    w = builder.dequantize("W", quant.w, np.zeros(len(quant.w), np.int8), axis=axis)
    if not np.any(layer.bias):
        return [w]
    builder.constant("B", layer.bias.astype(np.int32))
    # The bias scale a QDQ model stores: float32(s_x * s_w[c]), which the importer accepts.
    bias_scale = (np.float64(quant.x[0]) * quant.w.astype(np.float64)).astype(np.float32)
    b = builder.dequantize("B", bias_scale, np.zeros(len(quant.w), np.int32), axis=0)
    return [w, b]


def _operator(builder, case, x):
    """The float operator on the dequantized input(s); returns its output name."""
    layer, quant, name = case.layer, case.quant, case.layer.name
    op = quant.op
    if op == "Conv":
        (kh, kw) = layer.weight.shape[2:]
        return builder.node("Conv", [x, *_weights(builder, case, layer.weight, 0)], "t",
                            name=name, kernel_shape=[kh, kw], strides=list(layer.stride),
                            pads=list(layer.padding), dilations=list(layer.dilation),
                            group=layer.groups)
    if op == "Gemm":
        return builder.node("Gemm", [x, *_weights(builder, case, layer.weight, 0)], "t",
                            name=name, transB=1)
    if op == "MatMul":
        (w,) = _weights(builder, case, np.ascontiguousarray(layer.weight.T), 1)
        return builder.node("MatMul", [x, w], "t", name=name)
    if op in ("MaxPool", "AveragePool"):
        options = {"count_include_pad": int(layer.count_include_pad)} \
            if op == "AveragePool" else {}
        return builder.node(op, [x], "t", name=name, kernel_shape=list(layer.kernel),
                            strides=list(layer.stride), pads=list(layer.padding), **options)
    if op == "GlobalAveragePool":
        return builder.node(op, [x], "t", name=name)
    if op == "Add":
        if layer.constant is not None:
            builder.constant("b", layer.constant)
        b = builder.dequantize("b", quant.b[0], _int8_scalar(quant.b[1]))
        return builder.node("Add", [x, b], "t", name=name)
    raise ValueError(f"no ONNX operator for soak op {op!r}")


def _activation(builder, case, t):
    kind = case.quant.activation
    if kind is None:
        return t
    if kind == "relu":
        return builder.node("Relu", [t], "t_act", name="relu")
    low = builder.constant("clip_min", np.float32(0.0))
    high = builder.constant("clip_max", np.float32(6.0))
    return builder.node("Clip", [t, low, high], "t_act", name="relu6")


def _activation_inputs(case):
    """(graph input name, array, (scale, zero point)) for each activation input."""
    names = ["x", "b"][:len(case.inputs)]
    params = [case.quant.x, case.quant.b][:len(case.inputs)]
    return list(zip(names, case.inputs, params, strict=True))


def _output_shape(case):
    """The layer's output shape, as the planner infers it."""
    inputs = [g.TensorInfo(name, list(array.shape), "tensor(int8)")
              for name, array, _ in _activation_inputs(case)]
    return list(infer_shapes(g.Graph([case.layer], inputs, []), 1)[case.layer.output])


def qdq_model(case, float_io=False):
    """The one-node QDQ model of ``case``.

    Parameters
    ----------
    case : SoakCase
    float_io : bool
        False: int8 inputs ``x`` (and ``b``) and int8 output ``y``, for onnxruntime. True:
        float inputs that a QuantizeLinear quantizes and a float output after a final
        DequantizeLinear, the shape of model :func:`sw_driver.importer.import_model` takes.

    Returns
    -------
    onnx.ModelProto
    """
    builder = _Builder()
    graph_inputs = []
    for name, array, (scale, zero_point) in _activation_inputs(case):
        if float_io:
            graph_inputs.append(helper.make_tensor_value_info(f"{name}_float",
                                                              TensorProto.FLOAT, array.shape))
            builder.constant(f"{name}_q_scale", np.float32(scale))
            builder.constant(f"{name}_q_zero_point", _int8_scalar(zero_point))
            builder.node("QuantizeLinear", [f"{name}_float", f"{name}_q_scale",
                                            f"{name}_q_zero_point"], name,
                         name=f"{name}_quantize")
        else:
            graph_inputs.append(helper.make_tensor_value_info(name, TensorProto.INT8,
                                                              array.shape))
    x = builder.dequantize("x", case.quant.x[0], _int8_scalar(case.quant.x[1]))
    t = _activation(builder, case, _operator(builder, case, x))
    y_scale = builder.constant("y_scale", np.float32(case.quant.y[0]))
    y_zero = builder.constant("y_zero_point", _int8_scalar(case.quant.y[1]))
    builder.node("QuantizeLinear", [t, y_scale, y_zero], "y", name="quantize")
    if float_io:
        builder.node("DequantizeLinear", ["y", y_scale, y_zero], "y_float", name="dequantize")
        output = helper.make_tensor_value_info("y_float", TensorProto.FLOAT,
                                               _output_shape(case))
    else:
        output = helper.make_tensor_value_info("y", TensorProto.INT8, _output_shape(case))
    graph = helper.make_graph(builder.nodes, f"soak_{case.seed}_{case.index}", graph_inputs,
                              [output], builder.initializers)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                             ir_version=IR_VERSION)


def onnxruntime_output(case):
    """The int8 output onnxruntime gives for ``case`` with graph optimizations off."""
    session = onnxruntime_session(qdq_model(case))
    feeds = {name: array for name, array, _ in _activation_inputs(case)}
    (y,) = session.run(["y"], feeds)
    return y


def check_model(case):
    """Run the ONNX checker on both forms of ``case``'s model (for tests)."""
    onnx.checker.check_model(qdq_model(case))
    onnx.checker.check_model(qdq_model(case, float_io=True))
