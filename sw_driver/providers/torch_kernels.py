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
- Zero points and bias fold into one int64 per output channel, ``c0 = bias - z_x * sum(w)``
  (padding holds ``z_x``, as in the golden model). Requantization (:class:`Requant`) runs
  in float64 where that is exact, by :func:`~.cpu_kernels.conv2d_requant`'s argument: with
  ``|t| + |c0| < 2**21`` and ``n <= 52`` every intermediate of ``(t * M + c0 * M) * 2**-n``
  is an integer (or a power-of-two scaling of one) below ``2**53``, and ``round`` rounds
  half to even as :func:`models.requant.rounding_shift` does. The bound comes from the
  weights when they give it; else, on the CPU, from the data (one pass, no cost of a
  device synchronization); otherwise the golden shift formula runs in int64.
- ``Kernels(device, compile=True)`` runs the elementwise parts through ``torch.compile``
  (one fused kernel each): the float64 requantization, whose every intermediate is an exact
  integer or a power-of-two scaling of one, so fusing or contracting its operations (an FMA
  for ``t * M + c0 * M``) cannot change a value; and im2col, which only moves int8 values
  into the compute dtype. The GEMM is never compiled: with it inside the compiled region the
  H200 gave other results than the golden model (inductor chose its own matmul), so it stays
  the ``torch.mm(..., out_dtype=float32)`` above.
- Convolutions with one group run on NHWC storage (the output is an NCHW view of it, so
  the next layer's im2col reads it without a transpose): im2col is one strided view of the
  padded input, copied once.
"""

import numpy as np
import torch
import torch.nn.functional as F

from models import intonly
from models.conv import _output_shape
from models.pool import avg_pool_multipliers
from models.requant import INT32_MAX, INT32_MIN

from .cpu_kernels import ACC_FLOAT_MAX, CHUNK, SHIFT_FLOAT_MAX, _add_table

__all__ = ["CHUNK", "POOL_WINDOW_MAX", "AccumulatorOverflow", "DeviceArray", "Kernels",
           "Requant", "exact_settings"]

#: Output positions per block of a convolution on the CPU (whole images, at least one).
BLOCK_ROWS = 2048
#: Largest average-pool window whose float32 sum of ``x - z_x`` (each at most 255 in
#: magnitude) stays below ``2**24``, so is exact.
POOL_WINDOW_MAX = (1 << 24) // 255


class AccumulatorOverflow(ValueError):
    """An accumulator outside int32: the provider hands the layer to the golden model,
    which raises its own error."""


def exact_settings(device):
    """Switch off every PyTorch setting that would let a float matmul round its inputs or
    partial sums. They are process-wide flags that other code may change, so the provider
    checks them before every layer: reading them costs a few hundred nanoseconds."""
    if torch.get_float32_matmul_precision() != "highest":
        torch.set_float32_matmul_precision("highest")
    if device.type == "cuda":
        matmul = torch.backends.cuda.matmul
        if matmul.allow_tf32 or matmul.allow_fp16_reduced_precision_reduction:
            matmul.allow_tf32 = False
            matmul.allow_fp16_reduced_precision_reduction = False
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


def _q_params(multiplier, shift, shape):
    """``(M, n)`` as int64 NumPy arrays of ``shape``."""
    def fit(value):
        arr = np.asarray(value, dtype=np.int64)
        if arr.size == int(np.prod(shape)):
            return arr.reshape(shape)
        return np.broadcast_to(arr.reshape(()), shape).copy()  # per tensor

    return fit(multiplier), fit(shift)


def _rnd(value, multiplier, shift):
    """:func:`models.requant.rounding_shift` of int64 tensors (``multiplier`` and ``shift``
    ints or int64 tensors that broadcast)."""
    if not torch.is_tensor(multiplier):
        multiplier = int(multiplier)
    product = value * multiplier
    if not torch.is_tensor(shift):
        shift = int(shift)
        half = (1 << (shift - 1)) - 1
    else:
        half = torch.bitwise_left_shift(torch.ones_like(shift), shift - 1) - 1
    odd = torch.bitwise_right_shift(product, shift) & 1
    return torch.bitwise_right_shift(product + half + odd, shift)


def _requant_int64(acc, multiplier, shift, zero_point, lo, hi):
    """:func:`models.requant.requantize` of an int64 tensor already in the int32 range,
    the constants per tensor or per channel along the last axis."""
    return torch.clamp(_rnd(acc, multiplier, shift) + int(zero_point), int(lo),
                       int(hi)).to(torch.int8)


def _isqrt(value):
    """:func:`models.intonly.isqrt` (31 restoring steps) of int64 tensors."""
    rem = value
    root = torch.zeros_like(rem)
    bit = 1 << 60
    for _ in range(31):
        trial = root + bit
        take = rem >= trial
        rem = torch.where(take, rem - trial, rem)
        root = torch.where(take, (root >> 1) + bit, root >> 1)
        bit >>= 2
    return root


def _bit_length(value):
    """:func:`models.intonly._bit_length` of positive int64 tensors below ``2**62``."""
    bits = torch.zeros_like(value)
    rest = value
    for step in (32, 16, 8, 4, 2, 1):
        big = rest >= (1 << step)
        bits = torch.where(big, bits + step, bits)
        rest = torch.where(big, rest >> step, rest)
    return bits + (rest > 0).to(torch.int64)


def _requant_float(t, const, mf, scale, lo, hi, zy):
    """The float64 requantization of :class:`Requant` as one function of tensors (what
    ``torch.compile`` fuses into one kernel): ``lo``, ``hi`` and ``zy`` are float64 scalars
    (``lo``/``hi`` already less ``zy``)."""
    y = t * mf if const is None else torch.addcmul(const, t, mf)
    return (torch.clamp(torch.round(y * scale), lo, hi) + zy).to(torch.int8)


def _gather_cols(x, kernel, stride, padding, dilation, zx, dtype):
    """im2col of int8 NCHW ``x``: ``(N * OH * OW, kh * kw * C)`` in ``dtype`` with K ordered
    (kh, kw, c), the padding holding ``zx``. Only moves values, so it is exact however it is
    fused."""
    n, _, h, wd = x.shape
    (kh, kw), (sh, sw), (dh, dw) = kernel, stride, dilation
    top, left, bottom, right = padding
    oh, ow = _output_shape((h, wd), kernel, stride, padding, dilation)
    xp = F.pad(x.permute(0, 2, 3, 1).to(dtype), (0, 0, left, right, top, bottom), value=zx)
    taps = [xp[:, u * dh:u * dh + sh * (oh - 1) + 1:sh, v * dw:v * dw + sw * (ow - 1) + 1:sw]
            for u in range(kh) for v in range(kw)]
    cols = torch.stack(taps, dim=3) if len(taps) > 1 else taps[0].unsqueeze(3)
    return cols.reshape(n * oh * ow, kh * kw * x.shape[1])


#: Compiled variants (input shapes and layer geometries) per function before torch.compile
#: runs the rest eagerly: a model's layers times a few batch sizes.
RECOMPILE_LIMIT = 64


class _Compiled:
    """``fn`` through ``torch.compile``; once compiling fails on this machine (no C++
    compiler, no Triton) ``fn`` itself, which gives the same values, only slower.
    ``error`` says why it fell back.

    Shapes are static (``dynamic=False``): one compiled kernel per shape and geometry. With
    automatic dynamic shapes, PyTorch 2.13 reused an im2col compiled for one geometry on
    another and returned the wrong shape (``tests/test_torch_provider.py`` keeps a case).
    """

    def __init__(self, fn):
        self.eager, self.error = fn, None
        import torch._dynamo.config as dynamo

        for name in ("recompile_limit", "cache_size_limit"):  # the name changed in 2.x
            if hasattr(dynamo, name):
                setattr(dynamo, name, max(getattr(dynamo, name), RECOMPILE_LIMIT))
                break
        self.compiled = torch.compile(fn, dynamic=False)

    def __call__(self, *args):
        if self.error is None:
            try:
                return self.compiled(*args)
            except Exception as exc:  # any failure to compile: the eager function
                self.error = f"{type(exc).__name__}: {exc}".splitlines()[0]
        return self.eager(*args)


#: The compiled functions, made on first use and shared by every provider in the process
#: (torch.compile caches its code per function object).
_COMPILED = {}


def compiled(name):
    """The shared :class:`_Compiled` of ``"requant"`` or ``"cols"``."""
    if name not in _COMPILED:
        _COMPILED[name] = _Compiled({"requant": _requant_float, "cols": _gather_cols}[name])
    return _COMPILED[name]


class Requant:
    """``clamp(z_y + rounding_shift(t + c0, M, n), lo, hi)`` as int8, on the device.

    Parameters
    ----------
    kernels : Kernels
    multiplier, shift : array_like
        Per tensor or with ``shape``'s size (per channel, per window).
    shape : tuple of int
        The shape the constants broadcast from against ``t`` (e.g. ``(O,)`` for (P, O)
        rows, ``(O, 1)`` for (O, P) columns).
    c0 : numpy.ndarray of int64, optional
        Added to ``t`` first (``bias - z_x * sum(w)``), of ``shape``'s size.
    t_bound : int, optional
        A bound on ``|t|`` known without the data (from the weights), if any.
    zy, lo, hi : int
    check : bool
        The int32 range of ``t + c0`` is not implied by ``t_bound``: the int64 path checks
        it (a synchronization) and raises :class:`AccumulatorOverflow`.
    """

    def __init__(self, kernels, multiplier, shift, shape, *, c0=None, t_bound=None, zy, lo,
                 hi, check=False):
        m, n = _q_params(multiplier, shift, shape)
        c0 = np.zeros(shape, np.int64) if c0 is None else np.asarray(c0, np.int64)
        c0 = c0.reshape(shape)
        self.zy, self.lo, self.hi, self.check = int(zy), int(lo), int(hi), bool(check)
        self.cpu = kernels.device.type == "cpu"
        self.c0_max = int(np.abs(c0).max()) if c0.size else 0
        # |t| + |c0| < 2**21 and n <= 52 (with M < 2**31) make the float64 path exact.
        self.float_ok = bool(m.size == 0 or (
            int(n.max()) <= SHIFT_FLOAT_MAX and int(n.min()) >= 1
            and int(np.abs(m).max()) < 1 << 31 and self.c0_max < ACC_FLOAT_MAX))
        self.static = self.float_ok and t_bound is not None and (
            t_bound + self.c0_max < ACC_FLOAT_MAX)
        up = kernels.upload
        self.any_c0 = bool(self.c0_max)
        self.c0 = up(c0)
        self.m, self.n = up(m), up(n)
        self.half = up((np.int64(1) << (n - 1)) - 1)
        self.fused = kernels.fused
        if self.float_ok:
            self.mf = up(m.astype(np.float64))
            self.const = up((c0 * m).astype(np.float64))         # |.| < 2**52: exact
            self.scale = up(np.ldexp(1.0, -n))
            if self.fused:  # scalars as tensors: one compiled kernel for every layer
                self.bounds = [up(np.float64(v)) for v in
                               (self.lo - self.zy, self.hi - self.zy, self.zy)]

    def uses_float(self, t):
        """Whether ``t`` goes the float64 way: the weights bound it, or (on the CPU, where
        reading a value back costs no device synchronization) its own range does."""
        if self.static:
            return True
        if not (self.float_ok and self.cpu) or not t.numel():
            return False
        lo, hi = torch.aminmax(t)
        return max(-float(lo), float(hi)) + self.c0_max < ACC_FLOAT_MAX

    def __call__(self, t):
        """``t``: integer values (float32, float64 or int64) broadcasting with the
        constants. Returns int8."""
        if self.uses_float(t):
            if self.fused:
                return compiled("requant")(t, self.const if self.any_c0 else None,
                                           self.mf, self.scale, *self.bounds)
            # t * M + c0 * M, exact; * 2**-n exact; round: ties to even, as golden.
            y = torch.addcmul(self.const, t, self.mf) if self.any_c0 else t * self.mf
            y.mul_(self.scale).round_()
            y.clamp_(self.lo - self.zy, self.hi - self.zy).add_(self.zy)
            return y.to(torch.int8)
        acc = t.to(torch.int64)
        if acc is t:
            acc = acc.clone()
        if self.any_c0:
            acc.add_(self.c0)
        if self.check and acc.numel() and bool(((acc < INT32_MIN) | (acc > INT32_MAX)).any()):
            raise AccumulatorOverflow("the accumulator leaves the int32 range")
        # models.requant.rounding_shift, in place: (p + 2**(n-1) - 1 + odd) >> n.
        acc.mul_(self.m)
        odd = torch.bitwise_right_shift(acc, self.n).bitwise_and_(1)
        acc.add_(self.half).add_(odd).bitwise_right_shift_(self.n)
        return acc.add_(self.zy).clamp_(self.lo, self.hi).to(torch.int8)


class Kernels:
    """The exact kernels on one device (``torch.device``); see the module docstring.
    ``compile``: run requantization and im2col through ``torch.compile`` (:func:`compiled`).
    """

    def __init__(self, device, *, compile=False):
        self.device = torch.device(device)
        self.fused = bool(compile)
        # float16 feeds the tensor cores on CUDA; the CPU has no fast float16 GEMM.
        self.compute = torch.float16 if self.device.type == "cuda" else torch.float32

    # ---------------------------------------------------------------- transfers

    def upload(self, array, dtype=None):
        array = np.ascontiguousarray(array)
        if not array.flags.writeable:  # torch.from_numpy wants a writable array
            array = array.copy()
        tensor = torch.from_numpy(array).to(self.device)
        return tensor if dtype is None else tensor.to(dtype)

    def requant(self, multiplier, shift, shape, **kwargs):
        """A :class:`Requant` on this device."""
        return Requant(self, multiplier, shift, shape, **kwargs)

    # ---------------------------------------------------------------- GEMM, exact

    def _mm(self, a, b):
        """``a @ b`` (2-D or batched 3-D) of integer-valued compute-dtype tensors, as
        float32, with float32 accumulation."""
        if self.compute == torch.float16:
            op = torch.mm if a.dim() == 2 else torch.bmm
            return op(a, b, out_dtype=torch.float32)
        return torch.matmul(a, b)

    def exact_matmul(self, a, b):
        """Exact ``a @ b`` for compute-dtype tensors of int8 values: float32 when the
        reduction is at most :data:`CHUNK` products, else float64, the sum of exact float32
        chunks of at most :data:`CHUNK` products (exact below ``2**53``)."""
        k = a.shape[-1]
        if k <= CHUNK:
            return self._mm(a, b)
        total = None
        for k0 in range(0, k, CHUNK):
            part = self._mm(a[..., k0:k0 + CHUNK], b[..., k0:k0 + CHUNK, :])
            if total is None:
                total = part.to(torch.float64)
            else:
                total.add_(part)
        return total

    # ---------------------------------------------------------------- layers

    def conv(self, x, w, rq, *, kernel, stride, padding, dilation, groups, zx):
        """Requantized convolution of int8 NCHW ``x`` (any strides).

        ``w``: compute-dtype weights, (K, O) with K ordered (kh, kw, c) for one group, else
        (G, O/G, K) with K ordered (c, kh, kw); ``rq``: the layer's :class:`Requant`, of
        shape (O,) for one group, else (O, 1).
        """
        if groups == 1:
            return self._conv_nhwc(x, w, rq, kernel=kernel, stride=stride, padding=padding,
                                   dilation=dilation, zx=zx)
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
        xt = xf.transpose(0, 1)
        taps = [xt[:, :, u * dh:u * dh + sh * (oh - 1) + 1:sh,
                   v * dw:v * dw + sw * (ow - 1) + 1:sw]
                for u in range(kh) for v in range(kw)]
        cols = torch.stack(taps, dim=1) if len(taps) > 1 else taps[0].contiguous()
        k = c // groups * kh * kw
        cols = cols.reshape(groups, k, n * oh * ow)
        t = self.exact_matmul(w, cols).reshape(-1, n * oh * ow)          # (O, N*L)
        return rq(t).reshape(-1, n, oh, ow).permute(1, 0, 2, 3)

    def _conv_nhwc(self, x, w, rq, *, kernel, stride, padding, dilation, zx):
        n, c, h, wd = x.shape
        (kh, kw), (sh, sw), (dh, dw) = kernel, stride, dilation
        top, left, bottom, right = padding
        oh, ow = _output_shape((h, wd), kernel, stride, padding, dilation)
        if self.fused:  # the whole batch: im2col as one compiled kernel, the GEMM eager
            a = compiled("cols")(x, kernel, stride, padding, dilation, float(zx),
                                 self.compute)
            return rq(self.exact_matmul(a, w)).view(n, oh, ow, -1).permute(0, 3, 1, 2)
        hp, wp = h + top + bottom, wd + left + right
        # On the CPU, blocks of whole images of about BLOCK_ROWS output positions: the
        # buffers are reused from block to block and stay in cache (a fresh 40 MB im2col
        # matrix per layer costs more in page faults than its GEMM). A GPU takes the batch
        # at once.
        nb = n if self.device.type != "cpu" else max(1, min(n, BLOCK_ROWS // (oh * ow)))
        # The padded input in NHWC; the border holds z_x (c0 removes its contribution) and
        # is never overwritten.
        xp = torch.empty((nb, hp, wp, c), dtype=self.compute, device=self.device)
        if top:
            xp[:, :top].fill_(zx)
        if bottom:
            xp[:, top + h:].fill_(zx)
        if left:
            xp[:, top:top + h, :left].fill_(zx)
        if right:
            xp[:, top:top + h, left + wd:].fill_(zx)
        s0, s1, s2, s3 = xp.stride()
        direct = (kh, kw, sh, sw) == (1, 1, 1, 1)
        if not direct:
            cols = torch.empty((nb, oh, ow, kh, kw, c), dtype=self.compute,
                               device=self.device)
        x_nhwc = x.permute(0, 2, 3, 1)
        out = None
        for b0 in range(0, n, nb):
            bn = min(nb, n - b0)
            xb = xp[:bn]
            xb[:, top:top + h, left:left + wd].copy_(x_nhwc[b0:b0 + bn])
            if direct:
                a = xb.view(bn * oh * ow, c)
            else:
                # im2col: for one kernel row u the kw * c values of a window are one
                # strided view of the NHWC input (runs of kw * c values when dw == 1).
                cb = cols[:bn]
                for u in range(kh):
                    cb[:, :, :, u].copy_(xb[:, u * dh:].as_strided(
                        (bn, oh, ow, kw, c), (s0, sh * s1, sw * s2, dw * s2, s3)))
                a = cb.view(bn * oh * ow, kh * kw * c)
            y = rq(self.exact_matmul(a, w))                               # (bn*OH*OW, O)
            if nb == n:
                out = y
                break
            if out is None:
                out = torch.empty((n * oh * ow, y.shape[1]), dtype=torch.int8,
                                  device=self.device)
            out[b0 * oh * ow:(b0 + bn) * oh * ow].copy_(y)
        return out.view(n, oh, ow, -1).permute(0, 3, 1, 2)

    def dense(self, x, w_t, rq):
        """Requantized dense layer of int8 (M, K) ``x``; ``w_t`` (K, O) compute dtype,
        ``rq`` of shape (O,)."""
        return rq(self.exact_matmul(x.to(self.compute), w_t))

    def matmul(self, a, b, *, za, zb, rq):
        """``requantize((a - z_a) @ (b - z_b))`` of two int8 activations, by
        ``a @ b - z_b * rowsum(a) - z_a * colsum(b) + K * z_a * z_b`` (all exact in int64)."""
        shape = torch.broadcast_shapes(a.shape[:-2], b.shape[:-2])
        a = a.expand(*shape, *a.shape[-2:])
        b = b.expand(*shape, *b.shape[-2:])
        m, k, nn = a.shape[-2], a.shape[-1], b.shape[-1]
        af = a.reshape(-1, m, k).to(self.compute)
        bf = b.reshape(-1, k, nn).to(self.compute)
        acc = self.exact_matmul(af, bf).reshape(*shape, m, nn).to(torch.int64)
        if zb:
            acc.sub_(a.to(torch.int64).sum(-1, keepdim=True), alpha=zb)
        if za:
            acc.sub_(b.to(torch.int64).sum(-2, keepdim=True), alpha=za)
        if za and zb:
            acc.add_(k * za * zb)
        return rq(acc)

    def max_pool(self, x, *, kernel, stride, padding):
        top, left, bottom, right = padding
        # float16/32 hold -129..127 exactly; -129 is below every int8, so padding never wins.
        xf = F.pad(x.to(self.compute), (left, right, top, bottom), value=-129.0)
        return F.max_pool2d(xf, kernel, stride).to(torch.int8)

    def avg_pool(self, x, rq, *, kernel, stride, padding, zx):
        """``rq``: a :class:`Requant` of shape (OH, OW), one multiplier per window count."""
        top, left, bottom, right = padding
        d = F.pad(x.to(torch.float32) - zx, (left, right, top, bottom))
        # divisor_override=1: the window sum, exact in float32 below 2**24.
        return rq(F.avg_pool2d(d, kernel, stride, divisor_override=1))

    def global_avg_pool(self, x, rq, *, zx):
        hw = x.shape[2] * x.shape[3]
        return rq(x.to(torch.int64).sum(dim=(2, 3), keepdim=True) - hw * zx)

    def add(self, a, b, table):
        """The golden add by look-up in its 65536-entry table (see
        :func:`~.cpu_kernels.add`), broadcasting ``a`` and ``b``."""
        if a.dim() == 4 and a.shape == b.shape and a.stride() == b.stride() and \
                a.is_contiguous(memory_format=torch.channels_last):
            # NHWC storage (a convolution's output): look up in that order, and keep it.
            return self.add(a.permute(0, 2, 3, 1), b.permute(0, 2, 3, 1),
                            table).permute(0, 3, 1, 2)
        index = a.to(torch.int32).mul_(256)
        if a.shape == b.shape:
            index.add_(b)
        else:
            index = index + b
        return table[index.add_(128 * 256 + 128)]

    # ------------------------------------------------ integer-only sequence layers
    # models.intonly's recipes, operation for operation, in int64 on the device.

    def int_softmax(self, x, params):
        """:func:`models.intonly.softmax` over the last axis of int8 ``x``."""
        d = x.to(torch.int64)
        d = d - d.amax(dim=-1, keepdim=True)
        t = _rnd(d, params.exp_multiplier, params.exp_shift)
        k = -(t >> intonly.EXP_FRAC_BITS)
        f = t & ((1 << intonly.EXP_FRAC_BITS) - 1)
        c0, c1, c2 = intonly.EXP2_COEFFS
        frac = c0 + (((c1 + ((c2 * f) >> intonly.EXP_FRAC_BITS)) * f) >> intonly.EXP_FRAC_BITS)
        e = frac >> torch.clamp(k, max=31)
        recip = (1 << intonly.SOFTMAX_RECIP_BITS) // e.sum(dim=-1, keepdim=True)
        prob = _rnd(e, recip, intonly.SOFTMAX_RECIP_BITS - intonly.SOFTMAX_PROB_BITS)
        scaled = _rnd(prob, params.out_multiplier, params.out_shift)
        dtype = {"int8": torch.int8, "uint8": torch.uint8}[params.out_dtype]
        info = torch.iinfo(dtype)
        return torch.clamp(scaled + params.y_zero_point, info.min, info.max).to(dtype)

    def int_gelu(self, x, params, lo, hi):
        """:func:`models.intonly.gelu` of int8 ``x``, element-wise."""
        one = 1 << intonly.GELU_FRAC_BITS
        d = x.to(torch.int64) - params.x_zero_point
        v = _rnd(d, params.erf_multiplier, params.erf_shift)
        t = torch.clamp(v.abs(), max=one)
        a = _rnd(t, 2 * one - t, intonly.GELU_FRAC_BITS)
        g = d * (one + torch.sign(v) * a)
        return _requant_int64(g, params.out_multiplier, params.out_shift, params.y_zero_point,
                              lo, hi)

    def int_layernorm(self, x, consts, params, lo, hi):
        """:func:`models.intonly.layernorm` over the last axis of int8 ``x``; ``consts``:
        the per-channel int64 tensors ``(sign, bias, multiplier, shift)``."""
        sign, bias, multiplier, shift = consts
        length = x.shape[-1]
        x = x.to(torch.int64)
        s1 = x.sum(dim=-1, keepdim=True)
        s2 = (x * x).sum(dim=-1, keepdim=True)
        c = length * x - s1
        w = length * s2 - s1 * s1
        big_x = torch.clamp((w << intonly.LAYERNORM_EPS_BITS) + params.eps_term, min=1)
        j = (62 - _bit_length(big_x)) // 2
        root = _isqrt(big_x << (2 * j))
        recip = (1 << 62) // root
        n = _rnd(c, recip, 62 - intonly.LAYERNORM_NORM_BITS
                 - intonly.LAYERNORM_EPS_BITS // 2 - j)
        return _requant_int64(sign * n + bias, multiplier, shift, params.y_zero_point, lo, hi)

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
    """``(weights, Requant)`` of a Conv layer on the device (see :meth:`Kernels.conv`)."""
    w = layer.weight
    o, g = w.shape[0], layer.groups
    if g == 1:
        w_dev = kernels.upload(w.transpose(2, 3, 1, 0).reshape(-1, o)).to(kernels.compute)
        shape = (o,)
    else:
        w_dev = kernels.upload(w.reshape(g, o // g, -1)).to(kernels.compute)
        shape = (o, 1)
    return w_dev, _layer_requant(kernels, layer, w.reshape(o, -1), shape)


def dense_constants(kernels, layer):
    """``(w_t, Requant)`` of a Dense layer on the device."""
    w = layer.weight
    w_t = kernels.upload(np.ascontiguousarray(w.T)).to(kernels.compute)
    return w_t, _layer_requant(kernels, layer, w, (w.shape[0],))


def _layer_requant(kernels, layer, w2, shape):
    """The :class:`Requant` of a Conv or Dense layer with (O, K) weights ``w2``: ``c0 =
    bias - z_x * sum(w)`` per output; ``|t| <= 128 * sum|w|`` (raw int8 inputs); the int32
    check only where ``|acc|`` is not bounded below ``2**31`` from the weights (every
    ``|x - z_x|`` is at most ``max(127 - z_x, z_x + 128)``)."""
    zx = int(layer.x_zero_point)
    w64 = w2.astype(np.int64)
    c0 = -zx * w64.sum(axis=1)
    biases = np.zeros_like(c0) if layer.bias is None else layer.bias.astype(np.int64)
    c0 = c0 + biases
    absum = np.abs(w64).sum(axis=1)
    widest = max(127 - zx, zx + 128)
    bound = int((absum * widest + np.abs(biases)).max())
    return kernels.requant(layer.multiplier, layer.shift, shape, c0=c0.reshape(shape),
                           t_bound=int(128 * absum.max()), zy=layer.y_zero_point,
                           lo=layer.lo, hi=layer.hi, check=bound > INT32_MAX)


def matmul_bound(k, za, zb):
    """A bound on ``|acc|`` of a MatMul with reduction ``k``."""
    return k * max(127 - za, za + 128) * max(127 - zb, zb + 128)


def avg_pool_params(kernels, layer, h, w):
    """The :class:`Requant` (OH, OW) of an AveragePool at input size ``h`` x ``w``: one
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
    return kernels.requant(m, n, (oh, ow), zy=layer.y_zero_point, lo=layer.lo, hi=layer.hi)


def global_pool_params(kernels, layer, hw):
    (m,), (n,) = avg_pool_multipliers(layer.x_scale, layer.y_scale, [hw])
    return kernels.requant(m, n, (), zy=layer.y_zero_point, lo=layer.lo, hi=layer.hi)


def add_table(kernels, layer):
    table = _add_table(float(np.asarray(layer.a_scale, dtype=np.float64).reshape(())),
                       int(layer.a_zero_point),
                       float(np.asarray(layer.b_scale, dtype=np.float64).reshape(())),
                       int(layer.b_zero_point),
                       float(np.asarray(layer.y_scale, dtype=np.float64).reshape(())),
                       int(layer.y_zero_point), int(layer.lo), int(layer.hi))
    return kernels.upload(table)
