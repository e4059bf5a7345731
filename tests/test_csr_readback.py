"""A build whose RW registers do not read back (``ConvEngineConfig.csr_readback = False``,
the ``icebreaker`` preset): the configuration field, the CONFIG register's ``no_readback``
bit, a CSR bank whose RW registers read 0 while still holding what was written, and the
top that runs a pass from registers it cannot read back."""

from dataclasses import replace

import pytest
from amaranth.sim import Simulator

from contract.config import ArrayConfig, ConvEngineConfig
from contract.regmap import REGISTERS, by_name, unpack_features
from hw.csr import CsrBank
from hw.top import AcceleratorTop
from sim.streams import csr_read, csr_write, register_access
from sw_driver import regs

SMALL = ConvEngineConfig(array=ArrayConfig(rows=2, cols=2), act_depth=64, weight_depth=16,
                         max_col_tiles=2)
WRITE_ONLY = replace(SMALL, csr_readback=False)


@pytest.mark.parametrize("readback", [True, False])
def test_rw_registers_hold_their_value_and_read_it_only_with_readback(readback):
    """Every RW register of the map written all-ones: its port holds the field mask either
    way; a read gives the mask with readback, 0 without. The other kinds read the same."""
    dut = CsrBank(readback=readback)
    rw = [reg for reg in REGISTERS if reg.access == "RW"]
    held, read = {}, {}

    async def bench(ctx):
        ctx.set(dut.id, 0x54455353)
        for reg in rw:
            await csr_write(ctx, dut.bus, reg.offset, 0xFFFFFFFF)
        for reg in rw:
            held[reg.name] = ctx.get(getattr(dut, reg.name.lower()))
            read[reg.name] = await csr_read(ctx, dut.bus, reg.offset)
        read["ID"] = await csr_read(ctx, dut.bus, by_name()["ID"].offset)

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    masks = {reg.name: reg.stored_mask for reg in rw}
    assert held == masks
    assert read == {**(masks if readback else dict.fromkeys(masks, 0)), "ID": 0x54455353}


def test_the_top_without_readback_runs_a_pass_from_registers_that_read_zero():
    """A POOL pass of the write-only top: the registers read 0, CONFIG says so, and the
    pass still starts from what was written (busy, no error)."""
    dut = AcceleratorTop(WRITE_ONLY)
    seen = {}

    async def bench(ctx):
        write, read = register_access(ctx, dut.csr)

        seen["CONFIG"] = await read("CONFIG")
        for name, value in (("OPCODE", regs.Opcode.POOL), ("POOL_WIDTH", 2),
                            ("POOL_HEIGHT", 2), ("POOL_FRAMES", 1), ("STREAM_BEATS", 4)):
            await write(name, value)
            seen[name] = await read(name)
        await write("CTRL", regs.CTRL_START_MASK)
        await ctx.tick()
        seen["started"] = (await read("STATUS"), await read("ERROR_CODE"))

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    assert unpack_features(seen.pop("CONFIG"))["csr_readback"] is False
    assert seen == {"OPCODE": 0, "POOL_WIDTH": 0, "POOL_HEIGHT": 0, "POOL_FRAMES": 0,
                    "STREAM_BEATS": 0, "started": (regs.STATUS_BUSY_MASK, 0)}
