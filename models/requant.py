"""Fixed-point requantization: the heart of Tessera's integer contract.

A real multiplier ``r`` (for a convolution ``s_x * s_w[c] / s_y``) is carried as an int32
mantissa ``M`` in ``[2**30, 2**31)`` and a right shift ``n`` in ``[1, 62]`` with
``r ~= M / 2**n``. An int32 accumulator is then rescaled with one 64-bit multiply, one
rounding add and one arithmetic shift, rounding to nearest with ties to even (ONNX
``QuantizeLinear``'s rule)::

    y = clamp(z + round_half_even(acc * M / 2**n), lo, hi)

This module imports nothing from the project; see ``docs/semantics.md`` for the proofs of
the ranges quoted in the docstrings.
"""

import math

import numpy as np

__all__ = [
    "INT32_MAX",
    "INT32_MIN",
    "MULTIPLIER_MAX",
    "MULTIPLIER_MIN",
    "SHIFT_MAX",
    "SHIFT_MIN",
    "activation_range",
    "quantize_multiplier",
    "requantize",
    "rounding_shift",
]

INT32_MIN = -(1 << 31)
INT32_MAX = (1 << 31) - 1
INT8_MIN = -128
INT8_MAX = 127

#: Smallest and largest mantissa ``M`` (31 significant bits, always positive).
MULTIPLIER_MIN = 1 << 30
MULTIPLIER_MAX = (1 << 31) - 1
#: Right shifts supported by :func:`requantize`. ``n >= 1`` keeps the rounding term
#: ``2**(n-1)`` an integer; ``n <= 62`` keeps ``acc * M + 2**(n-1)`` inside int64 for every
#: int32 ``acc`` (``|acc * M| < 2**62`` and ``2**61`` more still fits below ``2**63``).
SHIFT_MIN = 1
SHIFT_MAX = 62


def _index_text(index, ndim):
    if ndim == 0:
        return ""
    return "[" + ", ".join(str(int(i)) for i in index) + "]"


def quantize_multiplier(real_multiplier):
    """Split a positive real multiplier into an int32 mantissa and a right shift.

    Definition: write ``r = f * 2**e`` with ``f`` in ``[0.5, 1)`` (``math.frexp``), then
    ``M = round_half_even(f * 2**31)`` and ``n = 31 - e``; if the rounding carried
    ``M`` up to ``2**31``, halve it (``M = 2**30``) and decrement ``n``. The result obeys
    ``2**30 <= M < 2**31`` and ``|M / 2**n - r| <= 2**-31 * r``.

    Parameters
    ----------
    real_multiplier : float or array_like of float
        One multiplier, or one per channel (any shape). Evaluated in float64; callers
        should compute ``s_x * s_w / s_y`` in float64 from the (float32) scales.

    Returns
    -------
    (M, n) : tuple of int, or tuple of numpy.ndarray of int64
        Python ints for a scalar input, int64 arrays of the input's shape otherwise.

    Raises
    ------
    ValueError
        If a value is not finite, not positive, or needs a shift outside
        ``[SHIFT_MIN, SHIFT_MAX] = [1, 62]``, i.e. lies outside about
        ``[2**-32, 2**30)``. The message names the value, its index and the range.
    """
    try:
        real = np.asarray(real_multiplier, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ValueError(
            f"real_multiplier must be a float or an array of floats, not {real_multiplier!r}"
        ) from exc
    finite = np.isfinite(real)
    good = finite & (real > 0)
    if not good.all():
        index = np.argwhere(~good)[0]
        value = float(real[tuple(index)])
        raise ValueError(
            f"real_multiplier{_index_text(index, real.ndim)} = {value!r} is not a positive "
            f"finite number; expected 2**-32 <= real_multiplier < 2**30"
        )
    mantissa, exponent = np.frexp(real)
    # f * 2**31 is exact in float64 (a power-of-two scaling), so rint is the only rounding.
    m = np.rint(np.ldexp(mantissa, 31)).astype(np.int64)
    n = 31 - exponent.astype(np.int64)
    carry = m == (1 << 31)
    m = np.where(carry, m >> 1, m)
    n = np.where(carry, n - 1, n)
    bad = (n < SHIFT_MIN) | (n > SHIFT_MAX)
    if bad.any():
        index = np.argwhere(bad)[0]
        value = float(real[tuple(index)])
        shift = int(n[tuple(index)])
        what = "too large" if shift < SHIFT_MIN else "too small"
        raise ValueError(
            f"real_multiplier{_index_text(index, real.ndim)} = {value!r} is {what}: it needs "
            f"a right shift of {shift}, outside the supported {SHIFT_MIN}..{SHIFT_MAX}; "
            f"expected 2**-32 <= real_multiplier < 2**30"
        )
    if real.ndim == 0:
        return int(m), int(n)
    return m, n


def _as_int_array(name, value, low, high):
    """Integer array from ``value``, with every element checked against ``[low, high]``."""
    arr = np.asarray(value)
    if arr.dtype == np.bool_ or not np.issubdtype(arr.dtype, np.integer):
        raise ValueError(f"{name} must be an integer or an array of integers, not {arr.dtype}")
    # Compare before converting so that, e.g., a uint64 above 2**63 cannot wrap into range.
    bad = (arr < low) | (arr > high)
    if bad.any():
        index = np.argwhere(bad)[0]
        raise ValueError(
            f"{name}{_index_text(index, arr.ndim)} = {int(arr[tuple(index)])} is outside "
            f"the expected range [{low}, {high}]"
        )
    return arr.astype(np.int64)


def _as_int(name, value, low, high):
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise ValueError(f"{name} must be an integer in [{low}, {high}], not {value!r}")
    if not low <= int(value) <= high:
        raise ValueError(f"{name} must be an integer in [{low}, {high}], not {int(value)}")
    return int(value)


def _as_clamp(lo, hi):
    """``(lo, hi)`` as ints in the int8 range with ``lo <= hi``, or a ValueError."""
    lo = _as_int("lo", lo, INT8_MIN, INT8_MAX)
    hi = _as_int("hi", hi, INT8_MIN, INT8_MAX)
    if lo > hi:
        raise ValueError(f"lo must not exceed hi, got lo={lo} and hi={hi}")
    return lo, hi


def _as_scale(name, value):
    """A positive finite scale as a Python float (float32 scales convert exactly)."""
    try:
        arr = np.asarray(value, dtype=np.float64)
        # A one-element array (an ONNX scale initializer) is accepted as a scalar.
        scale = float(arr.reshape(()))
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name} must be a positive finite float, not {value!r}") from exc
    if not (math.isfinite(scale) and scale > 0):
        raise ValueError(f"{name} must be a positive finite float, not {value!r}")
    return scale


def _per_channel(name, value, low, high, ndim, axis, channels):
    """Broadcastable int64 view of a scalar or per-channel parameter."""
    arr = _as_int_array(name, value, low, high)
    if arr.ndim == 0 or arr.size == 1:
        return arr.reshape(())
    if arr.ndim != 1 or arr.shape[0] != channels:
        raise ValueError(
            f"{name} must be a scalar or have shape ({channels},) to match axis {axis} of "
            f"acc, not shape {arr.shape}"
        )
    shape = [1] * ndim
    shape[axis] = channels
    return arr.reshape(shape)


def rounding_shift(value, multiplier, shift):
    """``value * M / 2**n`` rounded to nearest, ties to even, on int64 arrays, no clamping.

    Definition, with ``p = value * M`` exact in 64 bits and ``>>`` arithmetic::

        (p + 2**(n-1) - 1 + ((p >> n) & 1)) >> n

    Adding ``2**(n-1) - 1`` rounds every non-tie to nearest; the tie ``p = (2q + 1) * 2**(n-1)``
    lands on ``q + (q & 1)``, the even neighbour. This is ONNX ``QuantizeLinear``'s rounding
    (IEEE round-half-to-even) applied to the exact product, so it is a building block shared
    by requantization, pooling and add. In hardware it is the same adder as ties-up with bit
    ``n`` of the product as an extra carry-in.

    Parameters
    ----------
    value, multiplier, shift : numpy.ndarray of int64
        Already checked and broadcastable. The caller guarantees
        ``|value * multiplier| + 2**(shift-1) < 2**63``: for an int32 ``value`` and
        ``M < 2**31`` this holds for every ``shift <= 62``.

    Returns
    -------
    numpy.ndarray of int64
    """
    product = value * multiplier
    odd = (product >> shift) & 1
    rounding = np.left_shift(np.int64(1), shift - 1) - 1 + odd
    return (product + rounding) >> shift


def requantize(acc, multiplier, shift, zero_point, lo=INT8_MIN, hi=INT8_MAX, axis=1):
    """Rescale an int32 accumulator to int8: Tessera's requantization.

    Definition, element-wise, with ``M`` and ``n`` taken from channel ``c`` along ``axis``::

        y = clamp(zero_point + round_half_even(acc * M[c] / 2**n[c]), lo, hi)

    The product is exact in 64 bits and the rounding is :func:`rounding_shift` (nearest,
    ties to even, as ONNX ``QuantizeLinear`` rounds the same real value).

    Supported ranges (checked): ``acc`` in ``[-2**31, 2**31 - 1]``, ``M`` in
    ``[2**30, 2**31 - 1]``, ``n`` in ``[1, 62]``, ``zero_point`` and ``lo <= hi`` in
    ``[-128, 127]``. Then ``|acc * M| <= 2**31 * (2**31 - 1) < 2**62`` and adding
    ``2**(n-1) <= 2**61`` stays below ``2**63``: no int64 overflow is possible.

    Parameters
    ----------
    acc : numpy.ndarray of integers
        The accumulator (any integer dtype; values must fit int32), e.g. NCHW or (N, C).
    multiplier, shift : int or array_like of int
        Per tensor (scalar or one element) or per channel (1-D, ``acc.shape[axis]`` long),
        usually from :func:`quantize_multiplier`.
    zero_point : int
        Output zero point.
    lo, hi : int, optional
        Output clamp, e.g. from :func:`activation_range` for a fused ReLU / ReLU6.
    axis : int, optional
        The channel axis of ``acc`` (1 for NCHW and for dense (N, C)); only consulted when
        ``multiplier`` or ``shift`` is per channel.

    Returns
    -------
    numpy.ndarray of int8
        Same shape as ``acc``.
    """
    acc = np.asarray(acc)
    acc64 = _as_int_array("acc", acc, INT32_MIN, INT32_MAX)
    zero_point = _as_int("zero_point", zero_point, INT8_MIN, INT8_MAX)
    lo, hi = _as_clamp(lo, hi)
    per_channel = np.size(multiplier) > 1 or np.size(shift) > 1
    if per_channel:
        # The axis matters only for per-channel parameters; per-tensor ones fit any shape.
        if isinstance(axis, (bool, np.bool_)) or not isinstance(axis, (int, np.integer)) \
                or not -acc.ndim <= axis < acc.ndim:
            raise ValueError(f"axis must be an integer in [{-acc.ndim}, {acc.ndim - 1}] for "
                             f"per-channel parameters and acc of shape {acc.shape}, "
                             f"not {axis!r}")
        axis_n = int(axis) % acc.ndim
        channels = acc.shape[axis_n]
    else:
        axis_n, channels = 0, 1
    m = _per_channel("multiplier", multiplier, MULTIPLIER_MIN, MULTIPLIER_MAX,
                     acc.ndim, axis_n, channels)
    n = _per_channel("shift", shift, SHIFT_MIN, SHIFT_MAX, acc.ndim, axis_n, channels)
    scaled = rounding_shift(acc64, m, n)
    # |scaled| <= 2**61, so adding the zero point cannot overflow before the clamp.
    return np.clip(scaled + zero_point, lo, hi).astype(np.int8)


def activation_range(kind, zero_point, scale):
    """Clamp bounds ``(lo, hi)`` in the output's integer domain for a fused activation.

    Definition: a real bound ``b`` maps to ``zero_point + round_half_even(b / scale)``
    (the same rounding as ONNX QuantizeLinear), clamped to ``[-128, 127]``:

    ``None``     -> ``(-128, 127)``
    ``"relu"``   -> ``(zero_point, 127)``
    ``"relu6"``  -> ``(zero_point, min(127, zero_point + round_half_even(6 / scale)))``

    Because quantization is monotonic, clamping the quantized value to these bounds
    equals quantizing the clamped real value, so the fusion is exact.

    Parameters
    ----------
    kind : {None, "relu", "relu6"}
        The activation fused after the layer.
    zero_point : int
        Output zero point in [-128, 127].
    scale : float
        Output scale, positive and finite.

    Returns
    -------
    (lo, hi) : tuple of int
    """
    zero_point = _as_int("zero_point", zero_point, INT8_MIN, INT8_MAX)
    scale_f = _as_scale("scale", scale)
    if kind is None:
        return INT8_MIN, INT8_MAX
    if kind == "relu":
        return zero_point, INT8_MAX
    if kind == "relu6":
        # Python's round() is round-half-even, like QuantizeLinear.
        top = zero_point + round(6.0 / scale_f)
        return zero_point, min(INT8_MAX, top)
    raise ValueError(f"kind must be None, 'relu' or 'relu6', not {kind!r}")
