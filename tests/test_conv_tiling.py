"""Driver-side tiling of layers larger than the engine's buffers (sw_driver.conv_lowering):
row bands with their halos and output-channel chunks, checked through the executable model
of the engine (``engine_reference``) against the golden model."""

import numpy as np
import pytest

from contract.config import ArrayConfig, ConvEngineConfig
from models.conv import conv2d
from models.pool import max_pool2d
from models.requant import requantize
from sw_driver.conv_lowering import assemble_output, engine_reference, lower_conv2d

SMALL = ConvEngineConfig(array=ArrayConfig(rows=4, cols=4), act_depth=600, weight_depth=200,
                         max_col_tiles=4)


@pytest.mark.parametrize("layer", [
    # (C_in, H, W, C_out, k, stride, pad)
    (6, 20, 9, 5, 3, 1, 1),     # 1080 activations: row bands
    (3, 31, 11, 7, 5, 2, 2),    # bands with stride 2 and a 5x5 halo
    (8, 6, 6, 40, 3, 1, 1),     # K=72: 2 tiles per pass -> 5 output-channel chunks
    (5, 17, 13, 23, 3, 2, 0),   # both at once
])
def test_split_layers_match_golden(layer, rng, seed):
    c, h, w, o, k, stride, pad = layer
    x = rng.integers(-128, 128, (2, c, h, w), dtype=np.int8)
    weights = rng.integers(-128, 128, (o, c, k, k), dtype=np.int8)
    bias = rng.integers(-5000, 5000, o).astype(np.int32)
    mult = rng.integers(2**30, 2**31, o)
    shift = rng.integers(14, 20, o)
    passes = lower_conv2d(x, weights, bias, mult, shift, x_zero_point=-7, y_zero_point=3,
                          stride=stride, padding=pad, config=SMALL, name="big")
    assert len(passes) > 2, f"seed={seed}: expected the layer to be split"
    got = assemble_output(passes, [engine_reference(p) for p in passes], o)
    want = requantize(conv2d(x, weights, bias, x_zero_point=-7, stride=stride, padding=pad),
                      mult, shift, 3)
    assert got.shape == want.shape
    if not np.array_equal(got, want):
        index = tuple(int(i) for i in np.argwhere(got != want)[0])
        raise AssertionError(f"seed={seed} {layer}: first difference at {list(index)}: "
                             f"{got[index]} != golden {want[index]}")


def test_bands_for_a_fused_pool_have_even_heights(rng):
    x = rng.integers(-128, 128, (1, 6, 21, 9), dtype=np.int8)
    weights = rng.integers(-128, 128, (4, 6, 3, 3), dtype=np.int8)
    passes = lower_conv2d(x, weights, None, 2**30, 20, x_zero_point=0, y_zero_point=0,
                          padding=1, config=SMALL, row_multiple=2)
    assert len(passes) > 1
    assert all(p.out_size[0] % 2 == 0 for p in passes[:-1])
    assert all(p.row0 % 2 == 0 for p in passes)
    out = assemble_output(passes, [engine_reference(p) for p in passes], 4)
    want = requantize(conv2d(x, weights, None, x_zero_point=0, padding=1), 2**30, 20, 0)
    assert np.array_equal(max_pool2d(out, 2, 2), max_pool2d(want, 2, 2))


def test_an_image_that_just_fits_is_one_pass(rng):
    """6 x 20 x 5 = 600 elements fill the buffer exactly: with padding 1 the 3x3 layer
    needs no stored row beyond them, so it is one pass (not a band of 18 rows and one of
    2); one more row and it is split."""
    weights = rng.integers(-128, 128, (4, 6, 3, 3), dtype=np.int8)
    for height, count in ((20, 1), (21, 2)):
        x = rng.integers(-128, 128, (1, 6, height, 5), dtype=np.int8)
        passes = lower_conv2d(x, weights, None, 2**30, 20, x_zero_point=3, y_zero_point=0,
                              padding=1, config=SMALL)
        assert len(passes) == count, [p.out_size for p in passes]
        out = assemble_output(passes, [engine_reference(p) for p in passes], 4)
        want = requantize(conv2d(x, weights, None, x_zero_point=3, padding=1), 2**30, 20, 0)
        assert np.array_equal(out, want)


def test_a_fused_pool_gets_no_band_of_one_row(rng):
    """13 output rows in bands of 2: the 13th row, which the pool drops, is not a band of
    its own (it would pool to nothing); found by the resident soak (seed 1, case 3)."""
    config = ConvEngineConfig(array=ArrayConfig(rows=4, cols=4), act_depth=1024,
                              weight_depth=512, max_col_tiles=4)
    x = rng.integers(-128, 128, (1, 24, 13, 6), dtype=np.int8)
    weights = rng.integers(-128, 128, (17, 24, 3, 3), dtype=np.int8)
    passes = lower_conv2d(x, weights, None, 2**30, 20, x_zero_point=0, y_zero_point=0,
                          padding=1, config=config, row_multiple=2)
    assert all(p.out_size[0] >= 2 for p in passes), [p.out_size for p in passes]
    out = assemble_output(passes, [engine_reference(p) for p in passes], 17)
    want = requantize(conv2d(x, weights, None, x_zero_point=0, padding=1), 2**30, 20, 0)
    assert np.array_equal(max_pool2d(out, 2, 2), max_pool2d(want, 2, 2))
    # Where not even two rows fit, the lowering refuses (the caller pools apart).
    with pytest.raises(ValueError, match="exceed the activation buffer"):
        lower_conv2d(np.zeros((1, 24, 13, 13), np.int8), np.zeros((8, 24, 3, 3), np.int8),
                     None, 2**30, 20, x_zero_point=0, y_zero_point=0, padding=1,
                     config=config, row_multiple=2)


def test_a_row_too_wide_for_the_buffer_is_refused():
    x = np.zeros((1, 16, 8, 64), np.int8)  # one 3-row halo = 3072 > 600 elements
    weights = np.zeros((4, 16, 3, 3), np.int8)
    with pytest.raises(ValueError, match=r"layer wide.image 0, rows 0..0.: activations "
                                         r"16x2x64 = 2048 exceed the activation buffer"):
        lower_conv2d(x, weights, None, 2**30, 20, x_zero_point=0, y_zero_point=0,
                     padding=1, config=SMALL, name="wide")


@pytest.mark.parametrize("layer, tiles", [
    # (C, H, W, k, stride, pad): the column tiles of each pass of one image
    ((10, 6, 6, 3, 1, 1), [3]),          # one pass of 3 tiles (the last one half used)
    ((19, 6, 5, 3, 2, 1), [4, 1]),       # 7 padded rows x 5 x 4 bytes: 4 tiles' inputs fit
    ((20, 3, 3, 7, 1, 3), [4, 1]),       # K = 49 x 1 word: 4 tiles' weights fit, not 5
    ((40, 2, 2, 1, 1, 0), [8, 2]),       # max_col_tiles
    ((6, 23, 11, 3, 1, 1), [1] * 6),     # a tile's input does not fit: bands of one tile
])
def test_depthwise_mode_splits_match_golden(layer, tiles, rng, seed):
    # The depthwise mode's passes: as many column tiles as the buffers hold with the whole
    # image (each tile's activations dw_tile_daddr words on), else one tile in row bands.
    from dataclasses import replace

    config = replace(SMALL, depthwise=True, max_col_tiles=8)
    c, h, w, k, stride, pad = layer
    x = rng.integers(-128, 128, (2, c, h, w), dtype=np.int8)
    weights = rng.integers(-128, 128, (c, 1, k, k), dtype=np.int8)
    bias = rng.integers(-5000, 5000, c).astype(np.int32)
    mult = rng.integers(2**30, 2**31, c)
    shift = rng.integers(12, 18, c)
    passes = lower_conv2d(x, weights, bias, mult, shift, x_zero_point=127, y_zero_point=-2,
                          stride=stride, padding=pad, groups=c, config=config, name="dw")
    assert [p.descriptor["col_tiles"] for p in passes] == tiles * 2, f"seed={seed}"
    assert all(p.descriptor["depthwise"] == 1 and p.descriptor["dw_tile_daddr"]
               == p.descriptor["in_height"] * p.descriptor["in_width"] for p in passes)
    got = assemble_output(passes, [engine_reference(p) for p in passes], c)
    want = requantize(conv2d(x, weights, bias, x_zero_point=127, stride=stride, padding=pad,
                             groups=c), mult, shift, -2)
    if not np.array_equal(got, want):
        index = tuple(int(i) for i in np.argwhere(got != want)[0])
        raise AssertionError(f"seed={seed} {layer}: first difference at {list(index)}: "
                             f"{got[index]} != golden {want[index]}")
