"""MaxPool, AveragePool and GlobalAveragePool soak cases.

MaxPool keeps its input's scale and zero point (the importer accepts nothing else); an
average's output scale is often the input's own (what ``quantize_static`` writes, and where
ties are most common), else another, sometimes small enough to clip.
"""

import numpy as np

from models.pool import avg_pool_multipliers
from sw_driver import graph as g

from .case import Quantization, SoakCase
from .values import (
    draw_batch,
    draw_int8,
    draw_output_zero_point,
    draw_scale,
    draw_side,
    draw_size_class,
    draw_zero_point,
    log_uniform,
)

__all__ = ["draw_average_pool", "draw_global_average_pool", "draw_max_pool"]


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
    channels, longest, _ = draw_size_class(rng)
    h = draw_side(rng, kh, top, bottom, sh, longest)
    w = draw_side(rng, kw, left, right, sw, longest)
    return draw_int8(rng, (draw_batch(rng), int(rng.integers(1, channels + 1)), h, w))


def _averaging_output(rng, x_q, counts):
    """Output (scale, zero point) of an average: often the input's own (what
    ``quantize_static`` writes, and where ties are most common), else a different scale,
    sometimes small enough to clip."""
    x_scale, x_zp = x_q
    pick = rng.random()
    if pick < 0.45:
        y_q = x_q
    elif pick < 0.85:
        y_q = (float(np.float32(x_scale * log_uniform(rng, 0.25, 4.0))),
               draw_output_zero_point(rng))
    else:
        y_q = (float(np.float32(x_scale / log_uniform(rng, 4.0, 64.0))),
               draw_output_zero_point(rng))
    avg_pool_multipliers(x_q[0], y_q[0], counts)  # as the importer checks it
    return y_q


def draw_max_pool(rng, seed, index, kind):
    kernel, stride, pads = _window(rng, 0.5)
    x = _pool_input(rng, kernel, stride, pads)
    x_q = (draw_scale(rng, 1e-3, 0.5), draw_zero_point(rng))
    layer = g.MaxPool(f"soak_{index}", ("x",), "y", kernel=kernel, stride=stride,
                      padding=pads)
    notes = {"k": kernel, "stride": stride, "pads": pads, "zx": x_q[1]}
    return SoakCase(seed, index, kind, layer, (x,), Quantization(x=x_q, y=x_q, op="MaxPool"),
                    notes)


def draw_average_pool(rng, seed, index, kind):
    kernel, stride, pads = _window(rng, 0.7)
    x = _pool_input(rng, kernel, stride, pads)
    x_q = (draw_scale(rng, 1e-3, 0.5), draw_zero_point(rng))
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


def draw_global_average_pool(rng, seed, index, kind):
    channels, longest, _ = draw_size_class(rng)
    h, w = (int(v) for v in rng.integers(1, longest + 1, 2))
    x = draw_int8(rng, (draw_batch(rng), int(rng.integers(1, channels + 1)), h, w))
    x_q = (draw_scale(rng, 1e-3, 0.5), draw_zero_point(rng))
    y_q = _averaging_output(rng, x_q, [h * w])
    layer = g.GlobalAveragePool(f"soak_{index}", ("x",), "y", x_scale=x_q[0],
                                x_zero_point=x_q[1], y_scale=y_q[0], y_zero_point=y_q[1])
    notes = {"zx": x_q[1], "zy": y_q[1], "sy/sx": f"{y_q[0] / x_q[0]:.4g}"}
    return SoakCase(seed, index, kind, layer, (x,),
                    Quantization(x=x_q, y=y_q, op="GlobalAveragePool"), notes)

