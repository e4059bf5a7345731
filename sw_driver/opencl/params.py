"""Checking and normalizing layer arguments on the host, before anything is enqueued.

The kernels trust these checks (ranges that keep the 64-bit requantization exact, int32
index arithmetic); the messages name the argument as the golden models do.
"""

import math
from typing import NamedTuple

import numpy as np

from models.conv import K_MAX_WRAP_FREE, conv_output_size
from models.requant import MULTIPLIER_MAX, MULTIPLIER_MIN, SHIFT_MAX, SHIFT_MIN

__all__ = [
    "check_int8",
    "check_reduction",
    "clamp_range",
    "conv_arguments",
    "conv_geometry",
    "is_int",
    "pair",
    "padding",
    "per_channel",
    "requant_tables",
    "zero_point",
]

#: Tensors are indexed with int in the kernels' inner arithmetic.
MAX_ELEMENTS = 2**31 - 1


def is_int(value):
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def pair(name, value):
    """``(a, b)`` of positive ints from an int or a 2-sequence."""
    items = (value, value) if is_int(value) else tuple(value) if _iterable(value) else ()
    if len(items) != 2 or not all(is_int(v) and v >= 1 for v in items):
        raise ValueError(f"{name} must be a positive int or a pair of positive ints, "
                         f"not {value!r}")
    return int(items[0]), int(items[1])


def _iterable(value):
    try:
        iter(value)
    except TypeError:
        return False
    return True


def padding(value):
    """``(top, left, bottom, right)`` from an int, ``(pad_h, pad_w)`` or four ints."""
    pads = (value,) * 4 if is_int(value) else tuple(value) if _iterable(value) else ()
    if len(pads) == 2:
        pads = pads * 2
    if len(pads) != 4 or not all(is_int(v) and v >= 0 for v in pads):
        raise ValueError(f"padding must be a non-negative int, (pad_h, pad_w) or "
                         f"(top, left, bottom, right), not {value!r}")
    return tuple(int(p) for p in pads)


def zero_point(name, value):
    if not is_int(value) or not -128 <= int(value) <= 127:
        raise ValueError(f"{name} must be an integer in [-128, 127], not {value!r}")
    return int(value)


def clamp_range(lo, hi):
    lo, hi = zero_point("lo", lo), zero_point("hi", hi)
    if lo > hi:
        raise ValueError(f"lo must not exceed hi, got lo={lo} and hi={hi}")
    return lo, hi


def check_int8(name, shape, dtype, ndim, layout):
    """Check an activation's dtype, rank and size (``shape`` and ``dtype`` of any tensor)."""
    if np.dtype(dtype) != np.int8:
        raise ValueError(f"{name} must have dtype int8 (shape {layout}), not {dtype}")
    if ndim is not None and len(shape) != ndim:
        raise ValueError(f"{name} must have shape {layout}, not {tuple(shape)}")
    if min(shape, default=1) < 1:
        raise ValueError(f"{name} must not have empty dimensions, not {tuple(shape)}")
    if math.prod(shape) > MAX_ELEMENTS:
        raise ValueError(f"{name} has {math.prod(shape)} elements; the OpenCL kernels "
                         f"index at most {MAX_ELEMENTS}: split the batch")


def per_channel(name, value, channels, low, high):
    """int32 array of ``channels`` values from a scalar or a ``(channels,)`` array."""
    arr = np.asarray(value)
    if arr.dtype == np.bool_ or not np.issubdtype(arr.dtype, np.integer):
        raise ValueError(f"{name} must be an integer or an array of integers, not {arr.dtype}")
    if arr.size == 1:
        arr = np.full(channels, arr.reshape(()))
    if arr.shape != (channels,):
        raise ValueError(f"{name} must be a scalar or have shape ({channels},), "
                         f"not {arr.shape}")
    bad = (arr < low) | (arr > high)
    if bad.any():
        index = int(np.argmax(bad))
        raise ValueError(f"{name}[{index}] = {int(arr[index])} is outside the expected "
                         f"range [{low}, {high}]")
    return arr.astype(np.int32)


def requant_tables(multiplier, shift, channels):
    """Checked per-channel ``(M, n)`` as int32 arrays (the ranges of ``requantize``)."""
    return (per_channel("multiplier", multiplier, channels, MULTIPLIER_MIN, MULTIPLIER_MAX),
            per_channel("shift", shift, channels, SHIFT_MIN, SHIFT_MAX))


def check_reduction(k):
    """Raise if ``k`` products per output could overflow the kernels' int32 partial sums."""
    if k > K_MAX_WRAP_FREE:
        raise ValueError(
            f"{k} products per output exceed {K_MAX_WRAP_FREE}, the most an int32 "
            f"accumulator always holds; split the reduction (input channels) over layers"
        )


def conv_geometry(x_shape, kernel, stride, pads, dilation, pool):
    """Output size ``(OH, OW)`` of a convolution (before the fused pool) and the stored size.

    Returns
    -------
    (oh, ow, out_h, out_w)
        ``out_*`` halves ``oh``/``ow`` (floor) when the 2x2 max pool is fused.
    """
    (h, w), (kh, kw) = x_shape, kernel
    top, left, bottom, right = pads
    oh = conv_output_size(h, kh, stride[0], top, bottom, dilation[0])
    ow = conv_output_size(w, kw, stride[1], left, right, dilation[1])
    if oh < 1 or ow < 1:
        raise ValueError(f"kernel {kh}x{kw} (dilation {dilation}) does not fit input {h}x{w} "
                         f"with padding {pads}: output would be {oh}x{ow}")
    if pool and (oh < 2 or ow < 2):
        raise ValueError(f"a fused 2x2 max pool needs a convolution output of at least 2x2, "
                         f"not {oh}x{ow}")
    return (oh, ow, oh // 2, ow // 2) if pool else (oh, ow, oh, ow)


_normalize_padding = padding  # conv_arguments' keyword `padding` hides the function


class ConvArguments(NamedTuple):
    """The checked scalar arguments of a convolution and its output size."""

    zx: int
    zy: int
    lo: int
    hi: int
    stride: tuple
    dilation: tuple
    pads: tuple
    oh: int  # convolution output, before the fused pool
    ow: int
    out_h: int  # stored output
    out_w: int


def conv_arguments(x_shape, kernel, *, x_zero_point, y_zero_point, lo, hi, stride, padding,
                   dilation, pool):
    """Check a convolution's zero points, clamp, stride, padding and dilation (in that
    order) and compute its geometry (:func:`conv_geometry`)."""
    zx = zero_point("x_zero_point", x_zero_point)
    zy = zero_point("y_zero_point", y_zero_point)
    lo, hi = clamp_range(lo, hi)
    stride, dilation = pair("stride", stride), pair("dilation", dilation)
    pads = _normalize_padding(padding)
    return ConvArguments(zx, zy, lo, hi, stride, dilation, pads,
                         *conv_geometry(x_shape, kernel, stride, pads, dilation, pool))
