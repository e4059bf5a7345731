"""cocotb testbench of the XDMA wrapper (``hw/axi_wrapper.py``) driven by cocotbext-axi.

An ``AxiLiteMaster`` plays XDMA's user BAR, an ``AxiStreamSource`` its H2C channel and an
``AxiStreamSink`` its C2H channel, each with seeded random ``tvalid``/``tready`` gaps. The
programs are the driver's own (``sw_driver.accelerator.pass_program`` of the passes that
``sw_driver.conv_lowering`` makes), executed the way ``XdmaTransport`` would: CSR writes
as 4-byte AXI-Lite writes, the H2C words as one transfer ending in ``tlast``, the results
as one C2H transfer; the assembled layer must equal the golden model's.

A resident program (``sw_driver.resident``) runs the way ``ResidentRunner`` runs it on a
Transport: loaded over AXI-Lite and H2C with the checksum read back, then one start of two
loops. The image, its inputs and the golden outputs come from the pytest wrapper, which
compiles them (a pickle named by ``TESSERA_RESIDENT_CASE``).
"""

import os
import pickle

import cocotb
import numpy as np
from cocotb.clock import Clock
from cocotb.triggers import RisingEdge, with_timeout
from cocotbext.axi import (
    AxiLiteBus,
    AxiLiteMaster,
    AxiResp,
    AxiStreamBus,
    AxiStreamFrame,
    AxiStreamSink,
    AxiStreamSource,
)

from contract.config import ConvEngineConfig
from models.conv import conv2d
from models.requant import requantize
from sim.cocotb_util import first_difference, testbench_seed
from sim.tb_budgets import pass_budget
from sw_driver import regs
from sw_driver.accelerator import pass_program
from sw_driver.conv_lowering import assemble_output, lower_conv2d
from sw_driver.regs import Reg
from sw_driver.resident.runner import (
    CTRL_CLEAR_CHECKSUM,
    RES,
    STATUS_BUSY,
    STATUS_DONE,
    STATUS_ERROR,
    load_steps,
    start_writes,
)


def _gaps(rng, idle):
    """A cocotbext-axi pause generator: pause (1) with probability ``idle`` each cycle."""
    while True:
        yield int(rng.random() < idle)


class AxiBench:
    """The wrapper with XDMA's three masters attached; the Transport calls as coroutines."""

    def __init__(self, dut, rng, idle):
        self.dut = dut
        self.idle = idle
        clk, rstn = dut.axi_aclk, dut.axi_aresetn
        self.axil = AxiLiteMaster(AxiLiteBus.from_prefix(dut, "s_axil"), clk, rstn,
                                  reset_active_level=False)
        self.h2c = AxiStreamSource(AxiStreamBus.from_prefix(dut, "s_axis_h2c"), clk, rstn,
                                   reset_active_level=False)
        self.c2h = AxiStreamSink(AxiStreamBus.from_prefix(dut, "m_axis_c2h"), clk, rstn,
                                 reset_active_level=False)
        if idle:
            # Every channel gets its own gaps, so a write's address and data also arrive on
            # different cycles and responses wait for bready/rready.
            write, read = self.axil.write_if, self.axil.read_if
            for channel in (self.h2c, self.c2h, write.aw_channel, write.w_channel,
                            write.b_channel, read.ar_channel, read.r_channel):
                channel.set_pause_generator(_gaps(rng, idle))

    async def reset(self):
        dut = self.dut
        cocotb.start_soon(Clock(dut.axi_aclk, 10, unit="ns").start())
        dut.axi_aresetn.value = 0
        for _ in range(4):
            await RisingEdge(dut.axi_aclk)
        dut.axi_aresetn.value = 1
        await RisingEdge(dut.axi_aclk)

    async def csr_write(self, offset, value):
        resp = await self.axil.write(offset, int(value).to_bytes(4, "little"))
        assert resp.resp == AxiResp.OKAY, f"seed={testbench_seed()} write {offset:#x}: {resp.resp}"

    async def csr_read(self, offset):
        resp = await self.axil.read(offset, 4)
        assert resp.resp == AxiResp.OKAY, f"seed={testbench_seed()} read {offset:#x}: {resp.resp}"
        return int.from_bytes(resp.data, "little")

    async def dma_write(self, data):
        await self.h2c.send(AxiStreamFrame(bytes(data)))
        await self.h2c.wait()

    async def dma_read(self, nbytes):
        frame = await self.c2h.recv()
        data = bytes(frame.tdata)
        assert len(data) == nbytes, (
            f"seed={testbench_seed()}: the C2H transfer had {len(data)} bytes, expected {nbytes} "
            f"(tlast on the wrong beat)")
        return data


async def run_layer(bench, config, x, w, bias, mult, shift, golden, label, **opts):
    passes = lower_conv2d(x, w, bias, mult, shift, config=config, name=label, **opts)
    beats = []
    for p in passes:
        program = pass_program(p, config)
        for offset, value in program.csr_writes:
            await bench.csr_write(offset, value)
        sender = cocotb.start_soon(bench.dma_write(program.h2c))
        # The modelled cycles with a margin, stretched by the gaps on both streams.
        budget = pass_budget(p, config, stall=bench.idle)
        raw = await with_timeout(bench.dma_read(program.c2h_bytes), budget * 10, "ns")
        await with_timeout(sender, 20000, "ns")
        status = await bench.csr_read(Reg.STATUS)
        assert status & regs.STATUS_DONE_MASK and not status & regs.STATUS_ERROR_MASK, (
            f"seed={testbench_seed()} pass {program.name}: status {status:#x} after the results")
        beats.append(program.decode(raw))
    got = assemble_output(passes, beats, w.shape[0])
    assert np.array_equal(got, golden), \
        f"seed={testbench_seed()} config={config.name} {label}: {first_difference(got, golden)}"


@cocotb.test()
async def test_axil_registers(dut):
    """ID over AXI-Lite, a read-back of a RW register, and SLVERR for a partial write."""
    bench = AxiBench(dut, np.random.default_rng(testbench_seed()), 0.0)
    await bench.reset()
    assert await bench.csr_read(Reg.ID) == regs.ID_VALUE
    assert await bench.csr_read(Reg.VERSION) == regs.MAP_VERSION
    await bench.csr_write(Reg.POOL_WIDTH, 0x1234)
    assert await bench.csr_read(Reg.POOL_WIDTH) == 0x1234
    resp = await bench.axil.write(Reg.POOL_WIDTH, b"\x77")  # one byte: wstrb 0b0001
    assert resp.resp == AxiResp.SLVERR, f"a partial write answered {resp.resp}"
    assert await bench.csr_read(Reg.POOL_WIDTH) == 0x1234, "a partial write changed the CSR"
    assert int(dut.usr_irq_req.value) == 0
    # A read and a write at once, with gaps on every AXI-Lite channel: the slave takes one
    # transaction at a time and neither is lost or mixed with the other.
    rng = np.random.default_rng(testbench_seed())
    write, read = bench.axil.write_if, bench.axil.read_if
    for channel in (write.aw_channel, write.w_channel, write.b_channel, read.ar_channel,
                    read.r_channel):
        channel.set_pause_generator(_gaps(rng, 0.5))
    for value in range(5, 25):
        writer = cocotb.start_soon(bench.csr_write(Reg.POOL_HEIGHT, value))
        got = await with_timeout(bench.csr_read(Reg.ID), 5000, "ns")
        assert got == regs.ID_VALUE, f"seed={testbench_seed()}: ID read {got:#x} beside a write"
        await with_timeout(writer, 5000, "ns")
        got = await with_timeout(bench.csr_read(Reg.POOL_HEIGHT), 5000, "ns")
        assert got == value, f"seed={testbench_seed()}: POOL_HEIGHT {got} after writing {value}"


@cocotb.test()
async def test_h2c_tkeep(dut):
    """Bytes with tkeep clear reach the accelerator as zero: a POOL pass over one 2x2 frame
    of 4 channels whose last word has its last byte's tkeep clear returns the maximum of the
    zero-filled input."""
    from models.pool import max_pool2d
    from sw_driver.accelerator import pool_program

    config = ConvEngineConfig.from_env(os.environ)
    bench = AxiBench(dut, np.random.default_rng(testbench_seed()), 0.0)
    await bench.reset()
    x = np.full((1, config.cols, 2, 2), -100, dtype=np.int8)
    x[0, config.cols - 1, 1, 1] = -5  # in the last word's last byte, which is not kept
    program = pool_program(x, config, name="tkeep")
    for offset, value in program.csr_writes:
        await bench.csr_write(offset, value)
    data = bytes(program.h2c)
    # The unkept byte still carries -5 on tdata; only tkeep says it is not there.
    await bench.h2c.send(AxiStreamFrame(data, tkeep=[1] * (len(data) - 1) + [0]))
    raw = await with_timeout(bench.dma_read(program.c2h_bytes), 20000, "ns")
    zero_filled = x.copy()
    zero_filled[0, config.cols - 1, 1, 1] = 0
    got = program.decode(raw).reshape(-1)[:config.cols]
    want = max_pool2d(zero_filled, 2, 2).reshape(-1)
    assert np.array_equal(got, want), f"tkeep: {first_difference(got, want)}"


@cocotb.test()
@cocotb.parametrize(idle=[0.0, 0.3, 0.6])
async def test_conv_layer(dut, idle):
    """A conv layer, bit-exact against the golden model, with stream gaps ``idle``."""
    config = ConvEngineConfig.from_env(os.environ)
    seed = testbench_seed() + int(idle * 10)
    dut._log.info(f"seed={seed} idle={idle} config={config.name}")
    rng = np.random.default_rng(seed)
    bench = AxiBench(dut, rng, idle)
    await bench.reset()
    x = rng.integers(-128, 128, (1, 3, 7, 6), dtype=np.int8)
    w = rng.integers(-128, 128, (6, 3, 3, 3), dtype=np.int8)
    b = rng.integers(-2**14, 2**14, 6).astype(np.int32)
    m = rng.integers(2**30, 2**31, 6)
    n = rng.integers(12, 22, 6)
    golden = requantize(conv2d(x, w, b, x_zero_point=-128, padding=1), m, n, 4)
    await run_layer(bench, config, x, w, b, m, n, golden, f"conv idle={idle}",
                    x_zero_point=-128, y_zero_point=4, padding=1)
    # The interrupt line follows STATUS & IRQ_ENABLE: on with done enabled.
    await bench.csr_write(Reg.IRQ_ENABLE, regs.IRQ_ENABLE_DONE_MASK)
    await RisingEdge(dut.axi_aclk)
    assert int(dut.usr_irq_req.value) == 1, "usr_irq_req low with DONE set and enabled"


async def wait_resident_idle(bench, what, cycles):
    """Poll ``RES_STATUS`` until the player is idle; it must then read done only."""
    for _ in range(cycles // 20):
        status = await bench.csr_read(RES["STATUS"])
        if not status & STATUS_BUSY:
            break
    error, pc = await bench.csr_read(RES["ERROR"]), await bench.csr_read(RES["PC"])
    assert status & (STATUS_BUSY | STATUS_DONE | STATUS_ERROR) == STATUS_DONE, (
        f"seed={testbench_seed()} {what}: RES_STATUS {status:#x}, RES_ERROR {error} at "
        f"RES_PC {pc}")


async def receive_words(bench, count):
    """``count`` words from C2H: each SEND ends its own transfer with ``tlast``."""
    data = b""
    while len(data) < 4 * count:
        frame = await bench.c2h.recv()
        data += bytes(frame.tdata)
    assert len(data) == 4 * count, (
        f"seed={testbench_seed()}: C2H carried {len(data)} bytes, expected {4 * count}")
    return np.frombuffer(data, "<u4")


@cocotb.test()
async def test_resident_program(dut):
    """A compiled model loaded over AXI (checksum read back) and run for two inputs from
    one start with stream gaps, bit-exact with the golden outputs."""
    path = os.environ.get("TESSERA_RESIDENT_CASE")
    assert path, "TESSERA_RESIDENT_CASE is not set: run this bench from tests/test_axi_wrapper.py"
    with open(path, "rb") as f:
        case = pickle.load(f)
    image, feeds, want, idle = case["image"], case["feeds"], case["want"], case["idle"]
    seed = testbench_seed()
    dut._log.info(f"seed={seed} idle={idle} image: {len(image.program)} program words, "
                  f"{len(image.data)} data words, {len(image.passes)} passes")
    bench = AxiBench(dut, np.random.default_rng(seed), idle)
    await bench.reset()
    assert await bench.csr_read(RES["DATA_WORDS"]) >= image.data_words
    assert await bench.csr_read(RES["PROGRAM_WORDS"]) >= len(image.program)

    # --- load, as ResidentRunner.load does --------------------------------------------
    await bench.csr_write(RES["CTRL"], CTRL_CLEAR_CHECKSUM)
    for what, writes, data in load_steps(image):
        for offset, value in writes:
            await bench.csr_write(offset, value)
        await with_timeout(bench.dma_write(data), (len(data) // 4 + 100) * 10 * 10, "ns")
        await wait_resident_idle(bench, what, 2000)
    checksum = (await bench.csr_read(RES["CHECKSUM_A"]), await bench.csr_read(RES["CHECKSUM_B"]))
    assert checksum == image.checksum, (
        f"seed={seed}: the device's checksum {checksum[0]:#010x}/{checksum[1]:#010x}, the "
        f"image's {image.checksum[0]:#010x}/{image.checksum[1]:#010x}")

    # --- one start, N loops, as ResidentRunner.run does -------------------------------
    words, count = image.pack_inputs(feeds)
    for offset, value in start_writes(count):
        await bench.csr_write(offset, value)
    sender = cocotb.start_soon(bench.dma_write(words.astype("<u4").tobytes()))
    # The modelled cycles with a margin, stretched by the gaps on both streams.
    budget = int(4 * image.run_cycles(count) / (1 - idle)) + 20_000
    raw = await with_timeout(receive_words(bench, image.output_words * count),
                             budget * 10, "ns")
    await with_timeout(sender, 20000, "ns")
    await wait_resident_idle(bench, f"run of {count} loops", 400)
    got = image.unpack_outputs(raw, count)
    assert got.keys() == want.keys(), f"seed={seed}: outputs {sorted(got)}, want {sorted(want)}"
    for name, array in want.items():
        assert np.array_equal(got[name], array), \
            f"seed={seed} output {name!r}: {first_difference(got[name], array)}"
