"""QDQ ONNX model -> :class:`~sw_driver.graph.Graph` of integer layers.

The input is what ``onnxruntime.quantization.quantize_static`` writes with
``QuantFormat.QDQ``, int8 activations and symmetric int8 (per-channel) weights: every
float operator sits between ``DequantizeLinear`` nodes (its inputs) and a
``QuantizeLinear`` (its output). The importer folds each such group into one integer layer:

- ``DequantizeLinear`` of an initializer is a constant (weights, bias, an Add operand);
- ``DequantizeLinear`` of an activation only records the int8 tensor behind it, unless a
  float consumer (Softmax) or a graph output needs the float value: then it becomes a
  :class:`~sw_driver.graph.Dequantize` layer;
- a compute node, an optional Relu/Clip after it and the ``QuantizeLinear`` after that
  become one layer whose clamp carries the activation;
- any other ``QuantizeLinear`` (of the float model input, of a Softmax) becomes a
  :class:`~sw_driver.graph.Quantize` layer.

A graph with sequence operators (attention, LayerNormalization, GELU, GRU/LSTM...) is
imported in the ORT-compatible mode (``docs/semantics.md``): GEMMs stay integer (a MatMul of
two activations becomes a :class:`~sw_driver.graph.MatMul`), every other operator becomes a
:class:`~sw_driver.graph.FloatOp` between Dequantize and Quantize layers, computed by
:func:`models.sequence.float_op` as onnxruntime's unfused QDQ graph computes it.

The quantizer often deletes a Relu and gives the output zero point -128 instead; both
shapes of graph import to the same kind of layer.
"""

import numpy as np
import onnx
from onnx import helper, numpy_helper

from models.eltwise import add_multipliers
from models.pool import avg_pool_multipliers
from models.requant import activation_range, quantize_multiplier
from models.sequence import FLOAT_OPS, dequantize, quantize

from . import graph as g
from .errors import (
    NotQuantizedError,
    QuantizationError,
    UnsupportedModelError,
    UnsupportedOperatorError,
)
from .integer_mode import SEQUENCE_MODES, apply_sequence_mode
from .onnx_io import load_model, node_label

__all__ = ["SUPPORTED_OPS", "import_model"]

#: Operators whose float computation is folded into an integer layer.
INTEGER_OPS = frozenset({"Conv", "Gemm", "MatMul", "MaxPool", "AveragePool",
                         "GlobalAveragePool", "Add", "Flatten", "Reshape"})
ACTIVATIONS = frozenset({"Relu", "Clip"})
#: Operators computed in float32 between DequantizeLinear and QuantizeLinear, as
#: onnxruntime's unfused QDQ graph computes them (``docs/semantics.md``, "Sequence models,
#: ORT-compatible mode"); Reshape and Flatten are int8 views when their output keeps the
#: input's quantization, float otherwise.
SEQUENCE_OPS = FLOAT_OPS - {"Relu", "Softmax", "MatMul", "Add", "Pow", "Sqrt", "Tanh",
                            "ReduceMean", "Identity"} | {"Constant"}
#: Float operators a decomposed LayerNorm/GELU (tanh form) needs besides SEQUENCE_OPS.
_FLOAT_HELPERS = frozenset({"Pow", "Sqrt", "Tanh", "ReduceMean", "Identity"})
#: Every operator the importer accepts.
SUPPORTED_OPS = (INTEGER_OPS | ACTIVATIONS | SEQUENCE_OPS | _FLOAT_HELPERS
                 | {"Softmax", "QuantizeLinear", "DequantizeLinear"})

_TYPE_NAMES = {
    onnx.TensorProto.FLOAT: "float", onnx.TensorProto.DOUBLE: "double",
    onnx.TensorProto.FLOAT16: "float16", onnx.TensorProto.INT8: "int8",
    onnx.TensorProto.UINT8: "uint8", onnx.TensorProto.INT32: "int32",
    onnx.TensorProto.INT64: "int64",
}


def _tensor_info(value_info):
    tensor_type = value_info.type.tensor_type
    shape = None
    if tensor_type.HasField("shape"):
        shape = [d.dim_value if d.HasField("dim_value") else (d.dim_param or None)
                 for d in tensor_type.shape.dim]
    type_name = _TYPE_NAMES.get(tensor_type.elem_type, str(tensor_type.elem_type))
    return g.TensorInfo(value_info.name, shape, f"tensor({type_name})")


class _Const:
    """A DequantizeLinear of an initializer: integer values and their scale/zero point."""

    def __init__(self, values, scale, zero_point, axis):
        self.values, self.scale, self.zero_point, self.axis = values, scale, zero_point, axis


class _Importer:
    def __init__(self, model, source):
        self.model, self.source = model, source
        graph = model.graph
        # One wrapper object per node, kept alive, so that id(node) is a stable key
        # (protobuf may hand out a fresh wrapper on every access to graph.node).
        self.nodes = list(graph.node)
        self.init = {t.name: t for t in graph.initializer}
        self.opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")),
                          13)
        self.index = {id(n): i for i, n in enumerate(self.nodes)}
        self.consumers = {}
        for node in self.nodes:
            for name in node.input:
                self.consumers.setdefault(name, []).append(node)
        self.graph_outputs = {o.name for o in graph.output}
        self.consts = {}      # DQ output name -> _Const
        self.views = {}       # DQ output name -> (int8 tensor name, scale, zero point)
        self.qtensors = {}    # int8 tensor name -> (scale, zero point)
        self.absorbed = set()  # ids of Relu/Clip/QuantizeLinear folded into a layer
        self.dequantized = set()  # DQ outputs that a Dequantize layer makes float
        # FloatOp layer name -> {argument position: _Const}: the int8 form of the constants a
        # float op reads dequantized, for the integer mode's Add (sw_driver/integer_mode.py).
        self.quantized_args = {}
        self.layers = []

    # -- helpers -----------------------------------------------------------------------
    def where(self, node):
        return f"{self.source}: node {node_label(node, self.index[id(node)])!r} ({node.op_type})"

    def name(self, node):
        return node_label(node, self.index[id(node)])

    def array(self, node, name, what):
        if name not in self.init:
            raise UnsupportedModelError(
                f"{self.where(node)}: {what} {name!r} must be an initializer (constant)")
        return numpy_helper.to_array(self.init[name])

    @staticmethod
    def attrs(node):
        return {a.name: helper.get_attribute_value(a) for a in node.attribute}

    def qparams(self, node):
        """Per-tensor (scale, zero point) of an activation Q/DQ node, checked int8."""
        scale = self.array(node, node.input[1], "scale")
        if len(node.input) < 3 or not node.input[2]:
            raise UnsupportedModelError(
                f"{self.where(node)}: no zero point, i.e. uint8; Tessera needs int8 "
                f"activations (quantize with activation_type=QuantType.QInt8)")
        zero_point = self.array(node, node.input[2], "zero point")
        if zero_point.dtype != np.int8:
            raise UnsupportedModelError(
                f"{self.where(node)}: activation zero point is {zero_point.dtype}; Tessera "
                f"needs int8 activations (quantize with activation_type=QuantType.QInt8)")
        if scale.size != 1 or zero_point.size != 1:
            raise UnsupportedModelError(
                f"{self.where(node)}: activations must be quantized per tensor, not with "
                f"{scale.size} scales")
        scale = float(np.float32(scale.reshape(())))
        if not (np.isfinite(scale) and scale > 0):
            raise QuantizationError(f"{self.where(node)}: scale {scale!r} is not a positive "
                                    f"finite number")
        return scale, int(zero_point.reshape(()))

    def activation_input(self, node, position):
        """(int8 tensor name, scale, zero point) behind input ``position`` of ``node``."""
        name = node.input[position]
        if name in self.views:
            return self.views[name]
        if name in self.consts:
            raise UnsupportedModelError(
                f"{self.where(node)}: input {position} ({name!r}) is a constant where an "
                f"activation is expected")
        raise NotQuantizedError(
            f"{self.where(node)}: input {position} ({name!r}) is a float tensor, not the "
            f"output of a DequantizeLinear; the model is not (fully) quantized to QDQ form "
            f"(run `tessera quantize` first)")

    def output_group(self, node):
        """The optional Relu/Clip and the QuantizeLinear that close ``node``'s group.

        Returns (QuantizeLinear node, activation node or None).
        """
        out = node.output[0]
        consumers = self.consumers.get(out, [])
        not_quantized = NotQuantizedError(
            f"{self.where(node)}: output {out!r} does not go (alone) to a QuantizeLinear; "
            f"the model is not (fully) quantized to QDQ form (run `tessera quantize` first)")
        if out in self.graph_outputs or len(consumers) != 1:
            raise not_quantized
        after, activation = consumers[0], None
        if after.op_type in ACTIVATIONS and node.op_type in ("Conv", "Gemm", "MatMul", "Add"):
            activation = after
            consumers = self.consumers.get(after.output[0], [])
            if after.output[0] in self.graph_outputs or len(consumers) != 1:
                raise not_quantized
            after = consumers[0]
        if after.op_type != "QuantizeLinear":
            raise not_quantized
        return after, activation

    def clamp(self, activation, scale, zero_point):
        """Clamp bounds for a fused Relu/Clip in the output's integer domain."""
        if activation is None:
            return -128, 127
        if activation.op_type == "Relu":
            return activation_range("relu", zero_point, scale)
        low, high = self.clip_bounds(activation)
        lo = -128 if low is None else zero_point + round(low / scale)
        hi = 127 if high is None else zero_point + round(high / scale)
        # round() is half-to-even like QuantizeLinear; clamping quantized values to the
        # quantized bounds equals quantizing the clipped real value (monotonic).
        lo, hi = min(max(lo, -128), 127), min(max(hi, -128), 127)
        return lo, max(lo, hi)

    def clip_bounds(self, node):
        if self.opset < 11:
            a = self.attrs(node)
            return a.get("min"), a.get("max")
        bounds = []
        for position in (1, 2):
            if len(node.input) > position and node.input[position]:
                value = self.array(node, node.input[position], "Clip bound")
                bounds.append(float(value.reshape(())))
            else:
                bounds.append(None)
        return tuple(bounds)

    def finish_group(self, node, x_scale, x_zero_point):
        """Absorb the output group; return (output name, y_scale, y_zero_point, lo, hi)."""
        q, activation = self.output_group(node)
        y_scale, y_zero_point = self.qparams(q)
        lo, hi = self.clamp(activation, y_scale, y_zero_point)
        self.absorbed.add(id(q))
        if activation is not None:
            self.absorbed.add(id(activation))
        self.qtensors[q.output[0]] = (y_scale, y_zero_point)
        return q.output[0], y_scale, y_zero_point, lo, hi

    # -- constants -----------------------------------------------------------------------
    def weight(self, node, name, out_axis):
        """int8 weight and float32 per-output-channel scales of a weight input."""
        if name in self.views:
            # Input 0 was already accepted as an activation: the model is QDQ, but this is a
            # product of two activations (attention scores, a bilinear layer), which the
            # integer layers cannot express: their weights are constants.
            raise UnsupportedModelError(
                f"{self.where(node)}: multiplies two activations: input 0 "
                f"{node.input[0]!r} and input 1 {name!r} both come from a DequantizeLinear "
                f"of an activation ({self.views[node.input[0]][0]!r} and "
                f"{self.views[name][0]!r}); Tessera supports {node.op_type} with a constant "
                f"int8 weight (a DequantizeLinear of an initializer) only")
        const = self.consts.get(name)
        if const is None:
            raise NotQuantizedError(
                f"{self.where(node)}: weight {name!r} is not a DequantizeLinear of an int8 "
                f"initializer; the model is not quantized to QDQ form (run `tessera "
                f"quantize` first)")
        if const.values.dtype != np.int8:
            raise UnsupportedModelError(
                f"{self.where(node)}: weight {name!r} is {const.values.dtype}; Tessera needs "
                f"int8 weights (weight_type=QuantType.QInt8)")
        if np.any(const.zero_point != 0):
            raise UnsupportedModelError(
                f"{self.where(node)}: weight {name!r} has a non-zero zero point; Tessera "
                f"needs symmetric weights")
        channels = const.values.shape[out_axis]
        scale = const.scale.astype(np.float32).reshape(-1)
        if scale.size == 1:
            scale = np.full(channels, scale[0], dtype=np.float32)
        elif (const.axis % const.values.ndim) != out_axis % const.values.ndim \
                or scale.size != channels:
            raise UnsupportedModelError(
                f"{self.where(node)}: weight {name!r} is quantized along axis {const.axis}, "
                f"not per output channel")
        if not (np.all(np.isfinite(scale)) and np.all(scale > 0)):
            raise QuantizationError(f"{self.where(node)}: weight {name!r} has a scale that "
                                    f"is not positive and finite")
        return const.values, scale

    def bias(self, node, position, x_scale, w_scale):
        if len(node.input) <= position or not node.input[position]:
            return np.zeros(w_scale.shape[0], dtype=np.int32)
        name = node.input[position]
        const = self.consts.get(name)
        if const is None or const.values.dtype != np.int32:
            raise NotQuantizedError(
                f"{self.where(node)}: bias {name!r} is not a DequantizeLinear of an int32 "
                f"initializer (run `tessera quantize` first)")
        expected = np.float64(x_scale) * w_scale.astype(np.float64)
        scale = np.broadcast_to(const.scale.astype(np.float64).reshape(-1), expected.shape)
        if np.any(const.zero_point != 0) or not np.allclose(scale, expected, rtol=1e-5):
            raise QuantizationError(
                f"{self.where(node)}: bias {name!r} must have zero point 0 and scale "
                f"s_x * s_w[c] as the integer contract requires")
        return const.values.reshape(-1).astype(np.int32)

    def requant(self, node, x_scale, w_scale, y_scale):
        real = np.float64(x_scale) * w_scale.astype(np.float64) / np.float64(y_scale)
        try:
            return quantize_multiplier(real)
        except ValueError as exc:
            raise QuantizationError(
                f"{self.where(node)}: the requantization multiplier s_x * s_w[c] / s_y "
                f"cannot be represented: {exc}") from exc

    # -- node kinds --------------------------------------------------------------------
    def dequantize_linear(self, node):
        source = node.input[0]
        if source in self.init:
            values = numpy_helper.to_array(self.init[source])
            scale = self.array(node, node.input[1], "scale")
            zero_point = (self.array(node, node.input[2], "zero point")
                          if len(node.input) > 2 and node.input[2]
                          else np.zeros_like(scale, dtype=values.dtype))
            axis = int(self.attrs(node).get("axis", 1))
            if not np.all(np.isfinite(scale) & (scale > 0)):
                # quantize_static gives an -inf attention mask an infinite scale.
                raise QuantizationError(f"{self.where(node)}: scale {scale.tolist()!r} of "
                                        f"constant {source!r} is not positive and finite")
            self.consts[node.output[0]] = _Const(values, scale, zero_point, axis)
            return
        if source not in self.qtensors:
            raise UnsupportedModelError(
                f"{self.where(node)}: dequantizes {source!r}, which no QuantizeLinear "
                f"produced (int8 model inputs are not supported)")
        scale, zero_point = self.qparams(node)
        self.views[node.output[0]] = (source, scale, zero_point)
        float_needed = node.output[0] in self.graph_outputs or any(
            c.op_type not in INTEGER_OPS for c in self.consumers.get(node.output[0], []))
        if float_needed:
            self.dequantized.add(node.output[0])
            self.layers.append(g.Dequantize(self.name(node), (source,), node.output[0],
                                            scale=scale, zero_point=zero_point))

    def quantize_linear(self, node):
        if id(node) in self.absorbed:
            return
        scale, zero_point = self.qparams(node)
        if node.input[0] in self.init:
            # A Constant node quantized in the graph (GELU's erf + 1 in PyTorch's export,
            # which quantize_static sees as activations): fold it into an int8 constant that
            # the DequantizeLinear after it reads like a quantized initializer.
            values = quantize(numpy_helper.to_array(self.init[node.input[0]]), scale,
                              zero_point)
            self.init[node.output[0]] = numpy_helper.from_array(values, node.output[0])
            return
        self.qtensors[node.output[0]] = (scale, zero_point)
        self.layers.append(g.Quantize(self.name(node), (node.input[0],), node.output[0],
                                      scale=scale, zero_point=zero_point))

    def conv(self, node):
        a = self.attrs(node)
        x, x_scale, x_zp = self.activation_input(node, 0)
        w, w_scale = self.weight(node, node.input[1], 0)
        if w.ndim != 4:
            raise UnsupportedModelError(f"{self.where(node)}: only 2-D convolutions are "
                                        f"supported, not a weight of shape {w.shape}")
        auto_pad = a.get("auto_pad", b"NOTSET")
        auto_pad = auto_pad.decode() if isinstance(auto_pad, bytes) else auto_pad
        if auto_pad not in ("NOTSET", "VALID"):
            raise UnsupportedModelError(f"{self.where(node)}: auto_pad={auto_pad} is not "
                                        f"supported; give explicit pads")
        pads = tuple(a.get("pads", [0, 0, 0, 0]))
        bias = self.bias(node, 2, x_scale, w_scale)
        out, y_scale, y_zp, lo, hi = self.finish_group(node, x_scale, x_zp)
        m, n = self.requant(node, x_scale, w_scale, y_scale)
        self.layers.append(g.Conv(
            self.name(node), (x,), out, weight=w, bias=bias, x_zero_point=x_zp,
            multiplier=m, shift=n, y_zero_point=y_zp, lo=lo, hi=hi,
            stride=tuple(a.get("strides", [1, 1])), padding=(pads[0], pads[1], pads[2], pads[3]),
            dilation=tuple(a.get("dilations", [1, 1])), groups=int(a.get("group", 1))))

    def dense(self, node):
        a = self.attrs(node)
        if (node.op_type == "MatMul" and node.input[1] in self.views
                and node.input[0] in self.views):
            return self.matmul(node)
        x, x_scale, x_zp = self.activation_input(node, 0)
        if node.op_type == "Gemm":
            if a.get("transA", 0) or a.get("alpha", 1.0) != 1.0 or a.get("beta", 1.0) != 1.0:
                raise UnsupportedModelError(f"{self.where(node)}: only Gemm with transA=0, "
                                            f"alpha=1 and beta=1 is supported")
            trans_b = bool(a.get("transB", 0))
            w, w_scale = self.weight(node, node.input[1], 0 if trans_b else 1)
            bias = self.bias(node, 2, x_scale, w_scale)
        else:
            trans_b = False
            w, w_scale = self.weight(node, node.input[1], 1)
            bias = np.zeros(w_scale.shape[0], dtype=np.int32)
        if w.ndim != 2:
            raise UnsupportedModelError(f"{self.where(node)}: weight must be 2-D, not "
                                        f"{w.shape}")
        # The golden dense takes (O, K), the layout of Gemm with transB=1.
        w = np.ascontiguousarray(w if trans_b else w.T)
        out, y_scale, y_zp, lo, hi = self.finish_group(node, x_scale, x_zp)
        m, n = self.requant(node, x_scale, w_scale, y_scale)
        self.layers.append(g.Dense(
            self.name(node), (x,), out, weight=w, bias=bias, x_zero_point=x_zp,
            multiplier=m, shift=n, y_zero_point=y_zp, lo=lo, hi=hi))

    def pool_window(self, node):
        a = self.attrs(node)
        auto_pad = a.get("auto_pad", b"NOTSET")
        auto_pad = auto_pad.decode() if isinstance(auto_pad, bytes) else auto_pad
        unsupported = [f"{k}={a[k]}" for k in ("ceil_mode", "storage_order") if a.get(k, 0)]
        if any(d != 1 for d in a.get("dilations", [1, 1])):
            unsupported.append(f"dilations={a['dilations']}")
        if auto_pad not in ("NOTSET", "VALID"):
            unsupported.append(f"auto_pad={auto_pad}")
        if len(node.output) > 1 and node.output[1]:
            unsupported.append("an Indices output")
        kernel = tuple(a.get("kernel_shape", []))
        if len(kernel) != 2:
            unsupported.append(f"kernel_shape={list(kernel)} (only 2-D pooling)")
        if unsupported:
            raise UnsupportedModelError(f"{self.where(node)}: {', '.join(unsupported)} is "
                                        f"not supported")
        pads = tuple(a.get("pads", [0, 0, 0, 0]))
        return kernel, tuple(a.get("strides", [1, 1])), pads, a

    def passthrough_output(self, node, x_scale, x_zp):
        out, y_scale, y_zp, lo, hi = self.finish_group(node, x_scale, x_zp)
        if (np.float32(y_scale), y_zp) != (np.float32(x_scale), x_zp) or (lo, hi) != (-128, 127):
            raise UnsupportedModelError(
                f"{self.where(node)}: output quantization (scale {y_scale}, zero point "
                f"{y_zp}) differs from the input's ({x_scale}, {x_zp}); only pass-through "
                f"parameters, as quantize_static writes them, are supported")
        return out

    def max_pool(self, node):
        kernel, stride, pads, _ = self.pool_window(node)
        x, x_scale, x_zp = self.activation_input(node, 0)
        out = self.passthrough_output(node, x_scale, x_zp)
        self.layers.append(g.MaxPool(self.name(node), (x,), out, kernel=kernel, stride=stride,
                                     padding=pads))

    def average_pool(self, node):
        kernel, stride, pads, a = self.pool_window(node)
        x, x_scale, x_zp = self.activation_input(node, 0)
        out, y_scale, y_zp, lo, hi = self.finish_group(node, x_scale, x_zp)
        try:
            avg_pool_multipliers(x_scale, y_scale, [kernel[0] * kernel[1]])
        except ValueError as exc:
            raise QuantizationError(f"{self.where(node)}: {exc}") from exc
        self.layers.append(g.AveragePool(
            self.name(node), (x,), out, kernel=kernel, stride=stride, padding=pads,
            count_include_pad=bool(a.get("count_include_pad", 0)), x_scale=x_scale,
            x_zero_point=x_zp, y_scale=y_scale, y_zero_point=y_zp, lo=lo, hi=hi))

    def global_average_pool(self, node):
        x, x_scale, x_zp = self.activation_input(node, 0)
        out, y_scale, y_zp, lo, hi = self.finish_group(node, x_scale, x_zp)
        self.layers.append(g.GlobalAveragePool(
            self.name(node), (x,), out, x_scale=x_scale, x_zero_point=x_zp, y_scale=y_scale,
            y_zero_point=y_zp, lo=lo, hi=hi))

    def add(self, node):
        if self.sequence and not all(name in self.views for name in node.input):
            # PyTorch exports: int64 shape arithmetic (Mod + 1), a bias constant first
            # (bias + x @ W): float or integer ops of the ORT-compatible mode.
            return self.float_add(node)
        a, a_scale, a_zp = self.activation_input(node, 0)
        constant = None
        if node.input[1] in self.consts:
            const = self.consts[node.input[1]]
            if const.values.dtype != np.int8 or const.scale.size != 1:
                raise UnsupportedModelError(f"{self.where(node)}: a constant operand must be "
                                            f"int8 with one scale")
            constant = const.values
            b_scale = float(np.float32(const.scale.reshape(())))
            b_zp = int(const.zero_point.reshape(()))
            inputs = (a,)
        else:
            b, b_scale, b_zp = self.activation_input(node, 1)
            inputs = (a, b)
        q, activation = self.output_group(node)
        if self.sequence and activation is None:
            # The ORT-compatible mode: an elementwise add is dequantize -> float Add ->
            # quantize as in onnxruntime's graph (the integer add rounds exact ties to
            # even where float32 does not: erf(x) + 1 lands on ties often).
            return self.float_add(node)
        try:
            add_multipliers(a_scale, b_scale, self.qparams(q)[0])
        except ValueError as exc:
            if activation is not None:
                raise QuantizationError(f"{self.where(node)}: {exc}") from exc
            # Scales too far apart for the integer add (a bias the quantizer gave a scale
            # of 1e-12 because it is all zeros): compute it as onnxruntime's QDQ graph does,
            # dequantize -> float Add -> quantize (the ORT-compatible definition).
            return self.float_add(node)
        out, y_scale, y_zp, lo, hi = self.finish_group(node, a_scale, a_zp)
        self.layers.append(g.Add(
            self.name(node), inputs, out, a_scale=a_scale, a_zero_point=a_zp, b_scale=b_scale,
            b_zero_point=b_zp, y_scale=y_scale, y_zero_point=y_zp, lo=lo, hi=hi,
            constant=constant))

    def float_add(self, node):
        for position, name in enumerate(node.input):
            if name in self.views and name not in self.dequantized:
                source, scale, zero_point = self.views[name]
                self.dequantized.add(name)
                self.layers.append(g.Dequantize(f"{self.name(node)}:dequantize{position}",
                                                (source,), name, scale=scale,
                                                zero_point=zero_point))
        self.float_op(node)

    def flatten(self, node):
        if node.input[0] not in self.views:
            return self.float_op(node)
        x, x_scale, x_zp = self.activation_input(node, 0)
        out = self.passthrough_output(node, x_scale, x_zp)
        self.layers.append(g.Flatten(self.name(node), (x,), out,
                                     axis=int(self.attrs(node).get("axis", 1))))

    def reshape(self, node):
        if node.input[0] not in self.views:
            return self.float_op(node)
        if self.sequence and node.input[1] not in self.init and node.input[1] not in self.consts:
            # A shape computed at run time (PyTorch's MultiheadAttention builds it from
            # Shape of the batch): dequantize -> float Reshape, as onnxruntime's graph does.
            return self.float_add(node)
        x, x_scale, x_zp = self.activation_input(node, 0)
        shape = self.array(node, node.input[1], "shape")
        if self.attrs(node).get("allowzero", 0):
            raise UnsupportedModelError(f"{self.where(node)}: allowzero=1 is not supported")
        out = self.passthrough_output(node, x_scale, x_zp)
        self.layers.append(g.Reshape(self.name(node), (x,), out,
                                     shape=tuple(int(d) for d in shape.reshape(-1))))

    def softmax(self, node):
        axis = int(self.attrs(node).get("axis", -1 if self.opset >= 13 else 1))
        self.layers.append(g.Softmax(self.name(node), (node.input[0],), node.output[0],
                                     axis=axis, coerce_2d=self.opset < 13))

    def activation(self, node):
        if id(node) not in self.absorbed:
            raise UnsupportedModelError(
                f"{self.where(node)}: a {node.op_type} must directly follow a Conv, Gemm, "
                f"MatMul or Add and precede a QuantizeLinear, to be fused into its clamp")

    def opset_of(self, node):
        domain = node.domain or "ai.onnx"
        version = next((o.version for o in self.model.opset_import
                        if (o.domain or "ai.onnx") == domain), None)
        return f"{domain} opset {version}" if version is not None else f"domain {domain!r}"

    def check_static_shapes(self):
        """Sequence models need every input dimension but the batch fixed: the buffers
        and the attention shapes follow from them."""
        if not self.sequence:
            return
        initializers = set(self.init)
        for value_info in self.model.graph.input:
            if value_info.name in initializers:
                continue
            info = _tensor_info(value_info)
            if info.shape is None:
                raise UnsupportedModelError(
                    f"{self.source}: input {info.name!r} has no shape; a sequence model "
                    f"needs fixed dimensions (export with a fixed sequence length)")
            for axis, dim in enumerate(info.shape[1:], start=1):
                if not (isinstance(dim, int) and dim > 0):
                    raise UnsupportedModelError(
                        f"{self.source}: input {info.name!r} dimension {axis} is "
                        f"{dim!r}, dynamic without a bound; only the batch (dimension 0) may "
                        f"be symbolic: export with a fixed sequence length")

    def constant(self, node):
        a = self.attrs(node)
        if "value" in a:
            tensor = onnx.TensorProto()
            tensor.CopyFrom(a["value"])
        else:
            key = next((k for k in ("value_float", "value_floats", "value_int", "value_ints")
                        if k in a), None)
            if key is None:
                raise UnsupportedModelError(f"{self.where(node)}: only value, value_float(s) "
                                            f"and value_int(s) constants are supported")
            dtype = np.float32 if "float" in key else np.int64
            tensor = numpy_helper.from_array(np.asarray(a[key], dtype))
        tensor.name = node.output[0]
        self.init[node.output[0]] = tensor

    def float_arg(self, node, name):
        """A float op's input: None (absent), a constant array, or a tensor name."""
        if not name:
            return None
        if name in self.consts:
            const = self.consts[name]
            return dequantize(const.values, const.scale, const.zero_point, const.axis)
        if name in self.init:
            return numpy_helper.to_array(self.init[name])
        if name in self.qtensors:
            raise UnsupportedModelError(f"{self.where(node)}: reads the int8 tensor {name!r} "
                                        f"directly; a float op needs a DequantizeLinear")
        return name

    def float_op(self, node):
        args, inputs = [], []
        for name in node.input:
            value = self.float_arg(node, name)
            if isinstance(value, str):
                if value not in inputs:
                    inputs.append(value)
                value = inputs.index(value)
            args.append(value)
        attrs = {k: (v.decode() if isinstance(v, bytes) else
                     # ConstantOfShape's value: the golden model reads arrays, not protobuf.
                     numpy_helper.to_array(v) if isinstance(v, onnx.TensorProto) else v)
                 for k, v in self.attrs(node).items()}
        self.check_operands(node, args)
        if node.op_type in ("GRU", "LSTM"):
            self.check_recurrent(node, attrs)
        outputs = [o for o in node.output if o]
        for index, out in enumerate(node.output):
            if out:
                name = self.name(node) if len(outputs) == 1 else f"{self.name(node)}:{index}"
                quantized = {i: self.consts[n] for i, n in enumerate(node.input)
                             if n in self.consts}
                if quantized:
                    self.quantized_args[name] = quantized
                self.layers.append(g.FloatOp(
                    name, tuple(inputs), out, op_type=node.op_type, args=tuple(args),
                    attrs=attrs, opset=self.opset, output_index=index,
                    outputs=len(node.output)))

    def check_recurrent(self, node, attrs):
        """The recurrent forms models.sequence defines: layout 0, default activations."""
        defaults = {"GRU": ["Sigmoid", "Tanh"], "LSTM": ["Sigmoid", "Tanh", "Tanh"]}
        problems = [f"{key}={attrs[key]}" for key in ("clip", "input_forget", "layout")
                    if attrs.get(key)]
        activations = [a.decode() if isinstance(a, bytes) else a
                       for a in attrs.get("activations", [])]
        if activations and activations not in (defaults[node.op_type],
                                               defaults[node.op_type] * 2):
            problems.append(f"activations={activations}")
        if problems:
            raise UnsupportedModelError(
                f"{self.where(node)}: {', '.join(problems)} is not supported; Tessera runs "
                f"{node.op_type} with layout 0 and the default activations, no clip")

    def check_operands(self, node, args):
        """Refuse, at import, operands whose shapes are known and wrong (a mask that does
        not broadcast, indices of the wrong type)."""
        if node.op_type == "Where" and not isinstance(args[0], int) \
                and np.asarray(args[0]).dtype != np.bool_:
            raise UnsupportedModelError(f"{self.where(node)}: the condition must be bool, "
                                        f"not {np.asarray(args[0]).dtype}")
        if node.op_type not in ("Where", "Add", "Sub", "Mul", "Div", "Pow"):
            return
        shapes = [self.known_shape(node.input[i], a) for i, a in enumerate(args)]
        if any(s is None for s in shapes):
            return
        try:
            np.broadcast_shapes(*shapes)
        except ValueError:
            listed = ", ".join(f"{node.input[i]!r} {list(s)}" for i, s in enumerate(shapes))
            what = "condition (mask)" if node.op_type == "Where" else "operand"
            raise UnsupportedModelError(
                f"{self.where(node)}: {what} shapes do not broadcast: {listed}; every "
                f"dimension must be equal or 1") from None

    def known_shape(self, name, arg):
        if not isinstance(arg, int):
            return np.shape(arg)
        if not hasattr(self, "_shapes"):
            self._shapes = {}
            try:
                inferred = onnx.shape_inference.infer_shapes(self.model)
                for v in [*inferred.graph.value_info, *inferred.graph.input]:
                    shape = _tensor_info(v).shape
                    if shape is not None:
                        # A symbolic dimension (the batch) broadcasts like 1 here.
                        self._shapes[v.name] = tuple(d if isinstance(d, int) and d > 0 else 1
                                                     for d in shape)
            except onnx.shape_inference.InferenceError:
                pass  # shapes are then checked when the layer runs
        return self._shapes.get(name)

    def matmul(self, node):
        """activation x activation (attention) when input 1 is an activation."""
        a, a_scale, a_zp = self.activation_input(node, 0)
        b, b_scale, b_zp = self.activation_input(node, 1)
        out, y_scale, y_zp, lo, hi = self.finish_group(node, a_scale, a_zp)
        m, n = self.requant(node, a_scale, np.array([b_scale]), y_scale)
        self.layers.append(g.MatMul(
            self.name(node), (a, b), out, a_zero_point=a_zp, b_zero_point=b_zp,
            multiplier=int(np.asarray(m).reshape(-1)[0]), shift=int(np.asarray(n).reshape(-1)[0]),
            y_zero_point=y_zp, lo=lo, hi=hi))

    # -- driver ------------------------------------------------------------------------
    def run(self):
        graph = self.model.graph
        bad = [n for n in self.nodes
               if n.op_type not in SUPPORTED_OPS or n.domain not in ("", "ai.onnx")]
        unsupported = [(self.name(n), n.op_type) for n in bad]
        if unsupported:
            listed = ", ".join(f"{self.name(n)!r} ({n.op_type}) from {self.opset_of(n)}"
                               for n in bad)
            raise UnsupportedOperatorError(
                f"{self.source}: {len(unsupported)} node(s) use operators Tessera does not "
                f"support: {listed}. Supported: {', '.join(sorted(SUPPORTED_OPS))}",
                unsupported)
        if not any(n.op_type in ("QuantizeLinear", "DequantizeLinear") for n in self.nodes):
            raise NotQuantizedError(
                f"{self.source}: a float model (no QuantizeLinear/DequantizeLinear nodes); "
                f"Tessera runs QDQ int8 models: run `tessera quantize` on it first")
        #: A graph with sequence operators is run in the ORT-compatible mode.
        self.sequence = any(n.op_type in SEQUENCE_OPS - {"Reshape", "Flatten", "Constant"}
                            for n in self.nodes)
        self.check_static_shapes()
        handlers = {op: self.float_op for op in SEQUENCE_OPS | _FLOAT_HELPERS}
        handlers |= {
            "Constant": self.constant,
            "DequantizeLinear": self.dequantize_linear, "QuantizeLinear": self.quantize_linear,
            "Conv": self.conv, "Gemm": self.dense, "MatMul": self.dense,
            "MaxPool": self.max_pool, "AveragePool": self.average_pool,
            "GlobalAveragePool": self.global_average_pool, "Add": self.add,
            "Flatten": self.flatten, "Reshape": self.reshape, "Softmax": self.softmax,
            "Relu": self.activation, "Clip": self.activation,
        }
        for node in self.nodes:
            handlers[node.op_type](node)
        initializers = set(self.init)
        inputs = [_tensor_info(i) for i in graph.input if i.name not in initializers]
        for info in inputs:
            if info.type != "tensor(float)":
                raise UnsupportedModelError(
                    f"{self.source}: input {info.name!r} is {info.type}; only float model "
                    f"inputs are supported")
        outputs = [self.output_info(o) for o in graph.output]
        return g.Graph(self.layers, inputs, outputs, self.source)

    def output_info(self, value_info):
        info = _tensor_info(value_info)
        if info.shape is None:
            try:
                inferred = onnx.shape_inference.infer_shapes(self.model)
                known = {v.name: v for v in inferred.graph.value_info}
                if value_info.name in known:
                    info = g.TensorInfo(info.name, _tensor_info(known[info.name]).shape,
                                        info.type)
            except onnx.shape_inference.InferenceError:
                pass  # the shape is informative only
        return info


def import_model(path_or_bytes, sequence_mode="ort"):
    """Import a QDQ ONNX model as a graph of integer layers.

    Parameters
    ----------
    path_or_bytes : str, os.PathLike, bytes or onnx.ModelProto
        A model as written by ``onnxruntime.quantization.quantize_static`` with
        ``QuantFormat.QDQ``, int8 activations and int8 (per-channel) weights.
    sequence_mode : {"ort", "integer"}, optional
        The semantics of Softmax, LayerNormalization and GELU: onnxruntime's QDQ graph
        (``"ort"``, the default) or, where their inputs and outputs are quantized, the
        integer-only layers of :mod:`sw_driver.integer_mode`. Every layer's semantics is
        recorded in ``Graph.semantics``.

    Returns
    -------
    sw_driver.graph.Graph

    Raises
    ------
    ModelLoadError, MissingInitializerError
        The file is not a valid ONNX model.
    UnsupportedOperatorError
        Listing every node whose operator is not supported.
    NotQuantizedError
        A float model, or a float region in a QDQ one.
    QuantizationError
        Scales the integer contract cannot represent (the message names the node).
    UnsupportedModelError
        Other structures the importer does not handle (named).
    """
    if sequence_mode not in SEQUENCE_MODES:
        raise ValueError(f"sequence_mode must be one of "
                         f"{', '.join(map(repr, SEQUENCE_MODES))}, not {sequence_mode!r}")
    model, source = load_model(path_or_bytes)
    importer = _Importer(model, source)
    return apply_sequence_mode(importer.run(), sequence_mode, importer.quantized_args)
