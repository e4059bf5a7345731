"""Sequence-model layers as OpenCL kernels (``sequence.cl``), bit-exact with ``models/``.

- :func:`batched_matmul_requant`: the activation x activation MatMul of
  :func:`models.sequence.matmul_int` followed by :func:`models.requant.requantize`
  (attention scores ``Q @ K^T`` and ``attention @ V``, batched over heads and sequences).
- :func:`intonly_softmax`, :func:`intonly_gelu`, :func:`intonly_layernorm`: the
  integer-only nonlinearities of :mod:`models.intonly`, one kernel each (a work-item per
  row for Softmax and LayerNorm, per element for GELU).

The functions take an :class:`~sw_driver.opencl.OpenCLRuntime` and follow its conventions:
NumPy in, NumPy out (upload, launch, read); :class:`~sw_driver.opencl.DeviceTensor` in,
DeviceTensor out, nothing waited for. Arguments are checked on the host with the golden
functions' messages before anything is enqueued.

The ORT-compatible float Softmax, LayerNorm and GELU have no kernel here: float ``exp``,
``erf`` and division in OpenCL C are not required to round as NumPy does, and the golden
reductions run in an order a kernel would have to copy (``docs/opencl.md``, "Sequence
layers").
"""

import math

import numpy as np
import pyopencl.cltypes as cltypes

from models import intonly
from models.requant import INT8_MAX, INT8_MIN

from . import params
from .buffers import DeviceTensor

__all__ = [
    "batched_matmul_requant",
    "intonly_gelu",
    "intonly_layernorm",
    "intonly_softmax",
]

_GROUP = 64  # work-group of the one-work-item-per-row/element kernels


def _round_up(value, multiple):
    return -(-value // multiple) * multiple


def _vector(values, dtype):
    """Pack integers into an OpenCL vector argument (``int4``, ``int8``, ``long4``)."""
    base = np.int64 if dtype in (cltypes.long4, cltypes.long8) else np.int32
    width = dtype.itemsize // np.dtype(base).itemsize
    packed = np.zeros(width, dtype=base)
    packed[:len(values)] = values
    return packed.view(dtype)[0]


def _int_input(rt, name, x, low, high, kernels):
    """``(tensor, numpy_in, kernel suffix)`` for an integer input of a row/element kernel.

    ``kernels`` maps a NumPy dtype to the kernel variant that reads it, smallest first. A
    NumPy array is range-checked against ``[low, high]`` (the golden function's range) and
    uploaded as its own dtype where a kernel reads it, else as the widest one. A
    DeviceTensor cannot be checked without reading it, so it must have a dtype whose every
    value is in range (int8 tensors of the runtime always are).
    """
    if isinstance(x, DeviceTensor):
        if x.runtime is not rt:
            raise ValueError(f"{name} lives on another OpenCLRuntime; read it back first")
        info = np.iinfo(x.dtype) if np.issubdtype(x.dtype, np.integer) else None
        if x.dtype not in kernels or info.min < low or info.max > high:
            allowed = [str(d) for d in kernels
                       if np.iinfo(d).min >= low and np.iinfo(d).max <= high]
            raise ValueError(f"{name} on the device must have dtype {' or '.join(allowed)} "
                             f"(values in [{low}, {high}] without a check), not {x.dtype}")
        _check_shape(name, x.shape)
        return x, False, kernels[x.dtype]
    if not isinstance(x, np.ndarray) or x.dtype == np.bool_ \
            or not np.issubdtype(x.dtype, np.integer):
        raise ValueError(f"{name} must be a numpy.ndarray of integers or a DeviceTensor, "
                         f"not {getattr(x, 'dtype', type(x).__name__)}")
    _check_shape(name, x.shape)
    info = np.iinfo(x.dtype)
    if (info.min < low or info.max > high) and (x.min() < low or x.max() > high):
        index = np.unravel_index(np.argmax((x < low) | (x > high)), x.shape)
        raise ValueError(f"{name}[{', '.join(map(str, index))}] = {int(x[index])} is "
                         f"outside the expected range [{low}, {high}]")
    if x.dtype not in kernels:
        x = x.astype(list(kernels)[-1])
    return rt.to_device(x), True, kernels[x.dtype]


def _check_shape(name, shape):
    if len(shape) == 0:
        raise ValueError(f"{name} must have at least one axis, not a scalar")
    if min(shape) < 1:
        raise ValueError(f"{name} must not have empty dimensions, not {tuple(shape)}")
    if math.prod(shape) > params.MAX_ELEMENTS:
        raise ValueError(f"{name} has {math.prod(shape)} elements; the OpenCL kernels "
                         f"index at most {params.MAX_ELEMENTS}: split the batch")


def _check_length(name, length, maximum):
    if not 1 <= length <= maximum:
        raise ValueError(f"the last axis of {name} has length {length}; "
                         f"expected 1..{maximum}")


def _output(rt, tensor, numpy_io):
    return rt.read(tensor) if numpy_io else tensor


# ---------------------------------------------------------------- batched MatMul

def batched_matmul_requant(rt, a, b, *, a_zero_point, b_zero_point, multiplier, shift,
                           y_zero_point, lo=INT8_MIN, hi=INT8_MAX):
    """``requantize(matmul_int(a, a_zero_point, b, b_zero_point), M, n, y_zero_point, lo,
    hi)``: the product of two int8 activations, batched over the leading dimensions.

    Parameters
    ----------
    rt : OpenCLRuntime
    a : numpy.ndarray of int8 or DeviceTensor, shape (..., M, K)
    b : numpy.ndarray of int8 or DeviceTensor, shape (..., K, N)
        The leading (batch) dimensions broadcast as in ``numpy.matmul``.
    a_zero_point, b_zero_point, y_zero_point : int
    multiplier, shift : int
        Per-tensor requantization (``M`` in ``[2**30, 2**31)``, ``n`` in ``[1, 62]``).
    lo, hi : int
        Output clamp.

    Returns
    -------
    numpy.ndarray of int8 (or DeviceTensor when ``a`` is one), shape (batch..., M, N)

    Raises
    ------
    ValueError
        Shapes that do not multiply or broadcast, or arguments out of range.
    OverflowError
        At the read, if an integer product left int32 (where the golden model raises).
    """
    numpy_io = not isinstance(a, DeviceTensor)
    a, _ = rt._input("a", a, None, "(..., M, K)")
    b, _ = rt._input("b", b, None, "(..., K, N)")
    if a.ndim < 2 or b.ndim < 2 or a.shape[-1] != b.shape[-2]:
        raise ValueError(f"cannot multiply shapes {list(a.shape)} and {list(b.shape)}: the "
                         f"last dimension of the first must equal the second-to-last of the "
                         f"second")
    try:
        batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    except ValueError:
        raise ValueError(f"batch dimensions of {list(a.shape)} and {list(b.shape)} do not "
                         f"broadcast") from None
    za = params.zero_point("a_zero_point", a_zero_point)
    zb = params.zero_point("b_zero_point", b_zero_point)
    zy = params.zero_point("y_zero_point", y_zero_point)
    lo, hi = params.clamp_range(lo, hi)
    (m_y,), (n_y,) = params.requant_tables(multiplier, shift, 1)
    (m, k), n = a.shape[-2:], b.shape[-1]
    count = math.prod(batch)
    y = rt.empty((*batch, m, n))
    params.check_int8("y", y.shape, y.dtype, None, "(..., M, N)")

    def offsets(shape, size):
        # Element offset of each output batch element's matrix in its operand.
        index = np.arange(math.prod(shape), dtype=np.int64).reshape(shape)
        return (np.broadcast_to(index, batch).reshape(-1) * size).astype(np.int32)

    rows = count * m
    rt._launch("batched_matmul_requant", (_round_up(rows, _GROUP),), (_GROUP,), a.buffer,
               b.buffer, y.buffer,
               rt._cached_table(offsets(a.shape[:-2], m * k)),
               rt._cached_table(offsets(b.shape[:-2], k * n)), rt._status,
               _vector([m, k, n, rows], cltypes.int4),
               _vector([za, zb, zy, lo, hi, m_y, n_y], cltypes.int8))
    return _output(rt, y, numpy_io)


# ---------------------------------------------------------------- integer-only Softmax

def intonly_softmax(rt, x, p):
    """:func:`models.intonly.softmax` over the last axis.

    Parameters
    ----------
    rt : OpenCLRuntime
    x : numpy.ndarray of integers or DeviceTensor of int8
        Values in ``[-2**30, 2**30 - 1]`` (int8 and int32 are read directly, other integer
        types are checked and widened to int32), the last axis 1 to 65 536 long.
    p : models.intonly.SoftmaxParams

    Returns
    -------
    numpy.ndarray of uint8 or int8 (``p.out_dtype``), or a DeviceTensor of it
    """
    if not isinstance(p, intonly.SoftmaxParams):
        raise ValueError(f"p must be a models.intonly.SoftmaxParams, not {type(p).__name__}")
    x, numpy_io, suffix = _int_input(rt, "x", x, intonly.SOFTMAX_X_MIN, intonly.SOFTMAX_X_MAX,
                                     {np.dtype(np.int8): "i8", np.dtype(np.int32): "i32"})
    length = x.shape[-1]
    _check_length("x", length, intonly.SOFTMAX_MAX_LENGTH)
    rows = x.size // length
    info = np.iinfo(p.out_dtype)
    y = rt.empty(x.shape, np.dtype(p.out_dtype))
    rt._launch(f"intonly_softmax_{suffix}", (_round_up(rows, _GROUP),), (_GROUP,), x.buffer,
               y.buffer, np.int32(rows), np.int32(length),
               _vector([p.exp_multiplier, p.exp_shift, p.out_multiplier, p.out_shift],
                       cltypes.long4),
               _vector([p.y_zero_point, info.min, info.max], cltypes.int4))
    return _output(rt, y, numpy_io)


# ---------------------------------------------------------------- integer-only GELU

def intonly_gelu(rt, x, p, lo=INT8_MIN, hi=INT8_MAX):
    """:func:`models.intonly.gelu`, element-wise.

    ``x``: a NumPy integer array with values in ``[-2**15, 2**15 - 1]`` or an int8
    DeviceTensor; ``p``: :class:`models.intonly.GeluParams`; ``lo``, ``hi``: output clamp.
    Returns int8 of ``x``'s shape (a DeviceTensor for a DeviceTensor input).
    """
    if not isinstance(p, intonly.GeluParams):
        raise ValueError(f"p must be a models.intonly.GeluParams, not {type(p).__name__}")
    x, numpy_io, suffix = _int_input(rt, "x", x, intonly.GELU_X_MIN, intonly.GELU_X_MAX,
                                     {np.dtype(np.int8): "i8", np.dtype(np.int16): "i16"})
    lo, hi = params.clamp_range(lo, hi)
    y = rt.empty(x.shape)
    rt._launch(f"intonly_gelu_{suffix}", (_round_up(x.size, _GROUP),), (_GROUP,), x.buffer,
               y.buffer, np.int32(x.size),
               _vector([p.x_zero_point, p.erf_multiplier, p.erf_shift, p.out_multiplier,
                        p.out_shift, p.y_zero_point, lo, hi], cltypes.int8))
    return _output(rt, y, numpy_io)


# ---------------------------------------------------------------- integer-only LayerNorm

def intonly_layernorm(rt, x, p, lo=INT8_MIN, hi=INT8_MAX):
    """:func:`models.intonly.layernorm` over the last axis, gamma and beta folded in ``p``.

    ``x``: int8 (NumPy or DeviceTensor) whose last axis is ``len(p.sign)`` long;
    ``p``: :class:`models.intonly.LayerNormParams`; ``lo``, ``hi``: output clamp.
    Returns int8 of ``x``'s shape (a DeviceTensor for a DeviceTensor input).
    """
    if not isinstance(p, intonly.LayerNormParams):
        raise ValueError(f"p must be a models.intonly.LayerNormParams, not "
                         f"{type(p).__name__}")
    x, numpy_io, _ = _int_input(rt, "x", x, INT8_MIN, INT8_MAX, {np.dtype(np.int8): "i8"})
    lo, hi = params.clamp_range(lo, hi)
    length = len(p.sign)
    if x.shape[-1] != length:
        raise ValueError(f"the last axis of x has length {x.shape[-1]}; the layer's gamma "
                         f"and beta expect {length}")
    _check_length("x", length, intonly.LAYERNORM_MAX_LENGTH)
    rows = x.size // length
    m, n = params.requant_tables(p.multiplier, p.shift, length)
    tables = [rt._cached_table(np.asarray(t, np.int64).astype(np.int32))
              for t in (p.sign, p.bias)] + [rt._cached_table(m), rt._cached_table(n)]
    y = rt.empty(x.shape)
    rt._launch("intonly_layernorm_i8", (_round_up(rows, _GROUP),), (_GROUP,), x.buffer,
               y.buffer, *tables, np.int32(rows), np.int32(length), np.int64(p.eps_term),
               _vector([p.y_zero_point, lo, hi], cltypes.int4))
    return _output(rt, y, numpy_io)
