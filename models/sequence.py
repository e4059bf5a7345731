"""Golden model of sequence-model operators in the ORT-compatible mode.

Definition (``docs/semantics.md``, "Sequence models, ORT-compatible mode"):

- A GEMM of two int8 activations (attention scores ``Q @ K^T``, ``attention @ V``) is an
  exact integer product ``sum((a - z_a) * (b - z_b))`` in int32, requantized per tensor
  with the fixed-point multiplier of ``s_a * s_b / s_y`` (:func:`matmul_int`, then
  :func:`models.requant.requantize`), like the weight GEMMs.
- Every other operator is computed the way onnxruntime's unfused QDQ graph computes it:
  its int8 inputs are dequantized (:func:`dequantize`), the float32 operator runs
  (:func:`float_op`), and the result is quantized (:func:`quantize`). Data movement
  (Reshape, Transpose, Gather, ...) is exact either way.

This module imports nothing of the project beyond NumPy and the standard library.
"""

import math

import numpy as np

__all__ = ["FLOAT_OPS", "dequantize", "float_op", "matmul_int", "quantize"]

INT32_MIN, INT32_MAX = -(2 ** 31), 2 ** 31 - 1


def quantize(x, scale, zero_point):
    """ONNX QuantizeLinear to int8 as onnxruntime computes it: float32 ``x / scale``,
    round half to even, add the zero point, saturate."""
    q = np.rint(np.asarray(x, np.float32) / np.float32(scale))
    return (np.clip(q, -128 - zero_point, 127 - zero_point) + zero_point).astype(np.int8)


def dequantize(q, scale, zero_point, axis=None):
    """ONNX DequantizeLinear in float32: ``(q - zero_point) * scale``.

    ``scale`` and ``zero_point`` are scalars, or 1-D per ``axis`` of ``q``.
    """
    q = np.asarray(q)
    scale = np.asarray(scale, np.float32)
    zero_point = np.asarray(zero_point)
    if scale.size > 1:
        shape = [1] * q.ndim
        shape[axis % q.ndim] = scale.size
        scale, zero_point = scale.reshape(shape), zero_point.reshape(shape)
    else:
        scale, zero_point = scale.reshape(()), zero_point.reshape(())
    return ((q.astype(np.int32) - zero_point.astype(np.int32)).astype(np.float32) * scale)


def matmul_int(a, a_zero_point, b, b_zero_point):
    """Exact ``(a - z_a) @ (b - z_b)`` of two int8 tensors (NumPy matmul broadcasting over
    the leading, batch, dimensions), as int32.

    Raises
    ------
    ValueError
        Shapes that do not multiply, or a sum outside int32.
    """
    a, b = np.asarray(a), np.asarray(b)
    if a.ndim < 2 or b.ndim < 2 or a.shape[-1] != b.shape[-2]:
        raise ValueError(f"cannot multiply shapes {list(a.shape)} and {list(b.shape)}: the "
                         f"last dimension of the first must equal the second-to-last of the "
                         f"second")
    try:
        np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    except ValueError:
        raise ValueError(f"batch dimensions of {list(a.shape)} and {list(b.shape)} do not "
                         f"broadcast") from None
    acc = np.matmul(a.astype(np.int64) - int(a_zero_point), b.astype(np.int64) - int(b_zero_point))
    if acc.size and (acc.min() < INT32_MIN or acc.max() > INT32_MAX):
        raise ValueError("the integer product leaves the int32 range")
    return acc.astype(np.int32)


_erf = np.vectorize(math.erf, otypes=[np.float64])


def _axis(op_type, axis, rank):
    """ONNX axes lie in [-rank, rank - 1]; NumPy's modulo would accept any value."""
    axis = int(axis)
    if not -rank <= axis < rank:
        raise ValueError(f"{op_type}: axis {axis} is outside [-{rank}, {rank - 1}] for an "
                         f"input of rank {rank}")
    return axis % rank


def _f32(x):
    return np.asarray(x, dtype=np.float32)


def _broadcast(op_type, *arrays):
    try:
        return np.broadcast_shapes(*(np.shape(a) for a in arrays))
    except ValueError:
        shapes = " and ".join(str(list(np.shape(a))) for a in arrays)
        raise ValueError(f"{op_type}: input shapes {shapes} do not broadcast") from None


def _elementwise(op_type, args, attrs, opset):
    _broadcast(op_type, *args)
    if op_type == "Where":
        return np.where(np.asarray(args[0], bool), _f32(args[1]), _f32(args[2]))
    if all(np.issubdtype(np.asarray(a).dtype, np.integer) for a in args) \
            and op_type != "Pow":
        # Shape arithmetic of PyTorch exports (heads x batch, embed // heads) is int64 in
        # ONNX; integer Div truncates toward zero as onnxruntime's kernel does.
        a, b = (np.asarray(v, np.int64) for v in args)
        if op_type == "Div":
            if np.any(b == 0):
                raise ValueError("Div: integer division by zero")
            return np.sign(a) * np.sign(b) * (np.abs(a) // np.abs(b))
        return {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply}[op_type](a, b)
    a, b = _f32(args[0]), _f32(args[1])
    result = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Div": np.divide,
              "Pow": np.power}[op_type](a, b)
    return result.astype(np.float32)


#: ONNX TensorProto data types a Cast of shape arithmetic uses, as NumPy types.
_CAST_TYPES = {1: np.float32, 6: np.int32, 7: np.int64, 9: np.bool_, 11: np.float64}


def _cast(x, to):
    if int(to) not in _CAST_TYPES:
        raise ValueError(f"Cast: to={to} is not supported; Tessera casts to "
                         f"float (1), int32 (6), int64 (7), bool (9) and double (11)")
    return np.asarray(x).astype(_CAST_TYPES[int(to)])


def _mod(args, attrs):
    _broadcast("Mod", *args)
    a, b = (np.asarray(v) for v in args)
    if attrs.get("fmod", 0):
        return np.fmod(a, b)
    if not (np.issubdtype(a.dtype, np.integer) and np.issubdtype(b.dtype, np.integer)):
        raise ValueError("Mod: fmod=0 needs integer inputs (ONNX)")
    if np.any(b == 0):
        raise ValueError("Mod: integer modulo by zero")
    return np.mod(a, b)  # the sign of the divisor, as ONNX defines fmod=0


def _layer_norm(args, attrs, opset):
    x, scale = _f32(args[0]), _f32(args[1])
    bias = _f32(args[2]) if len(args) > 2 and args[2] is not None else None
    axis = _axis("LayerNormalization", attrs.get("axis", -1), x.ndim)
    eps = float(attrs.get("epsilon", 1e-5))
    axes = tuple(range(axis, x.ndim))
    # Mean and variance in float64, the result rounded to float32 (onnxruntime
    # accumulates in double for float32 inputs too).
    x64 = x.astype(np.float64)
    mean = x64.mean(axis=axes, keepdims=True)
    var = (x64 * x64).mean(axis=axes, keepdims=True) - mean * mean
    y = ((x64 - mean) / np.sqrt(var + eps)).astype(np.float32) * scale
    return y if bias is None else y + bias


def _gelu(x, approximate):
    x = _f32(x)
    if approximate == "tanh":
        inner = np.float32(math.sqrt(2 / math.pi)) * (x + np.float32(0.044715) * x * x * x)
        return np.float32(0.5) * x * (np.float32(1) + np.tanh(inner))
    return (np.float32(0.5) * x * (np.float32(1) + _erf(x / np.float32(math.sqrt(2)))
                                   .astype(np.float32))).astype(np.float32)


def _softmax(x, attrs, opset):
    x = _f32(x)
    shape = x.shape
    axis = _axis("Softmax", attrs.get("axis", -1 if opset >= 13 else 1), x.ndim)
    if opset < 13:
        x = x.reshape(int(np.prod(shape[:axis])), -1)
        axis = 1
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return (e * (np.float32(1) / e.sum(axis=axis, keepdims=True, dtype=np.float32))) \
        .astype(np.float32).reshape(shape)


def _axes(args, attrs, opset, position=1):
    if opset >= 13 and len(args) > position and args[position] is not None:
        return [int(v) for v in np.asarray(args[position]).reshape(-1)]
    return [int(v) for v in attrs.get("axes", [])] or None


def _reshape(x, shape):
    shape = [int(d) for d in np.asarray(shape).reshape(-1)]
    shape = [x.shape[i] if d == 0 else d for i, d in enumerate(shape)]
    try:
        return x.reshape(shape)
    except ValueError:
        raise ValueError(f"Reshape: cannot view shape {list(x.shape)} as {shape}") from None


def _slice(x, args, attrs, opset):
    if opset >= 10:
        starts, ends = (np.asarray(args[i]).reshape(-1) for i in (1, 2))
        axes = (np.asarray(args[3]).reshape(-1) if len(args) > 3 and args[3] is not None
                else np.arange(len(starts)))
        steps = (np.asarray(args[4]).reshape(-1) if len(args) > 4 and args[4] is not None
                 else np.ones(len(starts), np.int64))
    else:
        starts, ends = attrs["starts"], attrs["ends"]
        axes = attrs.get("axes", list(range(len(starts))))
        steps = [1] * len(starts)
    index = [slice(None)] * x.ndim
    for start, end, axis, step in zip(starts, ends, axes, steps, strict=True):
        # Python slices clamp out-of-range bounds the way ONNX Slice does.
        big = np.iinfo(np.int64)
        end = None if int(end) >= big.max // 2 or int(end) <= big.min // 2 else int(end)
        index[_axis("Slice", axis, x.ndim)] = slice(int(start), end, int(step))
    return x[tuple(index)]


def _split(x, args, attrs, opset, count):
    axis = _axis("Split", attrs.get("axis", 0), x.ndim)
    sizes = (args[1] if opset >= 13 and len(args) > 1 and args[1] is not None
             else attrs.get("split"))
    if sizes is None:
        if x.shape[axis] % count:
            raise ValueError(f"Split: axis {axis} of length {x.shape[axis]} does not split "
                             f"into {count} equal parts")
        sizes = [x.shape[axis] // count] * count
    sizes = [int(s) for s in np.asarray(sizes).reshape(-1)]
    if sum(sizes) != x.shape[axis]:
        raise ValueError(f"Split: sizes {sizes} do not add up to axis {axis}'s length "
                         f"{x.shape[axis]}")
    return np.split(x, np.cumsum(sizes)[:-1], axis=axis)


def _gather(x, indices, attrs):
    axis = _axis("Gather", attrs.get("axis", 0), x.ndim)
    indices = np.asarray(indices, np.int64)
    n = x.shape[axis]
    if indices.size and (indices.min() < -n or indices.max() >= n):
        raise ValueError(f"Gather: indices in [{indices.min()}, {indices.max()}] are outside "
                         f"[-{n}, {n - 1}] (axis {axis} has length {n})")
    return np.take(x, np.where(indices < 0, indices + n, indices), axis=axis)


def _sigmoid(x):
    return (np.float32(1) / (np.float32(1) + np.exp(-x))).astype(np.float32)


def _recurrent_inputs(args, gates):
    x, w, r = _f32(args[0]), _f32(args[1]), _f32(args[2])
    dirs, hidden = w.shape[0], r.shape[-1]
    seq, batch = x.shape[0], x.shape[1]
    b = (_f32(args[3]) if len(args) > 3 and args[3] is not None
         else np.zeros((dirs, 2 * gates * hidden), np.float32))
    lens = (np.asarray(args[4], np.int64) if len(args) > 4 and args[4] is not None
            else np.full(batch, seq, np.int64))
    if lens.shape != (batch,) or lens.min() < 1 or lens.max() > seq:
        raise ValueError(f"sequence_lens {lens.tolist()} must hold {batch} lengths in "
                         f"[1, {seq}]")
    h0 = (_f32(args[5]) if len(args) > 5 and args[5] is not None
          else np.zeros((dirs, batch, hidden), np.float32))
    return x, w, r, b, lens, h0, dirs, hidden


def _recurrent(op_type, args, attrs):
    """ONNX GRU / LSTM (layout 0, default activations) in float32; (Y, Y_h[, Y_c])."""
    gates = 3 if op_type == "GRU" else 4
    x, w, r, b, lens, h0, dirs, hidden = _recurrent_inputs(args, gates)
    direction = attrs.get("direction", "forward")
    seq, batch = x.shape[:2]
    c0 = None
    if op_type == "LSTM":
        c0 = (_f32(args[6]) if len(args) > 6 and args[6] is not None
              else np.zeros((dirs, batch, hidden), np.float32))
        peep = (_f32(args[7]) if len(args) > 7 and args[7] is not None
                else np.zeros((dirs, 3 * hidden), np.float32))
    y = np.zeros((seq, dirs, batch, hidden), np.float32)
    y_h = np.zeros((dirs, batch, hidden), np.float32)
    y_c = np.zeros((dirs, batch, hidden), np.float32)
    for d in range(dirs):
        wb, rb = np.split(b[d], 2)
        # The input projections of every time step as one GEMM.
        xw = np.einsum("tbi,gi->tbg", x, w[d]).astype(np.float32) + wb
        h, c = h0[d].copy(), None if c0 is None else c0[d].copy()
        reverse = direction == "reverse" or (direction == "bidirectional" and d == 1)
        for step in range(seq):
            active = step < lens  # each sequence runs its own length
            t = np.where(reverse, lens - 1 - step, step)  # per batch element
            xt = xw[np.clip(t, 0, seq - 1), np.arange(batch)]
            if op_type == "GRU":
                hr = (h @ r[d].T).astype(np.float32)
                xz, xr, xh = np.split(xt, 3, axis=-1)
                rz, rr, rh = np.split(hr, 3, axis=-1)
                bz, br, bh = np.split(rb, 3)
                z = _sigmoid(xz + rz + bz)
                rg = _sigmoid(xr + rr + br)
                if attrs.get("linear_before_reset", 0):
                    cand = np.tanh(xh + rg * (rh + bh))
                else:
                    cand = np.tanh(xh + ((rg * h) @ r[d][2 * hidden:].T) + bh)
                new_h = ((np.float32(1) - z) * cand + z * h).astype(np.float32)
            else:
                pre = xt + (h @ r[d].T).astype(np.float32) + rb
                pi, po, pf, pc = np.split(pre, 4, axis=-1)
                peep_i, peep_o, peep_f = np.split(peep[d], 3)
                i = _sigmoid(pi + peep_i * c)
                f = _sigmoid(pf + peep_f * c)
                new_c = (f * c + i * np.tanh(pc)).astype(np.float32)
                o = _sigmoid(po + peep_o * new_c)
                new_h = (o * np.tanh(new_c)).astype(np.float32)
                c = np.where(active[:, None], new_c, c)
            h = np.where(active[:, None], new_h, h)
            rows = np.nonzero(active)[0]
            y[t[rows], d, rows] = h[rows]
        y_h[d] = h
        if c is not None:
            y_c[d] = c
    return (y, y_h) if op_type == "GRU" else (y, y_h, y_c)


def float_op(op_type, args, attrs=None, opset=13, output_index=0, outputs=1):
    """One ONNX operator in float32, as onnxruntime's CPU kernels define it.

    Parameters
    ----------
    op_type : str
        One of :data:`FLOAT_OPS`.
    args : list
        The node's inputs in order (arrays; None for an absent optional input).
    attrs : dict, optional
        The node's attributes (decoded: str rather than bytes).
    opset : int
        The model's default-domain opset (axes and split sizes moved from attributes to
        inputs at 13, Softmax changed its axis rule at 13).
    output_index, outputs : int
        Which of the node's ``outputs`` outputs to return (Split).

    Raises
    ------
    ValueError
        Inputs that the operator does not accept (shapes that do not broadcast, a mask of
        the wrong shape, indices out of range), with the reason.
    """
    try:
        return _float_op(op_type, args, attrs or {}, opset, output_index, outputs)
    except (ValueError, IndexError, KeyError) as exc:
        # NumPy's own messages ("axes don't match array") gain the operator and shapes.
        text = str(exc)
        if text.startswith(f"{op_type}:") or text.startswith("sequence_lens"):
            raise ValueError(text) from None
        shapes = ", ".join(str(list(np.shape(a))) for a in args if a is not None)
        raise ValueError(f"{op_type}: inputs of shape {shapes} are not accepted: "
                         f"{type(exc).__name__}: {text}") from None


def _float_op(op_type, args, attrs, opset, output_index, outputs):
    x = args[0]
    if op_type in ("Add", "Sub", "Mul", "Div", "Pow", "Where"):
        return _elementwise(op_type, args, attrs, opset)
    if op_type == "Erf":
        return _erf(_f32(x)).astype(np.float32)
    if op_type in ("Sqrt", "Tanh", "Relu", "Identity"):
        fn = {"Sqrt": np.sqrt, "Tanh": np.tanh, "Relu": lambda v: np.maximum(v, 0),
              "Identity": lambda v: v}[op_type]
        return fn(_f32(x)).astype(np.float32) if op_type != "Identity" else np.asarray(x)
    if op_type == "Gelu":
        return _gelu(x, attrs.get("approximate", "none"))
    if op_type == "LayerNormalization":
        return _layer_norm(args, attrs, opset)
    if op_type == "Softmax":
        return _softmax(x, attrs, opset)
    if op_type == "ReduceMean":
        axes = _axes(args, attrs, 18)
        return np.mean(_f32(x), axis=None if axes is None else tuple(axes),
                       keepdims=bool(attrs.get("keepdims", 1)), dtype=np.float32)
    if op_type == "MatMul":
        return np.matmul(_f32(x), _f32(args[1]))
    if op_type == "Transpose":
        perm = attrs.get("perm")
        return np.transpose(np.asarray(x), None if perm is None else [int(p) for p in perm])
    if op_type == "Reshape":
        return _reshape(np.asarray(x), args[1])
    if op_type == "Flatten":
        axis = int(attrs.get("axis", 1)) % (np.ndim(x) + 1) if np.ndim(x) else 0
        x = np.asarray(x)
        return x.reshape(int(np.prod(x.shape[:axis])), -1)
    if op_type == "Concat":
        parts = [np.asarray(a) for a in args]
        try:
            return np.concatenate(parts, axis=int(attrs["axis"]))
        except ValueError:
            shapes = ", ".join(str(list(p.shape)) for p in parts)
            raise ValueError(f"Concat: shapes {shapes} do not join along axis "
                             f"{attrs['axis']}") from None
    if op_type == "Split":
        return _split(np.asarray(x), args, attrs, opset, outputs)[output_index]
    if op_type in ("GRU", "LSTM"):
        return _recurrent(op_type, args, attrs)[output_index]
    if op_type == "Shape":
        # Shape feeds the batch size into an Expand of the class token (opset 15 start/end).
        dims = np.shape(x)[int(attrs.get("start", 0)):attrs.get("end")]
        return np.array(dims, np.int64)
    if op_type == "Cast":
        return _cast(x, attrs.get("to", 1))
    if op_type == "Mod":
        return _mod(args, attrs)
    if op_type == "ConstantOfShape":
        # The importer passes the ``value`` attribute as an array (one element).
        value = np.asarray(attrs.get("value", np.zeros(1, np.float32))).reshape(-1)
        dims = tuple(int(d) for d in np.asarray(x).reshape(-1))
        if any(d < 0 for d in dims):
            raise ValueError(f"ConstantOfShape: negative dimension in {list(dims)}")
        return np.full(dims, value[0], value.dtype)
    if op_type == "Expand":
        x = np.asarray(x)
        target = tuple(int(d) for d in np.asarray(args[1]).reshape(-1))
        return np.broadcast_to(x, _broadcast("Expand", x, np.empty(target, np.bool_))).copy()
    if op_type == "Slice":
        return _slice(np.asarray(x), args, attrs, opset)
    if op_type == "Gather":
        return _gather(np.asarray(x), args[1], attrs)
    if op_type in ("Unsqueeze", "Squeeze"):
        x = np.asarray(x)
        axes = _axes(args, attrs, opset)
        if op_type == "Squeeze":
            if axes is None:
                return np.squeeze(x)
            return np.squeeze(x, axis=tuple(_axis(op_type, a, x.ndim) for a in axes))
        rank = x.ndim + len(axes)
        return np.expand_dims(x, tuple(sorted(_axis(op_type, a, rank) for a in axes)))
    raise ValueError(f"no float definition of {op_type}")


#: The operators :func:`float_op` defines.
FLOAT_OPS = frozenset({
    "Add", "Sub", "Mul", "Div", "Pow", "Where", "Erf", "Sqrt", "Tanh", "Relu", "Identity",
    "Gelu", "LayerNormalization", "Softmax", "ReduceMean", "MatMul", "Transpose", "Reshape",
    "Flatten", "Concat", "Split", "Slice", "Gather", "Unsqueeze", "Squeeze", "Shape",
    "Expand", "GRU", "LSTM", "Cast", "Mod", "ConstantOfShape"})
