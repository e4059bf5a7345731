"""Feeding the systolic array: split an M x K x N GEMM into R x C output tiles.

The array computes one R x C tile per K beats; this module turns int8 matrices into that
beat sequence (zero-padding edge tiles) and puts the returned rows back together. It is
shared by the testbenches, the demo and, later, the driver.
"""

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class TilePlan:
    """Tile order of one GEMM: row tiles outer, column tiles inner."""

    m: int
    k: int
    n: int
    rows: int
    cols: int

    @property
    def row_tiles(self):
        return -(-self.m // self.rows)

    @property
    def col_tiles(self):
        return -(-self.n // self.cols)

    @property
    def tiles(self):
        return self.row_tiles * self.col_tiles

    @property
    def beats(self):
        """Operand beats sent to the array."""
        return self.tiles * self.k

    @property
    def result_beats(self):
        return self.tiles * self.rows


def plan_gemm(a_shape, b_shape, rows, cols):
    """Check shapes and return the :class:`TilePlan` for ``A @ B`` on an R x C array."""
    if len(a_shape) != 2 or len(b_shape) != 2:
        raise ValueError(f"A and B must be 2-D, got shapes {tuple(a_shape)} and {tuple(b_shape)}")
    m, k = a_shape
    k2, n = b_shape
    if k != k2:
        raise ValueError(f"inner dimensions differ: A is {m}x{k}, B is {k2}x{n}")
    for name, value in (("M", m), ("K", k), ("N", n)):
        if value < 1:
            raise ValueError(f"{name} must be at least 1, got {value}")
    return TilePlan(m, k, n, rows, cols)


def operand_beats(a, b, rows, cols):
    """Yield ``(a_column, b_row, last)`` for every beat, tile by tile.

    ``a_column`` has ``rows`` int8 values and ``b_row`` has ``cols``; edge tiles are
    padded with zeros, which add nothing to any sum.
    """
    a = np.asarray(a, dtype=np.int8)
    b = np.asarray(b, dtype=np.int8)
    plan = plan_gemm(a.shape, b.shape, rows, cols)
    a_pad = np.zeros((plan.row_tiles * rows, plan.k), np.int8)
    a_pad[:plan.m] = a
    b_pad = np.zeros((plan.k, plan.col_tiles * cols), np.int8)
    b_pad[:, :plan.n] = b
    for ti in range(plan.row_tiles):
        a_tile = a_pad[ti * rows:(ti + 1) * rows]
        for tj in range(plan.col_tiles):
            b_tile = b_pad[:, tj * cols:(tj + 1) * cols]
            for kk in range(plan.k):
                yield a_tile[:, kk], b_tile[kk], kk == plan.k - 1


def assemble_results(result_rows, plan):
    """Put the array's output rows (in arrival order) back into the M x N int32 result."""
    rows = np.asarray(result_rows, dtype=np.int64)
    expected = (plan.result_beats, plan.cols)
    if rows.shape != expected:
        raise ValueError(f"expected {expected[0]} result rows of {expected[1]} values, "
                         f"got an array of shape {rows.shape}")
    tiles = rows.reshape(plan.row_tiles, plan.col_tiles, plan.rows, plan.cols)
    full = tiles.transpose(0, 2, 1, 3).reshape(plan.row_tiles * plan.rows,
                                               plan.col_tiles * plan.cols)
    return full[:plan.m, :plan.n].astype(np.int32)
