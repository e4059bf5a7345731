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

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from models import conv as golden
from models.requant import INT32_MAX, INT32_MIN

__all__ = ["CHUNK", "conv2d", "dense"]

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
