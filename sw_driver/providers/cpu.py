"""The CPU provider: Tessera's executable specification.

Every integer layer is computed by the golden functions in ``models/``, so what this
provider returns is by definition what every other backend must return bit for bit. The
only code of its own is glue (reshapes, the float Quantize/Dequantize/Softmax at the model's
edges) and an optional faster convolution/dense kernel whose exactness against the golden
model is proven in ``cpu_kernels`` and tested.
"""

import numpy as np

from models import intonly
from models.conv import conv2d, dense
from models.eltwise import add
from models.pool import avg_pool2d, global_avg_pool, max_pool2d
from models.requant import requantize
from models.sequence import float_op, matmul_int

from .. import graph as g
from . import cpu_kernels
from .base import Concurrency, Provider, Refusal
from .costs import CostModel, cpu_estimate

__all__ = ["CPUProvider"]


def _conv(layer, x, fast):
    if fast:
        y = cpu_kernels.conv2d_requant(
            x, layer.weight, layer.bias, x_zero_point=layer.x_zero_point, stride=layer.stride,
            padding=layer.padding, dilation=layer.dilation, groups=layer.groups,
            multiplier=layer.multiplier, shift=layer.shift, y_zero_point=layer.y_zero_point,
            lo=layer.lo, hi=layer.hi)
        if y is not None:
            return y
    kernel = cpu_kernels.conv2d if fast else conv2d
    acc = kernel(x, layer.weight, layer.bias, x_zero_point=layer.x_zero_point,
                 stride=layer.stride, padding=layer.padding, dilation=layer.dilation,
                 groups=layer.groups)
    return requantize(acc, layer.multiplier, layer.shift, layer.y_zero_point, layer.lo,
                      layer.hi, axis=1)


def _dense(layer, x, fast):
    kernel = cpu_kernels.dense if fast else dense
    lead = x.shape[:-1]
    acc = kernel(x.reshape(-1, x.shape[-1]), layer.weight, layer.bias,
                 x_zero_point=layer.x_zero_point)
    y = requantize(acc, layer.multiplier, layer.shift, layer.y_zero_point, layer.lo, layer.hi,
                   axis=1)
    return y.reshape(*lead, y.shape[-1])


def _flatten(layer, x):
    axis = layer.axis + x.ndim if layer.axis < 0 else layer.axis
    return x.reshape(int(np.prod(x.shape[:axis])), int(np.prod(x.shape[axis:])))


def _reshape(layer, x):
    # ONNX Reshape (allowzero=0): a 0 copies the input's dimension at that position.
    shape = [x.shape[i] if d == 0 else d for i, d in enumerate(layer.shape)]
    return x.reshape(shape)


def _softmax(layer, x):
    shape = x.shape
    axis = layer.axis + x.ndim if layer.axis < 0 else layer.axis
    if layer.coerce_2d:
        x = x.reshape(int(np.prod(shape[:axis])), -1)
        axis = 1
    x = x.astype(np.float32, copy=False)
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    # Multiply by the reciprocal of the sum, as onnxruntime's float Softmax does.
    y = e * (np.float32(1) / e.sum(axis=axis, keepdims=True, dtype=np.float32))
    return y.astype(np.float32, copy=False).reshape(shape)


def _quantize(layer, x):
    # onnxruntime's QuantizeLinear: float32 division, round half to even, saturate.
    q = np.rint(x.astype(np.float32, copy=False) / np.float32(layer.scale))
    return (np.clip(q, -128 - layer.zero_point, 127 - layer.zero_point)
            + layer.zero_point).astype(np.int8)


def _dequantize(layer, q):
    return ((q.astype(np.int32) - layer.zero_point).astype(np.float32)
            * np.float32(layer.scale))


class CPUProvider(Provider):
    """Runs every layer kind on the host with the golden models.

    Parameters
    ----------
    fast : bool, optional
        Use :mod:`~sw_driver.providers.cpu_kernels` for Conv (fused with its
        requantization where that is provably exact), Dense (float32 BLAS on exact integer
        partial sums) and Add (a table of the golden add over all int8 pairs), all
        bit-identical to the golden model, instead of the golden functions. Default True.
    costs : sw_driver.providers.costs.CostModel, optional
        The rates of this provider's time estimate for Conv and Dense (default
        ``CostModel()``); the planner compares it with the accelerators'.
    """

    name = "cpu"
    #: Pure functions of their arguments; the kernels' caches only ever add or drop whole
    #: entries checked on use, so concurrent calls need no lock
    #: (tests/test_session_threads.py).
    concurrency = Concurrency.SHARED

    def __init__(self, fast=True, *, costs=None):
        self.fast = bool(fast)
        self.costs = CostModel() if costs is None else costs
        if not isinstance(self.costs, CostModel):
            raise TypeError(f"costs must be a sw_driver.providers.costs.CostModel, not "
                            f"{type(self.costs).__name__}")

    def supports(self, layer, shape=None):
        if type(layer) in _RUNNERS:
            return None
        return Refusal(f"no CPU implementation of {layer.op}")

    def describe(self, layer):
        return "the CPU provider runs every layer kind (golden model)"

    def estimate(self, layer, shape):
        """Conv and Dense: :func:`~sw_driver.providers.costs.cpu_estimate` at
        :attr:`costs`; other layers None (no accelerator time to compare with)."""
        return cpu_estimate(layer, shape, self.costs)

    def run(self, layer, inputs):
        runner = _RUNNERS[type(layer)]
        if isinstance(layer, (g.Conv, g.Dense)):
            return runner(layer, inputs[0], self.fast)
        if isinstance(layer, g.Add):
            return runner(layer, *inputs, fast=self.fast)
        return runner(layer, *inputs)


def _add(layer, a, b=None, fast=False):
    b = layer.constant if b is None else b
    if fast:
        y = cpu_kernels.add(a, layer.a_scale, layer.a_zero_point, b, layer.b_scale,
                            layer.b_zero_point, layer.y_scale, layer.y_zero_point, layer.lo,
                            layer.hi)
        if y is not None:
            return y
    return add(a, layer.a_scale, layer.a_zero_point, b, layer.b_scale, layer.b_zero_point,
               layer.y_scale, layer.y_zero_point, layer.lo, layer.hi)


def _float_op(layer, *inputs):
    args = [inputs[a] if isinstance(a, int) else a for a in layer.args]
    # A bad operand (a mask of the wrong shape, indices out of range) raises ValueError,
    # which the dispatcher reports as a LayerError naming the layer.
    return float_op(layer.op_type, args, layer.attrs, layer.opset, layer.output_index,
                    layer.outputs)


def _matmul(layer, a, b):
    acc = matmul_int(a, layer.a_zero_point, b, layer.b_zero_point)
    return requantize(acc, layer.multiplier, layer.shift, layer.y_zero_point, layer.lo,
                      layer.hi)


def _int_softmax(layer, x):
    shape = x.shape
    axis = layer.axis + x.ndim if layer.axis < 0 else layer.axis
    if layer.coerce_2d:
        return intonly.softmax(x.reshape(int(np.prod(shape[:axis])), -1),
                               layer.params).reshape(shape)
    moved = np.moveaxis(x, axis, -1)
    return np.moveaxis(intonly.softmax(moved, layer.params), -1, axis)


_RUNNERS = {
    g.IntSoftmax: _int_softmax,
    g.IntLayerNorm: lambda layer, x: intonly.layernorm(x, layer.params, layer.lo, layer.hi),
    g.IntGelu: lambda layer, x: intonly.gelu(x, layer.params, layer.lo, layer.hi),
    g.FloatOp: _float_op,
    g.MatMul: _matmul,
    g.Conv: _conv,
    g.Dense: _dense,
    g.MaxPool: lambda layer, x: max_pool2d(x, layer.kernel, layer.stride, layer.padding),
    g.AveragePool: lambda layer, x: avg_pool2d(
        x, layer.kernel, layer.stride, layer.padding, x_scale=layer.x_scale,
        x_zero_point=layer.x_zero_point, y_scale=layer.y_scale,
        y_zero_point=layer.y_zero_point, count_include_pad=layer.count_include_pad,
        lo=layer.lo, hi=layer.hi),
    g.GlobalAveragePool: lambda layer, x: global_avg_pool(
        x, layer.x_scale, layer.x_zero_point, layer.y_scale, layer.y_zero_point, layer.lo,
        layer.hi),
    g.Add: _add,
    g.Flatten: _flatten,
    g.Reshape: _reshape,
    g.Softmax: _softmax,
    g.Quantize: _quantize,
    g.Dequantize: _dequantize,
}
