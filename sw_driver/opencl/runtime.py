"""`OpenCLRuntime`: Tessera's integer layers as OpenCL kernels, bit-exact with `models/`.

Every layer method mirrors a golden function (same argument meanings) and takes either a
NumPy array or a :class:`DeviceTensor`:

- NumPy in, NumPy out: the input is uploaded, the layer enqueued and the result read back
  (the read is the only wait).
- ``DeviceTensor`` in, ``DeviceTensor`` out: nothing waits, so consecutive layers are
  enqueued back to back on one in-order queue; ``.get()`` on the last one waits.

Weights, bias and the per-channel requantization parameters are uploaded once with
``upload_*_weights`` and the returned handle is passed to each call.

The queue profiles its commands: each one enqueued, and each wait, goes to
:attr:`OpenCLRuntime.commands` (:mod:`.profiling`), from which a caller times its own
commands on the device.
"""

import functools
from dataclasses import dataclass

import numpy as np
import pyopencl as cl
import pyopencl.cltypes as cltypes

from models.eltwise import add_multipliers
from models.pool import WINDOW_MAX, avg_pool_multipliers

from . import params
from .buffers import BufferPool, DeviceTensor, out_of_memory
from .device import select_device
from .profiling import QUEUE_PROPERTIES, CommandLog
from .program import device_context

__all__ = ["ConvWeights", "DepthwiseWeights", "OpenCLRuntime"]

# Tiles of conv.cl: TO output channels x WG columns (one per work-item; a column is 1 or
# 8 horizontally adjacent outputs, see _row_neighbours) per work-group.
# TO is 32, or 16 for layers with at most 16 output channels per group (a 32 tile would
# leave half of its accumulators idle); the kernels' names carry the suffix.
_TILE_O = 32
_TILE_O_SMALL = 16
_TILE_SUFFIX = {_TILE_O: "", _TILE_O_SMALL: "_o16"}
_GROUP = (64, 1, 1)
_GAP_GROUP = 64  # work-group of global_avg_pool in pool.cl
_LINEAR_GROUP = 64  # work-group of the one-work-item-per-output kernels


def _vector(values, dtype):
    """Pack ints into an OpenCL ``intN`` kernel argument (zero-padded)."""
    width = dtype.itemsize // 4
    packed = np.zeros(width, dtype=np.int32)
    packed[:len(values)] = values
    return packed.view(dtype)[0]


# The multipliers depend only on the scales; deriving them costs more than a launch, and a
# model calls each layer with the same scales every time.
_add_multipliers = functools.lru_cache(maxsize=1024)(add_multipliers)


def _tile_out(out_per_group):
    """Output-channel tile of conv.cl for a layer with ``out_per_group`` channels a group."""
    return _TILE_O_SMALL if out_per_group <= _TILE_O_SMALL else _TILE_O


def _row_neighbours(pool, kernel, out_w):
    """Horizontal neighbours per work-item of conv.cl: 8 (the ``_row8`` kernels) or 1.

    Eight neighbours share each weight vector read from local memory, which made the 3x3
    layers of ResNet-8 (stride 1 and 2) 1.4x to 2.2x faster on PoCL; a 1x1 layer was slower
    (its reductions are short), and a row narrower than 8 would leave work-items idle.
    """
    return 8 if not pool and kernel[1] > 1 and out_w >= 8 else 1


def _round_up(value, multiple):
    return -(-value // multiple) * multiple


@dataclass(frozen=True)
class ConvWeights:
    """Device-resident weights of a convolution or dense layer (from ``upload_*``).

    ``wt`` is laid out ``[groups][Cg*kh*kw][Og padded to the tile]`` (``tile_out``: 16
    for ``Og <= 16``, else 32); ``bias``, ``multiplier`` and ``shift`` are
    ``[groups][Og padded]`` (padding channels are never stored).
    """

    wt: cl.Buffer
    bias: cl.Buffer
    multiplier: cl.Buffer
    shift: cl.Buffer
    out_channels: int
    in_channels_per_group: int
    kernel: tuple
    groups: int
    padded_out_per_group: int
    tile_out: int = _TILE_O


@dataclass(frozen=True)
class DepthwiseWeights:
    """Device-resident weights of a depthwise convolution (``upload_depthwise_weights``)."""

    w: cl.Buffer
    bias: cl.Buffer
    multiplier: cl.Buffer
    shift: cl.Buffer
    channels: int
    kernel: tuple


class OpenCLRuntime:
    """Tessera's layers on one OpenCL device.

    Parameters
    ----------
    device : str, pyopencl.Device or None
        ``"platform:device"`` indices or part of a device name; None takes the first GPU,
        else the first device (see :mod:`sw_driver.opencl.device`; no environment variable
        is read here).

    Raises
    ------
    NoPlatformError, DeviceNotFoundError, UnsupportedDeviceError, KernelBuildError
    """

    def __init__(self, device=None):
        self.device = select_device(device)
        # The program is built once per device per process and shared by all runtimes.
        self.context, self.program = device_context(self.device)
        self.queue = cl.CommandQueue(self.context, self.device, properties=QUEUE_PROPERTIES)
        #: Every command enqueued and every wait, for per-layer device times.
        self.commands = CommandLog()
        self.pool = BufferPool(self.context, self.device)
        # Kernel objects carry their arguments, so each runtime has its own.
        self._kernels = {k.function_name: k for k in self.program.all_kernels()}
        self._tables = {}
        self._status = cl.Buffer(self.context, cl.mem_flags.READ_WRITE, 4)
        cl.enqueue_fill_buffer(self.queue, self._status, np.int32(0), 0, 4)

    @property
    def device_name(self):
        return self.device.name.strip()

    def __repr__(self):
        return f"OpenCLRuntime(device={self.device_name!r})"

    # ---------------------------------------------------------------- data movement

    def empty(self, shape, dtype=np.int8):
        """An uninitialized :class:`DeviceTensor` (buffers come from the runtime's pool)."""
        return DeviceTensor(self, shape, dtype)

    def to_device(self, array):
        """Upload ``array`` (copied; the call does not wait) and return a DeviceTensor."""
        array = np.ascontiguousarray(array)
        tensor = DeviceTensor(self, array.shape, array.dtype)
        if array.size:
            self._guard(lambda: self.commands.enqueued(cl.enqueue_copy(
                self.queue, tensor.buffer, array, is_blocking=False)), "uploading a tensor")
        return tensor

    def read(self, tensor):
        """Wait for ``tensor`` and return it as a NumPy array.

        Raises
        ------
        OverflowError
            If a layer enqueued since the last read produced an accumulator outside int32
            (where the golden model raises the same error).
        """
        result = np.empty(tensor.shape, dtype=tensor.dtype)
        status = np.zeros(1, dtype=np.int32)
        self.commands.enqueued(cl.enqueue_copy(self.queue, status, self._status,
                                               is_blocking=False))
        with self.commands.waiting():
            if result.size:
                self._guard(lambda: self.commands.enqueued(cl.enqueue_copy(
                    self.queue, result, tensor.buffer)), "reading a result")
            self.queue.finish()
        if status[0]:
            self.commands.enqueued(cl.enqueue_fill_buffer(self.queue, self._status,
                                                          np.int32(0), 0, 4))
            raise OverflowError("an int32 accumulator (bias + sum of products) overflowed "
                                "in a layer enqueued since the last read; the layer needs a "
                                "smaller bias or reduction")
        return result

    def finish(self):
        """Wait for everything enqueued so far."""
        with self.commands.waiting():
            self.queue.finish()

    def _guard(self, enqueue, what):
        try:
            return enqueue()
        except cl.Error as exc:
            error = out_of_memory(exc, what)
            if error is None:
                raise
            raise error from exc

    def _input(self, name, x, ndim, layout):
        """``(tensor, numpy_in)`` for a layer input, checked."""
        if isinstance(x, DeviceTensor):
            if x.runtime is not self:
                raise ValueError(f"{name} lives on another OpenCLRuntime; read it back first")
            params.check_int8(name, x.shape, x.dtype, ndim, layout)
            return x, False
        if not isinstance(x, np.ndarray):
            raise ValueError(f"{name} must be a numpy.ndarray of int8 or a DeviceTensor, "
                             f"not {type(x).__name__}")
        params.check_int8(name, x.shape, x.dtype, ndim, layout)
        return self.to_device(x), True

    def _launch(self, name, global_size, local_size, *args):
        kernel = self._kernels[name]
        kernel.set_args(*args)
        self._guard(lambda: self.commands.enqueued(cl.enqueue_nd_range_kernel(
            self.queue, kernel, global_size, local_size)), f"running {name}")

    def _output(self, tensor, numpy_out):
        return self.read(tensor) if numpy_out else tensor

    def _upload_array(self, array):
        return cl.Buffer(self.context, cl.mem_flags.READ_ONLY | cl.mem_flags.COPY_HOST_PTR,
                         hostbuf=np.ascontiguousarray(array))

    def _cached_table(self, array):
        """A read-only device copy of a small table, uploaded once per distinct content."""
        key = array.tobytes()
        if key not in self._tables:
            if len(self._tables) > 256:  # layer tables are few; don't grow without bound
                self._tables.clear()
            self._tables[key] = self._upload_array(array)
        return self._tables[key]

    # ---------------------------------------------------------------- weights

    def upload_conv_weights(self, w, bias=None, multiplier=1 << 30, shift=1, *, groups=1):
        """Upload a convolution's weights and per-channel requantization once.

        Parameters
        ----------
        w : numpy.ndarray of int8, shape (O, C / groups, kh, kw)
        bias : numpy.ndarray of int32, shape (O,), or None
        multiplier, shift : int or array_like of int
            Per tensor or per output channel, as for ``models.requant.requantize``
            (``M`` in ``[2**30, 2**31)``, ``n`` in ``[1, 62]``).
        groups : int
            ``O`` must be a multiple of it (``C`` is checked at each call).

        Returns
        -------
        ConvWeights
        """
        if not isinstance(w, np.ndarray) or w.dtype != np.int8 or w.ndim != 4:
            raise ValueError(f"w must be a numpy.ndarray of int8 with shape "
                             f"(O, C/groups, kh, kw), not {getattr(w, 'dtype', type(w))} "
                             f"{getattr(w, 'shape', '')}")
        if min(w.shape) < 1:
            raise ValueError(f"w must not have empty dimensions, not {w.shape}")
        if not params.is_int(groups) or groups < 1 or w.shape[0] % groups:
            raise ValueError(f"groups must be a positive int dividing O={w.shape[0]}, "
                             f"not {groups!r}")
        o, cg, kh, kw = w.shape
        k = cg * kh * kw
        params.check_reduction(k)
        og = o // groups
        tile = _tile_out(og)
        ogpad = _round_up(og, tile)
        bias = self._bias(bias, o)
        m, n = params.requant_tables(multiplier, shift, o)
        wt = np.zeros((groups, k, ogpad), dtype=np.int8)
        wt[:, :, :og] = w.reshape(groups, og, k).transpose(0, 2, 1)

        def padded(values, fill):
            table = np.full((groups, ogpad), fill, dtype=np.int32)
            table[:, :og] = values.reshape(groups, og)
            return table

        # Padding channels get a valid (M, n) so the kernel may requantize them harmlessly.
        return ConvWeights(
            self._upload_array(wt), self._upload_array(padded(bias, 0)),
            self._upload_array(padded(m, 1 << 30)), self._upload_array(padded(n, 1)),
            out_channels=o, in_channels_per_group=cg, kernel=(kh, kw), groups=groups,
            padded_out_per_group=ogpad, tile_out=tile)

    def upload_dense_weights(self, w, bias=None, multiplier=1 << 30, shift=1):
        """Upload a dense layer's ``(O, K)`` weights (ONNX Gemm ``transB=1`` layout).

        Dense runs on the convolution kernel as a 1x1 convolution of a 1x1 image.
        """
        if not isinstance(w, np.ndarray) or w.dtype != np.int8 or w.ndim != 2:
            raise ValueError(f"w must be a numpy.ndarray of int8 with shape (O, K), not "
                             f"{getattr(w, 'dtype', type(w))} {getattr(w, 'shape', '')}")
        return self.upload_conv_weights(w.reshape(*w.shape, 1, 1), bias, multiplier, shift)

    def upload_depthwise_weights(self, w, bias=None, multiplier=1 << 30, shift=1):
        """Upload a depthwise convolution's ``(C, 1, kh, kw)`` weights once."""
        if not isinstance(w, np.ndarray) or w.dtype != np.int8 or w.ndim != 4 \
                or w.shape[1] != 1 or min(w.shape) < 1:
            raise ValueError(f"w must be a numpy.ndarray of int8 with shape (C, 1, kh, kw), "
                             f"not {getattr(w, 'dtype', type(w))} {getattr(w, 'shape', '')}")
        c, _, kh, kw = w.shape
        params.check_reduction(kh * kw)
        m, n = params.requant_tables(multiplier, shift, c)
        return DepthwiseWeights(
            self._upload_array(w), self._upload_array(self._bias(bias, c)),
            self._upload_array(m), self._upload_array(n), channels=c, kernel=(kh, kw))

    @staticmethod
    def _bias(bias, channels):
        if bias is None:
            return np.zeros(channels, dtype=np.int32)
        if not isinstance(bias, np.ndarray) or bias.dtype != np.int32 \
                or bias.shape != (channels,):
            raise ValueError(f"bias must be a numpy.ndarray of int32 with shape "
                             f"({channels},), not {getattr(bias, 'dtype', type(bias))} "
                             f"{getattr(bias, 'shape', '')}")
        return bias

    # ---------------------------------------------------------------- convolution

    def conv2d_requant(self, x, weights, *, x_zero_point, y_zero_point, stride=1,
                       padding=0, dilation=1, lo=-128, hi=127, pool=False):
        """Convolution, bias, requantization and clamp in one kernel (optional 2x2 max pool).

        Equals ``requantize(conv2d(x, w, bias, x_zero_point=..., stride=..., padding=...,
        dilation=..., groups=...), M, n, y_zero_point, lo, hi)`` and, with ``pool=True``,
        ``max_pool2d`` of that with kernel 2 and stride 2. The batch is one launch.

        Parameters
        ----------
        x : numpy.ndarray of int8 or DeviceTensor, shape (N, C, H, W)
        weights : ConvWeights
            From :meth:`upload_conv_weights`.
        x_zero_point, y_zero_point : int
        stride, dilation : int or (int, int)
        padding : int, (pad_h, pad_w) or (top, left, bottom, right)
        lo, hi : int
            Output clamp.
        pool : bool
            Fuse a 2x2, stride 2 max pool (output ``floor(OH/2) x floor(OW/2)``).

        Returns
        -------
        numpy.ndarray of int8 (or DeviceTensor, for a DeviceTensor input)
        """
        if not isinstance(weights, ConvWeights):
            raise ValueError("weights must come from upload_conv_weights")
        x, numpy_io = self._input("x", x, 4, "(N, C, H, W)")
        n, c, h, w = x.shape
        wt = weights
        if c != wt.in_channels_per_group * wt.groups:
            raise ValueError(
                f"x has {c} channels but the weights expect C = {wt.in_channels_per_group} "
                f"x groups {wt.groups} = {wt.in_channels_per_group * wt.groups}")
        a = params.conv_arguments((h, w), wt.kernel, x_zero_point=x_zero_point,
                                  y_zero_point=y_zero_point, lo=lo, hi=hi, stride=stride,
                                  padding=padding, dilation=dilation, pool=pool)
        y = self.empty((n, wt.out_channels, a.out_h, a.out_w))
        og = wt.out_channels // wt.groups
        geometry = _vector([n, c, h, w, wt.in_channels_per_group, og, wt.padded_out_per_group,
                            *wt.kernel, *a.stride, a.pads[0], a.pads[1], *a.dilation, a.oh],
                           cltypes.int16)
        quant = _vector([a.ow, a.zx, a.zy, a.lo, a.hi, wt.out_channels,
                         wt.in_channels_per_group * wt.kernel[0] * wt.kernel[1]], cltypes.int8)
        hn = _row_neighbours(pool, wt.kernel, a.out_w)
        cols = a.out_h * -(-a.out_w // hn)
        groups = (-(-(n * cols) // _GROUP[0]), wt.padded_out_per_group // wt.tile_out,
                  wt.groups)
        name = (("conv_requant_pool2" if pool else "conv_requant")
                + _TILE_SUFFIX[wt.tile_out] + ("_row8" if hn > 1 else ""))
        self._launch(name,
                     tuple(g * s for g, s in zip(groups, _GROUP, strict=True)), _GROUP,
                     x.buffer, wt.wt, wt.bias, wt.multiplier, wt.shift, y.buffer,
                     self._status, geometry, quant)
        return self._output(y, numpy_io)

    def dense_requant(self, x, weights, *, x_zero_point, y_zero_point, lo=-128, hi=127):
        """``requantize(dense(x, w, bias, x_zero_point=...), M, n, y_zero_point, lo, hi)``.

        ``x`` is ``(N, K)`` int8 (NumPy or DeviceTensor); ``weights`` from
        :meth:`upload_dense_weights`. Returns ``(N, O)`` int8.
        """
        if not isinstance(weights, ConvWeights) or weights.kernel != (1, 1) \
                or weights.groups != 1:
            raise ValueError("weights must come from upload_dense_weights")
        x, numpy_io = self._input("x", x, 2, "(N, K)")
        if x.shape[1] != weights.in_channels_per_group:
            raise ValueError(f"x of shape {x.shape} does not match weights with K = "
                             f"{weights.in_channels_per_group}")
        as_image = x.reshape((x.shape[0], x.shape[1], 1, 1))
        y = self.conv2d_requant(as_image, weights, x_zero_point=x_zero_point,
                                y_zero_point=y_zero_point, lo=lo, hi=hi)
        flat = y.reshape((x.shape[0], weights.out_channels))
        return self._output(flat, numpy_io)

    def depthwise_conv2d_requant(self, x, weights, *, x_zero_point, y_zero_point, stride=1,
                                 padding=0, dilation=1, lo=-128, hi=127, pool=False):
        """Depthwise convolution with bias, requantization, clamp (optional 2x2 max pool).

        Equals ``requantize(depthwise_conv2d(x, w, bias, ...), M, n, y_zero_point, lo, hi)``
        (then ``max_pool2d(..., 2, 2)`` with ``pool=True``); arguments as for
        :meth:`conv2d_requant`, ``weights`` from :meth:`upload_depthwise_weights`.
        """
        if not isinstance(weights, DepthwiseWeights):
            raise ValueError("weights must come from upload_depthwise_weights")
        x, numpy_io = self._input("x", x, 4, "(N, C, H, W)")
        n, c, h, w = x.shape
        if c != weights.channels:
            raise ValueError(f"x has {c} channels but the depthwise weights have "
                             f"{weights.channels}")
        a = params.conv_arguments((h, w), weights.kernel, x_zero_point=x_zero_point,
                                  y_zero_point=y_zero_point, lo=lo, hi=hi, stride=stride,
                                  padding=padding, dilation=dilation, pool=pool)
        y = self.empty((n, c, a.out_h, a.out_w))
        geometry = _vector([n, c, h, w, 1, 1, 1, *weights.kernel, *a.stride, a.pads[0],
                            a.pads[1], *a.dilation, a.oh], cltypes.int16)
        quant = _vector([a.ow, a.zx, a.zy, a.lo, a.hi, c, 0], cltypes.int8)
        self._launch("depthwise_requant_pool2" if pool else "depthwise_requant",
                     (_round_up(a.out_h * a.out_w, _LINEAR_GROUP), n * c), (_LINEAR_GROUP, 1),
                     x.buffer, weights.w, weights.bias, weights.multiplier, weights.shift,
                     y.buffer, self._status, geometry, quant)
        return self._output(y, numpy_io)

    # ---------------------------------------------------------------- pooling, add

    def _window(self, x_shape, kernel, stride, padding):
        kernel, stride = params.pair("kernel", kernel), params.pair("stride", stride)
        pads = params.padding(padding)
        if max(pads[0], pads[2]) >= kernel[0] or max(pads[1], pads[3]) >= kernel[1]:
            raise ValueError(f"padding {pads} must be smaller than the kernel {kernel} on "
                             f"each side")
        if kernel[0] * kernel[1] > WINDOW_MAX:
            raise ValueError(f"kernel {kernel} has more than {WINDOW_MAX} elements")
        oh, ow, _, _ = params.conv_geometry(x_shape, kernel, stride, pads, (1, 1), False)
        return kernel, stride, pads, oh, ow

    def max_pool2d(self, x, kernel, stride=1, padding=0):
        """``models.pool.max_pool2d``: padding never wins; one launch for the batch."""
        x, numpy_io = self._input("x", x, 4, "(N, C, H, W)")
        n, c, h, w = x.shape
        kernel, stride, pads, oh, ow = self._window((h, w), kernel, stride, padding)
        y = self.empty((n, c, oh, ow))
        geometry = _vector([h, w, *kernel, *stride, pads[0], pads[1], oh, ow], cltypes.int16)
        self._launch("max_pool", (_round_up(oh * ow, _LINEAR_GROUP), n * c),
                     (_LINEAR_GROUP, 1), x.buffer, y.buffer, geometry)
        return self._output(y, numpy_io)

    def avg_pool2d(self, x, kernel, stride=1, padding=0, *, x_scale, x_zero_point, y_scale,
                   y_zero_point, count_include_pad=False, lo=-128, hi=127):
        """``models.pool.avg_pool2d``: integer window sum, per-count multiplier table."""
        x, numpy_io = self._input("x", x, 4, "(N, C, H, W)")
        n, c, h, w = x.shape
        kernel, stride, pads, oh, ow = self._window((h, w), kernel, stride, padding)
        zx = params.zero_point("x_zero_point", x_zero_point)
        zy = params.zero_point("y_zero_point", y_zero_point)
        lo, hi = params.clamp_range(lo, hi)
        # Only the counts that occur get a multiplier, exactly as the golden model does, so
        # both accept and reject the same scales.
        if count_include_pad:
            counts = np.array([kernel[0] * kernel[1]])
        else:
            def valid(size, k, s, begin, out):
                start = np.arange(out) * s - begin
                return np.minimum(start + k, size) - np.maximum(start, 0)

            counts = np.unique(np.outer(valid(h, kernel[0], stride[0], pads[0], oh),
                                        valid(w, kernel[1], stride[1], pads[1], ow)))
        table_m = np.full(kernel[0] * kernel[1] + 1, 1 << 30, dtype=np.int32)
        table_n = np.ones_like(table_m)
        table_m[counts], table_n[counts] = avg_pool_multipliers(x_scale, y_scale, counts)
        y = self.empty((n, c, oh, ow))
        geometry = _vector([h, w, *kernel, *stride, pads[0], pads[1], oh, ow, zx, zy, lo, hi,
                            int(bool(count_include_pad))], cltypes.int16)
        self._launch("avg_pool", (_round_up(oh * ow, _LINEAR_GROUP), n * c),
                     (_LINEAR_GROUP, 1), x.buffer, y.buffer,
                     self._cached_table(table_m), self._cached_table(table_n), geometry)
        return self._output(y, numpy_io)

    def global_avg_pool(self, x, x_scale, x_zero_point, y_scale, y_zero_point, lo=-128,
                        hi=127):
        """``models.pool.global_avg_pool``: one work-group per (n, c) plane."""
        x, numpy_io = self._input("x", x, 4, "(N, C, H, W)")
        n, c, h, w = x.shape
        zx = params.zero_point("x_zero_point", x_zero_point)
        zy = params.zero_point("y_zero_point", y_zero_point)
        lo, hi = params.clamp_range(lo, hi)
        if h * w > WINDOW_MAX:
            raise ValueError(f"x must have 1 to {WINDOW_MAX} pixels per channel, not {h * w}")
        (m,), (k,) = avg_pool_multipliers(x_scale, y_scale, [h * w])
        y = self.empty((n, c, 1, 1))
        self._launch("global_avg_pool", (n * c * _GAP_GROUP,), (_GAP_GROUP,), x.buffer,
                     y.buffer, _vector([h * w, zx, zy, lo, hi, m, k], cltypes.int8))
        return self._output(y, numpy_io)

    def add(self, a, a_scale, a_zero_point, b, b_scale, b_zero_point, y_scale, y_zero_point,
            lo=-128, hi=127):
        """``models.eltwise.add`` (TFLite's quantized ADD), element-wise.

        ``a`` and ``b`` have the same shape, or (NumPy inputs only) shapes that broadcast;
        broadcasting is done on the host before the upload.
        """
        if isinstance(a, np.ndarray) and isinstance(b, np.ndarray):
            for name, value in (("a", a), ("b", b)):
                params.check_int8(name, value.shape, value.dtype, None, "(...)")
            try:
                shape = np.broadcast_shapes(a.shape, b.shape)
            except ValueError as exc:
                raise ValueError(f"a of shape {a.shape} and b of shape {b.shape} must have "
                                 f"broadcastable shapes") from exc
            a, b = np.broadcast_to(a, shape), np.broadcast_to(b, shape)
        a, numpy_io = self._input("a", a, None, "(...)")
        b, _ = self._input("b", b, None, "(...)")
        if a.shape != b.shape:
            raise ValueError(f"device tensors a {a.shape} and b {b.shape} must have the same "
                             f"shape")
        za = params.zero_point("a_zero_point", a_zero_point)
        zb = params.zero_point("b_zero_point", b_zero_point)
        zy = params.zero_point("y_zero_point", y_zero_point)
        lo, hi = params.clamp_range(lo, hi)
        try:
            key = tuple(float(np.asarray(s, dtype=np.float64).reshape(()))
                        for s in (a_scale, b_scale, y_scale))
        except (TypeError, ValueError):
            key = None  # not a plain scale: let the golden helper raise its own message
        multipliers = (add_multipliers(a_scale, b_scale, y_scale) if key is None
                       else _add_multipliers(*key))
        y = self.empty(a.shape)
        self._launch("add_requant", (_round_up(a.size, _LINEAR_GROUP),), (_LINEAR_GROUP,),
                     a.buffer, b.buffer, y.buffer, np.int32(a.size),
                     _vector([za, zb, zy, lo, hi, *multipliers], cltypes.int16))
        return self._output(y, numpy_io)

