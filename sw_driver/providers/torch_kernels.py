"""Exact integer layers on PyTorch tensors: the kernels of the "torch" provider.

Imported only when a :class:`~.torch_provider.TorchProvider` is built (it imports torch).
Every function takes and returns torch tensors on one device and gives the golden model's
result bit for bit; ``docs/semantics.md`` ("Exact int8 on float hardware") holds the proof.
In short:

- int8 values are exact in float16 (CUDA) and float32 (CPU); the product of two is an
  integer of magnitude at most ``2**14``, exact in float32; a float32 sum of at most
  ``CHUNK = 1024`` such products has every partial sum at most ``2**24`` in magnitude, in
  any order, so it is exact **provided** the library multiplies and adds those values with
  float32 accumulation. Convolution is therefore lowered here to ``unfold`` (im2col) and a
  plain matrix multiply (no cuDNN convolution, so no Winograd or FFT algorithm can be
  chosen), and :func:`exact_settings` turns off TF32 and PyTorch's reduced-precision fp16
  reductions. On CUDA the float16 operands go through ``torch.mm(..., out_dtype=float32)``
  (cuBLAS with float32 output and accumulation).
- Longer reductions are split into chunks of at most ``CHUNK`` products; each chunk's
  float32 result is converted to int64 and the chunks are added exactly.
- Zero points, bias, requantization, pooling and add run in int64 on the device, as
  :mod:`models.requant` defines them (round half to even by the same shift formula).
"""

import numpy as np
import torch
import torch.nn.functional as F

from models.conv import _output_shape
from models.pool import avg_pool_multipliers
from models.requant import INT32_MAX, INT32_MIN

from .cpu_kernels import CHUNK, _add_table

__all__ = ["CHUNK", "POOL_WINDOW_MAX", "AccumulatorOverflow", "DeviceArray", "Kernels",
           "exact_settings"]

#: Largest average-pool window whose float32 sum of ``x - z_x`` (each at most 255 in
#: magnitude) stays below ``2**24``, so is exact.
POOL_WINDOW_MAX = (1 << 24) // 255


class AccumulatorOverflow(ValueError):
    """An accumulator outside int32: the provider hands the layer to the golden model,
    which raises its own error."""


def exact_settings(device):
    """Switch off every PyTorch setting that would let a float matmul round its inputs or
    partial sums (process-wide flags, so they are set again before every layer)."""
    if torch.get_float32_matmul_precision() != "highest":
        torch.set_float32_matmul_precision("highest")
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction = False
        torch.backends.cudnn.allow_tf32 = False


class DeviceArray:
    """A torch tensor left on the device between two layers of the "torch" provider.

    ``numpy.asarray`` copies it to the host (what a fallback provider receives).
    """

    def __init__(self, tensor):
        self.tensor = tensor

    @property
    def shape(self):
        return tuple(self.tensor.shape)

    @property
    def ndim(self):
        return self.tensor.dim()

    @property
    def nbytes(self):
        return self.tensor.numel() * self.tensor.element_size()

    def numpy(self):
        return self.tensor.detach().cpu().numpy()

    def __array__(self, dtype=None, copy=None):
        array = self.numpy()
        return array if dtype is None else array.astype(dtype)

    def __repr__(self):
        return f"<DeviceArray {self.shape} {self.tensor.dtype} on {self.tensor.device}>"


def _rounding_shift(value, multiplier, shift, half):
    """:func:`models.requant.rounding_shift` on int64 tensors; ``half = 2**(n-1) - 1``."""
    product = value * multiplier
    odd = torch.bitwise_and(product >> shift, 1)
    return (product + half + odd) >> shift


def _q_params(multiplier, shift, shape):
    """``(M, n, 2**(n-1) - 1)`` as int64 NumPy arrays of ``shape``."""
    def fit(value):
        arr = np.asarray(value, dtype=np.int64)
        if arr.size == int(np.prod(shape)):
            return arr.reshape(shape)
        return np.broadcast_to(arr.reshape(()), shape).copy()  # per tensor

    m, n = fit(multiplier), fit(shift)
    return m, n, (np.int64(1) << (n - 1)) - 1


class Kernels:
    """The exact kernels on one device (``torch.device``); see the module docstring."""

    def __init__(self, device):
        self.device = torch.device(device)
        # float16 feeds the tensor cores on CUDA; the CPU has no fast float16 GEMM.
        self.compute = torch.float16 if self.device.type == "cuda" else torch.float32

    # ---------------------------------------------------------------- transfers

    def upload(self, array, dtype=None):
        array = np.ascontiguousarray(array)
        if not array.flags.writeable:  # torch.from_numpy wants a writable array
            array = array.copy()
        tensor = torch.from_numpy(array).to(self.device)
        return tensor if dtype is None else tensor.to(dtype)

    def requant_params(self, multiplier, shift, shape):
        return tuple(self.upload(a) for a in _q_params(multiplier, shift, shape))

    # ---------------------------------------------------------------- GEMM, exact

    def _mm(self, a, b):
        """``a @ b`` (2-D or batched 3-D) of integer-valued compute-dtype tensors, as
        float32, with float32 accumulation."""
        if self.compute == torch.float16:
            op = torch.mm if a.dim() == 2 else torch.bmm
            return op(a, b, out_dtype=torch.float32)
        return torch.matmul(a, b)

    def exact_matmul(self, a, b):
        """Exact int64 ``a @ b`` for compute-dtype tensors of int8 values, the reduction
        split into chunks of at most :data:`CHUNK` products."""
        k = a.shape[-1]
        if k <= CHUNK:
            return self._mm(a, b).to(torch.int64)
        total = None
        for k0 in range(0, k, CHUNK):
            part = self._mm(a[..., k0:k0 + CHUNK], b[..., k0:k0 + CHUNK, :]).to(torch.int64)
            total = part if total is None else total + part
        return total

    # ---------------------------------------------------------------- layers

    def conv(self, x, w_mat, c0, q, *, kernel, stride, padding, dilation, groups, zx, zy,
             lo, hi, check=False):
        """Requantized convolution of int8 NCHW ``x``.

        ``w_mat``: (G, O/G, K) compute-dtype weights; ``c0``: (O, 1) int64,
        ``bias - z_x * sum(w)``; ``q``: requantization tensors of shape (O, 1).
        """
        n, c, h, wd = x.shape
        (kh, kw), (sh, sw), (dh, dw) = kernel, stride, dilation
        top, left, bottom, right = padding
        oh, ow = _output_shape((h, wd), kernel, stride, padding, dilation)
        xf = x.to(self.compute)
        if top or left or bottom or right:
            # Padding holds z_x, as in the golden model: it contributes z_x * w, which
            # c0 removes with every other z_x term.
            xf = F.pad(xf, (left, right, top, bottom), value=float(zx))
        # im2col as one stack of kh * kw strided views, laid out (C, kh*kw, N, OH, OW) so
        # that it reshapes for free to (G, K, N * L) with K ordered as the weights' (c, u, v).
        # (F.unfold is the same matrix, but 8x slower on the CPU.)
        xt = xf.transpose(0, 1)
        taps = [xt[:, :, u * dh:u * dh + sh * (oh - 1) + 1:sh,
                   v * dw:v * dw + sw * (ow - 1) + 1:sw]
                for u in range(kh) for v in range(kw)]
        cols = torch.stack(taps, dim=1) if len(taps) > 1 else taps[0].contiguous()
        k = c // groups * kh * kw
        cols = cols.reshape(groups, k, n * oh * ow)
        if groups == 1:
            t = self.exact_matmul(w_mat[0], cols[0])              # (O, N*L)
        else:
            t = self.exact_matmul(w_mat, cols).reshape(-1, n * oh * ow)
        y = self._requant(self._checked(t + c0, check), q, zy, lo, hi)   # (O, N*L) int8
        return y.reshape(-1, n, oh, ow).permute(1, 0, 2, 3)

    def dense(self, x, w_t, c0, q, *, zy, lo, hi, check=False):
        """Requantized dense layer of int8 (M, K) ``x``; ``w_t`` (K, O) compute dtype,
        ``c0`` and ``q`` of shape (1, O)."""
        t = self.exact_matmul(x.to(self.compute), w_t)
        return self._requant(self._checked(t + c0, check), q, zy, lo, hi)

    def matmul(self, a, b, *, za, zb, q, zy, lo, hi, check=False):
        """``requantize((a - z_a) @ (b - z_b))`` of two int8 activations, by
        ``a @ b - z_b * rowsum(a) - z_a * colsum(b) + K * z_a * z_b`` (all exact)."""
        shape = torch.broadcast_shapes(a.shape[:-2], b.shape[:-2])
        a = a.expand(*shape, *a.shape[-2:])
        b = b.expand(*shape, *b.shape[-2:])
        m, k, nn = a.shape[-2], a.shape[-1], b.shape[-1]
        af = a.reshape(-1, m, k).to(self.compute)
        bf = b.reshape(-1, k, nn).to(self.compute)
        t = self.exact_matmul(af, bf).reshape(*shape, m, nn)
        rows = a.to(torch.int64).sum(-1, keepdim=True)
        cols = b.to(torch.int64).sum(-2, keepdim=True)
        acc = t - zb * rows - za * cols + k * za * zb
        return self._requant(self._checked(acc, check), q, zy, lo, hi)

    @staticmethod
    def _checked(acc, check):
        """``acc``, after a host-side range check where the weights alone cannot bound it
        (a sync, so only for such layers)."""
        if check and acc.numel() and bool(((acc < INT32_MIN) | (acc > INT32_MAX)).any()):
            raise AccumulatorOverflow("the accumulator leaves the int32 range")
        return acc

    def _requant(self, acc, q, zy, lo, hi):
        m, n, half = q
        return torch.clamp(_rounding_shift(acc, m, n, half) + zy, lo, hi).to(torch.int8)

    def max_pool(self, x, *, kernel, stride, padding):
        top, left, bottom, right = padding
        # float16/32 hold -129..127 exactly; -129 is below every int8, so padding never wins.
        xf = F.pad(x.to(self.compute), (left, right, top, bottom), value=-129.0)
        return F.max_pool2d(xf, kernel, stride).to(torch.int8)

    def avg_pool(self, x, q, *, kernel, stride, padding, zx, zy, lo, hi):
        """``q``: requantization tensors of shape (OH, OW), one per window count."""
        top, left, bottom, right = padding
        d = F.pad(x.to(torch.float32) - zx, (left, right, top, bottom))
        # divisor_override=1: the window sum, exact in float32 below 2**24.
        total = F.avg_pool2d(d, kernel, stride, divisor_override=1).to(torch.int64)
        return self._requant(total, q, zy, lo, hi)

    def global_avg_pool(self, x, q, *, zx, zy, lo, hi):
        hw = x.shape[2] * x.shape[3]
        total = x.to(torch.int64).sum(dim=(2, 3), keepdim=True) - hw * zx
        return self._requant(total, q, zy, lo, hi)

    def add(self, a, b, table):
        """The golden add by look-up in its 65536-entry table (see
        :func:`~.cpu_kernels.add`), broadcasting ``a`` and ``b``."""
        index = (a.to(torch.int32) + 128) * 256 + (b.to(torch.int32) + 128)
        return table[index.to(torch.int64)]

    def quantize(self, x, scale, zero_point):
        # ``scale`` is a 0-d tensor on the device: PyTorch's CUDA division by a host
        # scalar multiplies by the reciprocal, which is not the correctly rounded quotient
        # NumPy computes. torch.round rounds half to even, as np.rint.
        q = torch.round(x.to(torch.float32) / scale)
        return (torch.clamp(q, -128 - zero_point, 127 - zero_point)
                + zero_point).to(torch.int8)

    def dequantize(self, q, scale, zero_point):
        return (q.to(torch.int32) - zero_point).to(torch.float32) * scale


# -------------------------------------------------------------------- per-layer constants

def conv_constants(kernels, layer):
    """Device tensors for a Conv layer: ``(w_mat, c0, q, bound)``; ``bound`` bounds
    ``|acc|`` from the weights alone."""
    w = layer.weight
    o = w.shape[0]
    g = layer.groups
    w_mat = kernels.upload(w.reshape(g, o // g, -1)).to(kernels.compute)
    c0, bound = _c0_and_bound(w.reshape(o, -1), layer.bias, layer.x_zero_point)
    return (w_mat, kernels.upload(c0.reshape(o, 1)),
            kernels.requant_params(layer.multiplier, layer.shift, (o, 1)), bound)


def dense_constants(kernels, layer):
    w = layer.weight
    o = w.shape[0]
    w_t = kernels.upload(np.ascontiguousarray(w.T)).to(kernels.compute)
    c0, bound = _c0_and_bound(w, layer.bias, layer.x_zero_point)
    return (w_t, kernels.upload(c0.reshape(1, o)),
            kernels.requant_params(layer.multiplier, layer.shift, (1, o)), bound)


def _c0_and_bound(w2, bias, zx):
    """``bias - z_x * sum(w)`` per output (int64) and a bound on ``|acc|``: every
    ``|x - z_x|`` is at most ``max(127 - z_x, z_x + 128)``."""
    sums = w2.sum(axis=1, dtype=np.int64)
    c0 = -int(zx) * sums
    biases = np.zeros_like(c0) if bias is None else bias.astype(np.int64)
    c0 = c0 + biases
    widest = max(127 - int(zx), int(zx) + 128)
    bound = int((np.abs(w2.astype(np.int64)).sum(axis=1) * widest + np.abs(biases)).max())
    return c0, bound


def matmul_bound(k, za, zb):
    """A bound on ``|acc|`` of a MatMul with reduction ``k``."""
    return k * max(127 - za, za + 128) * max(127 - zb, zb + 128)


def avg_pool_params(kernels, layer, h, w):
    """Requantization tensors (OH, OW) of an AveragePool at input size ``h`` x ``w``: one
    multiplier per window's element count, as :func:`models.pool.avg_pool2d` makes them."""
    kernel, stride, padding = layer.kernel, layer.stride, layer.padding
    oh, ow = _output_shape((h, w), kernel, stride, padding, (1, 1))
    top, left = padding[0], padding[1]
    if layer.count_include_pad:
        counts = np.full((oh, ow), kernel[0] * kernel[1], dtype=np.int64)
    else:
        def valid(size, k, s, pad_begin, out):
            start = np.arange(out) * s - pad_begin
            return np.minimum(start + k, size) - np.maximum(start, 0)

        counts = np.outer(valid(h, kernel[0], stride[0], top, oh),
                          valid(w, kernel[1], stride[1], left, ow))
    distinct, index = np.unique(counts, return_inverse=True)
    table_m, table_n = avg_pool_multipliers(layer.x_scale, layer.y_scale, distinct)
    m = table_m[index].reshape(oh, ow)
    n = table_n[index].reshape(oh, ow)
    return kernels.requant_params(m, n, (oh, ow))


def global_pool_params(kernels, layer, hw):
    (m,), (n,) = avg_pool_multipliers(layer.x_scale, layer.y_scale, [hw])
    return kernels.requant_params(m, n, ())


def add_table(kernels, layer):
    table = _add_table(float(np.asarray(layer.a_scale, dtype=np.float64).reshape(())),
                       int(layer.a_zero_point),
                       float(np.asarray(layer.b_scale, dtype=np.float64).reshape(())),
                       int(layer.b_zero_point),
                       float(np.asarray(layer.y_scale, dtype=np.float64).reshape(())),
                       int(layer.y_zero_point), int(layer.lo), int(layer.hi))
    return kernels.upload(table)
