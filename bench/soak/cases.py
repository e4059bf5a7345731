"""Random layer configurations for the soak: one pure function of ``(seed, index)``.

:func:`draw_case` returns a :class:`SoakCase`: a :mod:`sw_driver.graph` layer whose integer
fields are derived from float32 scales exactly as :mod:`sw_driver.importer` derives them
(``quantize_multiplier(s_x * s_w[c] / s_y)`` in float64, ``activation_range`` for a fused
ReLU/ReLU6, pass-through parameters for MaxPool, float scales kept for the pools and Add),
its int8 inputs, and the float quantization parameters the one-node ONNX QDQ model needs.
The same ``(seed, index)`` always gives the same case, so any case is reproduced alone.

What is drawn (see :data:`KIND_WEIGHTS` and :data:`SIZE_CLASSES`): Conv with kernels 1-7
(square and not), strides 1-2 (unequal too), ONNX pads (symmetric, asymmetric, none),
dilation 1-3, groups 1, grouped and depthwise (multiplier 1 or 2), 1-64 channels and 1-32
pixel sides, mostly small; Dense
(Gemm with bias, MatMul without, 2-D and 3-D inputs); MaxPool and AveragePool (2x2, 3x3,
rectangular windows, strides 1-3, pads smaller than the window, ``count_include_pad``
both ways, output scale equal to the input's or not); GlobalAveragePool; Add of two
tensors or a tensor and an int8 constant, broadcast or not. Zero points are drawn from the
whole int8 range with extra weight on -128 and 127, and output scales from "most outputs
in range" to "most outputs clip" (saturation).
"""

from dataclasses import dataclass, field

import numpy as np

from models.conv import conv_output_size
from models.eltwise import add_multipliers
from models.pool import avg_pool_multipliers
from models.requant import activation_range, quantize_multiplier
from sw_driver import graph as g

__all__ = ["KINDS", "KIND_WEIGHTS", "Quantization", "SoakCase", "draw_case"]

#: Soak kinds and how often each is drawn.
KIND_WEIGHTS = {
    "Conv": 0.30,
    "DepthwiseConv": 0.12,
    "GroupedConv": 0.06,
    "Dense": 0.14,
    "MaxPool": 0.09,
    "AveragePool": 0.13,
    "GlobalAveragePool": 0.06,
    "Add": 0.10,
}
KINDS = tuple(KIND_WEIGHTS)

#: (share of cases, most channels, longest image side, most products per Conv output):
#: mostly small layers, some that need several column tiles or passes on the 8x8 engine.
#: Share of Conv and Dense cases whose scales are all powers of two: the requantization
#: multiplier is then exactly ``2**-k`` and a rounding tie is common, as in the pools.
POWER_OF_TWO_SHARE = 0.15
SIZE_CLASSES = ((0.60, 24, 15, 1200), (0.30, 48, 28, 1600), (0.10, 80, 40, 1000))


@dataclass(frozen=True)
class Quantization:
    """The float parameters of the one-node QDQ model around the layer.

    Attributes
    ----------
    x, y : (float, int)
        Scale (a float32 value) and zero point of the input and the output.
    b : (float, int) or None
        The second operand of an Add.
    w : numpy.ndarray of float32 or None
        Per-output-channel weight scales of a Conv or Dense.
    activation : None, "relu" or "relu6"
        The Relu or Clip(0, 6) between the operator and its QuantizeLinear.
    op : str
        The ONNX operator: Conv, Gemm, MatMul, MaxPool, AveragePool, GlobalAveragePool, Add.
    """

    x: tuple
    y: tuple
    op: str
    b: tuple = None
    w: np.ndarray = None
    activation: str = None


@dataclass(frozen=True, eq=False)
class SoakCase:
    """One soak configuration: the layer, its inputs and its QDQ parameters.

    Attributes
    ----------
    seed, index : int
        The case is ``draw_case(seed, index)``.
    kind : str
        One of :data:`KINDS` (finer than ``layer.op``: depthwise and grouped Conv apart).
    layer : sw_driver.graph.Layer
        Named ``soak_<index>``, inputs ``x`` (and ``b`` for a two-input Add), output ``y``.
    inputs : tuple of numpy.ndarray of int8
    quant : Quantization
    """

    seed: int
    index: int
    kind: str
    layer: g.Layer
    inputs: tuple
    quant: Quantization
    notes: dict = field(default_factory=dict)

    @property
    def description(self):
        """The configuration on one line."""
        shapes = " + ".join("x".join(map(str, x.shape)) for x in self.inputs)
        details = ", ".join(f"{key} {value}" for key, value in self.notes.items())
        return f"{self.kind} on {shapes}: {details}"


# ---------------------------------------------------------------- value helpers

def _zero_point(rng, at_each_end=0.15):
    """int8 zero point, with extra weight on both ends of the range."""
    pick = rng.random()
    if pick < at_each_end:
        return -128
    if pick < 2 * at_each_end:
        return 127
    return int(rng.integers(-128, 128))


def _output_zero_point(rng, activation=None):
    """Like :func:`_zero_point`, less often at the ends: an output zero point of 127 clips
    every positive result, which tests the clamp but hides the rounding. After a ReLU it is
    usually -128 (what ``quantize_static`` writes) and never 127 (all outputs at 127)."""
    if activation is None:
        return _zero_point(rng, at_each_end=0.08)
    return -128 if rng.random() < 0.5 else int(rng.integers(-128, 100))


def _log_uniform(rng, low, high, size=None):
    return np.exp(rng.uniform(np.log(low), np.log(high), size))


def _scale(rng, low, high):
    """A float32 scale (as a Python float, exact), log-uniform in ``[low, high]``."""
    return float(np.float32(_log_uniform(rng, low, high)))


def _int8(rng, shape):
    """int8 data: usually the whole range, sometimes only the extremes or a narrow band."""
    pick = rng.random()
    if pick < 0.1:
        return rng.choice(np.array([-128, 127], np.int8), size=shape)
    if pick < 0.2:
        centre = int(rng.integers(-128, 128))
        return np.clip(rng.integers(centre - 3, centre + 4, size=shape), -128, 127) \
            .astype(np.int8)
    return rng.integers(-128, 128, size=shape, dtype=np.int8)


def _activation(rng):
    pick = rng.random()
    return None if pick < 0.5 else "relu" if pick < 0.8 else "relu6"


def _output_target(rng):
    """The output spread in LSB: mostly within range, sometimes far beyond (saturation)."""
    if rng.random() < 0.08:
        return float(_log_uniform(rng, 300.0, 5000.0))
    return float(_log_uniform(rng, 1.0, 200.0))


def _spread(x, zero_point):
    """Root mean square of ``x - zero_point`` (at least 1)."""
    return max(1.0, float(np.sqrt(np.mean((x.astype(np.float64) - zero_point) ** 2))))


def _pads(rng, span_h, span_w):
    """ONNX pads (top, left, bottom, right) for windows spanning ``span_h x span_w``."""
    pick = rng.random()
    if pick < 0.25:
        return (0, 0, 0, 0)
    if pick < 0.55:
        ph, pw = (span_h - 1) // 2, (span_w - 1) // 2
        return (ph, pw, span_h - 1 - ph, span_w - 1 - pw)  # "same" for stride 1
    return tuple(int(rng.integers(0, span)) for span in (span_h, span_w, span_h, span_w))


def _size_class(rng):
    """(most channels, longest side, most products per output) for this case."""
    shares = np.array([size[0] for size in SIZE_CLASSES])
    return SIZE_CLASSES[int(rng.choice(len(SIZE_CLASSES), p=shares / shares.sum()))][1:]


def _side(rng, span, pad_begin, pad_end, stride, longest):
    """A pixel count in 1..longest for which the window fits at least once."""
    least = max(1, span - pad_begin - pad_end)
    side = int(rng.integers(1, longest + 1))
    return max(side, least) if conv_output_size(side, span, stride, pad_begin, pad_end) < 1 \
        else side


def _batch(rng):
    return 1 if rng.random() < 0.8 else 2


# ---------------------------------------------------------------- requantized layers

def _power_of_two(value):
    """The power of two nearest to ``value`` (on a log scale)."""
    return float(2.0 ** np.round(np.log2(value)))


def _weights_and_scales(rng, shape, power_of_two):
    """int8 weights, symmetric per output channel, and their float32 scales (one power of
    two for the whole tensor with ``power_of_two``)."""
    weight = _int8(rng, shape)
    if power_of_two:
        w_scale = np.full(shape[0], _power_of_two(_log_uniform(rng, 1e-3, 0.1)), np.float32)
    elif rng.random() < 0.3:
        w_scale = np.full(shape[0], _scale(rng, 1e-3, 0.1), np.float32)
    else:
        w_scale = (_log_uniform(rng, 1e-3, 0.1, shape[0])).astype(np.float32)
    return weight, w_scale


def _bias(rng, channels, reach):
    """int32 bias in the accumulator's units, about ``reach`` in size (or none)."""
    if rng.random() < 0.15:
        return np.zeros(channels, np.int32), False
    spread = float(_log_uniform(rng, 0.01, 3.0))
    return np.rint(rng.standard_normal(channels) * reach * spread).astype(np.int32), True


def _scales(rng, activation, unit, power_of_two=False):
    """(input scale, output scale, output zero point) for outputs spread over about
    :func:`_output_target` LSB, where the real output spread is ``unit * input scale``.

    For a ReLU6 the output scale comes first (``6 / s_y`` is 8 to 255 LSB, as calibration
    on real data gives) and the input scale follows, so that the clip at 6 lies among the
    outputs rather than far beyond or below them all. With ``power_of_two`` (not with a
    ReLU6) both scales are powers of two, so the requantization multiplier is one too and
    rounding ties are frequent.
    """
    target = _output_target(rng)
    if activation == "relu6":
        y_scale = 6.0 / float(_log_uniform(rng, 8.0, 255.0))
        x_scale = target * y_scale / unit
    elif power_of_two:
        x_scale = _power_of_two(_log_uniform(rng, 1e-3, 0.5))
        y_scale = _power_of_two(unit * x_scale / target)
    else:
        x_scale = _scale(rng, 1e-3, 0.5)
        y_scale = unit * x_scale / target
    return (float(np.float32(x_scale)), float(np.float32(y_scale)),
            _output_zero_point(rng, activation))


def _requant_fields(rng, x, x_zp, weight, w_scale, products, power_of_two):
    """The fields :class:`sw_driver.graph.Requantized` layers share, as the importer fills
    them, plus the input and output parameters and the activation."""
    reach = _spread(x, x_zp) * _spread(weight, 0) * np.sqrt(products)
    bias, has_bias = _bias(rng, weight.shape[0], reach)
    activation = _activation(rng)
    x_scale, y_scale, y_zp = _scales(
        rng, activation, reach * float(np.median(w_scale.astype(np.float64))), power_of_two)
    lo, hi = activation_range(activation, y_zp, y_scale)
    # sw_driver.importer._Importer.requant: float64 of the float32 scales.
    real = np.float64(x_scale) * w_scale.astype(np.float64) / np.float64(y_scale)
    multiplier, shift = quantize_multiplier(real)
    fields = {"weight": weight, "bias": bias, "x_zero_point": x_zp, "multiplier": multiplier,
              "shift": shift, "y_zero_point": y_zp, "lo": lo, "hi": hi}
    notes = {"zx": x_zp, "zy": y_zp, "act": activation or "none",
             "bias": "yes" if has_bias else "none",
             "scales": "powers of two" if power_of_two and activation != "relu6" else "any"}
    return fields, (x_scale, x_zp), (y_scale, y_zp), activation, notes


def _conv(rng, seed, index, kind):
    kh = int(rng.integers(1, 8))
    kw = kh if rng.random() < 0.75 else int(rng.integers(1, 8))
    sh = int(rng.integers(1, 3))
    sw = sh if rng.random() < 0.85 else 3 - sh
    dh, dw = (1, 1) if rng.random() < 0.8 else tuple(int(d) for d in rng.integers(1, 4, 2))
    span_h, span_w = dh * (kh - 1) + 1, dw * (kw - 1) + 1
    top, left, bottom, right = _pads(rng, span_h, span_w)
    channels, longest, products = _size_class(rng)
    if kind == "Conv":
        groups = 1
        c = int(rng.integers(1, min(channels, max(1, products // (kh * kw))) + 1))
        o = int(rng.integers(1, channels + 1))
    elif kind == "DepthwiseConv":
        c = int(rng.integers(1, channels + 1))
        groups, o = c, c if rng.random() < 0.8 else 2 * c
    else:
        groups = int(rng.integers(2, 5))
        per_group = max(1, min(channels // groups, products // (kh * kw)))
        c = groups * int(rng.integers(1, per_group + 1))
        o = groups * int(rng.integers(1, max(1, channels // groups) + 1))
    h = _side(rng, span_h, top, bottom, sh, longest)
    w = _side(rng, span_w, left, right, sw, longest)
    x_zp = _zero_point(rng)
    x = _int8(rng, (_batch(rng), c, h, w))
    power_of_two = bool(rng.random() < POWER_OF_TWO_SHARE)
    weight, w_scale = _weights_and_scales(rng, (o, c // groups, kh, kw), power_of_two)
    fields, x_q, y_q, activation, notes = _requant_fields(
        rng, x, x_zp, weight, w_scale, (c // groups) * kh * kw, power_of_two)
    layer = g.Conv(f"soak_{index}", ("x",), "y", stride=(sh, sw),
                   padding=(top, left, bottom, right), dilation=(dh, dw), groups=groups,
                   **fields)
    notes = {"O": o, "k": f"{kh}x{kw}", "stride": (sh, sw), "pads": layer.padding,
             "dilation": (dh, dw), "groups": groups, **notes}
    quant = Quantization(x=x_q, y=y_q, op="Conv", w=w_scale, activation=activation)
    return SoakCase(seed, index, kind, layer, (x,), quant, notes)


def _dense(rng, seed, index, kind):
    channels, _, products = _size_class(rng)
    k = int(rng.integers(1, products + 1))
    o = int(rng.integers(1, 2 * channels + 1))
    op = "Gemm" if rng.random() < 0.7 else "MatMul"
    lead = (int(rng.integers(1, channels // 2 + 1)),)
    if op == "MatMul" and rng.random() < 0.3:
        lead = (int(rng.integers(1, 4)), int(rng.integers(1, 5)))
    x_zp = _zero_point(rng)
    x = _int8(rng, (*lead, k))
    power_of_two = bool(rng.random() < POWER_OF_TWO_SHARE)
    weight, w_scale = _weights_and_scales(rng, (o, k), power_of_two)
    fields, x_q, y_q, activation, notes = _requant_fields(rng, x, x_zp, weight, w_scale, k,
                                                          power_of_two)
    if op == "MatMul":  # the importer gives a MatMul a zero bias
        fields["bias"] = np.zeros(o, np.int32)
        notes["bias"] = "none"
    layer = g.Dense(f"soak_{index}", ("x",), "y", **fields)
    quant = Quantization(x=x_q, y=y_q, op=op, w=w_scale, activation=activation)
    return SoakCase(seed, index, kind, layer, (x,), quant, {"op": op, "O": o, **notes})


# ---------------------------------------------------------------- pools

def _window(rng, square_kernels):
    pick = rng.random()
    if pick < square_kernels:
        k = 2 if rng.random() < 0.5 else 3
        kh = kw = k
    else:
        kh, kw = (int(v) for v in rng.integers(1, 6, 2))
    if rng.random() < 0.5:
        sh, sw = kh, kw
    else:
        sh, sw = (int(v) for v in rng.integers(1, 4, 2))
    if rng.random() < 0.5:
        pads = (0, 0, 0, 0)
    else:  # every pad smaller than the window, as ONNX and the golden models require
        pads = tuple(int(rng.integers(0, k)) for k in (kh, kw, kh, kw))
    return (kh, kw), (sh, sw), pads


def _pool_input(rng, kernel, stride, pads):
    (kh, kw), (sh, sw), (top, left, bottom, right) = kernel, stride, pads
    channels, longest, _ = _size_class(rng)
    h = _side(rng, kh, top, bottom, sh, longest)
    w = _side(rng, kw, left, right, sw, longest)
    return _int8(rng, (_batch(rng), int(rng.integers(1, channels + 1)), h, w))


def _averaging_output(rng, x_q, counts):
    """Output (scale, zero point) of an average: often the input's own (what
    ``quantize_static`` writes, and where ties are most common), else a different scale,
    sometimes small enough to clip."""
    x_scale, x_zp = x_q
    pick = rng.random()
    if pick < 0.45:
        y_q = x_q
    elif pick < 0.85:
        y_q = (float(np.float32(x_scale * _log_uniform(rng, 0.25, 4.0))),
               _output_zero_point(rng))
    else:
        y_q = (float(np.float32(x_scale / _log_uniform(rng, 4.0, 64.0))),
               _output_zero_point(rng))
    avg_pool_multipliers(x_q[0], y_q[0], counts)  # as the importer checks it
    return y_q


def _max_pool(rng, seed, index, kind):
    kernel, stride, pads = _window(rng, 0.5)
    x = _pool_input(rng, kernel, stride, pads)
    x_q = (_scale(rng, 1e-3, 0.5), _zero_point(rng))
    layer = g.MaxPool(f"soak_{index}", ("x",), "y", kernel=kernel, stride=stride,
                      padding=pads)
    notes = {"k": kernel, "stride": stride, "pads": pads, "zx": x_q[1]}
    return SoakCase(seed, index, kind, layer, (x,), Quantization(x=x_q, y=x_q, op="MaxPool"),
                    notes)


def _average_pool(rng, seed, index, kind):
    kernel, stride, pads = _window(rng, 0.7)
    x = _pool_input(rng, kernel, stride, pads)
    x_q = (_scale(rng, 1e-3, 0.5), _zero_point(rng))
    count_include_pad = bool(rng.random() < 0.5)
    y_q = _averaging_output(rng, x_q, np.arange(1, kernel[0] * kernel[1] + 1))
    layer = g.AveragePool(f"soak_{index}", ("x",), "y", kernel=kernel, stride=stride,
                          padding=pads, count_include_pad=count_include_pad,
                          x_scale=x_q[0], x_zero_point=x_q[1], y_scale=y_q[0],
                          y_zero_point=y_q[1])
    notes = {"k": kernel, "stride": stride, "pads": pads,
             "count_include_pad": int(count_include_pad), "zx": x_q[1], "zy": y_q[1],
             "sy/sx": f"{y_q[0] / x_q[0]:.4g}"}
    quant = Quantization(x=x_q, y=y_q, op="AveragePool")
    return SoakCase(seed, index, kind, layer, (x,), quant, notes)


def _global_average_pool(rng, seed, index, kind):
    channels, longest, _ = _size_class(rng)
    h, w = (int(v) for v in rng.integers(1, longest + 1, 2))
    x = _int8(rng, (_batch(rng), int(rng.integers(1, channels + 1)), h, w))
    x_q = (_scale(rng, 1e-3, 0.5), _zero_point(rng))
    y_q = _averaging_output(rng, x_q, [h * w])
    layer = g.GlobalAveragePool(f"soak_{index}", ("x",), "y", x_scale=x_q[0],
                                x_zero_point=x_q[1], y_scale=y_q[0], y_zero_point=y_q[1])
    notes = {"zx": x_q[1], "zy": y_q[1], "sy/sx": f"{y_q[0] / x_q[0]:.4g}"}
    return SoakCase(seed, index, kind, layer, (x,),
                    Quantization(x=x_q, y=y_q, op="GlobalAveragePool"), notes)


# ---------------------------------------------------------------- add

def _add(rng, seed, index, kind):
    channels, longest, _ = _size_class(rng)
    n, c = _batch(rng), int(rng.integers(1, channels + 1))
    h, w = (int(v) for v in rng.integers(1, longest + 1, 2))
    a = _int8(rng, (n, c, h, w))
    a_zp, b_zp = _zero_point(rng), _zero_point(rng)
    ratio = float(_log_uniform(rng, 1 / 64, 64.0))  # b_scale / a_scale
    pick = rng.random()
    if pick < 0.7:
        b_shape, operand = (n, c, h, w), "tensor"
    elif pick < 0.8:
        b_shape, operand = (1, c, 1, 1), "tensor"
    else:
        b_shape = [(c, h, w), (c, 1, 1), (1,), (n, c, h, w)][int(rng.integers(0, 4))]
        operand = "constant"
    b = _int8(rng, b_shape)
    activation = _activation(rng)
    a_scale, y_scale, y_zp = _scales(
        rng, activation, float(np.hypot(_spread(a, a_zp), ratio * _spread(b, b_zp))))
    a_q, b_q, y_q = (a_scale, a_zp), (float(np.float32(a_scale * ratio)), b_zp), (y_scale, y_zp)
    add_multipliers(a_q[0], b_q[0], y_q[0])  # as the importer checks it
    lo, hi = activation_range(activation, y_q[1], y_q[0])
    constant = b if operand == "constant" else None
    layer = g.Add(f"soak_{index}", ("x",) if constant is not None else ("x", "b"), "y",
                  a_scale=a_q[0], a_zero_point=a_q[1], b_scale=b_q[0], b_zero_point=b_q[1],
                  y_scale=y_q[0], y_zero_point=y_q[1], lo=lo, hi=hi, constant=constant)
    inputs = (a,) if constant is not None else (a, b)
    notes = {"b": f"{operand} {'x'.join(map(str, b_shape))}", "za": a_q[1], "zb": b_q[1],
             "zy": y_q[1], "sb/sa": f"{b_q[0] / a_q[0]:.4g}", "act": activation or "none"}
    quant = Quantization(x=a_q, y=y_q, op="Add", b=b_q, activation=activation)
    return SoakCase(seed, index, kind, layer, inputs, quant, notes)


_DRAW = {
    "Conv": _conv,
    "DepthwiseConv": _conv,
    "GroupedConv": _conv,
    "Dense": _dense,
    "MaxPool": _max_pool,
    "AveragePool": _average_pool,
    "GlobalAveragePool": _global_average_pool,
    "Add": _add,
}
_PROBABILITIES = np.array(list(KIND_WEIGHTS.values())) / sum(KIND_WEIGHTS.values())


def draw_case(seed, index):
    """The soak configuration number ``index`` of run ``seed``.

    A pure function: its random generator is seeded with ``(seed, index)`` alone, so a case
    is reproduced without drawing the ones before it.

    Parameters
    ----------
    seed, index : int
        Non-negative.

    Returns
    -------
    SoakCase
    """
    for name, value in (("seed", seed), ("index", index)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
            raise ValueError(f"{name} must be a non-negative integer, not {value!r}")
    rng = np.random.default_rng([int(seed), int(index)])
    kind = KINDS[int(rng.choice(len(KINDS), p=_PROBABILITIES))]
    return _DRAW[kind](rng, int(seed), int(index), kind)
