"""Conv (regular, grouped, depthwise) and Dense soak cases, requantized per channel.

The integer fields are what :mod:`sw_driver.importer` makes of the same QDQ model:
``quantize_multiplier(s_x * s_w[c] / s_y)`` in float64 from float32 scales,
``activation_range`` for a fused ReLU/ReLU6, a zero bias for a MatMul.
"""

import numpy as np

from models.requant import activation_range, quantize_multiplier
from sw_driver import graph as g

from .case import Quantization, SoakCase
from .values import (
    POWER_OF_TWO_SHARE,
    draw_activation,
    draw_batch,
    draw_int8,
    draw_pads,
    draw_scale,
    draw_scales,
    draw_side,
    draw_size_class,
    draw_zero_point,
    log_uniform,
    nearest_power_of_two,
    rms_spread,
)

__all__ = ["draw_conv", "draw_dense"]


def _weights_and_scales(rng, shape, power_of_two):
    """int8 weights, symmetric per output channel, and their float32 scales (one power of
    two for the whole tensor with ``power_of_two``)."""
    weight = draw_int8(rng, shape)
    if power_of_two:
        w_scale = np.full(shape[0], nearest_power_of_two(log_uniform(rng, 1e-3, 0.1)), np.float32)
    elif rng.random() < 0.3:
        w_scale = np.full(shape[0], draw_scale(rng, 1e-3, 0.1), np.float32)
    else:
        w_scale = (log_uniform(rng, 1e-3, 0.1, shape[0])).astype(np.float32)
    return weight, w_scale


def _bias(rng, channels, reach):
    """int32 bias in the accumulator's units, about ``reach`` in size (or none)."""
    if rng.random() < 0.15:
        return np.zeros(channels, np.int32), False
    spread = float(log_uniform(rng, 0.01, 3.0))
    return np.rint(rng.standard_normal(channels) * reach * spread).astype(np.int32), True


def _requant_fields(rng, x, x_zp, weight, w_scale, products, power_of_two):
    """The fields :class:`sw_driver.graph.Requantized` layers share, as the importer fills
    them, plus the input and output parameters and the activation."""
    reach = rms_spread(x, x_zp) * rms_spread(weight, 0) * np.sqrt(products)
    bias, has_bias = _bias(rng, weight.shape[0], reach)
    activation = draw_activation(rng)
    x_scale, y_scale, y_zp = draw_scales(
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


def draw_conv(rng, seed, index, kind):
    kh = int(rng.integers(1, 8))
    kw = kh if rng.random() < 0.75 else int(rng.integers(1, 8))
    sh = int(rng.integers(1, 3))
    sw = sh if rng.random() < 0.85 else 3 - sh
    dh, dw = (1, 1) if rng.random() < 0.8 else tuple(int(d) for d in rng.integers(1, 4, 2))
    span_h, span_w = dh * (kh - 1) + 1, dw * (kw - 1) + 1
    top, left, bottom, right = draw_pads(rng, span_h, span_w)
    channels, longest, products = draw_size_class(rng)
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
    h = draw_side(rng, span_h, top, bottom, sh, longest)
    w = draw_side(rng, span_w, left, right, sw, longest)
    x_zp = draw_zero_point(rng)
    x = draw_int8(rng, (draw_batch(rng), c, h, w))
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


def draw_dense(rng, seed, index, kind):
    channels, _, products = draw_size_class(rng)
    k = int(rng.integers(1, products + 1))
    o = int(rng.integers(1, 2 * channels + 1))
    op = "Gemm" if rng.random() < 0.7 else "MatMul"
    lead = (int(rng.integers(1, channels // 2 + 1)),)
    if op == "MatMul" and rng.random() < 0.3:
        lead = (int(rng.integers(1, 4)), int(rng.integers(1, 5)))
    x_zp = draw_zero_point(rng)
    x = draw_int8(rng, (*lead, k))
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

