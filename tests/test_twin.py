"""The Verilator twin through the driver: discovery, GEMM layers bit-exact, faults."""

import numpy as np
import pytest

from hw.config import ArrayConfig
from models.gemm import gemm_int8
from sim.twin import Fault, Twin
from sw_driver import regs
from sw_driver.accelerator import Accelerator, AcceleratorError
from sw_driver.regs import Opcode, Reg
from sw_driver.transport.sim import SimTransport

CONFIG = ArrayConfig(rows=4, cols=4)

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def transport():
    transport = SimTransport.open(CONFIG, cycle_budget=100_000)
    yield transport
    transport.close()


@pytest.fixture
def accelerator(transport):
    accelerator = Accelerator(transport)
    accelerator.reset()
    return accelerator


def random_gemm(rng, m, k, n):
    return (rng.integers(-128, 128, (m, k), dtype=np.int8),
            rng.integers(-128, 128, (k, n), dtype=np.int8))


def check(got, a, b, seed, label):
    want = gemm_int8(a, b)
    if not np.array_equal(got, want):
        index = tuple(int(i) for i in np.argwhere(got != want)[0])
        raise AssertionError(f"seed={seed} {label}: first difference at {list(index)}: "
                             f"twin {got[index]} != golden {want[index]}")


def test_discovery(accelerator):
    assert accelerator.config == CONFIG
    assert accelerator.transport.csr_read(Reg.ID) == regs.ID_VALUE


def test_gemm_layers_bit_exact(accelerator, rng, seed):
    for m, k, n in [(1, 1, 1), (5, 9, 7), (16, 40, 12), (4, 300, 4)]:
        a, b = random_gemm(rng, m, k, n)
        got, counters = accelerator.gemm(a, b, name=f"gemm{m}x{k}x{n}")
        check(got, a, b, seed, f"{m}x{k}x{n}")
        tiles = -(-m // 4) * -(-n // 4)
        assert counters.macs == tiles * k * 16, f"seed={seed}: MAC counter {counters}"
        assert counters.busy >= tiles * max(k, 4), f"seed={seed}: busy counter {counters}"


@pytest.mark.parametrize("fault, message", [
    (Fault.DROP_WORD, r"layer 'faulty' \(GEMM 8x24x8\) timed out: .*status was busy"),
    (Fault.STUCK_BUSY, r"layer 'faulty' \(GEMM 8x24x8\) timed out: .*status was busy"),
    (Fault.ERROR, r"layer 'faulty' failed: .*error code 238 \(error flag raised\)"),
])
def test_faults_are_reported_and_the_device_recovers(accelerator, transport, fault,
                                                     message, rng, seed):
    a, b = random_gemm(rng, 8, 24, 8)
    transport.twin.inject_fault(fault)
    with pytest.raises(AcceleratorError, match=message):
        accelerator.gemm(a, b, name="faulty")
    transport.twin.inject_fault(Fault.NONE)
    # The next layer runs correctly on the reset device.
    got, _ = accelerator.gemm(a, b, name="after-fault")
    check(got, a, b, seed, f"after {fault.name}")


def poll_status(transport, reads=10):
    """STATUS once done or error is set (a start takes effect a few cycles later)."""
    for _ in range(reads):
        status = transport.csr_read(Reg.STATUS)
        if status & (regs.STATUS_DONE_MASK | regs.STATUS_ERROR_MASK):
            return status
    return status


def test_bad_descriptor_sets_an_error_code(accelerator, transport):
    transport.csr_write(Reg.OPCODE, Opcode.GEMM)
    transport.csr_write(Reg.GEMM_K, 0)
    transport.csr_write(Reg.GEMM_TILES, 1)
    transport.csr_write(Reg.CTRL, regs.CTRL_START_MASK)
    assert poll_status(transport) & regs.STATUS_ERROR_MASK
    assert transport.csr_read(Reg.ERROR_CODE) == 2
    assert transport.twin.irq  # errors raise the interrupt when enabled
    transport.csr_write(Reg.STATUS, regs.STATUS_ERROR_MASK)
    transport.csr_write(Reg.OPCODE, Opcode.CONV)  # not built into this top yet
    transport.csr_write(Reg.GEMM_K, 1)
    transport.csr_write(Reg.CTRL, regs.CTRL_START_MASK)
    assert poll_status(transport) & regs.STATUS_ERROR_MASK
    assert transport.csr_read(Reg.ERROR_CODE) == 1
    accelerator.reset()
    assert transport.csr_read(Reg.STATUS) & 0b111 == 0


def test_waveform_is_written(tmp_path, rng, seed):
    path = tmp_path / "gemm.fst"
    twin = Twin(CONFIG, waves=path)
    accelerator = Accelerator(SimTransport(twin))
    a, b = random_gemm(rng, 4, 8, 4)
    got, _ = accelerator.gemm(a, b)
    twin.close()
    check(got, a, b, seed, "with waves")
    assert path.stat().st_size > 1000
    assert path.read_bytes()[:1] == b"\x00"  # an FST header block
