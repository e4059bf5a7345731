"""Integer-only Softmax, GELU and LayerNorm: the golden model of hardware without floats.

The idea of approximating these nonlinearities with low-order integer polynomials and an
integer square root comes from I-BERT (S. Kim, A. Gholami, Z. Yao, M. W. Mahoney,
K. Keutzer, "I-BERT: Integer-only BERT Quantization", ICML 2021). The formulation here is
Tessera's own and differs from the paper's where the project's conventions ask for it:

- every float scale enters through a fixed-point multiplier ``(M, n)`` from
  :func:`models.requant.quantize_multiplier`, computed once per layer (the paper divides
  by float-derived integer constants such as ``floor(ln 2 / s)``);
- the exponential works in base 2 (range reduction is a mask and a shift, no division);
- GELU's erf is ``t * (2 - t)`` on a clipped, rescaled argument, fitted here;
- LayerNorm uses a bit-by-bit square root and one reciprocal per row, with the variance's
  epsilon carried with 22 fractional bits;
- every rounding of a data value is :func:`models.requant.rounding_shift` (to nearest, ties
  to even) and every function ends in the project's requantization (``z + round_half_even(
  acc * M / 2**n)``, clamped).

Each operation has a ``*_params`` function (float scales in, integers out: what a driver
computes once per layer) and the integer function itself, which takes integer arrays and
those integers only. ``*_error_bound`` functions state the guaranteed distance from the
float operation in output LSB; ``docs/semantics.md`` ("Sequence models, integer-only mode")
derives them. Only integer NumPy operations (``+ - * // >> << & min max where``) touch
data; ``tests/test_models_intonly.py`` checks that statically and checks every bound.
"""

import math
from dataclasses import dataclass

import numpy as np

from .requant import (
    INT8_MAX,
    INT8_MIN,
    _as_clamp,
    _as_int,
    _as_int_array,
    _as_scale,
    quantize_multiplier,
    requantize,
    rounding_shift,
)

__all__ = [
    "EXP2_COEFFS",
    "EXP2_POLY_REL_ERROR",
    "GELU_APPROX_ERROR",
    "GELU_ERF_CLIP",
    "GeluParams",
    "LayerNormParams",
    "SoftmaxParams",
    "gelu",
    "gelu_error_bound",
    "gelu_params",
    "isqrt",
    "layernorm",
    "layernorm_error_bound",
    "layernorm_params",
    "softmax",
    "softmax_error_bound",
    "softmax_params",
]

# --- Softmax constants ----------------------------------------------------------------------

#: Input values accepted by :func:`softmax`: ``x - max(x)`` then lies in ``[-(2**31 - 1), 0]``
#: and ``(x - max) * M`` below ``2**62`` in magnitude.
SOFTMAX_X_MIN = -(1 << 30)
SOFTMAX_X_MAX = (1 << 30) - 1
#: Longest softmax axis: the row sum of ``N`` terms below ``2**31`` stays below ``2**47``.
SOFTMAX_MAX_LENGTH = 1 << 16
#: Fractional bits of the base-2 exponent ``t ~= (x - max) * s / ln 2``.
EXP_FRAC_BITS = 16
#: ``2**u`` for ``u`` in ``[0, 1)`` is computed as ``2**EXP_ONE_BITS * p(u)``.
EXP_ONE_BITS = 29
#: ``round(a_i * 2**29)`` of the quadratic ``p(u) = a0 + a1 u + a2 u**2`` that minimises the
#: largest relative error against ``2**u`` on ``[0, 1]`` (fitted as a linear programme on
#: 20 001 points: a0 = 1.0017248, a1 = 0.6576363, a2 = 0.3371894).
EXP2_COEFFS = (537796887, 353065787, 181027199)
#: Largest relative error of the integer polynomial (floors included) against
#: ``2**29 * 2**(f / 2**16)`` over all 65 536 fractions ``f`` (checked exhaustively by the
#: tests; the exact figure is 1.72477e-3).
EXP2_POLY_REL_ERROR = 1.7248e-3
#: Fractional bits of the probability before the output requantization (``p * 2**15``).
SOFTMAX_PROB_BITS = 15
#: The row's reciprocal is ``floor(2**61 / S)``.
SOFTMAX_RECIP_BITS = 61

# --- GELU constants ------------------------------------------------------------------------

#: Inputs accepted by :func:`gelu` (int8 and int16 tensors); zero points are int8.
GELU_X_MIN = -(1 << 15)
GELU_X_MAX = (1 << 15) - 1
#: Fractional bits of the erf argument ``t`` and of erf itself.
GELU_FRAC_BITS = 14
#: ``c`` of ``erf(w) ~= sign(w) * t * (2 - t)``, ``t = min(|w| / c, 1)``: the value that
#: minimises ``max_x |x| / 2 * |approximation - erf(x / sqrt 2)|``, GELU's own error
#: (searched in steps of 1e-4).
GELU_ERF_CLIP = 1.7416
#: That minimum, ``max_x |x| / 2 * |erf_approx(x / sqrt 2) - erf(x / sqrt 2)|`` in real units
#: (0.0196882, reached near ``x = 1.2``), rounded up.
GELU_APPROX_ERROR = 0.019689

# --- LayerNorm constants -------------------------------------------------------------------

#: Longest normalized axis: ``W = N * sum(x**2) - sum(x)**2 <= N**2 * 2**14 <= 2**38``.
LAYERNORM_MAX_LENGTH = 1 << 12
#: Fractional bits of the variance term and of epsilon: ``X = W * 2**22 + E``.
LAYERNORM_EPS_BITS = 22
#: Fractional bits of the normalized value ``n ~= (x - mean) / std * 2**16``.
LAYERNORM_NORM_BITS = 16
#: ``E`` may not exceed this, so that ``X < 2**62``.
LAYERNORM_EPS_MAX = 1 << 61
#: Largest ``|bias|`` after folding, so that ``n + bias`` stays inside int32.
LAYERNORM_BIAS_MAX = (1 << 31) - 1 - (1 << 22)


def _requant_params(name, real):
    """``quantize_multiplier(real)`` with the layer quantity named in the error."""
    try:
        return quantize_multiplier(real)
    except ValueError as exc:
        raise ValueError(f"{name} cannot be carried as a fixed-point multiplier: {exc}") \
            from exc


def _check_input(name, x, low, high):
    """``x`` as int64, or a ValueError naming ``name`` and the range ``[low, high]``."""
    x = np.asarray(x)
    if x.ndim == 0:
        raise ValueError(f"{name} must have at least one axis, not a scalar")
    return _as_int_array(name, x, low, high)


def _check_length(name, length, maximum):
    if not 1 <= length <= maximum:
        raise ValueError(f"the last axis of {name} has length {length}; "
                         f"expected 1..{maximum}")


# --- Softmax -------------------------------------------------------------------------------

@dataclass(frozen=True)
class SoftmaxParams:
    """Integer constants of :func:`softmax` (from :func:`softmax_params`).

    ``exp_multiplier``/``exp_shift`` carry ``x_scale * 2**16 / ln 2``; ``out_multiplier``/
    ``out_shift`` carry ``2**-15 / y_scale``; ``out_dtype`` is ``"uint8"`` or ``"int8"``.
    """

    exp_multiplier: int
    exp_shift: int
    out_multiplier: int
    out_shift: int
    y_zero_point: int
    out_dtype: str


def softmax_params(x_scale, y_scale=1.0 / 256, y_zero_point=None, out_dtype="uint8"):
    """Fixed-point constants of :func:`softmax` for an input scale and an output encoding.

    Parameters
    ----------
    x_scale : float
        Scale of the integer input (for an attention score, ``s_q * s_k``, times the
        ``1 / sqrt(d)`` the model applies). The input's zero point cancels in softmax.
    y_scale : float, optional
        Output scale; the default ``1/256`` is the usual quantized softmax output.
    y_zero_point : int, optional
        Default 0 for ``"uint8"`` and -128 for ``"int8"`` (both map 0 to the lowest code).
    out_dtype : {"uint8", "int8"}

    Raises
    ------
    ValueError
        If a scale is not positive and finite, ``x_scale * 2**16 / ln 2`` or
        ``2**-15 / y_scale`` is outside a multiplier's range (about ``[2**-32, 2**30)``), or
        the zero point is outside the output type.
    """
    if out_dtype not in ("uint8", "int8"):
        raise ValueError(f"out_dtype must be 'uint8' or 'int8', not {out_dtype!r}")
    low, high = (0, 255) if out_dtype == "uint8" else (INT8_MIN, INT8_MAX)
    if y_zero_point is None:
        y_zero_point = low
    y_zero_point = _as_int("y_zero_point", y_zero_point, low, high)
    sx = _as_scale("x_scale", x_scale)
    sy = _as_scale("y_scale", y_scale)
    m_e, n_e = _requant_params("softmax x_scale * 2**16 / ln(2)",
                               sx * 2.0**EXP_FRAC_BITS / math.log(2.0))
    m_y, n_y = _requant_params("softmax 2**-15 / y_scale", 2.0**-SOFTMAX_PROB_BITS / sy)
    return SoftmaxParams(m_e, n_e, m_y, n_y, y_zero_point, out_dtype)


def _exp2_fraction(f):
    """``2**29 * 2**(f / 2**16)`` for ``f`` in ``[0, 2**16)``, integer Horner, floors."""
    c0, c1, c2 = EXP2_COEFFS
    # c2 * f < 2**45 and the bracket times f < 2**46: int64 with room to spare.
    return c0 + (((c1 + ((c2 * f) >> EXP_FRAC_BITS)) * f) >> EXP_FRAC_BITS)


def softmax(x, params):
    """Integer-only softmax over the last axis.

    Recipe (int64 arrays, ``>>`` arithmetic, ``rnd(v, M, n)`` =
    :func:`models.requant.rounding_shift`; widths are of the values, not the containers)::

        d = x - max(x)                         # [-(2**31 - 1), 0]          32-bit signed
        t = rnd(d, M_e, n_e)                   # ~ d*s/ln2 * 2**16, <= 0    62-bit signed
        k = -(t >> 16)                         # integer part, >= 0
        f = t & (2**16 - 1)                    # fraction, [0, 2**16)       16-bit unsigned
        P = C0 + (((C1 + ((C2*f) >> 16)) * f) >> 16)   # 2**29 * 2**(f/2**16), < 2**31
        e = P >> min(k, 31)                    # 2**29 * exp(d*s)            31-bit unsigned
        S = sum(e)                             # >= P(0) = C0 > 2**29, < 2**47 (N <= 2**16)
        r = 2**61 // S                         # one division per row, < 2**32
        p = rnd(e, r, 61 - 15)                 # probability * 2**15, [0, 2**15]  (e*r <= 2**61)
        y = clamp(z_y + rnd(p, M_y, n_y), type's range)   # the project's requantization

    ``exp(x) = 2**(x / ln 2)``: the base-2 exponent splits into an integer part, applied as
    a right shift, and a fraction whose ``2**u`` in ``[1, 2)`` is a quadratic
    (:data:`EXP2_COEFFS`). The row's maximum gives ``t = 0`` and ``e = C0``.

    Error bound (:func:`softmax_error_bound`): with ``p`` the float softmax of the real
    inputs ``x * s``, ``|y - (z_y + p / y_scale)| <= 0.5 + B / y_scale`` where
    ``B = delta / (2 (1 - delta)) + (N + 1) / (2**29 (1 - delta)) + 2**-16 + 2**-30``
    and ``delta = (1 + 1.7248e-3)(1 + 5.3e-6) - 1`` (polynomial and argument rounding);
    with the default ``y_scale = 1/256`` that is 0.73 LSB for short rows (0.76 at
    ``N = 2**16``), so ``y`` is always within 1 of the float softmax quantized the same way.

    Parameters
    ----------
    x : numpy.ndarray of integers
        Values in ``[-2**30, 2**30 - 1]`` (int8, int16 or an int32 accumulator), the last
        axis 1 to 65 536 long.
    params : SoftmaxParams

    Returns
    -------
    numpy.ndarray of uint8 or int8
        Same shape as ``x``.

    Raises
    ------
    ValueError
        If ``x`` is not an integer array, a value is out of range or the axis is too long.
    """
    p = _softmax_probability(x, params)
    scaled = rounding_shift(p, np.int64(params.out_multiplier), np.int64(params.out_shift))
    info = np.iinfo(params.out_dtype)
    return np.clip(scaled + params.y_zero_point, info.min, info.max).astype(params.out_dtype)


def _softmax_probability(x, params):
    """:func:`softmax` up to ``p``, the probability in Q15 (int64), inputs checked."""
    x = _check_input("x", x, SOFTMAX_X_MIN, SOFTMAX_X_MAX)
    _check_length("x", x.shape[-1], SOFTMAX_MAX_LENGTH)
    d = x - x.max(axis=-1, keepdims=True)
    t = rounding_shift(d, np.int64(params.exp_multiplier), np.int64(params.exp_shift))
    k = -(t >> EXP_FRAC_BITS)
    f = t & ((1 << EXP_FRAC_BITS) - 1)
    # P < 2**31, so a shift by 31 already gives 0: capping keeps NumPy's shift defined.
    e = _exp2_fraction(f) >> np.minimum(k, 31)
    total = e.sum(axis=-1, keepdims=True)
    recip = (np.int64(1) << SOFTMAX_RECIP_BITS) // total
    return rounding_shift(e, recip, np.int64(SOFTMAX_RECIP_BITS - SOFTMAX_PROB_BITS))


def softmax_error_bound(length, y_scale=1.0 / 256):
    """Largest ``|y - (z_y + p / y_scale)|`` of :func:`softmax` in output LSB (see there)."""
    delta = (1 + EXP2_POLY_REL_ERROR) * (1 + 5.3e-6) - 1
    bound = (delta / (2 * (1 - delta)) + (length + 1) / (2.0**EXP_ONE_BITS * (1 - delta))
             + 2.0**-(SOFTMAX_PROB_BITS + 1) + 2.0**-30)
    return 0.5 + bound / float(y_scale)


# --- GELU ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class GeluParams:
    """Integer constants of :func:`gelu` (from :func:`gelu_params`).

    ``erf_multiplier``/``erf_shift`` carry ``x_scale * 2**14 / (sqrt(2) * c)``;
    ``out_multiplier``/``out_shift`` carry ``x_scale / (2**15 * y_scale)``.
    """

    x_zero_point: int
    erf_multiplier: int
    erf_shift: int
    out_multiplier: int
    out_shift: int
    y_zero_point: int


def gelu_params(x_scale, x_zero_point, y_scale, y_zero_point):
    """Fixed-point constants of :func:`gelu`; zero points are int8.

    Raises
    ------
    ValueError
        If a scale is not positive and finite, a zero point is outside ``[-128, 127]``, or
        a derived multiplier (named in the message) is outside about ``[2**-32, 2**30)``.
    """
    zx = _as_int("x_zero_point", x_zero_point, INT8_MIN, INT8_MAX)
    zy = _as_int("y_zero_point", y_zero_point, INT8_MIN, INT8_MAX)
    sx = _as_scale("x_scale", x_scale)
    sy = _as_scale("y_scale", y_scale)
    m_t, n_t = _requant_params("gelu x_scale * 2**14 / (sqrt(2) * c)",
                               sx * 2.0**GELU_FRAC_BITS / (math.sqrt(2.0) * GELU_ERF_CLIP))
    m_y, n_y = _requant_params("gelu x_scale / (2**15 * y_scale)",
                               sx / (2.0**(GELU_FRAC_BITS + 1) * sy))
    return GeluParams(zx, m_t, n_t, m_y, n_y, zy)


def gelu(x, params, lo=INT8_MIN, hi=INT8_MAX):
    """Integer-only GELU, ``x/2 * (1 + erf(x / sqrt 2))``, element-wise.

    Recipe (``rnd`` = :func:`models.requant.rounding_shift`, ``c`` = 1.7416)::

        d = x - z_x                            # |d| <= 2**15 + 128           17-bit signed
        v = rnd(d, M_t, n_t)                   # ~ d*s / (sqrt2 * c) * 2**14  (|d*M_t| < 2**48)
        t = min(|v|, 2**14)                    # t/2**14 = min(|w|/c, 1)     15-bit unsigned
        a = rnd(t, 2**15 - t, 14)              # erf(|w|) * 2**14 = t(2-t)   15-bit unsigned
        L = sign(v) * a                        # erf(w) * 2**14, [-2**14, 2**14]
        g = d * (2**14 + L)                    # gelu * 2**15 / s, |g| < 2**31   int32
        y = requantize(g, M_y, n_y, z_y, lo, hi)   # models.requant, M_y/2**n_y ~ s/(2**15 s_y)

    ``t * (2 - t)`` is the parabola through erf's value 0 at 0 and its saturation 1 at
    ``|w| = c`` with zero slope there; ``c`` minimises GELU's own worst error.

    Error bound (:func:`gelu_error_bound`): ``|y - clamp(z_y + gelu(s (x - z_x)) / s_y,
    lo, hi)| <= 0.5 + (0.019689 + 1.2e-4 + |x|_max * 2**-31) / s_y`` with ``|x|_max`` the
    largest real input; 0.019689 is the approximation's own error (:data:`GELU_APPROX_ERROR`),
    1.2e-4 the roundings of ``v`` and ``a`` (at most ``2**-14 + 2**-15`` in erf, times
    ``|x| / 2 <= c / sqrt 2``, the only place they are not swamped by the clip).

    Parameters
    ----------
    x : numpy.ndarray of integers
        Values in ``[-2**15, 2**15 - 1]`` (int8 or int16), any shape.
    params : GeluParams
    lo, hi : int, optional
        Output clamp in ``[-128, 127]``.

    Returns
    -------
    numpy.ndarray of int8
    """
    x = _as_int_array("x", x, GELU_X_MIN, GELU_X_MAX)
    lo, hi = _as_clamp(lo, hi)
    one = np.int64(1 << GELU_FRAC_BITS)
    d = x - params.x_zero_point
    v = rounding_shift(d, np.int64(params.erf_multiplier), np.int64(params.erf_shift))
    t = np.minimum(np.abs(v), one)
    a = rounding_shift(t, 2 * one - t, np.int64(GELU_FRAC_BITS))
    g = d * (one + np.sign(v) * a)
    return requantize(g, params.out_multiplier, params.out_shift, params.y_zero_point, lo, hi)


def gelu_error_bound(y_scale, x_abs_max):
    """Largest ``|y - clamp(z_y + gelu(real) / y_scale)|`` of :func:`gelu` in output LSB.

    ``x_abs_max`` is the largest ``|x_scale * (x - z_x)|`` the input can take: the input
    scale matters only through it.
    """
    rounding = (2.0**-GELU_FRAC_BITS + 2.0**-(GELU_FRAC_BITS + 1)) * GELU_ERF_CLIP \
        / math.sqrt(2.0) + 1e-6
    return 0.5 + (GELU_APPROX_ERROR + rounding + x_abs_max * 2.0**-31) / float(y_scale)


# --- LayerNorm -----------------------------------------------------------------------------

def isqrt(value):
    """``floor(sqrt(value))`` of int64 values in ``[0, 2**62)``, bit by bit.

    The restoring digit-by-digit method: 31 fixed iterations of a compare, a subtract and
    shifts, one result bit each; no multiplier and no data-dependent loop count, so the
    hardware is a 31-stage pipeline (or one stage used 31 times).
    """
    rem = _as_int_array("value", value, 0, (1 << 62) - 1)
    root = np.zeros_like(rem)
    bit = np.int64(1 << 60)
    for _ in range(31):
        trial = root + bit
        take = rem >= trial
        rem = np.where(take, rem - trial, rem)
        root = np.where(take, (root >> 1) + bit, root >> 1)
        bit = bit >> 2
    return root


@dataclass(frozen=True)
class LayerNormParams:
    """Integer constants of :func:`layernorm` (from :func:`layernorm_params`).

    ``eps_term`` is ``round(N**2 * eps / x_scale**2 * 2**22)``; per channel ``c``:
    ``sign[c]`` the sign of gamma, ``bias[c] = round(beta * 2**16 / |gamma|)`` and
    ``multiplier[c]``/``shift[c]`` carrying ``|gamma| / (2**16 * y_scale)``.
    """

    eps_term: int
    sign: np.ndarray
    bias: np.ndarray
    multiplier: np.ndarray
    shift: np.ndarray
    y_zero_point: int


def _float_vector(name, value):
    try:
        arr = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name} must be a 1-D array of floats, not {value!r}") from exc
    if arr.ndim != 1 or not np.isfinite(arr).all():
        raise ValueError(f"{name} must be a 1-D array of finite floats, got shape "
                         f"{arr.shape}")
    return arr


def layernorm_params(x_scale, gamma, beta, y_scale, y_zero_point, eps=1e-5):
    """Fixed-point constants of :func:`layernorm` over an axis of ``len(gamma)`` values.

    Gamma's magnitude and beta fold into a per-channel requantization, as a convolution's
    weight scale and bias do: ``y = z_y + round((sign * n + bias) * |gamma| / (2**16 s_y))``.

    Raises
    ------
    ValueError
        If gamma and beta differ in length or the length is outside ``1..4096``; a
        ``gamma[c]`` is 0 or so small that ``|gamma[c]| / (2**16 y_scale) < 2**-32`` (or
        so large it reaches ``2**30``); ``|beta[c]| * 2**16 / |gamma[c]|`` exceeds
        ``2**31 - 2**22 - 1``; ``N**2 * eps / x_scale**2 * 2**22`` exceeds ``2**61``; or a
        scale or epsilon is not positive and finite. The message names the channel.
    """
    gamma = _float_vector("gamma", gamma)
    beta = _float_vector("beta", beta)
    if gamma.shape != beta.shape:
        raise ValueError(f"gamma and beta must have the same length, not {gamma.shape[0]} "
                         f"and {beta.shape[0]}")
    length = gamma.shape[0]
    _check_length("gamma", length, LAYERNORM_MAX_LENGTH)
    sx = _as_scale("x_scale", x_scale)
    sy = _as_scale("y_scale", y_scale)
    eps = _as_scale("eps", eps)
    zy = _as_int("y_zero_point", y_zero_point, INT8_MIN, INT8_MAX)
    eps_real = length**2 * eps / sx**2 * 2.0**LAYERNORM_EPS_BITS
    if eps_real > LAYERNORM_EPS_MAX:
        raise ValueError(f"layernorm eps / x_scale**2 = {eps / sx**2!r} is too large: "
                         f"N**2 * eps / x_scale**2 * 2**22 must not exceed 2**61 (N = {length})")
    zero = np.flatnonzero(gamma == 0)
    if zero.size:
        raise ValueError(f"gamma[{zero[0]}] = 0 cannot be folded into a multiplier; "
                         f"expected a nonzero gamma")
    magnitude = np.abs(gamma)
    try:
        multiplier, shift = quantize_multiplier(magnitude / (2.0**LAYERNORM_NORM_BITS * sy))
    except ValueError as exc:
        raise ValueError(f"layernorm |gamma| / (2**16 * y_scale): {exc}") from exc
    bias_real = np.rint(beta * 2.0**LAYERNORM_NORM_BITS / magnitude)
    too_big = np.abs(bias_real) > LAYERNORM_BIAS_MAX
    if too_big.any():
        c = int(np.flatnonzero(too_big)[0])
        raise ValueError(f"beta[{c}] / gamma[{c}] = {beta[c] / gamma[c]!r} is too large: "
                         f"|beta / gamma| * 2**16 must not exceed {LAYERNORM_BIAS_MAX}")
    return LayerNormParams(int(round(eps_real)), np.sign(gamma).astype(np.int64),
                           bias_real.astype(np.int64), multiplier, shift, zy)


def layernorm(x, params, lo=INT8_MIN, hi=INT8_MAX):
    """Integer-only LayerNormalization over the last axis (N values), gamma and beta folded.

    Recipe (int64 arrays; ``rnd`` = :func:`models.requant.rounding_shift`; the input's zero
    point and scale cancel in ``(x - mean) / std`` and enter only through epsilon)::

        s1 = sum(x);  s2 = sum(x*x)            # |s1| <= 2**19, s2 <= 2**26 (N <= 2**12)
        c  = N*x - s1                          # N * (x - mean), |c| <= 2**20
        W  = N*s2 - s1*s1                      # N**2 * var, [0, 2**38]
        X  = max((W << 22) + E, 1)             # N**2 (var + eps/s**2) * 2**22, < 2**62
        j  = (62 - bit_length(X)) // 2         # normalise: X << 2j in [2**60, 2**62)
        D  = isqrt(X << 2j)                    # sqrt(X) * 2**j, [2**30, 2**31), 31 steps
        R  = 2**62 // D                        # one division per row, (2**31, 2**32]
        n  = rnd(c, R, 62 - 16 - 11 - j)       # (x - mean)/std * 2**16, |n| <= 2**22
        acc = sign[c] * n + bias[c]            # int32 (|bias| <= 2**31 - 2**22 - 1)
        y  = requantize(acc, M[c], n[c], z_y, lo, hi, axis=-1)   # models.requant

    ``bit_length`` is a leading-zero count; the shift ``62 - 27 - j`` is at least 5.

    Error bound (:func:`layernorm_error_bound`): against the float LayerNorm of
    ``s * (x - z)`` with the same gamma, beta and eps,
    ``|y - clamp(z_y + ln / s_y, lo, hi)| <= 0.5 + |gamma|_max * (2**-16 + sqrt(N) *
    2**-22) / s_y + 2**-20`` (rounding of ``n`` and of ``bias``; ``isqrt``, ``R`` and ``E``
    together move ``1/std`` by less than ``2**-23.9`` relative; the multiplier's ``2**-31``
    relative error on an output within the int8 range).

    Parameters
    ----------
    x : numpy.ndarray of integers
        int8 values (``[-128, 127]``); the last axis must be ``len(gamma)`` long.
    params : LayerNormParams
    lo, hi : int, optional
        Output clamp in ``[-128, 127]``.

    Returns
    -------
    numpy.ndarray of int8
    """
    x = _check_input("x", x, INT8_MIN, INT8_MAX)
    lo, hi = _as_clamp(lo, hi)
    length = params.sign.shape[0]
    if x.shape[-1] != length:
        raise ValueError(f"the last axis of x has length {x.shape[-1]}; the layer's gamma "
                         f"and beta expect {length}")
    s1 = x.sum(axis=-1, keepdims=True)
    s2 = (x * x).sum(axis=-1, keepdims=True)
    c = length * x - s1
    w = length * s2 - s1 * s1
    big_x = np.maximum((w << LAYERNORM_EPS_BITS) + params.eps_term, 1)
    bits = _bit_length(big_x)
    j = (62 - bits) // 2
    root = isqrt(big_x << (2 * j))
    recip = (np.int64(1) << 62) // root
    n = rounding_shift(c, recip, 62 - LAYERNORM_NORM_BITS - LAYERNORM_EPS_BITS // 2 - j)
    acc = params.sign * n + params.bias
    return requantize(acc, params.multiplier, params.shift, params.y_zero_point, lo, hi,
                      axis=-1)


def _bit_length(value):
    """Bits of positive int64 values below ``2**62`` (a priority encoder in hardware)."""
    bits = np.zeros_like(value)
    rest = value.copy()
    for step in (32, 16, 8, 4, 2, 1):
        big = rest >= (np.int64(1) << step)
        bits = np.where(big, bits + step, bits)
        rest = np.where(big, rest >> step, rest)
    return bits + (rest > 0)


def layernorm_error_bound(gamma, y_scale):
    """Largest ``|y - clamp(z_y + ln / y_scale)|`` of :func:`layernorm` in output LSB."""
    gamma = _float_vector("gamma", gamma)
    length = gamma.shape[0]
    worst = float(np.abs(gamma).max())
    real = worst * (2.0**-LAYERNORM_NORM_BITS + math.sqrt(length) * 2.0**-22)
    return 0.5 + real / float(y_scale) + 2.0**-20
