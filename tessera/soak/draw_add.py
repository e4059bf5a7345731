"""Add soak cases: two int8 tensors, or a tensor and an int8 constant, broadcast or not,
with their own scales and zero points and an optional fused ReLU/ReLU6."""

import numpy as np

from models.eltwise import add_multipliers
from models.requant import activation_range
from sw_driver import graph as g

from .case import Quantization, SoakCase
from .values import (
    draw_activation,
    draw_batch,
    draw_int8,
    draw_scales,
    draw_size_class,
    draw_zero_point,
    log_uniform,
    rms_spread,
)

__all__ = ["draw_add"]


def draw_add(rng, seed, index, kind):
    channels, longest, _ = draw_size_class(rng)
    n, c = draw_batch(rng), int(rng.integers(1, channels + 1))
    h, w = (int(v) for v in rng.integers(1, longest + 1, 2))
    a = draw_int8(rng, (n, c, h, w))
    a_zp, b_zp = draw_zero_point(rng), draw_zero_point(rng)
    ratio = float(log_uniform(rng, 1 / 64, 64.0))  # b_scale / a_scale
    pick = rng.random()
    if pick < 0.7:
        b_shape, operand = (n, c, h, w), "tensor"
    elif pick < 0.8:
        b_shape, operand = (1, c, 1, 1), "tensor"
    else:
        b_shape = [(c, h, w), (c, 1, 1), (1,), (n, c, h, w)][int(rng.integers(0, 4))]
        operand = "constant"
    b = draw_int8(rng, b_shape)
    activation = draw_activation(rng)
    a_scale, y_scale, y_zp = draw_scales(
        rng, activation, float(np.hypot(rms_spread(a, a_zp), ratio * rms_spread(b, b_zp))))
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

