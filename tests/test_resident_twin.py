"""Resident execution on the Verilator twin, through the driver's transport (csr_write,
dma_write, dma_read) as a board would run it: an image of a 3x3 convolution chained into a
2x2 max pool on chip, loaded once (checksum checked), then run for two inputs in one start
(``RES_LOOPS = 2``, each input taken by a ``RECV``), bit-exact with the layer-at-a-time run
of the same twin and with the golden models."""

from dataclasses import replace

import numpy as np
import pytest
from assertions import assert_exact
from resident_images import pass_records, recv_record, send_record, words_of

from contract.config import ArrayConfig, ConvEngineConfig
from contract.resident import header, image_checksum
from contract.streams import weight_words
from models.conv import conv2d
from models.pool import max_pool2d
from models.requant import requantize
from sw_driver import regs
from sw_driver.accelerator import Accelerator, pass_program, pool_program
from sw_driver.conv_lowering import lower_conv2d
from sw_driver.regs import Reg
from sw_driver.transport.sim import SimTransport
from twin.dma import Twin

#: The 4x4 engine of the other twin tests, with a small resident block (its own build).
CONFIG = ConvEngineConfig(array=ArrayConfig(rows=4, cols=4), act_depth=2048,
                          weight_depth=2048, max_col_tiles=8, resident_words=4096,
                          program_words=512)

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def transport():
    transport = SimTransport(Twin(CONFIG), cycle_budget=400_000)
    yield transport
    transport.close()


def load(t, words, *, address=0, program=False):
    t.csr_write(Reg.RES_STATUS, regs.RES_STATUS_DONE_MASK | regs.RES_STATUS_ERROR_MASK)
    t.csr_write(Reg.RES_ADDR, address)
    t.csr_write(Reg.RES_COUNT, len(words))
    t.csr_write(Reg.RES_CTRL, regs.RES_CTRL_LOAD_PROGRAM_MASK if program
                else regs.RES_CTRL_LOAD_DATA_MASK)
    t.dma_write(np.asarray(words, dtype="<u4").tobytes())


def wait_done(t, what):
    for _ in range(1000):
        status = t.csr_read(Reg.RES_STATUS)
        if not status & regs.RES_STATUS_BUSY_MASK:
            assert status == regs.RES_STATUS_DONE_MASK, (
                f"{what}: RES_STATUS {status:#x}, RES_ERROR {t.csr_read(Reg.RES_ERROR):#x} "
                f"at RES_PC {t.csr_read(Reg.RES_PC)}")
            return
        t.twin.run(1000)
    raise AssertionError(f"{what}: still busy")


def test_a_conv_and_pool_image_runs_twice_from_one_start(transport, rng, seed):
    accelerator = Accelerator(transport)
    accelerator.reset()
    assert accelerator.config == CONFIG  # RES_DATA_WORDS / RES_PROGRAM_WORDS discovered

    # --- the layers: a 3x3 convolution (4 channels: one beat per pixel) then a max pool --
    xs = [rng.integers(-128, 128, (1, 3, 8, 8), dtype=np.int8) for _ in range(2)]
    w = rng.integers(-128, 128, (4, 3, 3, 3), dtype=np.int8)
    bias = rng.integers(-2**12, 2**12, 4).astype(np.int32)
    mult, shift = rng.integers(2**30, 2**31, 4), rng.integers(36, 40, 4)
    conv = dict(x_zero_point=5, y_zero_point=-2, lo=-128, hi=127, stride=1, padding=1)
    passes = [lower_conv2d(x, w, bias, mult, shift, config=CONFIG, **conv) for x in xs]
    assert [len(p) for p in passes] == [1, 1]
    programs = [pass_program(p[0], CONFIG) for p in passes]
    golden_conv = [requantize(conv2d(x, w, bias, x_zero_point=5, stride=1, padding=1), mult,
                              shift, -2, -128, 127) for x in xs]
    assert len(np.unique(golden_conv[0])) > 10, "the outputs are mostly clamped"
    want = [max_pool2d(y, 2, 2) for y in golden_conv]
    pool = pool_program(golden_conv[0], CONFIG)  # its register writes depend on the shape

    # --- the image: [fixed words | input | fixed words] [conv result] [pool result] ------
    p = passes[0][0]
    h2c = [words_of(program.h2c) for program in programs]
    act_words = -(-p.activations.size // 4)
    first = p.weights.shape[0] // p.descriptor["col_tiles"]
    rest_words = (p.weights.shape[0] - first) * weight_words(CONFIG.cols)
    act_at = len(h2c[0]) - rest_words - act_words
    # The two passes differ in their input's words alone.
    assert np.array_equal(np.delete(h2c[0], np.s_[act_at:act_at + act_words]),
                          np.delete(h2c[1], np.s_[act_at:act_at + act_words]))
    data = h2c[0].copy()
    data[act_at:act_at + act_words] = 0  # what RECV fills
    conv_at = len(data)
    conv_words = programs[0].c2h_bytes // 4
    pool_at = conv_at + conv_words
    pool_words = pool.c2h_bytes // 4
    records = [*recv_record(act_at, act_words),
               *pass_records(programs[0], source=0, result=conv_at),
               *pass_records(pool, source=conv_at, result=pool_at),
               *send_record(pool_at, pool_words), header("END")]
    records = np.array(records, dtype=np.uint32)

    # --- load once, checksum, run two inputs in one start --------------------------------
    t = transport
    t.csr_write(Reg.RES_CTRL, regs.RES_CTRL_CLEAR_CHECKSUM_MASK)
    load(t, data)
    wait_done(t, "data load")
    load(t, records, program=True)
    wait_done(t, "program load")
    assert (t.csr_read(Reg.RES_CHECKSUM_A), t.csr_read(Reg.RES_CHECKSUM_B)) == \
        image_checksum(records, image_checksum(data))
    t.csr_write(Reg.RES_STATUS, regs.RES_STATUS_DONE_MASK | regs.RES_STATUS_ERROR_MASK)
    t.csr_write(Reg.RES_LOOPS, 2)
    start = t.twin.cycles
    t.csr_write(Reg.RES_CTRL, regs.RES_CTRL_RUN_MASK)
    t.dma_write(b"".join(h[act_at:act_at + act_words].tobytes() for h in h2c))
    raw = t.dma_read(2 * pool.c2h_bytes)
    wait_done(t, "run")
    resident_cycles = t.twin.cycles - start

    # --- the same layers at a time, on the same twin -------------------------------------
    start = t.twin.cycles
    layered = [accelerator.max_pool2d(accelerator.conv2d(x, w, bias, mult, shift, **conv))
               for x in xs]
    layered_cycles = t.twin.cycles - start
    for index in range(2):
        got = pool.decode(raw[index * pool.c2h_bytes:(index + 1) * pool.c2h_bytes])
        got = got.reshape(1, 4, 4, 4).transpose(0, 3, 1, 2)
        label = f"seed={seed} input {index} on {CONFIG.name}"
        assert_exact(got, want[index], label, names=("resident", "golden"))
        assert_exact(layered[index], want[index], label, names=("layer at a time", "golden"))
    print(f"resident: {resident_cycles} cycles for two inputs; layer at a time "
          f"{layered_cycles} (host-side waits included in both)")


def test_a_device_fault_mid_program_is_reported_and_reset(transport):
    """An accelerator error inside a PASS stops the program with RES_ERROR = the
    accelerator's code; the soft reset leaves both ready for the next run."""
    t = transport
    accelerator = Accelerator(t)
    accelerator.reset()
    # A PASS whose start is refused (opcode 7): the accelerator's BAD_OPCODE.
    records = [header("PASS", csr=2), int(Reg.OPCODE), 7, int(Reg.CTRL),
               regs.CTRL_START_MASK, header("END")]
    load(t, records, program=True)
    wait_done(t, "program load")
    t.csr_write(Reg.RES_STATUS, regs.RES_STATUS_DONE_MASK | regs.RES_STATUS_ERROR_MASK)
    t.csr_write(Reg.RES_LOOPS, 1)
    t.csr_write(Reg.RES_CTRL, regs.RES_CTRL_RUN_MASK)
    t.twin.run(2000)
    assert t.csr_read(Reg.RES_STATUS) == regs.RES_STATUS_ERROR_MASK
    assert t.csr_read(Reg.RES_ERROR) == regs.ErrorCode.BAD_OPCODE
    assert t.csr_read(Reg.RES_PC) == 0
    accelerator.reset()
    load(t, [header("END")], program=True)
    wait_done(t, "program load after the fault")
    t.csr_write(Reg.RES_CTRL, regs.RES_CTRL_RUN_MASK)
    wait_done(t, "a run after the fault")
    assert replace(accelerator.config) == CONFIG
