"""The overlapped dataflow on the twin: activations and the later column tiles' weights
stream in while the engine computes, bit-exact with the golden model, and the cycle model
follows the twin's PERF_CYCLES; a strided 1x1 convolution sends only the pixels it reads.

Shapes are chosen for the corners of the overlap: one and many column tiles, the last
activation rows never read (stride 2 on an odd size, so the layer ends before they are
consumed unless the top waits for them), a pass whose first tile waits on every word, and
kernels whose K is not a multiple of anything."""

import numpy as np
import pytest
from assertions import assert_exact

from contract.config import ArrayConfig, ConvEngineConfig
from models.conv import conv2d
from models.requant import requantize
from sw_driver.accelerator import Accelerator, pass_program, skip_strided_1x1
from sw_driver.conv_lowering import lower_conv2d
from sw_driver.cycle_model import pass_cycles
from sw_driver.transport.sim import SimTransport
from twin.dma import Twin

#: The twin of tests/test_twin.py (its build is cached and shared).
CONFIG = ConvEngineConfig(array=ArrayConfig(rows=4, cols=4), act_depth=2048,
                          weight_depth=2048, max_col_tiles=8)

#: (C_in, C_out, size, kernel, stride, padding)
LAYERS = [
    # One tile; the last input row (120 words) is never read and arrives after the array
    # has finished (the first two rows take 240 cycles to compute): the layer must still
    # take it off the stream.
    (4, 4, (3, 120), 2, 2, 0),
    (4, 4, (9, 56), 2, 2, 0),    # the same over nine rows
    (5, 14, (11, 7), 3, 2, 1),   # four tiles (the last partial), odd sizes
    (16, 12, (6, 6), 1, 1, 0),   # 1x1: the output path is the bottleneck
    (2, 9, (5, 13), 5, 1, 2),    # K = 50, three tiles
    (8, 8, (16, 16), 3, 1, 1),   # activations (2048 bytes) fill the buffer
    # A Dense pass's shape (samples as pixels of 512 channels): a group starts once its
    # last sample's first word is in, not all of its 128 words.
    (512, 4, (1, 4), 1, 1, 0),
]


#: The lean engine of the same size (the iCEBreaker's kind: its address generator, the
#: serial requantizer, no skid buffers), with performance counters to measure it.
LEAN = ConvEngineConfig(array=ArrayConfig(rows=4, cols=4), act_depth=2048, weight_depth=512,
                        max_col_tiles=8, pipelined=False, residual_add=False)


@pytest.fixture(scope="module")
def accelerator():
    transport = SimTransport(Twin(CONFIG), cycle_budget=400_000)
    yield Accelerator(transport)
    transport.close()


def _layer(rng, c_in, c_out, size, kernel):
    x = rng.integers(-128, 128, (1, c_in, *size), dtype=np.int8)
    w = rng.integers(-128, 128, (c_out, c_in, kernel, kernel), dtype=np.int8)
    bias = rng.integers(-2**14, 2**14, c_out).astype(np.int32)
    return x, w, bias, rng.integers(2**30, 2**31, c_out), rng.integers(12, 22, c_out)


@pytest.fixture(scope="module")
def lean_accelerator():
    transport = SimTransport(Twin(LEAN), cycle_budget=4_000_000)
    yield Accelerator(transport)
    transport.close()


@pytest.mark.slow
@pytest.mark.parametrize("layer", LAYERS[2:], ids=lambda p: "-".join(map(str, p)))
def test_lean_engine_is_bit_exact_and_modelled(lean_accelerator, layer, rng, seed):
    """The lean engine's passes are slower by design (a lane of requantization takes some
    40 cycles): the cycle model must still follow them, for the driver's deadlines."""
    _run_and_model(lean_accelerator, LEAN, layer, rng, seed, tolerance=0.10)


def _run_and_model(accelerator, config, layer, rng, seed, *, tolerance):
    """Run ``layer`` on the twin of ``config``: bit-exact with the golden model, and its
    PERF_CYCLES within ``tolerance`` of the cycle model."""
    c_in, c_out, size, kernel, stride, padding = layer
    x, w, bias, mult, shift = _layer(rng, c_in, c_out, size, kernel)
    got = accelerator.conv2d(x, w, bias, mult, shift, x_zero_point=3, y_zero_point=-2,
                             stride=stride, padding=padding, name="overlap")
    want = requantize(conv2d(x, w, bias, x_zero_point=3, stride=stride, padding=padding),
                      mult, shift, -2)
    assert_exact(got, want, f"seed={seed} layer={layer} config={config.name}",
                 names=("twin", "golden"))
    cycles = accelerator.last_counters.cycles
    passes = lower_conv2d(x, w, bias, mult, shift, x_zero_point=3, y_zero_point=-2,
                          stride=stride, padding=padding, config=config)
    model = sum(pass_cycles(p, config) for p in passes)
    print(f"seed={seed} layer={layer} {config.name}: twin {cycles} cycles, model {model}")
    assert abs(model - cycles) <= tolerance * cycles, (layer, model, cycles)


@pytest.mark.slow
@pytest.mark.parametrize("layer", LAYERS, ids=lambda p: "-".join(map(str, p)))
def test_overlapped_loading_is_bit_exact_and_modelled(accelerator, layer, rng, seed):
    _run_and_model(accelerator, CONFIG, layer, rng, seed, tolerance=0.05)


@pytest.mark.slow
def test_device_is_clean_after_a_layer_that_leaves_rows_unread(accelerator, rng, seed):
    """A stride-2 layer that never reads its last rows, then another layer: the second
    must not see leftover stream words."""
    for layer in (LAYERS[0], LAYERS[1], LAYERS[0]):
        c_in, c_out, size, kernel, stride, padding = layer
        x, w, bias, mult, shift = _layer(rng, c_in, c_out, size, kernel)
        got = accelerator.conv2d(x, w, bias, mult, shift, x_zero_point=0, y_zero_point=0,
                                 stride=stride, padding=padding)
        want = requantize(conv2d(x, w, bias, x_zero_point=0, stride=stride, padding=padding),
                          mult, shift, 0)
        assert_exact(got, want, f"seed={seed} layer={layer} in sequence",
                     names=("twin", "golden"))


@pytest.mark.slow
def test_strided_1x1_on_the_twin(accelerator, rng, seed):
    x, w, bias, mult, shift = _layer(rng, 6, 5, (9, 12), 1)
    got = accelerator.conv2d(x, w, bias, mult, shift, x_zero_point=-4, y_zero_point=1,
                             stride=2, name="proj")
    want = requantize(conv2d(x, w, bias, x_zero_point=-4, stride=2), mult, shift, 1)
    assert_exact(got, want, f"seed={seed} strided 1x1", names=("twin", "golden"))


@pytest.mark.parametrize("stride, padding, kernel, skipped", [
    (2, 0, 1, True), ((3, 3), (0, 0, 0, 0), 1, True), (2, 1, 1, False), ((2, 1), 0, 1, False),
    (1, 0, 1, False), (2, 0, 3, False)])
def test_skip_strided_1x1_is_exact(stride, padding, kernel, skipped, rng, seed):
    x, w, bias, _, _ = _layer(rng, 3, 4, (7, 10), kernel)
    y, new_stride = skip_strided_1x1(x, w, stride, padding)
    assert (new_stride == 1 and y.shape[2:] != x.shape[2:]) == skipped, (stride, padding)
    if skipped:
        assert np.array_equal(conv2d(y, w, bias, x_zero_point=7),
                              conv2d(x, w, bias, x_zero_point=7, stride=stride)), seed
    else:
        assert y is x and new_stride == stride


def test_stream_order_puts_the_later_tiles_weights_after_the_activations(rng):
    x, w, bias, mult, shift = _layer(rng, 2, 9, (3, 3), 1)  # 3 tiles of K = 2 rows
    (p,) = lower_conv2d(x, w, bias, mult, shift, x_zero_point=0, y_zero_point=0,
                        config=CONFIG)
    h2c = pass_program(p, CONFIG).h2c
    acts = p.activations.astype(np.int8).tobytes()  # 18 bytes, padded to 20
    entries = len(h2c) - 20 - 6 * 4
    assert h2c[entries + 2 * 4:entries + 2 * 4 + 18] == acts
    assert h2c[entries:entries + 4] == p.weights[0].astype(np.int8).tobytes()
    assert h2c[-4:] == p.weights[-1].astype(np.int8).tobytes()
