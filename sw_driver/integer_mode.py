"""The session's ``sequence_mode``: which semantics each nonlinearity of a graph follows.

:func:`apply_sequence_mode` runs after the importer. In ``"ort"`` mode (the default) it
only labels the layers; in ``"integer"`` mode it first replaces, where the model allows it,
the ORT-compatible subgraphs of Softmax, LayerNormalization and GELU by the integer-only
layers :class:`~sw_driver.graph.IntSoftmax`, :class:`~sw_driver.graph.IntLayerNorm` and
:class:`~sw_driver.graph.IntGelu` (:mod:`models.intonly`). Either way every layer gets a
``(semantics, why)`` entry in ``Graph.semantics`` (``docs/semantics.md``, "In a session").

A GELU is recognised by what it computes: from an ``Erf``, ``Tanh`` or ``Gelu`` node the
region of element-wise float ops with scalar constants (and the Q/DQ pairs inside it) is
traced back to one int8 tensor ``x``; the region is evaluated, as the ORT-compatible mode
computes it, on all 256 codes of ``x``, and the first int8 tensor it produces that is
within :data:`GELU_MATCH_LSB` of GELU quantized to that tensor's scale is the GELU's output.
PyTorch's erf export, the tanh approximation and the ``Gelu`` op all pass; a region that
computes something else (or from several tensors) keeps its ORT-compatible form, and its
layers say why.
"""

import math

import numpy as np

from models import intonly
from models.eltwise import add_multipliers
from models.sequence import dequantize, float_op, quantize

from . import graph as g

__all__ = ["GELU_MATCH_LSB", "SEQUENCE_MODES", "TANH_GELU_GAP", "apply_sequence_mode"]

#: The values of the session option ``sequence_mode``.
SEQUENCE_MODES = ("ort", "integer")
#: Largest distance, in output LSB over the 256 input codes, between a float region and
#: GELU (erf form) for the region to count as a GELU. The QDQ pairs that the quantizer puts
#: inside the erf form cost up to about 1 LSB, and the tanh form differs from the erf form
#: by at most :data:`TANH_GELU_GAP`.
GELU_MATCH_LSB = 2
#: ``max |GELU_tanh(v) - GELU_erf(v)|`` in real units (4.73e-4, near ``v = 2.70``), rounded
#: up: what the integer GELU (erf form) adds to its bound where the model asked for tanh.
TANH_GELU_GAP = 4.8e-4
#: Float ops that act element by element (with scalar constants) and may sit in a GELU.
_ELEMENTWISE = frozenset({"Add", "Sub", "Mul", "Div", "Pow", "Erf", "Tanh", "Gelu",
                          "Identity", "Sqrt", "Relu"})
_INTEGER_LAYERS = (g.Conv, g.Dense, g.MatMul, g.Add, g.MaxPool, g.AveragePool,
                   g.GlobalAveragePool, g.Flatten, g.Reshape, g.IntSoftmax, g.IntLayerNorm,
                   g.IntGelu)
_erf = np.vectorize(math.erf, otypes=[np.float64])


class _Refused(Exception):
    """Why a nonlinearity keeps its ORT-compatible form."""


class _Graph:
    """Producer and consumers of every tensor of a layer list."""

    def __init__(self, layers, outputs, quantized_args=None):
        self.layers = layers
        self.quantized_args = quantized_args or {}
        self.outputs = outputs
        self.producer = {layer.output: layer for layer in layers}
        self.consumers = {}
        for layer in layers:
            for name in layer.inputs:
                self.consumers.setdefault(name, []).append(layer)

    def only_quantized(self, layer):
        """The one Quantize that reads ``layer``'s output, or a _Refused saying why not."""
        readers = self.consumers.get(layer.output, [])
        if layer.output in self.outputs:
            raise _Refused(f"its output {layer.output!r} is a model output (float)")
        if len(readers) != 1 or not isinstance(readers[0], g.Quantize):
            kinds = ", ".join(r.op for r in readers) or "nothing"
            raise _Refused(f"its output is read by {kinds}, not by one QuantizeLinear "
                           f"alone (an output that is not quantized)")
        return readers[0]

    def dequantized_input(self, layer, name):
        """The Dequantize layer producing ``name``, or a _Refused saying why not."""
        source = self.producer.get(name)
        if not isinstance(source, g.Dequantize):
            what = "a model input" if source is None else f"{source.op} {source.name!r}"
            raise _Refused(f"its input {name!r} comes from {what}, not from a "
                           f"DequantizeLinear (an input that is not quantized)")
        return source


def _tensor_args(layer):
    """The FloatOp's constant arguments (arrays), for the scalar check."""
    return [a for a in layer.args if a is not None and not isinstance(a, int)]


def _is_scalar_elementwise(layer):
    return (isinstance(layer, g.FloatOp) and layer.op_type in _ELEMENTWISE
            and all(np.size(a) == 1 for a in _tensor_args(layer)))


def _softmax(graph, layer):
    name = layer.inputs[0]
    if isinstance(layer, g.FloatOp):
        opset = layer.opset
        axis = int(layer.attrs.get("axis", -1 if opset >= 13 else 1))
        coerce = opset < 13
    else:
        axis, coerce = layer.axis, layer.coerce_2d
    dq = graph.dequantized_input(layer, name)
    q = graph.only_quantized(layer)
    try:
        params = intonly.softmax_params(dq.scale, q.scale, q.zero_point, out_dtype="int8")
    except ValueError as exc:
        raise _Refused(str(exc)) from None
    new = g.IntSoftmax(layer.name, (dq.inputs[0],), q.output, axis=axis, coerce_2d=coerce,
                       params=params, x_scale=dq.scale, y_scale=q.scale)
    why = (f"integer-only mode: models.intonly.softmax replaces DequantizeLinear -> Softmax "
           f"-> QuantizeLinear (within {intonly.softmax_error_bound(1, q.scale):.2f} LSB of "
           f"the float softmax on short rows)")
    return new, q, {layer, q, dq}, why


def _layernorm(graph, layer):
    if len(layer.inputs) != 1 or layer.args[0] != 0:
        raise _Refused("its input X is not a tensor of the run, or it reads several")
    gamma = layer.args[1] if len(layer.args) > 1 else None
    beta = layer.args[2] if len(layer.args) > 2 else None
    if gamma is None or isinstance(gamma, int) or (beta is not None and isinstance(beta, int)):
        raise _Refused("gamma and beta must be constants")
    gamma = np.asarray(gamma, np.float64)
    beta = np.zeros_like(gamma) if beta is None else np.asarray(beta, np.float64)
    if gamma.ndim != 1 or beta.shape != gamma.shape:
        raise _Refused(f"gamma {list(gamma.shape)} and beta {list(beta.shape)} must be 1-D "
                       f"and equal: the integer LayerNorm normalizes one (the last) axis")
    axis = int(layer.attrs.get("axis", -1))
    if axis != -1:
        raise _Refused(f"axis={axis}; the integer LayerNorm normalizes the last axis "
                       f"(axis=-1) only")
    dq = graph.dequantized_input(layer, layer.inputs[0])
    q = graph.only_quantized(layer)
    eps = float(layer.attrs.get("epsilon", 1e-5))
    try:
        params = intonly.layernorm_params(dq.scale, gamma, beta, q.scale, q.zero_point, eps)
    except ValueError as exc:
        raise _Refused(str(exc)) from None
    new = g.IntLayerNorm(layer.name, (dq.inputs[0],), q.output, params=params,
                         x_scale=dq.scale, y_scale=q.scale)
    bound = intonly.layernorm_error_bound(gamma, q.scale)
    why = (f"integer-only mode: models.intonly.layernorm replaces DequantizeLinear -> "
           f"LayerNormalization -> QuantizeLinear (within {bound:.3f} LSB of the float op)")
    return new, q, {layer, q, dq}, why


def _gelu_entry(graph, seed):
    """(int8 input tensor, the layers from it to ``seed``) of a GELU region, traced back."""
    region, entries, stack = {seed}, set(), [seed]
    while stack:
        layer = stack.pop()
        for name in layer.inputs:
            source = graph.producer.get(name)
            if _is_scalar_elementwise(source):
                if source not in region:
                    region.add(source)
                    stack.append(source)
                continue
            if not isinstance(source, g.Dequantize):
                what = "a model input" if source is None else f"{source.op} {source.name!r}"
                raise _Refused(f"the GELU region reads {name!r} from {what}, not from an "
                               f"int8 tensor (an input that is not quantized)")
            region.add(source)
            q = graph.producer.get(source.inputs[0])
            if isinstance(q, g.Quantize) and _is_scalar_elementwise(
                    graph.producer.get(q.inputs[0])):
                region.add(q)  # a Q/DQ pair inside the region: keep tracing back
                stack.append(q)
            else:
                entries.add(source.inputs[0])
    if len(entries) != 1:
        raise _Refused(f"the region around {seed.op} reads {len(entries)} int8 tensors "
                       f"({', '.join(sorted(entries))}), not one")
    return entries.pop()


def _run_region(layer, env):
    if isinstance(layer, g.Quantize):
        return quantize(env[layer.inputs[0]], layer.scale, layer.zero_point)
    if isinstance(layer, g.Dequantize):
        return dequantize(env[layer.inputs[0]], layer.scale, layer.zero_point)
    args = [env[layer.inputs[a]] if isinstance(a, int) else a for a in layer.args]
    return float_op(layer.op_type, args, layer.attrs, layer.opset)


def _gelu(graph, seed):
    x = _gelu_entry(graph, seed)
    # Forward: every element-wise layer computed from x alone, in order; which of them
    # depend on the seed.
    pure, after_seed, chain = {x}, {seed.output}, []
    for layer in graph.layers:
        if not (_is_scalar_elementwise(layer) or isinstance(layer, (g.Quantize, g.Dequantize))):
            continue
        if not layer.inputs or not all(name in pure for name in layer.inputs):
            continue
        pure.add(layer.output)
        chain.append(layer)
        if any(name in after_seed for name in layer.inputs):
            after_seed.add(layer.output)
    dq = next((layer for layer in chain if isinstance(layer, g.Dequantize)
               and layer.inputs[0] == x), None)
    codes = np.arange(-128, 128, dtype=np.int8)
    env = {x: codes}
    try:
        # A region that is not a GELU may overflow or divide by zero on some code: that
        # only makes it fail the comparison below.
        with np.errstate(all="ignore"):
            for layer in chain:
                env[layer.output] = _run_region(layer, env)
    except ValueError as exc:
        raise _Refused(f"the region from {x!r} through {seed.op} cannot be evaluated on the "
                       f"256 codes: {exc}") from None
    real = dequantize(codes, dq.scale, dq.zero_point).astype(np.float64)
    exact = real / 2 * (1 + _erf(real / math.sqrt(2)))
    worst = []
    for q in chain:
        if not (isinstance(q, g.Quantize) and q.output in after_seed):
            continue
        got = np.asarray(env[q.output]).reshape(-1).astype(np.int64)
        if got.size != codes.size:
            continue
        want = np.clip(np.rint(exact / q.scale) + q.zero_point, -128, 127)
        distance = float(np.abs(got - want).max())
        if distance > GELU_MATCH_LSB:
            worst.append(f"{q.output!r} {distance:.0f}")
            continue
        return _make_gelu(graph, seed, x, dq, q, chain, distance)
    raise _Refused(f"no int8 tensor computed from {x!r} through {seed.op} is a GELU of it: "
                   f"largest distances from GELU over the 256 codes, in LSB: "
                   f"{', '.join(worst) or 'none'} (at most {GELU_MATCH_LSB} needed)")


def _make_gelu(graph, seed, x, dq, q, chain, distance):
    try:
        params = intonly.gelu_params(dq.scale, dq.zero_point, q.scale, q.zero_point)
    except ValueError as exc:
        raise _Refused(str(exc)) from None
    # The region: the chain's layers that the output depends on.
    needed, region = {q.output}, []
    for layer in reversed(chain):
        if layer.output in needed:
            region.append(layer)
            needed.update(layer.inputs)
    region.reverse()
    ops = {layer.op_type for layer in region if isinstance(layer, g.FloatOp)}
    if seed.op_type == "Gelu":
        form = "Gelu(tanh)" if seed.attrs.get("approximate", "none") == "tanh" else "Gelu"
    else:
        form = "erf" if "Erf" in ops else "tanh"
    nodes = tuple(layer.name for layer in region if isinstance(layer, g.FloatOp))
    producer = graph.producer[q.inputs[0]]
    new = g.IntGelu(producer.name, (x,), q.output, params=params, form=form, nodes=nodes,
                    x_scale=dq.scale, y_scale=q.scale)
    # The largest real input is at most 255 steps from the zero point.
    bound = intonly.gelu_error_bound(q.scale, dq.scale * 255)
    if "tanh" in form:
        bound += TANH_GELU_GAP / q.scale  # the model asked for the tanh approximation
    why = (f"integer-only mode: models.intonly.gelu replaces the GELU ({form} form: "
           f"{', '.join(nodes)}) between int8 {x!r} and {q.output!r} (within {bound:.2f} "
           f"LSB of the model's float GELU; the ORT-compatible region was {distance:.0f} "
           f"LSB from it at worst over the 256 codes)")
    return new, q, set(region), why


def _residual_add(graph, layer):
    """``DequantizeLinear(a) + DequantizeLinear(b) -> QuantizeLinear``: the integer
    :class:`~sw_driver.graph.Add` of :func:`models.eltwise.add` (the CNN residual add)."""
    if len(layer.args) != 2:
        raise _Refused(f"Add with {len(layer.args)} operands")
    tensors = [i for i, a in enumerate(layer.args) if isinstance(a, int)]
    if not tensors:
        raise _Refused("both operands are constants")
    dqs = [graph.dequantized_input(layer, layer.inputs[layer.args[i]]) for i in tensors]
    q = graph.only_quantized(layer)
    constant = None
    if len(tensors) == 1:
        # tensor + constant (a bias): the constant's own int8 codes, as the importer read
        # them (graph.quantized_args), become the integer Add's second operand.
        position = 1 - tensors[0]
        const = graph.quantized_args.get(layer.name, {}).get(position)
        if const is None:
            raise _Refused("its constant operand is not a DequantizeLinear of an int8 "
                           "initializer")
        if const.values.dtype != np.int8 or np.size(const.scale) != 1:
            raise _Refused(f"its constant operand is {const.values.dtype} with "
                           f"{np.size(const.scale)} scales; the integer add takes int8 with "
                           f"one scale")
        constant = const.values
        b_scale = float(np.float32(np.reshape(const.scale, ())))
        b_zp = int(np.reshape(const.zero_point, ()))
        a = dqs[0]
        inputs = (a.inputs[0],)
        what = "a tensor and an int8 constant"
    else:
        a, b = dqs
        b_scale, b_zp = b.scale, b.zero_point
        inputs = (a.inputs[0], b.inputs[0])
        what = "two int8 tensors"
    try:
        add_multipliers(a.scale, b_scale, q.scale)
    except ValueError as exc:
        raise _Refused(f"its scales cannot be represented by the integer add: {exc}") from None
    new = g.Add(layer.name, inputs, q.output, a_scale=a.scale, a_zero_point=a.zero_point,
                b_scale=b_scale, b_zero_point=b_zp, y_scale=q.scale,
                y_zero_point=q.zero_point, constant=constant)
    why = (f"integer-only mode: models.eltwise.add (the integer residual add) replaces "
           f"DequantizeLinear -> Add -> QuantizeLinear of {what}")
    return new, q, {layer, q, *dqs}, why


def _scalar_scale(graph, layer):
    """``DequantizeLinear(x) * c`` or ``/ c`` with a positive scalar constant ``c`` ->
    QuantizeLinear: a requantization of ``x`` to the new scale, run as the integer add of
    ``x`` at scale ``s_x * c`` and a zero constant (one rounding, as the adder computes)."""
    if len(layer.args) != 2:
        raise _Refused(f"{layer.op_type} with {len(layer.args)} operands")
    tensors = [i for i, a in enumerate(layer.args) if isinstance(a, int)]
    if len(tensors) != 1 or (layer.op_type == "Div" and tensors != [0]):
        raise _Refused(f"it is not an int8 tensor {layer.op_type} a scalar constant")
    c = layer.args[1 - tensors[0]]
    if np.size(c) != 1 or not np.isfinite(c).all() or float(np.reshape(c, ())) <= 0:
        raise _Refused(f"its constant is not one positive finite number (shape "
                       f"{list(np.shape(c))}): a sign flip or a per-element factor is not a "
                       f"requantization")
    c = float(np.float32(np.reshape(c, ())))
    dq = graph.dequantized_input(layer, layer.inputs[layer.args[tensors[0]]])
    q = graph.only_quantized(layer)
    scale = dq.scale * c if layer.op_type == "Mul" else dq.scale / c
    try:
        add_multipliers(scale, scale, q.scale)
    except ValueError as exc:
        raise _Refused(f"the factor {c!r} cannot be represented by the integer add: "
                       f"{exc}") from None
    new = g.Add(layer.name, (dq.inputs[0],), q.output, a_scale=scale,
                a_zero_point=dq.zero_point, b_scale=scale, b_zero_point=0, y_scale=q.scale,
                y_zero_point=q.zero_point, constant=np.zeros((), np.int8))
    why = (f"integer-only mode: {layer.op_type} by {c!r} is a requantization, run as "
           f"models.eltwise.add of the input at scale s_x {'*' if layer.op_type == 'Mul' else '/'}"
           f" {c!r} and a zero constant")
    return new, q, {layer, q, dq}, why


def _kind(candidate, phase):
    """The rewrite to try on ``candidate`` in ``phase`` (0: the nonlinearities, 1: the
    element-wise Add/Mul/Div, after them so that a GELU's inner Mul and Add are matched as
    part of the GELU first), or None."""
    if isinstance(candidate, g.Softmax) and phase == 0:
        return _softmax
    if not isinstance(candidate, g.FloatOp):
        return None
    kinds = ({"Softmax": _softmax, "LayerNormalization": _layernorm, "Erf": _gelu,
              "Tanh": _gelu, "Gelu": _gelu},
             {"Add": _residual_add, "Mul": _scalar_scale, "Div": _scalar_scale})[phase]
    return kinds.get(candidate.op_type)


def _integer_rewrite(graph, quantized_args=None):
    """Replace what can be replaced; returns ({layer name: why}, {layer name: refusal})."""
    made, refused = {}, {}
    layers = list(graph.layers)
    outputs = {o.name for o in graph.outputs}
    for phase in (0, 1):
        for candidate in list(layers):
            kind = _kind(candidate, phase)
            if kind is None or candidate not in layers:
                continue
            view = _Graph(layers, outputs, quantized_args)
            try:
                new, replaced, region, why = kind(view, candidate)
            except _Refused as exc:
                refused[candidate.name] = str(exc)
                continue
            layers[layers.index(replaced)] = new
            layers = _drop_dead(layers, region, outputs)
            if any(layer.name == new.name for layer in layers if layer is not new):
                # The float layer it is named after is still read elsewhere: names stay
                # unique.
                new.name = f"{new.name}:integer"
            made[new.name] = why
    graph.layers[:] = layers
    return made, refused


def _drop_dead(layers, removable, outputs):
    """``layers`` less those of ``removable`` that nothing reads any more."""
    while True:
        read = {name for layer in layers for name in layer.inputs} | outputs
        dead = [layer for layer in layers if layer in removable and layer.output not in read]
        if not dead:
            return layers
        layers = [layer for layer in layers if layer not in dead]


def _label(graph, layer, view, mode):
    """``(semantics, why)`` of a layer that was not replaced."""
    if isinstance(layer, _INTEGER_LAYERS):
        return "integer-only", "integer layer: the integer contract (docs/semantics.md)"
    if isinstance(layer, (g.Quantize, g.Dequantize)):
        what = "QuantizeLinear" if isinstance(layer, g.Quantize) else "DequantizeLinear"
        return "ort-compatible", f"{what} as onnxruntime computes it"
    op = layer.op
    float_inputs = [name for name in layer.inputs
                    if not isinstance(view.producer.get(name), g.Dequantize)]
    readers = view.consumers.get(layer.output, [])
    quantized_out = (layer.output not in view.outputs and readers
                     and all(isinstance(r, g.Quantize) for r in readers))
    if float_inputs or not quantized_out or not layer.inputs:
        which = (f"input {float_inputs[0]!r}" if float_inputs
                 else f"output {layer.output!r}" if layer.inputs else "its value")
        return "float", f"float32 {op}: {which} is not quantized in the model"
    if mode == "integer":
        why = f"dequantize -> float32 {op} -> quantize: no integer-only form of {op}"
    else:
        why = (f"dequantize -> float32 {op} -> quantize, as onnxruntime's QDQ graph "
               f"(sequence_mode='ort')")
    return "ort-compatible", why


def apply_sequence_mode(graph, mode="ort", quantized_args=None):
    """Give ``graph`` the semantics of ``mode`` and label every layer; returns ``graph``.

    Only sequence graphs (with a float op or an activation x activation MatMul) are
    labelled: a CNN's ``Graph.semantics`` stays empty, its layers being integer in either
    mode.

    Parameters
    ----------
    graph : sw_driver.graph.Graph
        As the importer made it (ORT-compatible); changed in place.
    mode : {"ort", "integer"}
    quantized_args : dict, optional
        FloatOp name -> {argument position: the importer's constant with ``values`` (int8
        codes), ``scale``, ``zero_point``}: the int8 form of the constants a float op reads
        dequantized, which the integer Add of a bias needs.

    Raises
    ------
    ValueError
        An unknown mode.
    """
    if mode not in SEQUENCE_MODES:
        raise ValueError(f"sequence_mode must be one of {', '.join(map(repr, SEQUENCE_MODES))}, "
                         f"not {mode!r}")
    made, refused = (_integer_rewrite(graph, quantized_args) if mode == "integer"
                     else ({}, {}))
    graph.sequence_mode = mode
    if not any(isinstance(layer, (g.FloatOp, g.MatMul)) for layer in graph.layers):
        # A CNN: every layer follows the integer contract in either mode, and its
        # profile stays as it was (a final float Softmax is the model's own output).
        graph.semantics = {}
        return graph
    view = _Graph(graph.layers, {o.name for o in graph.outputs})
    semantics = {}
    for layer in graph.layers:
        if layer.name in made:
            semantics[layer.name] = ("integer-only", made[layer.name])
            continue
        kind, why = _label(graph, layer, view, mode)
        if layer.name in refused:
            why = f"not integer-only: {refused[layer.name]}; {why}"
        semantics[layer.name] = (kind, why)
    graph.semantics = semantics
    return graph
