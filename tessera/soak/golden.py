"""The soak's reference: each layer computed by the golden functions of ``models/``.

Deliberately not the CPU provider (which is itself under test, with its fast kernels): the
fields of the :mod:`sw_driver.graph` layer go straight into ``models.conv``,
``models.requant``, ``models.pool`` and ``models.eltwise``.
"""

from models.conv import conv2d, dense
from models.eltwise import add
from models.pool import avg_pool2d, global_avg_pool, max_pool2d
from models.requant import requantize
from sw_driver import graph as g

__all__ = ["golden_output"]


def _conv(layer, x):
    acc = conv2d(x, layer.weight, layer.bias, x_zero_point=layer.x_zero_point,
                 stride=layer.stride, padding=layer.padding, dilation=layer.dilation,
                 groups=layer.groups)
    return requantize(acc, layer.multiplier, layer.shift, layer.y_zero_point, layer.lo,
                      layer.hi, axis=1)


def _dense(layer, x):
    acc = dense(x.reshape(-1, x.shape[-1]), layer.weight, layer.bias,
                x_zero_point=layer.x_zero_point)
    y = requantize(acc, layer.multiplier, layer.shift, layer.y_zero_point, layer.lo, layer.hi,
                   axis=1)
    return y.reshape(*x.shape[:-1], y.shape[-1])


def _max_pool(layer, x):
    return max_pool2d(x, layer.kernel, layer.stride, layer.padding)


def _average_pool(layer, x):
    return avg_pool2d(x, layer.kernel, layer.stride, layer.padding, x_scale=layer.x_scale,
                      x_zero_point=layer.x_zero_point, y_scale=layer.y_scale,
                      y_zero_point=layer.y_zero_point,
                      count_include_pad=layer.count_include_pad, lo=layer.lo, hi=layer.hi)


def _global_average_pool(layer, x):
    return global_avg_pool(x, layer.x_scale, layer.x_zero_point, layer.y_scale,
                           layer.y_zero_point, layer.lo, layer.hi)


def _add(layer, a, b=None):
    b = layer.constant if b is None else b
    return add(a, layer.a_scale, layer.a_zero_point, b, layer.b_scale, layer.b_zero_point,
               layer.y_scale, layer.y_zero_point, layer.lo, layer.hi)


_GOLDEN = {
    g.Conv: _conv,
    g.Dense: _dense,
    g.MaxPool: _max_pool,
    g.AveragePool: _average_pool,
    g.GlobalAveragePool: _global_average_pool,
    g.Add: _add,
}


def golden_output(case):
    """The int8 output the golden models define for ``case`` (a :class:`SoakCase`)."""
    return _GOLDEN[type(case.layer)](case.layer, *case.inputs)
