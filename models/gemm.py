"""Golden int8 GEMM: the definition the systolic array is checked against."""

import numpy as np


def gemm_int8(a, b):
    """int32 ``C = A @ B`` for int8 ``A`` (M x K) and ``B`` (K x N).

    Products are exact (|a*b| <= 2^14) and are summed in int64, then wrapped to int32 in
    two's complement -- what a 32-bit hardware accumulator does. Wrapping can only happen
    for K > 2^17, far beyond any layer Tessera runs, but it is defined all the same.
    """
    a = np.asarray(a)
    b = np.asarray(b)
    if a.dtype != np.int8 or b.dtype != np.int8:
        raise ValueError(f"gemm_int8 expects int8 operands, got A {a.dtype} and B {b.dtype}")
    if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[0]:
        raise ValueError(
            f"gemm_int8 expects A (M x K) and B (K x N), got shapes {a.shape} and {b.shape}")
    return (a.astype(np.int64) @ b.astype(np.int64)).astype(np.int32)
