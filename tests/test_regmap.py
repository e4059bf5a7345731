"""The register map: generated files up to date, decoder behaviour in simulation."""

import pytest
from amaranth.sim import Simulator

from hw.csr import CsrBank
from hw.regmap import ID_VALUE, REGISTERS, Field, Register, by_name, stale_files


def test_generated_files_are_current():
    stale = stale_files()
    assert not stale, f"regenerate with `python -m hw.regmap`: stale {stale}"


def test_bad_register_descriptions_are_refused():
    with pytest.raises(ValueError, match="access must be one of"):
        Register("X", 0x0, "WO", "")
    with pytest.raises(ValueError, match="not 32-bit aligned"):
        Register("X", 0x2, "RO", "")
    with pytest.raises(ValueError, match="field b overlaps"):
        Register("X", 0x0, "RO", "", (Field("a", 0, 4, ""), Field("b", 2, 4, "")))


def test_decoder_read_write_pulse_and_clear():
    regs = by_name()
    dut = CsrBank()
    seen = {}

    async def bench(ctx):
        ctx.set(dut.id, ID_VALUE)

        async def write(name, value):
            ctx.set(dut.bus.addr, regs[name].offset)
            ctx.set(dut.bus.w_data, value)
            ctx.set(dut.bus.w_en, 1)
            await ctx.tick()
            ctx.set(dut.bus.w_en, 0)

        async def read(name):
            ctx.set(dut.bus.addr, regs[name].offset)
            ctx.set(dut.bus.r_en, 1)
            await ctx.tick()
            ctx.set(dut.bus.r_en, 0)
            return ctx.get(dut.bus.r_data)

        seen["id"] = await read("ID")
        await write("IRQ_ENABLE", 3)
        seen["irq_enable"] = await read("IRQ_ENABLE")
        await write("CTRL", 1)
        seen["start_pulse"] = ctx.get(dut.ctrl)
        await ctx.tick()
        seen["start_after"] = ctx.get(dut.ctrl)
        seen["ctrl_read"] = await read("CTRL")
        ctx.set(dut.status_set, 0b010)   # hardware: done
        await ctx.tick()
        ctx.set(dut.status_set, 0)
        ctx.set(dut.status_live, 0b001)  # busy, read-only
        seen["status"] = await read("STATUS")
        await write("STATUS", 0b010)    # clear done
        seen["status_cleared"] = await read("STATUS")
        await write("ID", 0)            # read-only: ignored
        seen["id_after_write"] = await read("ID")

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    assert seen == {"id": ID_VALUE, "irq_enable": 3, "start_pulse": 1, "start_after": 0,
                    "ctrl_read": 0, "status": 0b011, "status_cleared": 0b001,
                    "id_after_write": ID_VALUE}


def test_every_register_has_a_port():
    dut = CsrBank()
    dut._MustUse__silence = True  # only its ports are inspected
    for reg in REGISTERS:
        assert hasattr(dut, reg.name.lower())
