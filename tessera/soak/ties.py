"""How far a soak output's exact real value lies from a rounding tie.

The golden models round the exact value ``v`` (in output LSB, before the zero point and
the clamp) half to even; onnxruntime evaluates the same ``v`` in float32 first. The two can
only disagree where float32 error moves ``v`` across ``k + 1/2``, so every legitimate
difference sits next to a tie. :func:`tie_distance` gives ``| frac(v) - 1/2 |`` (0 on an
exact tie, 1/2 on an integer) computed in float64, which the soak reports for each element
where the golden model and onnxruntime differ: a difference far from a tie is a bug.
"""

import numpy as np

from models.conv import conv2d, dense
from sw_driver import graph as g

__all__ = ["NEAR_TIE", "average_pool_real", "distance_from_tie", "real_output",
           "tie_distance"]

#: How close (in output LSB) a real value must be to ``k + 1/2`` for onnxruntime's float32
#: evaluation to be allowed to round it the other way; its float32 errors are below 1e-4
#: LSB on the layers measured, and 1e-3 still rejects every ordinary difference. Shared by
#: the soak and the onnxruntime comparison tests.
NEAR_TIE = 1e-3


def _channel_scale(case):
    quant = case.quant
    return np.float64(quant.x[0]) * quant.w.astype(np.float64) / np.float64(quant.y[0])


def _conv(case, x):
    layer = case.layer
    acc = conv2d(x, layer.weight, layer.bias, x_zero_point=layer.x_zero_point,
                 stride=layer.stride, padding=layer.padding, dilation=layer.dilation,
                 groups=layer.groups)
    return acc * _channel_scale(case)[None, :, None, None]


def _dense(case, x):
    layer = case.layer
    acc = dense(x.reshape(-1, x.shape[-1]), layer.weight, layer.bias,
                x_zero_point=layer.x_zero_point)
    return (acc * _channel_scale(case)).reshape(*x.shape[:-1], -1)


def average_pool_real(layer, x):
    """The real mean of each window of a :class:`~sw_driver.graph.AveragePool` ``layer``
    over int8 ``x``, in output LSB without the zero point (float64; an exact tie stays
    exact when the two scales are equal)."""
    (kh, kw), (sh, sw) = layer.kernel, layer.stride
    top, left, bottom, right = layer.padding
    pad = ((0, 0), (0, 0), (top, bottom), (left, right))
    values = np.pad(x.astype(np.float64) - layer.x_zero_point, pad)
    inside = np.pad(np.ones(x.shape[2:]), pad[2:])
    oh = (values.shape[2] - kh) // sh + 1
    ow = (values.shape[3] - kw) // sw + 1
    total = np.zeros((*x.shape[:2], oh, ow))
    count = np.zeros((oh, ow))
    for u in range(kh):
        for v in range(kw):
            total += values[:, :, u:u + sh * (oh - 1) + 1:sh, v:v + sw * (ow - 1) + 1:sw]
            count += inside[u:u + sh * (oh - 1) + 1:sh, v:v + sw * (ow - 1) + 1:sw]
    if layer.count_include_pad:
        count = np.full_like(count, kh * kw)
    return total / count * (layer.x_scale / layer.y_scale)


def _global_average_pool(case, x):
    layer = case.layer
    mean = (x.astype(np.float64) - layer.x_zero_point).mean(axis=(2, 3), keepdims=True)
    return mean * (layer.x_scale / layer.y_scale)


def _add(case, a, b=None):
    layer = case.layer
    b = layer.constant if b is None else b
    total = ((a.astype(np.float64) - layer.a_zero_point) * layer.a_scale
             + (b.astype(np.float64) - layer.b_zero_point) * layer.b_scale)
    return total / layer.y_scale


_REAL = {
    g.Conv: _conv,
    g.Dense: _dense,
    g.AveragePool: lambda case, x: average_pool_real(case.layer, x),
    g.GlobalAveragePool: _global_average_pool,
    g.Add: _add,
}


def real_output(case):
    """The real value each output rounds, in output LSB without the zero point (float64);
    None for MaxPool, which does not round."""
    real = _REAL.get(type(case.layer))
    return None if real is None else real(case, *case.inputs)


def tie_distance(case, where):
    """``|frac(v) - 1/2|`` of the real outputs selected by the boolean mask ``where``.

    Returns
    -------
    numpy.ndarray of float64, or None for a layer that does not round.
    """
    real = real_output(case)
    return None if real is None else distance_from_tie(real[where])


def distance_from_tie(real):
    """``|frac(v) - 1/2|`` element-wise: 0 on an exact tie, 1/2 on an integer."""
    return np.abs(real - np.floor(real) - 0.5)
