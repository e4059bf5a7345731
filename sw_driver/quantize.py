"""Tessera's own post-training quantizer: float ONNX + calibration data -> QDQ ONNX.

The output has the shape :mod:`sw_driver.importer` reads (and onnxruntime runs):

- weights: int8, symmetric per output channel, ``s_w[c] = max|w[c]| / 127`` (zero point 0,
  values in [-127, 127] so that negating a weight never saturates);
- biases: int32 at scale ``s_x * s_w[c]``, as the integer contract requires;
- activations: int8 per tensor, asymmetric: the calibrated range ``[lo, hi]`` is widened to
  hold 0 (so padding and ReLU's 0 are exact), ``s = (hi - lo) / 255`` and
  ``z = round(-128 - lo / s)``;
- a Relu or Clip directly after a Conv, Gemm, MatMul or Add is kept between the operator
  and its QuantizeLinear, where the importer fuses it into the requantization clamp; the
  range calibrated is the activation's output;
- MaxPool, Flatten and Reshape pass their input's scale and zero point through (their
  integer form is exact only then);
- Softmax stays float: it reads a DequantizeLinear and its output is not quantized.

Only the structure is Tessera's business here; onnxruntime merely executes the float
model during calibration (:mod:`sw_driver.calibration`). Its quantizer is the reference in
the tests, never called from here.
"""

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from .calibration import METHODS, CalibrationError, check_calibration, collect_ranges
from .errors import UnsupportedModelError, UnsupportedOperatorError
from .onnx_io import load_model, node_label

__all__ = ["METHODS", "CalibrationError", "FLOAT_OPS", "activation_qparams", "quantize",
           "quantize_file", "weight_qparams"]

#: Operators with a weight (input 1) and an optional bias (input 2).
WEIGHTED_OPS = frozenset({"Conv", "Gemm", "MatMul"})
#: Operators whose output gets its own calibrated range.
CALIBRATED_OPS = WEIGHTED_OPS | {"Add", "AveragePool", "GlobalAveragePool"}
#: Operators whose output reuses the input's quantization.
PASSTHROUGH_OPS = frozenset({"MaxPool", "Flatten", "Reshape"})
ACTIVATIONS = frozenset({"Relu", "Clip"})
#: Every float operator the quantizer accepts.
FLOAT_OPS = CALIBRATED_OPS | PASSTHROUGH_OPS | ACTIVATIONS | {"Softmax"}
MIN_OPSET = 13  # per-channel DequantizeLinear (the axis attribute) needs opset 13


def activation_qparams(lo, hi):
    """Per-tensor asymmetric int8 ``(scale, zero_point)`` for a float range.

    Parameters
    ----------
    lo, hi : float
        Calibrated range; widened to include 0 so that 0 is exactly representable.

    Returns
    -------
    (numpy.float32, int)
    """
    lo, hi = min(float(lo), 0.0), max(float(hi), 0.0)
    scale = np.float32((hi - lo) / 255.0)
    if not scale > 0:
        # A tensor that was 0 on every calibration sample: any scale represents it.
        scale = np.float32(1.0)
    zero_point = int(np.clip(np.rint(-128.0 - lo / float(scale)), -128, 127))
    return scale, zero_point


def weight_qparams(w, axis):
    """Symmetric per-channel int8 weights: ``(int8 values, float32 scales)`` along ``axis``."""
    w = np.asarray(w, dtype=np.float32)
    moved = np.moveaxis(w, axis, 0).reshape(w.shape[axis], -1)
    absmax = np.abs(moved).max(axis=1) if moved.size else np.zeros(w.shape[axis])
    # An all-zero channel quantizes to zeros under any scale; 1 keeps the multiplier sane.
    scale = np.where(absmax > 0, absmax / 127.0, 1.0).astype(np.float32)
    shape = [1] * w.ndim
    shape[axis] = -1
    q = np.clip(np.rint(w / scale.reshape(shape)), -127, 127).astype(np.int8)
    return q, scale


class _Rewriter:
    """One pass over a float graph that emits its QDQ twin."""

    def __init__(self, model, source):
        self.model, self.source = model, source
        graph = model.graph
        self.nodes = list(graph.node)
        self.init = {t.name: t for t in graph.initializer}
        self.inputs = [i for i in graph.input if i.name not in self.init]
        self.outputs = {o.name for o in graph.output}
        self.consumers = {}
        for node in self.nodes:
            for name in node.input:
                self.consumers.setdefault(name, []).append(node)

    def where(self, index):
        node = self.nodes[index]
        return f"{self.source}: node {node_label(node, index)!r} ({node.op_type})"

    # -- analysis ----------------------------------------------------------------------
    def check(self):
        opset = next((o.version for o in self.model.opset_import if o.domain in ("", "ai.onnx")),
                     None)
        if opset is None or opset < MIN_OPSET:
            raise UnsupportedModelError(
                f"{self.source}: opset {opset}; the quantizer needs opset >= {MIN_OPSET} "
                f"(per-channel DequantizeLinear). Convert it with "
                f"onnx.version_converter.convert_version(model, {MIN_OPSET})")
        bad = [(node_label(n, i), n.op_type) for i, n in enumerate(self.nodes)
               if n.op_type not in FLOAT_OPS or n.domain not in ("", "ai.onnx")]
        if any(op in ("QuantizeLinear", "DequantizeLinear") for _, op in bad):
            raise UnsupportedModelError(f"{self.source}: the model is already quantized "
                                        f"(it has QuantizeLinear/DequantizeLinear nodes)")
        if bad:
            listed = ", ".join(f"{name!r} ({op})" for name, op in bad)
            raise UnsupportedOperatorError(
                f"{self.source}: {len(bad)} node(s) use operators the quantizer does not "
                f"support: {listed}. Supported: {', '.join(sorted(FLOAT_OPS))}", bad)
        for info in self.inputs:
            if info.type.tensor_type.elem_type != TensorProto.FLOAT:
                raise UnsupportedModelError(f"{self.source}: input {info.name!r} is not float32")

    def plan(self):
        """Which tensors get QDQ, and which activations are fused.

        Sets ``self.quantized`` (tensor -> None for "calibrate it" or the tensor whose
        parameters it reuses), ``self.fused`` (indices of fused Relu/Clip) and
        ``self.after`` (node index -> tensor whose Q/DQ follow that node).
        """
        self.quantized, self.fused, self.after = {}, set(), {}
        for info in self.inputs:
            if any(c.op_type != "Softmax" for c in self.consumers.get(info.name, [])):
                self.quantized[info.name] = None
        index_of = {id(n): i for i, n in enumerate(self.nodes)}
        for i, node in enumerate(self.nodes):
            op = node.op_type
            if op in ACTIVATIONS:
                if i not in self.fused:
                    raise UnsupportedModelError(
                        f"{self.where(i)}: a {op} must directly follow a Conv, Gemm, MatMul "
                        f"or Add (alone consuming its output) to be fused into its clamp")
                continue
            if op == "Softmax":
                if self.consumers.get(node.output[0]):
                    raise UnsupportedModelError(
                        f"{self.where(i)}: a Softmax output must be a model output; Tessera "
                        f"runs Softmax in float at the end of a model only")
                continue
            out = node.output[0]
            users = self.consumers.get(out, [])
            if (op in CALIBRATED_OPS and op not in ("AveragePool", "GlobalAveragePool")
                    and out not in self.outputs and len(users) == 1
                    and users[0].op_type in ACTIVATIONS):
                j = index_of[id(users[0])]
                self.fused.add(j)
                self.quantized[users[0].output[0]] = None
                self.after[j] = users[0].output[0]
                continue
            source = node.input[0] if op in PASSTHROUGH_OPS else None
            if source is not None and source not in self.quantized:
                raise UnsupportedModelError(f"{self.where(i)}: its input {source!r} is not an "
                                            f"int8 tensor (e.g. a Softmax output)")
            self.quantized[out] = source
            self.after[i] = out

    # -- emission ----------------------------------------------------------------------
    def params(self, tensor):
        source = self.quantized[tensor]
        return self.params(source) if source is not None else self.qparams[tensor]

    def float_name(self, tensor):
        """What the producer of ``tensor`` writes (renamed when it is a graph output)."""
        return f"{tensor}_float" if tensor in self.outputs else tensor

    def dq_name(self, tensor):
        """What consumers read: the DequantizeLinear's output."""
        return tensor if tensor in self.outputs else f"{tensor}_dq"

    def add_init(self, name, array):
        self.new_inits.append(numpy_helper.from_array(array, name))
        return name

    def qdq(self, tensor):
        scale, zero_point = self.params(tensor)
        s = self.add_init(f"{tensor}_scale", np.array(scale, np.float32))
        z = self.add_init(f"{tensor}_zero_point", np.array(zero_point, np.int8))
        self.new_nodes.append(helper.make_node(
            "QuantizeLinear", [self.float_name(tensor), s, z], [f"{tensor}_quantized"],
            name=f"{tensor}_QuantizeLinear"))
        self.new_nodes.append(helper.make_node(
            "DequantizeLinear", [f"{tensor}_quantized", s, z], [self.dq_name(tensor)],
            name=f"{tensor}_DequantizeLinear"))

    def const_dq(self, name, values, scale, zero_point, axis=None):
        """A DequantizeLinear of a new integer initializer; returns its output name."""
        q = self.add_init(f"{name}_quantized", values)
        s = self.add_init(f"{name}_scale", scale)
        z = self.add_init(f"{name}_zero_point", zero_point)
        attrs = {} if axis is None else {"axis": axis}
        self.new_nodes.append(helper.make_node("DequantizeLinear", [q, s, z], [f"{name}_dq"],
                                               name=f"{name}_DequantizeLinear", **attrs))
        self.replaced.add(name)
        return f"{name}_dq"

    def weighted(self, i, node, inputs):
        if node.input[1] not in self.init:
            raise UnsupportedModelError(f"{self.where(i)}: the weight {node.input[1]!r} must "
                                        f"be an initializer")
        w = numpy_helper.to_array(self.init[node.input[1]])
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        if node.op_type == "Conv":
            axis = 0
        elif node.op_type == "Gemm":
            if attrs.get("transA", 0) or attrs.get("alpha", 1.0) != 1.0 \
                    or attrs.get("beta", 1.0) != 1.0:
                raise UnsupportedModelError(f"{self.where(i)}: only Gemm with transA=0, "
                                            f"alpha=1 and beta=1 is supported")
            axis = 0 if attrs.get("transB", 0) else 1
        else:
            axis = 1
        if w.ndim != (4 if node.op_type == "Conv" else 2):
            raise UnsupportedModelError(f"{self.where(i)}: weight of shape {list(w.shape)} "
                                        f"is not supported")
        tag = f"{node.input[1]}_{i}" if node.input[1] in self.replaced else node.input[1]
        q, w_scale = weight_qparams(w, axis)
        inputs[1] = self.const_dq(tag, q, w_scale, np.zeros(w_scale.shape, np.int8), axis)
        if len(node.input) > 2 and node.input[2]:
            if node.input[2] not in self.init:
                raise UnsupportedModelError(f"{self.where(i)}: the bias {node.input[2]!r} "
                                            f"must be an initializer")
            b = numpy_helper.to_array(self.init[node.input[2]]).astype(np.float64)
            if b.size != w_scale.size:
                raise UnsupportedModelError(f"{self.where(i)}: a bias of shape "
                                            f"{list(b.shape)} is not one value per channel")
            x_scale = self.params(node.input[0])[0]
            b_scale = (np.float32(x_scale) * w_scale).astype(np.float32)
            # int32 holds any realistic bias at this scale; clipping beats wrapping.
            bq = np.clip(np.rint(b.reshape(-1) / b_scale.astype(np.float64)),
                         -2**31, 2**31 - 1).astype(np.int32)
            tag = f"{node.input[2]}_{i}" if node.input[2] in self.replaced else node.input[2]
            inputs[2] = self.const_dq(tag, bq, b_scale, np.zeros(bq.shape, np.int32), 0)

    def constant_operand(self, i, name):
        """An Add operand that is an initializer: per-tensor asymmetric int8."""
        values = numpy_helper.to_array(self.init[name]).astype(np.float32)
        scale, zero_point = activation_qparams(values.min(), values.max())
        q = np.clip(np.rint(values / scale) + zero_point, -128, 127).astype(np.int8)
        tag = f"{name}_{i}" if name in self.replaced else name
        return self.const_dq(tag, q, np.array(scale, np.float32),
                             np.array(zero_point, np.int8))

    def emit(self, qparams):
        self.qparams = qparams
        self.new_nodes, self.new_inits, self.replaced = [], [], set()
        for info in self.inputs:
            if info.name in self.quantized:
                self.qdq(info.name)
        for i, node in enumerate(self.nodes):
            inputs = list(node.input)
            for k, name in enumerate(inputs):
                if name in self.quantized:
                    inputs[k] = self.dq_name(name)
            if node.op_type in WEIGHTED_OPS:
                self.weighted(i, node, inputs)
            elif node.op_type == "Add":
                for k, name in enumerate(node.input):
                    if name in self.init:
                        inputs[k] = self.constant_operand(i, name)
            outputs = [self.float_name(o) if o in self.quantized else o for o in node.output]
            new = onnx.NodeProto()
            new.CopyFrom(node)
            del new.input[:]
            new.input.extend(inputs)
            del new.output[:]
            new.output.extend(outputs)
            self.new_nodes.append(new)
            if i in self.after:
                self.qdq(self.after[i])
        graph = self.model.graph
        kept = [t for t in graph.initializer if t.name not in self.replaced]
        new_graph = helper.make_graph(self.new_nodes, graph.name, list(graph.input),
                                      list(graph.output), kept + self.new_inits)
        # Initializers listed as graph inputs (old IR habit) must stay consistent.
        del new_graph.input[:]
        new_graph.input.extend(i for i in graph.input if i.name not in self.replaced)
        model = helper.make_model(new_graph, opset_imports=list(self.model.opset_import),
                                  ir_version=self.model.ir_version,
                                  producer_name="tessera.quantize")
        onnx.checker.check_model(model)
        return model


def quantize(model, calibration, method="minmax", percentile=99.99, batch=64):
    """Quantize a float ONNX model to QDQ form with Tessera's rules (module docstring).

    Parameters
    ----------
    model : str, os.PathLike, bytes or onnx.ModelProto
        A float model of the operators in :data:`FLOAT_OPS`, opset >= 13.
    calibration : numpy.ndarray or dict of str -> numpy.ndarray
        Representative inputs, ``[N, ...]`` (N >= 1) per model input.
    method : {"minmax", "percentile"}
        How activation ranges are taken from the calibration run.
    percentile : float
        For ``"percentile"``: the upper percentile kept (the lower one is ``100 - p``).
    batch : int
        Samples per calibration run.

    Returns
    -------
    onnx.ModelProto
        The QDQ model; :class:`sw_driver.InferenceSession` and onnxruntime both run it.

    Raises
    ------
    ModelLoadError
        Not a readable ONNX model.
    CalibrationError
        Empty, mis-shaped or non-finite calibration data; an unknown method.
    UnsupportedOperatorError, UnsupportedModelError
        Operators or structures outside what Tessera runs (named in the message).
    """
    if method not in METHODS:
        raise CalibrationError(f"unknown calibration method {method!r}; known: "
                               f"{', '.join(METHODS)}")
    loaded, source = load_model(model)
    rewriter = _Rewriter(loaded, source)
    rewriter.check()
    data = check_calibration(calibration, rewriter.inputs)
    rewriter.plan()
    observed = [t for t, src in rewriter.quantized.items() if src is None]
    ranges = collect_ranges(loaded, observed, data, method=method, percentile=percentile,
                            batch=batch)
    return rewriter.emit({t: activation_qparams(*ranges[t]) for t in observed})


def quantize_file(model_path, out_path, calibration, **options):
    """:func:`quantize` a model file and save the QDQ model; returns ``out_path``.

    ``options`` are those of :func:`quantize` (``method``, ``percentile``, ``batch``).
    """
    quantized = quantize(model_path, calibration, **options)
    out_path = Path(out_path)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(quantized, out_path)
    return out_path
