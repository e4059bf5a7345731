"""Element-wise integer operations: the residual add of two differently scaled int8 tensors.

The formulation is TensorFlow Lite's quantized ADD: both inputs move to a common fixed-point
domain with 20 fractional bits and multipliers below one, are added exactly, and the sum is
requantized once to the output scale. Every step is an int32 or int64 integer operation;
the three ``(M, n)`` pairs are computed once per layer by :func:`add_multipliers`.
"""

import numpy as np

from .conv import _check_zero_point
from .requant import (
    INT8_MAX,
    INT8_MIN,
    _as_clamp,
    _as_scale,
    quantize_multiplier,
    rounding_shift,
)

__all__ = ["ADD_LEFT_SHIFT", "add", "add_multipliers"]

#: Fractional bits of the common domain. ``(x - z) << 20`` is at most ``255 * 2**20 < 2**28``
#: in magnitude, so the rescaled inputs and their sum stay inside int32.
ADD_LEFT_SHIFT = 20


def add_multipliers(a_scale, b_scale, y_scale):
    """The fixed-point parameters of :func:`add`.

    Definition, with ``t = 2 * max(a_scale, b_scale)`` (float64)::

        (M_a, n_a) = quantize_multiplier(a_scale / t)            # in (0, 0.5]
        (M_b, n_b) = quantize_multiplier(b_scale / t)            # in (0, 0.5]
        (M_y, n_y) = quantize_multiplier(t / (2**20 * y_scale))

    Returns
    -------
    tuple of int
        ``(M_a, n_a, M_b, n_b, M_y, n_y)``.

    Raises
    ------
    ValueError
        If a scale is not positive and finite, or the input scales differ by more than
        ``2**31`` or so (a multiplier below ``2**-32``), or ``y_scale`` is so much smaller
        than the inputs' that ``t / (2**20 * y_scale) >= 2**30``.
    """
    sa = _as_scale("a_scale", a_scale)
    sb = _as_scale("b_scale", b_scale)
    sy = _as_scale("y_scale", y_scale)
    twice_max = 2.0 * max(sa, sb)
    params = []
    for name, real in (("a_scale / (2 * max(a_scale, b_scale))", sa / twice_max),
                       ("b_scale / (2 * max(a_scale, b_scale))", sb / twice_max),
                       ("2 * max(a_scale, b_scale) / (2**20 * y_scale)",
                        twice_max / (2.0**ADD_LEFT_SHIFT * sy))):
        try:
            params.extend(quantize_multiplier(real))
        except ValueError as exc:
            raise ValueError(
                f"add with a_scale={sa!r}, b_scale={sb!r}, y_scale={sy!r}: {name} "
                f"cannot be requantized: {exc}"
            ) from exc
    return tuple(params)


def add(a, a_scale, a_zero_point, b, b_scale, b_zero_point, y_scale, y_zero_point,
        lo=INT8_MIN, hi=INT8_MAX):
    """Quantized residual add ``y ~= (s_a (a - z_a) + s_b (b - z_b)) / s_y + z_y``.

    Definition (all products exact in int64, ``rnd(v, M, n)`` is
    :func:`models.requant.rounding_shift`, i.e. ``v * M / 2**n`` rounded half to even; see
    :func:`add_multipliers` for the parameters)::

        a1 = rnd((a - z_a) * 2**20, M_a, n_a)                  # |a1| < 2**27
        b1 = rnd((b - z_b) * 2**20, M_b, n_b)                  # |b1| < 2**27
        y  = clamp(z_y + rnd(a1 + b1, M_y, n_y), lo, hi)

    The input roundings are at 2**-20 of the larger input scale, so they move the result by
    about ``2**-19 * max(s_a, s_b) / s_y`` output LSB; the final rounding is to nearest with
    ties to even, like ONNX QuantizeLinear. onnxruntime's ``QLinearAdd`` evaluates the same
    sum in float32 and rounds ties to even, so the two agree within 1 LSB.

    Parameters
    ----------
    a, b : numpy.ndarray of int8
        Same shape, or shapes that broadcast (NumPy rules, like ONNX Add).
    a_scale, b_scale, y_scale : float
    a_zero_point, b_zero_point, y_zero_point : int
    lo, hi : int
        Output clamp (a fused ReLU, see :func:`models.requant.activation_range`).

    Returns
    -------
    numpy.ndarray of int8, the broadcast shape of ``a`` and ``b``
    """
    for name, value in (("a", a), ("b", b)):
        if not isinstance(value, np.ndarray) or value.dtype != np.int8:
            raise ValueError(
                f"{name} must be a numpy.ndarray of int8, not "
                f"{getattr(value, 'dtype', type(value).__name__)}"
            )
    try:
        shape = np.broadcast_shapes(a.shape, b.shape)
    except ValueError as exc:
        raise ValueError(
            f"a of shape {a.shape} and b of shape {b.shape} must have broadcastable shapes"
        ) from exc
    za = _check_zero_point("a_zero_point", a_zero_point)
    zb = _check_zero_point("b_zero_point", b_zero_point)
    zy = _check_zero_point("y_zero_point", y_zero_point)
    lo, hi = _as_clamp(lo, hi)
    ma, na, mb, nb, my, ny = add_multipliers(a_scale, b_scale, y_scale)
    # |x - z| << 20 < 2**28 and M < 2**31: each product is below 2**59, far from overflow.
    a1 = rounding_shift((a.astype(np.int64) - za) << ADD_LEFT_SHIFT, np.int64(ma), np.int64(na))
    b1 = rounding_shift((b.astype(np.int64) - zb) << ADD_LEFT_SHIFT, np.int64(mb), np.int64(nb))
    total = np.broadcast_to(a1 + b1, shape)
    y = rounding_shift(total, np.int64(my), np.int64(ny)) + zy
    return np.clip(y, lo, hi).astype(np.int8)
