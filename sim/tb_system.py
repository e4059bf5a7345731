"""cocotb system testbench: the driver's own layer programs (``sw_driver.accelerator.
pass_program``) run against the accelerator top's CSR port and DMA streams, cycle by cycle.

The same programs run on the twin in tests/test_twin.py; here they run through cocotb, and
both must give the golden model's output, so the two paths agree.
"""

import os

import cocotb
import numpy as np
from cocotb.triggers import ReadOnly, RisingEdge, with_timeout

from contract.config import ConvEngineConfig
from models.conv import conv2d, dense, depthwise_conv2d
from models.requant import requantize
from sim.cocotb_util import clock_and_reset, first_difference, receive_stream, send_stream
from sim.tb_budgets import add_budget, pass_budget, pool_budget
from sw_driver import regs
from sw_driver.accelerator import pass_program
from sw_driver.conv_lowering import assemble_output, lower_conv2d
from sw_driver.regs import Reg


def _seed():
    return int(os.environ.get("TESSERA_SEED", "1"))


class CocotbTransport:
    """The Transport calls, as coroutines driving the top's ports."""

    def __init__(self, dut):
        self.dut = dut

    async def csr_write(self, offset, value):
        dut = self.dut
        dut.csr__addr.value = offset
        dut.csr__w_data.value = value
        dut.csr__w_en.value = 1
        await RisingEdge(dut.clk)
        dut.csr__w_en.value = 0

    async def csr_read(self, offset):
        dut = self.dut
        dut.csr__addr.value = offset
        dut.csr__r_en.value = 1
        await RisingEdge(dut.clk)
        dut.csr__r_en.value = 0
        await ReadOnly()
        value = int(dut.csr__r_data.value)
        await RisingEdge(dut.clk)
        return value

    async def dma_write(self, data):
        words = np.frombuffer(data, dtype="<u4")
        last = len(words) - 1
        await send_stream(self.dut, "h2c", [int(word) | (int(index == last) << 32)
                                            for index, word in enumerate(words)])

    async def dma_read(self, nbytes):
        words = await receive_stream(self.dut, "c2h", nbytes // 4)
        return np.array([word & 0xFFFFFFFF for word in words], dtype="<u4").tobytes()


async def run_program(dut, transport, program, budget):
    for offset, value in program.csr_writes:
        await transport.csr_write(offset, value)
    sender = cocotb.start_soon(transport.dma_write(program.h2c))
    raw = await with_timeout(transport.dma_read(program.c2h_bytes), budget * 10, "ns")
    await sender
    status = await transport.csr_read(Reg.STATUS)
    assert status & regs.STATUS_DONE_MASK and not status & regs.STATUS_ERROR_MASK, (
        f"seed={_seed()} pass {program.name}: status {status:#x} after the results")
    return program.decode(raw)


async def run_layer(dut, config, transport, x, w, bias, mult, shift, golden, label, **opts):
    passes = lower_conv2d(x, w, bias, mult, shift, config=config, name=label, **opts)
    beats = []
    for p in passes:
        program = pass_program(p, config)
        beats.append(await run_program(dut, transport, program, pass_budget(p, config)))
    got = assemble_output(passes, beats, w.shape[0])
    assert np.array_equal(got, golden), \
        f"seed={_seed()} config={config.name} {label}: {first_difference(got, golden)}"
    return got


@cocotb.test()
async def test_layer_programs(dut):
    """Conv, depthwise and dense layers through the CSR port and the DMA streams."""
    config = ConvEngineConfig.from_env(os.environ)
    rng = np.random.default_rng(_seed())
    await clock_and_reset(dut, ("h2c__valid", "c2h__ready", "csr__w_en", "csr__r_en",
                                "dbg_force_error"))
    transport = CocotbTransport(dut)
    assert await transport.csr_read(Reg.ID) == regs.ID_VALUE

    def params(channels):
        return (rng.integers(-2**14, 2**14, channels).astype(np.int32),
                rng.integers(2**30, 2**31, channels), rng.integers(12, 22, channels))

    x = rng.integers(-128, 128, (1, 3, 7, 6), dtype=np.int8)
    w = rng.integers(-128, 128, (5, 3, 3, 3), dtype=np.int8)
    b, m, n = params(5)
    golden = requantize(conv2d(x, w, b, x_zero_point=-128, padding=1), m, n, 4)
    await run_layer(dut, config, transport, x, w, b, m, n, golden, "conv",
                    x_zero_point=-128, y_zero_point=4, padding=1)

    x = rng.integers(-128, 128, (1, 4, 6, 6), dtype=np.int8)
    w = rng.integers(-128, 128, (4, 1, 3, 3), dtype=np.int8)
    b, m, n = params(4)
    golden = requantize(depthwise_conv2d(x, w, b, x_zero_point=127, stride=2, padding=1),
                        m, n, -7)
    await run_layer(dut, config, transport, x, w, b, m, n, golden, "depthwise",
                    x_zero_point=127, y_zero_point=-7, stride=2, padding=1, groups=4)

    xd = rng.integers(-128, 128, (5, 12), dtype=np.int8)
    wd = rng.integers(-128, 128, (6, 12), dtype=np.int8)
    b, m, n = params(6)
    golden = requantize(dense(xd, wd, b, x_zero_point=3), m, n, 0)
    image = np.ascontiguousarray(xd.T).reshape(1, 12, 1, 5)
    got = await run_layer(dut, config, transport, image, wd.reshape(6, 12, 1, 1), b, m, n,
                          golden.T.reshape(1, 6, 1, 5), "dense", x_zero_point=3,
                          y_zero_point=0)
    assert got[0, :, 0, :].T.shape == golden.shape


@cocotb.test()
async def test_pool_and_add_programs(dut):
    """POOL over odd rows and columns, then ADD and an even POOL: each pass must leave the
    input stream empty (an unpaired last row used to stay behind and spoil the next pass),
    and every result must equal the golden model's."""
    from models.eltwise import add, add_multipliers
    from models.pool import max_pool2d
    from sw_driver.accelerator import add_program, pool_program

    config = ConvEngineConfig.from_env(os.environ)
    rng = np.random.default_rng(_seed())
    await clock_and_reset(dut, ("h2c__valid", "c2h__ready", "csr__w_en", "csr__r_en",
                                "dbg_force_error"))
    transport = CocotbTransport(dut)
    cols = config.cols

    async def run(program, budget):
        for offset, value in program.csr_writes:
            await transport.csr_write(offset, value)
        sender = cocotb.start_soon(transport.dma_write(program.h2c))
        raw = await with_timeout(transport.dma_read(program.c2h_bytes), budget * 10, "ns")
        # The pass must have taken every word it was sent.
        await with_timeout(sender, 2000, "ns")
        status = await transport.csr_read(Reg.STATUS)
        assert status & regs.STATUS_DONE_MASK and not status & regs.STATUS_ERROR_MASK, (
            f"seed={_seed()} pass {program.name}: status {status:#x} after the results")
        return program.decode(raw)

    async def pool(x, label):
        n, c, h, w = x.shape
        program = pool_program(x, config, name=label)
        beats = await run(program, pool_budget(x.shape, config))
        groups = -(-c // cols)
        got = beats.reshape(n, groups, h // 2, w // 2, cols).transpose(0, 1, 4, 2, 3)
        got = got.reshape(n, groups * cols, h // 2, w // 2)[:, :c]
        want = max_pool2d(x, 2, 2)
        assert np.array_equal(got, want), \
            f"seed={_seed()} {label} {x.shape}: {first_difference(got, want)}"

    await pool(rng.integers(-128, 128, (1, cols + 1, 5, 7), dtype=np.int8), "pool odd")
    a = rng.integers(-128, 128, (1, cols, 3, 5), dtype=np.int8)
    b = rng.integers(-128, 128, (1, cols, 3, 5), dtype=np.int8)
    ma, na, mb, nb, my, ny = add_multipliers(0.05, 0.02, 0.07)
    params = {"a_zero_point": 3, "b_zero_point": -5, "y_zero_point": 0, "lo": -128,
              "hi": 127, "a_multiplier": ma, "a_shift": na, "b_multiplier": mb,
              "b_shift": nb, "y_multiplier": my, "y_shift": ny}
    program = add_program(a, b, params, config, name="add")
    beats = await run(program, add_budget(a.size, config))
    got = beats.reshape(-1)[:a.size].reshape(a.shape)
    want = add(a, 0.05, 3, b, 0.02, -5, 0.07, 0)
    assert np.array_equal(got, want), f"seed={_seed()} add: {first_difference(got, want)}"
    await pool(rng.integers(-128, 128, (2, cols, 4, 6), dtype=np.int8), "pool even")
    await pool(rng.integers(-128, 128, (1, 1, 3, 2), dtype=np.int8), "pool 3x2")
