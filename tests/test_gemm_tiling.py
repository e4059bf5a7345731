"""The tiling feeder and the golden GEMM, checked against NumPy."""

import numpy as np
import pytest

from models.gemm import gemm_int8
from sw_driver.gemm_tiling import assemble_results, operand_beats, plan_gemm


def tile_products(a, b, rows, cols):
    """Compute each tile from the beat sequence alone, as the array would."""
    plan = plan_gemm(a.shape, b.shape, rows, cols)
    out, acc = [], np.zeros((rows, cols), np.int64)
    for a_col, b_row, last in operand_beats(a, b, rows, cols):
        acc += np.outer(a_col.astype(np.int64), b_row.astype(np.int64))
        if last:
            out.extend(acc.copy())
            acc[:] = 0
    return assemble_results(out, plan)


@pytest.mark.parametrize("rows, cols", [(1, 1), (3, 5), (8, 8)])
def test_beats_reassemble_to_the_product(rows, cols, rng, seed):
    for _ in range(5):
        m, k, n = (int(v) for v in rng.integers(1, 20, 3))
        a = rng.integers(-128, 128, (m, k), dtype=np.int8)
        b = rng.integers(-128, 128, (k, n), dtype=np.int8)
        got = tile_products(a, b, rows, cols)
        want = a.astype(np.int64) @ b.astype(np.int64)
        assert np.array_equal(got, want), f"seed={seed} M={m} K={k} N={n}"


def test_golden_gemm_extremes():
    a = np.full((2, 1000), -128, np.int8)
    b = np.full((1000, 3), -128, np.int8)
    assert (gemm_int8(a, b) == 1000 * 16384).all()
    assert gemm_int8(a, b).dtype == np.int32


def test_golden_gemm_wraps_like_a_32_bit_accumulator():
    k = 2**17 + 1  # 2^17 products of 2^14 reach 2^31: one past int32's range
    a = np.full((1, k), -128, np.int8)
    b = np.full((k, 1), -128, np.int8)
    assert gemm_int8(a, b)[0, 0] == np.int64(k * 16384 - 2**32)


@pytest.mark.parametrize("a_shape, b_shape, message", [
    ((2, 3), (4, 5), "inner dimensions differ"),
    ((0, 3), (3, 5), "M must be at least 1"),
    ((2, 0), (0, 5), "K must be at least 1"),
    ((2,), (2, 5), "must be 2-D"),
])
def test_bad_shapes_are_refused(a_shape, b_shape, message):
    with pytest.raises(ValueError, match=message):
        plan_gemm(a_shape, b_shape, 4, 4)


def test_golden_gemm_refuses_wrong_dtype():
    with pytest.raises(ValueError, match="int8 operands"):
        gemm_int8(np.zeros((2, 2), np.int16), np.zeros((2, 2), np.int8))


def test_result_count_is_checked():
    plan = plan_gemm((5, 3), (3, 4), 2, 2)
    with pytest.raises(ValueError, match="expected 12 result rows of 2 values"):
        assemble_results(np.zeros((11, 2)), plan)
