"""Faster, bit-identical replacements for :func:`models.conv.conv2d` and ``dense``.

The golden model subtracts the zero point first and sums in float64, one matrix multiply
per kernel tap. Here the raw int8 values are multiplied instead and summed in float32 BLAS
(half the memory traffic, twice the SIMD width), which is exact by this argument:

- Padding holds the value ``z_x`` (as in the golden model), so over every window
  ``sum((xp - z_x) * w) = sum(xp * w) - z_x * sum(w)``: the correction is one int64 per
  output channel, exact.
- Each product ``xp * w`` of two int8 values is an integer of magnitude at most
  ``128 * 128 = 2**14``. A sum of at most ``CHUNK = 1024`` of them is an integer of
  magnitude at most ``2**24``, and so is every partial sum in any order; float32 represents
  every integer up to ``2**24`` exactly, so each float32 addition (or FMA) is exact.
- Reductions longer than ``CHUNK`` are split; the chunk results are converted to int64 and
  added exactly.

The int32 range check and its error are the golden model's: on any overflow or bad shape
the golden function is called to raise the same exception. ``tests/test_session_cpu.py``
compares both on random and extreme values, with reductions on both sides of ``CHUNK``.
"""

import functools

import numpy as np
from numpy.lib.stride_tricks import as_strided, sliding_window_view

from models import conv as golden
from models.eltwise import add as golden_add
from models.requant import INT32_MAX, INT32_MIN, MULTIPLIER_MAX, MULTIPLIER_MIN, SHIFT_MIN

__all__ = ["CHUNK", "add", "conv2d", "conv2d_requant", "dense"]

#: Longest reduction summed in one float32 pass: CHUNK * 2**14 <= 2**24.
CHUNK = 1 << 10
#: Grouped reductions shorter than this go to the golden model (faster there).
SHORT_REDUCTION = 64


def _finish(total, correction, bias, channel_shape):
    acc = total - correction.reshape(channel_shape)
    if bias is not None:
        acc = acc + bias.astype(np.int64).reshape(channel_shape)
    if acc.size and (acc.min() < INT32_MIN or acc.max() > INT32_MAX):
        return None
    return acc.astype(np.int32)


def _chunked_matmul(a, b):
    """Exact int64 ``a @ b`` for float32 arrays of int8 values, reducing over a's last axis."""
    k = a.shape[-1]
    total = None
    for k0 in range(0, k, CHUNK):
        part = np.matmul(a[..., k0:k0 + CHUNK], b[..., k0:k0 + CHUNK, :]).astype(np.int64)
        total = part if total is None else total + part
    return total


def conv2d(x, w, bias=None, *, x_zero_point, stride=(1, 1), padding=(0, 0, 0, 0),
           dilation=(1, 1), groups=1):
    """Same contract and result as :func:`models.conv.conv2d` (int32 NCHW), faster.

    Parameters and exceptions are those of the golden function; ``stride``, ``dilation``
    must be pairs and ``padding`` a 4-tuple (the importer's layout).
    """
    def reference():
        return golden.conv2d(x, w, bias, x_zero_point=x_zero_point, stride=stride,
                             padding=padding, dilation=dilation, groups=groups)

    ok = (isinstance(x, np.ndarray) and isinstance(w, np.ndarray) and x.dtype == np.int8
          and w.dtype == np.int8 and x.ndim == 4 and w.ndim == 4 and len(padding) == 4
          and groups >= 1 and x.shape[1] == w.shape[1] * groups and w.shape[0] % groups == 0
          and (bias is None or (bias.dtype == np.int32 and bias.shape == (w.shape[0],))))
    if not ok:
        return reference()
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    top, left, bottom, right = (int(p) for p in padding)
    (sh, sw), (dh, dw) = stride, dilation
    span_h, span_w = dh * (kh - 1) + 1, dw * (kw - 1) + 1
    oh = (h + top + bottom - span_h) // sh + 1
    ow = (wd + left + right - span_w) // sw + 1
    if oh < 1 or ow < 1 or min(x.shape) < 1 or min(w.shape) < 1 or min(padding) < 0:
        return reference()
    if 1 < cg * kh * kw < SHORT_REDUCTION and cg > 1:
        # Measured: for a short reduction (e.g. a 3x3 stem over RGB) copying the windows
        # costs more than the golden per-tap loop saves.
        return reference()
    zx = int(x_zero_point)
    xp = np.pad(x, ((0, 0), (0, 0), (top, bottom), (left, right)),
                constant_values=zx).astype(np.float32)
    # (n, c, oh, ow, kh, kw) view: every window of every output position, no copy yet.
    win = sliding_window_view(xp, (span_h, span_w), axis=(2, 3))
    win = win[:, :, ::sh, ::sw, ::dh, ::dw][:, :, :oh, :ow]
    og = o // groups
    wf = w.astype(np.float32)
    if cg == 1:
        # Depthwise-like: a broadcast multiply per tap beats many tiny matrix multiplies.
        xg = win.reshape(n, groups, 1, oh, ow, kh * kw)
        wt = wf.reshape(groups, og, kh * kw)
        total = np.zeros((n, groups, og, oh, ow), dtype=np.int64)
        for t0 in range(0, kh * kw, CHUNK):
            part = np.zeros((n, groups, og, oh, ow), dtype=np.float32)
            for t in range(t0, min(t0 + CHUNK, kh * kw)):
                part += xg[..., t] * wt[None, :, :, t, None, None]
            total += part.astype(np.int64)
        total = total.reshape(n, o, oh, ow)
    else:
        k = cg * kh * kw
        cols = win.reshape(n, groups, cg, oh, ow, kh, kw).transpose(0, 1, 3, 4, 2, 5, 6)
        cols = cols.reshape(n, groups, oh * ow, k)
        wm = wf.reshape(groups, og, k).transpose(0, 2, 1)       # (G, K, Og)
        total = _chunked_matmul(cols, wm[None])                  # (n, G, P, Og)
        total = total.transpose(0, 1, 3, 2).reshape(n, o, oh, ow)
    correction = zx * w.reshape(o, -1).sum(axis=1, dtype=np.int64)
    acc = _finish(total, correction, bias, (1, o, 1, 1))
    return reference() if acc is None else acc


def dense(x, w, bias=None, *, x_zero_point):
    """Same contract and result as :func:`models.conv.dense` (int32 (N, O)), faster."""
    ok = (isinstance(x, np.ndarray) and isinstance(w, np.ndarray) and x.dtype == np.int8
          and w.dtype == np.int8 and x.ndim == 2 and w.ndim == 2 and x.shape[1] == w.shape[1]
          and min(x.shape) > 0 and min(w.shape) > 0
          and (bias is None or (bias.dtype == np.int32 and bias.shape == (w.shape[0],))))
    acc = None
    if ok:
        total = _chunked_matmul(x.astype(np.float32), w.astype(np.float32).T)
        correction = int(x_zero_point) * w.sum(axis=1, dtype=np.int64)
        acc = _finish(total, correction, bias, (1, -1))
    if acc is None:
        return golden.dense(x, w, bias, x_zero_point=x_zero_point)
    return acc


#: ``|acc| < ACC_FLOAT_MAX`` and ``n <= SHIFT_FLOAT_MAX`` make the float64 requantization of
#: :func:`conv2d_requant` exact: ``|acc * M| < 2**21 * 2**31 = 2**52`` and
#: ``2**(n-1) <= 2**51``, so every intermediate is an integer below ``2**53``.
ACC_FLOAT_MAX = 1 << 21
SHIFT_FLOAT_MAX = 52
#: Output positions per block of :func:`conv2d_requant` (whole images, at least one).
BLOCK_ROWS = 2048


def _pair(value):
    try:
        a, b = (int(v) for v in value)
    except (TypeError, ValueError):
        return None
    return (a, b) if a >= 1 and b >= 1 else None


def _small_int(value):
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        return None
    return int(value) if -128 <= int(value) <= 127 else None


def _channel_param(value, channels, low, high):
    arr = np.asarray(value)
    if arr.dtype == np.bool_ or not np.issubdtype(arr.dtype, np.integer):
        return None
    if arr.size == 1:
        arr = np.full(channels, arr.reshape(()), dtype=np.int64)
    elif arr.shape != (channels,):
        return None
    if arr.size and ((arr < low).any() or (arr > high).any()):
        return None
    return arr.astype(np.int64)


_CONSTANTS = {}
_CONSTANTS_MAX = 256


def _layer_constants(w, bias, zx, multiplier, shift, ow):
    """The per-layer constants of :func:`conv2d_requant`, or None outside its exact range.

    Cached (at batch 1 computing them costs about as much as the convolution). An entry is
    used only for the very same objects (it holds references, so no id can be reused) with
    unchanged contents (compared with copies taken when it was made).
    """
    key = (id(w), id(bias), id(multiplier), id(shift), zx, ow)
    entry = _CONSTANTS.get(key)
    objects = (w, bias, multiplier, shift)
    if entry is not None:
        refs, copies, consts = entry
        same = all(a is b for a, b in zip(refs, objects, strict=True))
        if same and all(np.array_equal(a, b) for a, b in zip(copies, objects, strict=True)):
            return consts
    consts = _compute_layer_constants(w, bias, zx, multiplier, shift, ow)
    if len(_CONSTANTS) >= _CONSTANTS_MAX:
        _CONSTANTS.clear()
    copies = tuple(None if v is None else np.array(v, copy=True) for v in objects)
    _CONSTANTS[key] = (objects, copies, consts)
    return consts


def _compute_layer_constants(w, bias, zx, multiplier, shift, ow):
    o = w.shape[0]
    m = _channel_param(multiplier, o, MULTIPLIER_MIN, MULTIPLIER_MAX)
    sh_n = _channel_param(shift, o, SHIFT_MIN, SHIFT_FLOAT_MAX)
    if m is None or sh_n is None:
        return None
    c0 = -zx * w.reshape(o, -1).sum(axis=1, dtype=np.int64)
    if bias is not None:
        c0 += bias.astype(np.int64)
    bound = int(np.abs(c0).max())
    if bound >= ACC_FLOAT_MAX:
        return None
    # |acc| <= |t| + |c0|: from the weights alone if possible, else checked per block.
    check_data = bool(128 * np.abs(w.reshape(o, -1).astype(np.int64)).sum(axis=1).max()
                      + bound >= ACC_FLOAT_MAX)
    # Requantization constants, tiled OW times: each block is requantized as rows of OW * O
    # values (NHWC), so NumPy's inner loops run over a long row instead of the O channels.
    mf = np.tile(m.astype(np.float64), ow)
    const = np.tile((c0 * m).astype(np.float64), ow)  # |.| < 2**53: exact
    scale = np.tile(np.ldexp(1.0, -sh_n), ow)
    kh, kw = w.shape[2:]
    wm = w.transpose(2, 3, 1, 0).reshape(kh * kw * w.shape[1], o).astype(np.float32)
    return bound, check_data, mf, const, scale, wm


def conv2d_requant(x, w, bias=None, *, x_zero_point, stride, padding, dilation, groups,
                   multiplier, shift, y_zero_point, lo, hi):
    """``requantize(conv2d(x, w, bias, ...), multiplier, shift, y_zero_point, lo, hi, axis=1)``
    for ``groups == 1``, in one im2col, one float32 GEMM and a float64 requantization.

    Returns the int8 NCHW result (a transposed view of NHWC storage: the next convolution's
    im2col reads it without a copy), or None when a precondition of the exact fast path does
    not hold (the caller then takes the general path, which raises the golden errors).

    Exactness:

    - im2col and GEMM: as :func:`conv2d` (raw int8 values in float32, reductions of at most
      ``CHUNK`` terms, chunk sums added in float64, exact below ``2**53``); the zero point
      and bias fold into one int64 per channel ``c0 = bias - z_x * sum(w)``.
    - Requantization: with ``acc = t + c0`` and ``|t| + |c0| < 2**21`` (checked, from the
      weights or else from the data) and ``n <= 52``, ``t * M`` and
      ``C = c0 * M`` are integers below ``2**52`` (exact in float64), and so is their sum
      ``acc * M``; scaling by ``2**-n`` is exact, so ``rint`` (round half to even) of it is
      the golden :func:`models.requant.rounding_shift`. Clamping to ``[lo - z_y, hi - z_y]``
      then adding ``z_y`` equals clamping ``z_y + shifted`` to ``[lo, hi]``.
    """
    if not (isinstance(x, np.ndarray) and isinstance(w, np.ndarray) and x.dtype == np.int8
            and w.dtype == np.int8 and x.ndim == 4 and w.ndim == 4 and groups == 1
            and x.shape[1] == w.shape[1] and min(x.shape) > 0 and min(w.shape) > 0
            and (bias is None or (isinstance(bias, np.ndarray) and bias.dtype == np.int32
                                  and bias.shape == (w.shape[0],)))):
        return None
    stride, dilation = _pair(stride), _pair(dilation)
    try:
        top, left, bottom, right = (int(p) for p in padding)
    except (TypeError, ValueError):
        return None
    zx, zy = _small_int(x_zero_point), _small_int(y_zero_point)
    lo, hi = _small_int(lo), _small_int(hi)
    if None in (stride, dilation, zx, zy, lo, hi) or lo > hi or min(top, left, bottom, right) < 0:
        return None
    n, c, h, wd = x.shape
    o, _, kh, kw = w.shape
    (sh, sw), (dh, dw) = stride, dilation
    hp, wp = h + top + bottom, wd + left + right
    oh = (hp - dh * (kh - 1) - 1) // sh + 1
    ow = (wp - dw * (kw - 1) - 1) // sw + 1
    if oh < 1 or ow < 1:
        return None
    k = kh * kw * c
    consts = _layer_constants(w, bias, zx, multiplier, shift, ow)
    if consts is None:
        return None
    bound, check_data, mf, const, scale, wm = consts
    # Blocks of whole images of about BLOCK_ROWS output positions: the padded input, the
    # im2col matrix and the sums of a block stay in cache from one step to the next.
    nb = max(1, min(n, BLOCK_ROWS // (oh * ow)))
    xp = np.empty((nb, hp, wp, c), dtype=np.float32)     # NHWC, padded with z_x
    if top or bottom or left or right:
        xp.fill(zx)  # the border is never overwritten below
    cols = np.empty((nb, oh, ow, kh, kw, c), dtype=np.float32)   # K ordered (kh, kw, c)
    total = np.empty((nb * oh, ow * o), dtype=np.float32 if k <= CHUNK else np.float64)
    y = np.empty((nb * oh, ow * o), dtype=np.float64)
    q = np.empty((n * oh, ow * o), dtype=np.int8)            # NHWC
    x_nhwc = x.transpose(0, 2, 3, 1)
    for b0 in range(0, n, nb):
        bn = min(nb, n - b0)
        xb, cb, tb, yb = xp[:bn], cols[:bn], total[:bn * oh], y[:bn * oh]
        xb[:, top:top + h, left:left + wd, :] = x_nhwc[b0:b0 + bn]
        if dw == 1:
            # For one kernel row u, the kw * c values of a window are contiguous in NHWC:
            # one strided copy per kernel row, with runs of kw * c values.
            s0, s1, s2, s3 = xb.strides
            for u in range(kh):
                cb[:, :, :, u] = as_strided(xb[:, u * dh:], shape=(bn, oh, ow, kw * c),
                                            strides=(s0, sh * s1, sw * s2, s3),
                                            writeable=False).reshape(bn, oh, ow, kw, c)
        else:
            for u in range(kh):
                for v in range(kw):
                    cb[:, :, :, u, v, :] = xb[:, u * dh:u * dh + sh * (oh - 1) + 1:sh,
                                               v * dw:v * dw + sw * (ow - 1) + 1:sw, :]
        a_blk = cb.reshape(bn * oh * ow, k)
        t_blk = tb.reshape(bn * oh * ow, o)
        if k <= CHUNK:
            np.matmul(a_blk, wm, out=t_blk)                  # exact: |sum| <= 2**24
        else:
            t_blk[...] = 0
            for k0 in range(0, k, CHUNK):                    # exact: |sum| < 2**53
                t_blk += a_blk[:, k0:k0 + CHUNK] @ wm[k0:k0 + CHUNK]
        if check_data and max(-float(tb.min()), float(tb.max())) + bound >= ACC_FLOAT_MAX:
            return None
        np.multiply(tb, mf, out=yb)                          # exact: |t| < 2**21
        yb += const                                          # acc * M, exact
        yb *= scale                                          # exact: a power of two
        np.rint(yb, out=yb)                                  # ties to even, as golden
        np.clip(yb, lo - zy, hi - zy, out=yb)
        np.add(yb, zy, out=q[b0 * oh:(b0 + bn) * oh], casting="unsafe")  # in [lo, hi]
    return q.reshape(n, oh, ow, o).transpose(0, 3, 1, 2)


def _scale_key(value):
    try:
        scale = float(np.asarray(value, dtype=np.float64).reshape(()))
    except (TypeError, ValueError):
        return None
    return scale


@functools.lru_cache(maxsize=256)
def _add_table(a_scale, a_zero_point, b_scale, b_zero_point, y_scale, y_zero_point, lo, hi):
    """The golden :func:`models.eltwise.add` of every int8 pair, as a 65536-entry int8 table
    indexed by ``(a + 128) * 256 + (b + 128)``."""
    values = np.arange(-128, 128, dtype=np.int8)
    a = np.repeat(values, 256)
    b = np.tile(values, 256)
    return golden_add(a, a_scale, a_zero_point, b, b_scale, b_zero_point, y_scale,
                      y_zero_point, lo, hi)


def add(a, a_scale, a_zero_point, b, b_scale, b_zero_point, y_scale, y_zero_point, lo, hi):
    """:func:`models.eltwise.add` for two int8 tensors of the same shape, by table look-up.

    The golden add is an element-wise function of the pair ``(a, b)`` of int8 values (the
    layer's parameters fixed), so it is tabulated once per parameter set by running the golden
    function itself on all 65536 pairs: the result is identical by exhaustion. Returns None
    (the caller then runs the golden function, which raises its own errors) when the inputs
    differ in shape or dtype, or a parameter is not one the golden function accepts.
    """
    if not (isinstance(a, np.ndarray) and isinstance(b, np.ndarray) and a.dtype == np.int8
            and b.dtype == np.int8 and a.shape == b.shape):
        return None
    scales = [_scale_key(s) for s in (a_scale, b_scale, y_scale)]
    ints = [_small_int(v) for v in (a_zero_point, b_zero_point, y_zero_point, lo, hi)]
    if None in scales or None in ints:
        return None
    try:
        table = _add_table(scales[0], ints[0], scales[1], ints[1], scales[2], ints[2], ints[3],
                           ints[4])
    except ValueError:
        return None
    # Computed in the inputs' memory order (empty_like/astype keep it), so that an NHWC-backed
    # input gives an NHWC-backed output for the next convolution.
    index = a.astype(np.int32)
    index <<= 8
    index += b
    index += 128 * 256 + 128
    out = np.empty_like(a)
    np.take(table, index, out=out, mode="clip")  # every index is in range: clip never acts
    return out
