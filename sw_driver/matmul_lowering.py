"""An activation x activation MatMul (attention ``Q @ K^T``, ``attention @ V``) lowered to
the Dense passes the convolution engine already runs: no RTL of its own.

The golden definition (:func:`models.sequence.matmul_int`, then
:func:`models.requant.requantize` per tensor) is, for one batch slice ``A`` (M, K) and
``B`` (K, N)::

    acc[m, n] = sum_k (A[m, k] - z_a) * (B[k, n] - z_b)

A Dense pass computes ``bias[n] + sum_k (x[m, k] - z_x) * w[n, k]`` with int8 ``w`` and a
per-column bias (``sw_driver.conv_lowering`` folds ``z_x`` into that bias). So ``A`` is
the pass's input (``x = A``, ``z_x = z_a``) and ``B^T`` its weights. The second operand's
zero point cannot go into the bias: ``-z_b * sum_k (A[m, k] - z_a)`` depends on the row
``m`` (a pixel of the pass), and the engine's bias is per column. It is made exact by
splitting each weight ``B[k, n] - z_b`` into int8 parts that the array sums::

    B[k, n] - z_b = B[k, n] + c_1 + ... + c_j,  c_i int8 constants summing to -z_b

and repeating ``A``'s K columns once per part: ``x = [A, A, ...]`` (K * (1 + j) columns),
``w = [B^T, c_1, ..., c_j]``. Then ``sum (x - z_a) * w`` over the K * (1 + j) columns is
``acc`` exactly. ``j`` is 0 when ``z_b = 0``, 1 for ``z_b`` in [-127, 127], 2 for
``z_b = -128`` (``128 = 127 + 1``). The engine sums modulo 2**32 and the golden model keeps
``acc`` inside int32, so the wrapped sum is ``acc`` itself (as for Conv).

Repeating K columns doubles the pass's work. Usually fewer columns do: the host sums each
row, ``S[m] = sum_k (A[m, k] - z_a)`` (M * K additions beside the pass's M * N * K MACs),
and the share ``t[m] = -z_b * S[m] = 127 q + r`` enters through pairs of input columns
whose weights are the same for every output column, (127, -127) for ``q`` in steps of 255
and (1, -1) for ``r`` (:func:`correction_columns`): ``2 * ceil(max|q| / 255) + 2``
columns, 4 for typical attention rows. The lowering takes whichever of the two needs fewer
columns; both are exact, so the choice depends on the data only for speed.

Which operand becomes the weights is chosen per layer: ``Y^T = B^T @ A^T`` swaps the roles,
so the operand whose zero point needs fewer parts (none when it is 0) goes to the weights
side. Softmax output (``z = -128`` in onnxruntime's int8 quantization) is thus the pass's
input in ``attention @ V``, and ``V`` its weights.

Batch dimensions broadcast as NumPy's matmul does; slices that share the same weights
slice (a broadcast operand) are stacked into one Dense call, so their rows share passes.
"""

from dataclasses import dataclass

import numpy as np

__all__ = ["DenseJob", "MatMulLowering", "correction_columns", "lower_matmul",
           "matmul_refusal", "matmul_work", "weight_parts"]

INT8_MIN, INT8_MAX = -128, 127
#: ``|acc| <= K * 255 * 255``: beyond this K a sum could leave int32, which the engine
#: would wrap silently where the golden model raises.
MAX_CONTRACTION = (2 ** 31 - 1) // (255 * 255)


def weight_parts(zero_point):
    """The int8 constants that add up to ``-zero_point`` (the extra copies of the input
    columns a weights-side zero point costs): none for 0, one for [-127, 127], two for
    -128."""
    zero_point = int(zero_point)
    if not INT8_MIN <= zero_point <= INT8_MAX:
        raise ValueError(f"zero point {zero_point} is outside [-128, 127]")
    if zero_point == 0:
        return ()
    if zero_point == INT8_MIN:
        return (INT8_MAX, 1)
    return (-zero_point,)


def orientation(a_zero_point, b_zero_point):
    """``(transposed, parts)``: whether ``Y^T = B^T @ A^T`` is run (``A`` then being the
    weights side), and the weight parts of the weights-side zero point. The side whose
    zero point needs fewer parts is chosen; ``B`` on a tie."""
    a_parts, b_parts = weight_parts(a_zero_point), weight_parts(b_zero_point)
    if len(a_parts) < len(b_parts):
        return True, a_parts
    return False, b_parts


#: Weights of the correction columns: pairs carry ``127 * e`` and ``e`` for any ``e`` in
#: [-255, 255] (a difference of two int8 inputs, whatever the input zero point).
CORRECTION_WEIGHT = 127
PAIR_RANGE = 255


def _pair(e, x_zero_point):
    """Two int8 input columns ``x1, x2`` with ``(x1 - z) - (x2 - z) = e`` for ``e`` in
    [-255, 255]: each ``x - z`` lies in [-128 - z, 127 - z], a range of 256 holding 0."""
    # The column on e's side takes as much of |e| as fits above 0, the other the rest
    # below 0 (at most 255 - (127 - z) = 128 + z of it, which fits).
    big = np.minimum(np.abs(e), 127 - x_zero_point)
    d1, d2 = np.where(e >= 0, big, big + e), np.where(e >= 0, big - e, big)
    return (d1 + x_zero_point).astype(np.int8), (d2 + x_zero_point).astype(np.int8)


def correction_columns(rows, x_zero_point, w_zero_point):
    """Extra input columns and their weights (the same for every output column) that add
    the weights-side zero point's share, ``-w_zero_point * sum_k (rows[m, k] -
    x_zero_point)``, to each row ``m``: the alternative to repeating the K columns when
    those row sums are small (the usual case: a few columns instead of K).

    The share ``t = 127 q + r`` (``r`` in [0, 126]) is written as pairs of columns: ``P``
    pairs of weights (127, -127) carry ``q`` in steps of at most 255, one pair (1, -1)
    carries ``r``. Returns ``(x (rows, 2P + 2) int8, w (2P + 2,) int8)``; none when
    ``w_zero_point`` is 0.
    """
    if w_zero_point == 0:
        return np.zeros((len(rows), 0), np.int8), np.zeros(0, np.int8)
    sums = rows.astype(np.int64).sum(axis=1) - int(x_zero_point) * rows.shape[1]
    q, r = np.divmod(-int(w_zero_point) * sums, CORRECTION_WEIGHT)
    pairs = int(-(-np.abs(q).max(initial=0) // PAIR_RANGE))
    columns, weights = [], []
    for _ in range(pairs):
        e = np.clip(q, -PAIR_RANGE, PAIR_RANGE)
        q = q - e
        columns += _pair(e, x_zero_point)
        weights += [CORRECTION_WEIGHT, -CORRECTION_WEIGHT]
    columns += _pair(r, x_zero_point)
    weights += [1, -1]
    return np.stack(columns, axis=1), np.array(weights, np.int8)


def contraction_width(k, a_zero_point, b_zero_point):
    """Input columns of each Dense pass of a MatMul over ``k``: ``k`` times one plus the
    number of weight parts."""
    return k * (1 + len(orientation(a_zero_point, b_zero_point)[1]))


@dataclass
class DenseJob:
    """One Dense call: ``x`` (P, K') int8 with zero point ``x_zero_point``, weights ``w``
    (N, K') int8, no bias; its P output rows are the M rows of each batch slice in
    ``slices`` (flat indices into the broadcast batch), in that order."""

    x: np.ndarray
    w: np.ndarray
    x_zero_point: int
    slices: tuple


@dataclass
class MatMulLowering:
    """The Dense calls of one MatMul and how their outputs make ``Y``."""

    jobs: list
    batch: tuple
    rows: int
    cols: int
    transposed: bool

    def assemble(self, outputs):
        """``Y`` (int8, batch + (M, N)) from each job's (P, N) output, in job order."""
        out = np.zeros((int(np.prod(self.batch, dtype=np.int64)), self.rows, self.cols),
                       np.int8)
        for job, y in zip(self.jobs, outputs, strict=True):
            y = np.asarray(y)
            if y.shape != (len(job.slices) * self.rows, self.cols):
                raise ValueError(f"a Dense job returned shape {list(y.shape)}, expected "
                                 f"{[len(job.slices) * self.rows, self.cols]}")
            out[list(job.slices)] = y.reshape(len(job.slices), self.rows, self.cols)
        out = out.reshape(*self.batch, self.rows, self.cols)
        return np.ascontiguousarray(np.swapaxes(out, -1, -2)) if self.transposed else out


def lower_matmul(a, b, *, a_zero_point, b_zero_point, name="matmul"):
    """The Dense calls that compute ``(a - z_a) @ (b - z_b)`` (before requantization).

    Parameters
    ----------
    a, b : numpy.ndarray of int8, shapes (..., M, K) and (..., K, N)
        Batch dimensions broadcast (NumPy matmul rules).
    a_zero_point, b_zero_point : int
    name : str
        Layer name for messages.

    Returns
    -------
    MatMulLowering

    Raises
    ------
    ValueError
        Operands that are not int8 of rank >= 2, shapes that do not multiply, or a
        contraction so long that the sum could leave int32.
    """
    a, b = np.asarray(a), np.asarray(b)
    for what, operand in (("first", a), ("second", b)):
        if operand.dtype != np.int8 or operand.ndim < 2:
            raise ValueError(f"layer {name!r}: the {what} operand must be an int8 array of "
                             f"rank 2 or more, not {operand.dtype} of shape "
                             f"{list(operand.shape)}")
    if a.shape[-1] != b.shape[-2]:
        raise ValueError(f"layer {name!r}: cannot multiply shapes {list(a.shape)} and "
                         f"{list(b.shape)}")
    try:
        batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    except ValueError:
        raise ValueError(f"layer {name!r}: batch dimensions of {list(a.shape)} and "
                         f"{list(b.shape)} do not broadcast") from None
    if a.shape[-1] > MAX_CONTRACTION:
        raise ValueError(f"layer {name!r}: a contraction over K={a.shape[-1]} could leave "
                         f"int32 (the engine's limit is K <= {MAX_CONTRACTION})")
    transposed, parts = orientation(a_zero_point, b_zero_point)
    if transposed:  # Y^T = B^T @ A^T: B's rows are the pass's pixels, A the weights
        a, b = np.swapaxes(b, -1, -2), np.swapaxes(a, -1, -2)
        a_zero_point, b_zero_point = b_zero_point, a_zero_point
    m, k = a.shape[-2:]
    n = b.shape[-1]
    count = int(np.prod(batch, dtype=np.int64))
    a_all = np.broadcast_to(a, (*batch, m, k)).reshape(count, m, k)
    b_all = np.broadcast_to(b, (*batch, k, n)).reshape(count, k, n)
    # Which of b's own slices each output slice reads: slices reading the same one share
    # its weights, so their rows go through the same Dense call.
    b_batch = b.shape[:-2]
    source = np.broadcast_to(
        np.arange(int(np.prod(b_batch, dtype=np.int64))).reshape(b_batch), batch).reshape(-1)
    jobs = []
    for index in np.unique(source):
        slices = tuple(int(s) for s in np.flatnonzero(source == index))
        rows = a_all[list(slices)].reshape(len(slices) * m, k)
        wt = b_all[slices[0]].T
        extra_x, extra_w = correction_columns(rows, a_zero_point, b_zero_point)
        if extra_w.size < len(parts) * k:
            x = np.concatenate([rows, extra_x], axis=1)
            w = np.concatenate([wt, np.broadcast_to(extra_w, (n, extra_w.size))], axis=1)
        else:  # the rows' sums are too large for a few columns: repeat them
            w = np.concatenate([wt] + [np.full_like(wt, c) for c in parts], axis=1)
            x = np.concatenate([rows] * (1 + len(parts)), axis=1)
        jobs.append(DenseJob(np.ascontiguousarray(x), np.ascontiguousarray(w),
                             int(a_zero_point), slices))
    return MatMulLowering(jobs, tuple(batch), m, n, transposed)


def matmul_refusal(layer, config, shape=None):
    """Why the engine of ``config`` cannot run MatMul ``layer`` (on a first operand of
    ``shape``, when known), or None.

    What holds at every shape is checked by lowering a one-column probe (requantization
    values and zero points in range); with the shape, the pass's K' input columns (at worst
    K times one plus the weight parts) must fit the activation buffer (one pixel at least) and the
    weight buffer (one column tile at least). M, N and the batch only add passes.
    """
    from .conv_lowering import lower_conv2d

    transposed, parts = orientation(layer.a_zero_point, layer.b_zero_point)
    x_zero_point = layer.b_zero_point if transposed else layer.a_zero_point
    width = 1 + len(parts)
    try:
        lower_conv2d(np.zeros((1, width, 1, 1), np.int8), np.zeros((1, width, 1, 1), np.int8),
                     None, layer.multiplier, layer.shift, x_zero_point=x_zero_point,
                     y_zero_point=layer.y_zero_point, lo=layer.lo, hi=layer.hi,
                     config=config, name=layer.name)
    except ValueError as exc:
        return str(exc)
    if shape is None:
        return None
    if len(shape) < 2:
        return f"a MatMul operand has rank 2 or more, not shape {list(shape)}"
    k = int(shape[-1])
    if k > MAX_CONTRACTION:
        return (f"a contraction over K={k} could leave int32 (the engine's limit is "
                f"K <= {MAX_CONTRACTION})")
    columns = k * width
    limit = min(config.act_depth, config.weight_depth)
    if columns > limit:
        why = (f" (K={k} times {width} at worst: with the weights-side zero point "
               f"{layer.a_zero_point if transposed else layer.b_zero_point}, K is repeated "
               f"when the rows' sums are large)") if parts else ""
        return (f"each pass needs K'={columns} input columns{why}, more than the "
                f"activation buffer ({config.act_depth}) or the weight buffer "
                f"({config.weight_depth}) holds")
    return None


def matmul_work(layer, a_shape, b_shape, config):
    """The accelerator's work (:class:`~sw_driver.providers.costs.DeviceWork`) for MatMul
    ``layer`` on operands of these shapes: the Dense calls of :func:`lower_matmul`, each
    counted as the planner counts a Dense layer (the same passes the driver runs)."""
    from . import graph as g
    from .providers.costs import DeviceWork, device_work

    lowering = lower_matmul(np.zeros(a_shape, np.int8), np.zeros(b_shape, np.int8),
                            a_zero_point=layer.a_zero_point,
                            b_zero_point=layer.b_zero_point, name=layer.name)
    work = DeviceWork(0, 0, 0, 0, 0)
    for job in lowering.jobs:
        dense = g.Dense(layer.name, ("x",), "y", weight=job.w, x_zero_point=job.x_zero_point,
                        multiplier=layer.multiplier, shift=layer.shift,
                        y_zero_point=layer.y_zero_point, lo=layer.lo, hi=layer.hi)
        work = work + device_work(dense, job.x.shape, config)
    return work
