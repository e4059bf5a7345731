"""The Verilator twin through the driver: discovery, conv / depthwise / dense layers
bit-exact with the golden models, faults reported and recovered from, waveforms. The
layer and fault tests run on both builds: the plain one and the profile-guided one
(``twin.dma.build_twin(..., train=...)``)."""

import numpy as np
import pytest
from assertions import assert_exact

from contract.config import ArrayConfig, ConvEngineConfig
from models.conv import conv2d, dense, depthwise_conv2d
from models.eltwise import add
from models.pool import max_pool2d
from models.requant import requantize
from sw_driver import regs
from sw_driver.accelerator import Accelerator, AcceleratorError
from sw_driver.regs import Opcode, Reg
from sw_driver.transport.sim import SimTransport
from twin.dma import Fault, Twin

#: The configuration most twin tests share (one Verilator build for them all).
CONFIG = ConvEngineConfig(array=ArrayConfig(rows=4, cols=4), act_depth=2048,
                          weight_depth=2048, max_col_tiles=8)

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module", params=["plain", "profile-guided"])
def transport(request):
    guided = request.param == "profile-guided"
    twin = Twin(CONFIG, train="bench.twin_train" if guided else None)
    # A failed profile-guided build falls back to the plain one; here that is a failure.
    assert twin.profile_guided == guided, f"wanted the {request.param} build, got {twin.library}"
    transport = SimTransport(twin, cycle_budget=400_000)
    yield transport
    transport.close()


@pytest.fixture
def accelerator(transport):
    accelerator = Accelerator(transport)
    accelerator.reset()
    return accelerator


def requant_params(rng, channels):
    return (rng.integers(-2**14, 2**14, channels).astype(np.int32),
            rng.integers(2**30, 2**31, channels), rng.integers(12, 22, channels))


def check(got, want, seed, label):
    assert_exact(got, want, f"seed={seed} {label}", names=("twin", "golden"))


def test_discovery(accelerator):
    assert accelerator.config == CONFIG
    assert accelerator.transport.csr_read(Reg.ID) == regs.ID_VALUE


@pytest.mark.parametrize("shape", [
    # (N, C_in, H, W, C_out, k, stride, pad, x_zp, y_zp)
    (1, 3, 9, 7, 6, 3, 1, 1, -128, 5),
    (2, 5, 8, 8, 4, 1, 2, 0, 127, -128),
    (1, 2, 11, 11, 9, 5, 2, 2, 0, 0),
])
def test_conv_layers_bit_exact(accelerator, shape, rng, seed):
    n, c, h, w, o, k, stride, pad, x_zp, y_zp = shape
    x = rng.integers(-128, 128, (n, c, h, w), dtype=np.int8)
    weights = rng.integers(-128, 128, (o, c, k, k), dtype=np.int8)
    bias, mult, shift = requant_params(rng, o)
    got = accelerator.conv2d(x, weights, bias, mult, shift, x_zero_point=x_zp,
                             y_zero_point=y_zp, lo=y_zp, hi=127, stride=stride,
                             padding=pad, name="conv")
    want = requantize(conv2d(x, weights, bias, x_zero_point=x_zp, stride=stride,
                             padding=pad), mult, shift, y_zp, y_zp, 127)
    check(got, want, seed, f"conv {shape}")
    counters = accelerator.last_counters
    assert counters.macs > 0 and counters.busy > 0, f"seed={seed}: counters {counters}"


def test_depthwise_layer_bit_exact(accelerator, rng, seed):
    x = rng.integers(-128, 128, (1, 6, 7, 7), dtype=np.int8)
    weights = rng.integers(-128, 128, (6, 1, 3, 3), dtype=np.int8)
    bias, mult, shift = requant_params(rng, 6)
    got = accelerator.depthwise_conv2d(x, weights, bias, mult, shift, x_zero_point=-3,
                                       y_zero_point=2, stride=2, padding=1, name="dw")
    want = requantize(depthwise_conv2d(x, weights, bias, x_zero_point=-3, stride=2,
                                       padding=1), mult, shift, 2)
    check(got, want, seed, "depthwise")


def test_dense_layer_bit_exact(accelerator, rng, seed):
    x = rng.integers(-128, 128, (7, 40), dtype=np.int8)
    weights = rng.integers(-128, 128, (10, 40), dtype=np.int8)
    bias, mult, shift = requant_params(rng, 10)
    got = accelerator.dense(x, weights, bias, mult, shift, x_zero_point=17, y_zero_point=-1)
    want = requantize(dense(x, weights, bias, x_zero_point=17), mult, shift, -1)
    check(got, want, seed, "dense")


@pytest.mark.parametrize("size", [(8, 6), (7, 9)])
def test_conv_with_fused_max_pool_bit_exact(accelerator, size, rng, seed):
    x = rng.integers(-128, 128, (2, 3, *size), dtype=np.int8)
    weights = rng.integers(-128, 128, (6, 3, 3, 3), dtype=np.int8)
    bias, mult, shift = requant_params(rng, 6)
    got = accelerator.conv2d(x, weights, bias, mult, shift, x_zero_point=5, y_zero_point=-9,
                             lo=-9, padding=1, pool=True, name="conv+pool")
    want = max_pool2d(requantize(conv2d(x, weights, bias, x_zero_point=5, padding=1), mult,
                                 shift, -9, -9, 127), 2, 2)
    check(got, want, seed, f"conv+pool {size}")


@pytest.mark.parametrize("pool", [False, True])
def test_layer_larger_than_the_buffers_is_split_bit_exact(accelerator, pool, rng, seed):
    # 32x24x12 activations exceed the 2048-element buffer (row bands); 40 output channels
    # (10 column tiles) with K = 288 exceed the 2048-word weight buffer (output-channel
    # chunks).
    x = rng.integers(-128, 128, (1, 32, 24, 12), dtype=np.int8)
    weights = rng.integers(-128, 128, (40, 32, 3, 3), dtype=np.int8)
    bias, mult, shift = requant_params(rng, 40)
    got = accelerator.conv2d(x, weights, bias, mult, shift, x_zero_point=-1, y_zero_point=0,
                             padding=1, pool=pool, name="big")
    want = requantize(conv2d(x, weights, bias, x_zero_point=-1, padding=1), mult, shift, 0)
    check(got, max_pool2d(want, 2, 2) if pool else want, seed, f"split, pool={pool}")


def test_max_pool_layer_bit_exact(accelerator, rng, seed):
    x = rng.integers(-128, 128, (2, 6, 7, 10), dtype=np.int8)
    check(accelerator.max_pool2d(x), max_pool2d(x, 2, 2), seed, "maxpool")


def test_add_layer_bit_exact(accelerator, rng, seed):
    a = rng.integers(-128, 128, (2, 5, 3, 3), dtype=np.int8)
    b = rng.integers(-128, 128, (2, 5, 3, 3), dtype=np.int8)
    args = (a, 0.05, 3, b, 0.02, -128, 0.07, -4, -4, 127)
    check(accelerator.add(*args), add(*args), seed, "add")


def small_layer(rng):
    x = rng.integers(-128, 128, (1, 4, 6, 6), dtype=np.int8)
    weights = rng.integers(-128, 128, (4, 4, 3, 3), dtype=np.int8)
    bias, mult, shift = requant_params(rng, 4)
    want = requantize(conv2d(x, weights, bias, x_zero_point=0, padding=1), mult, shift, 0)
    return (x, weights, bias, mult, shift), want


@pytest.mark.parametrize("fault, message", [
    (Fault.DROP_WORD, r"layer pass 'faulty.*' timed out: .*status was busy.*reset"),
    (Fault.STUCK_BUSY, r"layer pass 'faulty.*' timed out: .*status was busy.*reset"),
    (Fault.ERROR, r"layer pass 'faulty.*' failed: .*error code 238 \(error flag raised\)"),
])
def test_faults_are_reported_and_the_device_recovers(accelerator, transport, fault,
                                                     message, rng, seed):
    args, want = small_layer(rng)
    transport.twin.inject_fault(fault)
    with pytest.raises(AcceleratorError, match=message):
        accelerator.conv2d(*args, x_zero_point=0, y_zero_point=0, padding=1, name="faulty")
    transport.twin.inject_fault(Fault.NONE)
    # The next layer runs correctly on the reset device.
    got = accelerator.conv2d(*args, x_zero_point=0, y_zero_point=0, padding=1)
    check(got, want, seed, f"after {fault.name}")


def poll_status(transport, reads=10):
    """STATUS once done or error is set (a start takes effect a few cycles later)."""
    for _ in range(reads):
        status = transport.csr_read(Reg.STATUS)
        if status & (regs.STATUS_DONE_MASK | regs.STATUS_ERROR_MASK):
            return status
    return status


def test_bad_descriptor_and_opcode_set_error_codes(accelerator, transport):
    transport.csr_write(Reg.OPCODE, Opcode.CONV)
    transport.csr_write(Reg.LOAD_PARAMS, 0)
    transport.csr_write(Reg.CTRL, regs.CTRL_START_MASK)
    assert poll_status(transport) & regs.STATUS_ERROR_MASK
    assert transport.csr_read(Reg.ERROR_CODE) == 2
    assert transport.twin.irq  # errors raise the interrupt when enabled
    transport.csr_write(Reg.STATUS, regs.STATUS_ERROR_MASK)
    transport.csr_write(Reg.OPCODE, 7)  # no such operation
    transport.csr_write(Reg.CTRL, regs.CTRL_START_MASK)
    assert poll_status(transport) & regs.STATUS_ERROR_MASK
    assert transport.csr_read(Reg.ERROR_CODE) == 1
    accelerator.reset()
    assert transport.csr_read(Reg.STATUS) & 0b111 == 0


def test_waveform_is_written(tmp_path, rng, seed):
    path = tmp_path / "conv.fst"
    twin = Twin(CONFIG, waves=path)
    accelerator = Accelerator(SimTransport(twin))
    args, want = small_layer(rng)
    got = accelerator.conv2d(*args, x_zero_point=0, y_zero_point=0, padding=1)
    twin.close()
    check(got, want, seed, "with waves")
    assert path.stat().st_size > 1000
