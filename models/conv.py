"""Integer convolution and dense layers: int8 in, int32 accumulator out.

Definition (``docs/semantics.md``): ``acc = bias + sum((x - x_zero_point) * w)`` with int8
activations, symmetric int8 weights (zero point 0) and int32 bias; padding behaves as the
value ``x_zero_point``, so it contributes exactly 0. Requantization to int8 is separate
(:func:`models.requant.requantize`).

How it is computed: the zero point is subtracted first, so every product is at most
``255 * 128 = 32640 < 2**15`` in magnitude. The products are summed by float64 matrix
multiplies, one per kernel tap. Every partial sum is an integer of magnitude at most
``K * 2**15`` (``K`` = products per output), which float64 represents exactly while
``K * 2**15 <= 2**53``, i.e. ``K <= 2**38``; an int32 accumulator overflows long before
that, so the float64 result is exact for every layer whose result fits int32. The sum is
then converted to int64, the bias added, and the result checked against the int32 range.

Worst case without bias the sum fits int32 whenever ``K * 32640 <= 2**31 - 1``, i.e.
``K <= 65793`` (e.g. 3x3 kernels over 7310 input channels). Two's-complement wrap-around is
harmless for the partial sums of an int32 accumulator; only the final value has to fit.
"""

import numpy as np

from .requant import INT8_MAX, INT8_MIN, INT32_MAX, INT32_MIN, _as_int

__all__ = [
    "conv2d",
    "conv_output_size",
    "dense",
    "depthwise_conv2d",
]

#: Largest number of products per output for which any int8 inputs keep the sum (without
#: bias) inside int32: floor((2**31 - 1) / (255 * 128)).
K_MAX_WRAP_FREE = INT32_MAX // (255 * 128)


def _check_array(name, value, dtype, ndim, layout):
    """Return ``value`` as an ndarray after checking its dtype and rank."""
    if not isinstance(value, np.ndarray):
        raise ValueError(
            f"{name} must be a numpy.ndarray of {np.dtype(dtype).name} with shape {layout}, "
            f"not {type(value).__name__}"
        )
    if value.dtype != dtype:
        raise ValueError(
            f"{name} must have dtype {np.dtype(dtype).name} (shape {layout}), not {value.dtype}"
        )
    if value.ndim != ndim:
        raise ValueError(f"{name} must have shape {layout}, not {value.shape}")
    return value


def _check_zero_point(name, value):
    return _as_int(name, value, INT8_MIN, INT8_MAX)


def _positive_pair(name, value):
    """``(a, b)`` of positive ints from an int or a 2-sequence."""
    if isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_)):
        pair = (value, value)
    else:
        try:
            pair = tuple(value)
        except TypeError:
            pair = ()
    if len(pair) != 2 or not all(
        isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_)) and v >= 1
        for v in pair
    ):
        raise ValueError(f"{name} must be a positive int or a pair of positive ints, "
                         f"not {value!r}")
    return int(pair[0]), int(pair[1])


def _padding(value):
    """``(top, left, bottom, right)`` of non-negative ints (ONNX ``pads`` order)."""
    if isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_)):
        pads = (value,) * 4
    else:
        try:
            pads = tuple(value)
        except TypeError:
            pads = ()
    if len(pads) == 2:
        pads = pads * 2
    if len(pads) != 4 or not all(
        isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_)) and v >= 0
        for v in pads
    ):
        raise ValueError(
            f"padding must be a non-negative int, (pad_h, pad_w) or "
            f"(top, left, bottom, right), not {value!r}"
        )
    return tuple(int(p) for p in pads)


def conv_output_size(size, kernel, stride, pad_begin, pad_end, dilation=1):
    """ONNX output length (``ceil_mode=0``): ``floor((size + pads - span) / stride) + 1``.

    ``span = dilation * (kernel - 1) + 1``. Returns a value < 1 when the kernel does not fit.
    """
    span = dilation * (kernel - 1) + 1
    return (size + pad_begin + pad_end - span) // stride + 1


def _output_shape(x_shape, kernel, stride, padding, dilation):
    (h, w), (kh, kw) = x_shape, kernel
    top, left, bottom, right = padding
    oh = conv_output_size(h, kh, stride[0], top, bottom, dilation[0])
    ow = conv_output_size(w, kw, stride[1], left, right, dilation[1])
    if oh < 1 or ow < 1:
        raise ValueError(
            f"kernel {kh}x{kw} (dilation {dilation}) does not fit input {h}x{w} with "
            f"padding {padding}: output would be {oh}x{ow}"
        )
    return oh, ow


def _finish(total, bias, channel_axis):
    """Add the bias to an exact float64 sum and check the int32 range."""
    acc = total.astype(np.int64)
    if bias is not None:
        shape = [1] * acc.ndim
        shape[channel_axis] = bias.shape[0]
        acc += bias.astype(np.int64).reshape(shape)
    bad = (acc < INT32_MIN) | (acc > INT32_MAX)
    if bad.any():
        index = tuple(int(i) for i in np.argwhere(bad)[0])
        raise OverflowError(
            f"accumulator at index {index} is {int(acc[index])}, outside int32; the layer "
            f"needs a smaller reduction (at most {K_MAX_WRAP_FREE} products are always safe)"
        )
    return acc.astype(np.int32)


def _check_bias(bias, out_channels):
    if bias is None:
        return None
    _check_array("bias", bias, np.int32, 1, f"({out_channels},)")
    if bias.shape != (out_channels,):
        raise ValueError(f"bias must have shape ({out_channels},), not {bias.shape}")
    return bias


def conv2d(x, w, bias=None, *, x_zero_point, stride=(1, 1), padding=(0, 0, 0, 0),
           dilation=(1, 1), groups=1):
    """2-D convolution of int8 NCHW activations with int8 OIHW weights; int32 result.

    Definition, with ``G = groups``, ``Cg = C / G`` input channels per group, ``Og = O / G``
    and ``g = o // Og``::

        acc[n, o, i, j] = bias[o] + sum over c < Cg, u < kh, v < kw of
            (xp[n, g*Cg + c, i*sh + u*dh, j*sw + v*dw] - x_zero_point) * w[o, c, u, v]

    where ``xp`` is ``x`` padded with the value ``x_zero_point`` (padding contributes 0).
    The output is ``OH = floor((H + top + bottom - (dh*(kh-1)+1)) / sh) + 1`` (ONNX
    ``ceil_mode=0``) by the analogous ``OW``. Exact; see the module docstring.

    Parameters
    ----------
    x : numpy.ndarray of int8, shape (N, C, H, W)
    w : numpy.ndarray of int8, shape (O, C / groups, kh, kw)
        Symmetric per-output-channel weights (zero point 0).
    bias : numpy.ndarray of int32, shape (O,), or None
        At scale ``s_x * s_w[o]``; None means zero.
    x_zero_point : int
        Activation zero point in [-128, 127].
    stride, dilation : int or (int, int)
    padding : int, (pad_h, pad_w) or (top, left, bottom, right)
        Same order as ONNX ``pads`` for 2-D.
    groups : int
        ``C`` and ``O`` must both be multiples of it.

    Returns
    -------
    numpy.ndarray of int32, shape (N, O, OH, OW)

    Raises
    ------
    ValueError
        A wrong dtype, shape or parameter (the message names the argument).
    OverflowError
        If an accumulator falls outside int32.
    """
    _check_array("x", x, np.int8, 4, "(N, C, H, W)")
    _check_array("w", w, np.int8, 4, "(O, C/groups, kh, kw)")
    zx = _check_zero_point("x_zero_point", x_zero_point)
    stride = _positive_pair("stride", stride)
    dilation = _positive_pair("dilation", dilation)
    padding = _padding(padding)
    if isinstance(groups, (bool, np.bool_)) or not isinstance(groups, (int, np.integer)) \
            or groups < 1:
        raise ValueError(f"groups must be a positive int, not {groups!r}")
    if min(w.shape) < 1 or min(x.shape) < 1:
        raise ValueError(f"x {x.shape} and w {w.shape} must not have empty dimensions")
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    if c % groups or o % groups:
        raise ValueError(
            f"groups={groups} must divide both the input channels of x ({c}) and the output "
            f"channels of w ({o})"
        )
    if cg != c // groups:
        raise ValueError(
            f"w must have shape (O, C/groups, kh, kw) = ({o}, {c // groups}, kh, kw) for x "
            f"with C={c} and groups={groups}, not {w.shape}"
        )
    bias = _check_bias(bias, o)
    oh, ow = _output_shape((h, wd), (kh, kw), stride, padding, dilation)
    top, left, bottom, right = padding
    sh, sw = stride
    dh, dw = dilation
    og = o // groups

    # Shift to the zero-point-free domain first so that zero padding means "value z_x".
    xs = np.pad(x.astype(np.float64) - zx, ((0, 0), (0, 0), (top, bottom), (left, right)))
    wf = w.astype(np.float64).reshape(groups, og, cg, kh, kw)
    total = np.zeros((n, groups, og, oh * ow), dtype=np.float64)
    for u in range(kh):
        for v in range(kw):
            patch = xs[:, :, u * dh:u * dh + sh * (oh - 1) + 1:sh,
                       v * dw:v * dw + sw * (ow - 1) + 1:sw]
            patch = patch.reshape(n, groups, cg, oh * ow)
            tap = wf[:, :, :, u, v]
            if cg == 1:
                # Depthwise-like: a broadcast multiply beats thousands of 1x1 matmuls.
                total += tap[None, :, :, :] * patch
            else:
                total += np.matmul(tap, patch)
    return _finish(total.reshape(n, o, oh, ow), bias, 1)


def depthwise_conv2d(x, w, bias=None, *, x_zero_point, stride=(1, 1), padding=(0, 0, 0, 0),
                     dilation=(1, 1)):
    """Depthwise 2-D convolution (``groups == C``, one filter per channel); int32 result.

    Definition: :func:`conv2d` with ``groups = C``, i.e.::

        acc[n, c, i, j] = bias[c] + sum over u < kh, v < kw of
            (xp[n, c, i*sh + u*dh, j*sw + v*dw] - x_zero_point) * w[c, 0, u, v]

    Parameters
    ----------
    x : numpy.ndarray of int8, shape (N, C, H, W)
    w : numpy.ndarray of int8, shape (C, 1, kh, kw)
    bias : numpy.ndarray of int32, shape (C,), or None
    x_zero_point, stride, padding, dilation
        As for :func:`conv2d`.

    Returns
    -------
    numpy.ndarray of int32, shape (N, C, OH, OW)
    """
    _check_array("x", x, np.int8, 4, "(N, C, H, W)")
    _check_array("w", w, np.int8, 4, "(C, 1, kh, kw)")
    if w.shape[0] != x.shape[1] or w.shape[1] != 1:
        raise ValueError(
            f"w must have shape (C, 1, kh, kw) = ({x.shape[1]}, 1, kh, kw) for depthwise "
            f"convolution of x with C={x.shape[1]}, not {w.shape}"
        )
    return conv2d(x, w, bias, x_zero_point=x_zero_point, stride=stride, padding=padding,
                  dilation=dilation, groups=x.shape[1])


def dense(x, w, bias=None, *, x_zero_point):
    """Fully connected layer, like ONNX Gemm with ``transB=1``; int32 result.

    Definition::

        acc[n, o] = bias[o] + sum over k < K of (x[n, k] - x_zero_point) * w[o, k]

    The weight is stored (O, K), one row per output channel, as ONNX ``Gemm(x, W, B,
    transB=1)`` and PyTorch ``nn.Linear`` store it; a ``transB=0`` Gemm weight (K, O) must be
    transposed by the caller. Exact while the result fits int32 (see the module docstring).

    Parameters
    ----------
    x : numpy.ndarray of int8, shape (N, K)
    w : numpy.ndarray of int8, shape (O, K)
    bias : numpy.ndarray of int32, shape (O,), or None
    x_zero_point : int

    Returns
    -------
    numpy.ndarray of int32, shape (N, O)
    """
    _check_array("x", x, np.int8, 2, "(N, K)")
    _check_array("w", w, np.int8, 2, "(O, K)")
    zx = _check_zero_point("x_zero_point", x_zero_point)
    if w.shape[1] != x.shape[1]:
        raise ValueError(
            f"w must have shape (O, K) = (O, {x.shape[1]}) to match x of shape {x.shape}, "
            f"not {w.shape}"
        )
    bias = _check_bias(bias, w.shape[0])
    total = (x.astype(np.float64) - zx) @ w.astype(np.float64).T
    return _finish(total, bias, 1)
