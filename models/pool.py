"""Integer pooling on int8 NCHW tensors: max, average and global average.

Max pooling is exact and needs no requantization (the output keeps the input's scale and
zero point). Average pooling divides by the window size with a fixed-point multiplier from
:func:`models.requant.quantize_multiplier`, one per distinct divisor, so the whole layer is
integer-only given that small table. onnxruntime's ``QLinearAveragePool`` /
``QLinearGlobalAveragePool`` (and the unfused DequantizeLinear → AveragePool →
QuantizeLinear) compute the same quotient in float32 and round half to even; the
definitions below round the exact quotient half to even too, from an exact 64-bit product,
so they differ only where float32 rounding moves a value across a tie (measured in
``tests/test_models_onnxruntime.py``).
"""

import numpy as np

from .conv import _check_array, _check_zero_point, _output_shape, _padding, _positive_pair
from .requant import (
    INT8_MAX,
    INT8_MIN,
    INT32_MAX,
    _as_clamp,
    _as_scale,
    quantize_multiplier,
    rounding_shift,
)

__all__ = [
    "avg_pool2d",
    "avg_pool_multipliers",
    "global_avg_pool",
    "max_pool2d",
]

#: Largest window (or image, for the global pool) whose sum of ``x - z_x`` (each at most
#: 255 in magnitude) always fits int32: floor((2**31 - 1) / 255).
WINDOW_MAX = INT32_MAX // 255


def _check_window(kernel, stride, padding):
    kernel = _positive_pair("kernel", kernel)
    stride = _positive_pair("stride", stride)
    padding = _padding(padding)
    top, left, bottom, right = padding
    # pads < kernel guarantees that every window holds at least one real element, so a
    # max never sees only padding and an average never divides by a zero count.
    if max(top, bottom) >= kernel[0] or max(left, right) >= kernel[1]:
        raise ValueError(
            f"padding {padding} must be smaller than the kernel {kernel} on each side"
        )
    if kernel[0] * kernel[1] > WINDOW_MAX:
        raise ValueError(f"kernel {kernel} has more than {WINDOW_MAX} elements")
    return kernel, stride, padding


def _windows(xp, kernel, stride, out_shape):
    """Yield the strided (N, C, OH, OW) view of ``xp`` for each kernel tap."""
    (kh, kw), (sh, sw), (oh, ow) = kernel, stride, out_shape
    for u in range(kh):
        for v in range(kw):
            yield xp[:, :, u:u + sh * (oh - 1) + 1:sh, v:v + sw * (ow - 1) + 1:sw]


def max_pool2d(x, kernel, stride=(1, 1), padding=(0, 0, 0, 0)):
    """Max pooling on int8 NCHW; padding never wins (it behaves as -inf).

    Definition::

        y[n, c, i, j] = max over u < kh, v < kw with (i*sh + u - top, j*sw + v - left)
                        inside the image of x[n, c, i*sh + u - top, j*sw + v - left]

    Output size as ONNX MaxPool with ``ceil_mode=0``; each pad must be smaller than the
    kernel along its axis (so no window is all padding). Scale and zero point pass through
    unchanged, so this is exact.

    Parameters
    ----------
    x : numpy.ndarray of int8, shape (N, C, H, W)
    kernel, stride : int or (int, int)
        ``stride`` defaults to 1 like ONNX (not to the kernel as in PyTorch).
    padding : int, (pad_h, pad_w) or (top, left, bottom, right)

    Returns
    -------
    numpy.ndarray of int8, shape (N, C, OH, OW)
    """
    _check_array("x", x, np.int8, 4, "(N, C, H, W)")
    kernel, stride, padding = _check_window(kernel, stride, padding)
    out_shape = _output_shape(x.shape[2:], kernel, stride, padding, (1, 1))
    top, left, bottom, right = padding
    # -129 is below every int8, so a padded element can never be the maximum.
    xp = np.pad(x.astype(np.int16), ((0, 0), (0, 0), (top, bottom), (left, right)),
                constant_values=INT8_MIN - 1)
    result = None
    for view in _windows(xp, kernel, stride, out_shape):
        result = view.copy() if result is None else np.maximum(result, view)
    return result.astype(np.int8)


def avg_pool_multipliers(x_scale, y_scale, counts):
    """Fixed-point multipliers for dividing a window sum by its element count.

    Definition: ``(M[k], n[k]) = quantize_multiplier(x_scale / (y_scale * counts[k]))``,
    evaluated in float64 (float32 scales convert exactly).

    Parameters
    ----------
    x_scale, y_scale : float
    counts : array_like of int
        Positive element counts.

    Returns
    -------
    (M, n) : tuple of numpy.ndarray of int64, shaped like ``counts``
    """
    sx = _as_scale("x_scale", x_scale)
    sy = _as_scale("y_scale", y_scale)
    counts = np.asarray(counts, dtype=np.int64)
    if (counts < 1).any():
        raise ValueError(f"counts must be positive, not {counts!r}")
    real = sx / (sy * counts.astype(np.float64))
    try:
        return quantize_multiplier(np.atleast_1d(real).reshape(counts.shape))
    except ValueError as exc:
        raise ValueError(
            f"x_scale / (y_scale * count) with x_scale={sx!r}, y_scale={sy!r} and counts "
            f"{counts.ravel().tolist()} cannot be requantized: {exc}"
        ) from exc


def avg_pool2d(x, kernel, stride=(1, 1), padding=(0, 0, 0, 0), *, x_scale, x_zero_point,
               y_scale, y_zero_point, count_include_pad=False, lo=INT8_MIN, hi=INT8_MAX):
    """Average pooling on int8 NCHW with requantization to the output's scale.

    Definition, for each output position with window ``W`` (the kernel placed at
    ``(i*sh - top, j*sw - left)``)::

        s     = sum over (p, q) in W inside the image of (x[n, c, p, q] - x_zero_point)
        count = kh * kw                      if count_include_pad
                number of (p, q) in W inside the image   otherwise
        M, k  = quantize_multiplier(x_scale / (y_scale * count))
        y     = clamp(y_zero_point + round_half_even(s * M / 2**k), lo, hi)

    Padding contributes 0 to ``s`` (it behaves as the value ``x_zero_point``, i.e. real 0),
    as ONNX AveragePool's padding does. This is ``round(s * x_scale / (count * y_scale))``
    with ties to even (:func:`models.requant.rounding_shift`), the rounding of ONNX
    QuantizeLinear; with ``x_scale == y_scale`` a 2×2 mean is a tie a quarter of the time.

    Parameters
    ----------
    x : numpy.ndarray of int8, shape (N, C, H, W)
    kernel, stride : int or (int, int)
    padding : int, (pad_h, pad_w) or (top, left, bottom, right)
        Each pad must be smaller than the kernel along its axis.
    x_scale, y_scale : float
    x_zero_point, y_zero_point : int
    count_include_pad : bool
        ONNX attribute of the same name (default 0, as in ONNX).
    lo, hi : int
        Output clamp.

    Returns
    -------
    numpy.ndarray of int8, shape (N, C, OH, OW)
    """
    _check_array("x", x, np.int8, 4, "(N, C, H, W)")
    kernel, stride, padding = _check_window(kernel, stride, padding)
    zx = _check_zero_point("x_zero_point", x_zero_point)
    zy = _check_zero_point("y_zero_point", y_zero_point)
    lo, hi = _as_clamp(lo, hi)
    h, w = x.shape[2:]
    out_shape = _output_shape((h, w), kernel, stride, padding, (1, 1))
    top, left, bottom, right = padding
    xp = np.pad(x.astype(np.int64) - zx, ((0, 0), (0, 0), (top, bottom), (left, right)))
    total = sum(_windows(xp, kernel, stride, out_shape))

    if count_include_pad:
        counts = np.full(out_shape, kernel[0] * kernel[1], dtype=np.int64)
    else:
        def valid(size, k, s, pad_begin, out):
            start = np.arange(out) * s - pad_begin
            return np.minimum(start + k, size) - np.maximum(start, 0)

        counts = np.outer(valid(h, kernel[0], stride[0], top, out_shape[0]),
                          valid(w, kernel[1], stride[1], left, out_shape[1]))
    # One multiplier per distinct count: a small table the hardware can index.
    distinct, index = np.unique(counts, return_inverse=True)
    table_m, table_n = avg_pool_multipliers(x_scale, y_scale, distinct)
    m = table_m[index].reshape(out_shape)
    n = table_n[index].reshape(out_shape)
    # |total| <= 255 * kh * kw <= 2**31 - 1 (checked), so the int64 product is exact.
    return np.clip(rounding_shift(total, m, n) + zy, lo, hi).astype(np.int8)


def global_avg_pool(x, x_scale, x_zero_point, y_scale, y_zero_point, lo=INT8_MIN,
                    hi=INT8_MAX):
    """Global average pooling on int8 NCHW, requantized to the output's scale.

    Definition, with ``HW = H * W``::

        s    = sum over p < H, q < W of (x[n, c, p, q] - x_zero_point)
        M, k = quantize_multiplier(x_scale / (y_scale * HW))
        y[n, c, 0, 0] = clamp(y_zero_point + round_half_even(s * M / 2**k), lo, hi)

    onnxruntime's ``QLinearGlobalAveragePool`` forms the same integer sum and scales it in
    float32 with round-half-to-even; only float32 error near a tie can tell the two apart.
    ``HW`` must not exceed ``WINDOW_MAX`` (8421504) so that ``s`` fits int32.

    Parameters
    ----------
    x : numpy.ndarray of int8, shape (N, C, H, W)
    x_scale, y_scale : float
    x_zero_point, y_zero_point : int
    lo, hi : int
        Output clamp.

    Returns
    -------
    numpy.ndarray of int8, shape (N, C, 1, 1)
    """
    _check_array("x", x, np.int8, 4, "(N, C, H, W)")
    zx = _check_zero_point("x_zero_point", x_zero_point)
    zy = _check_zero_point("y_zero_point", y_zero_point)
    lo, hi = _as_clamp(lo, hi)
    hw = x.shape[2] * x.shape[3]
    if not 1 <= hw <= WINDOW_MAX:
        raise ValueError(f"x must have 1 to {WINDOW_MAX} pixels per channel, not {hw}")
    total = (x.astype(np.int64) - zx).sum(axis=(2, 3), keepdims=True)
    (m,), (n,) = avg_pool_multipliers(x_scale, y_scale, [hw])
    return np.clip(rounding_shift(total, m, n) + zy, lo, hi).astype(np.int8)
