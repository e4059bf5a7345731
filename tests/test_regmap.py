"""The register map and the rest of the contract: generated files up to date, decoder
behaviour in simulation, and the RTL, the driver and the C header agreeing with it."""

import numpy as np
import pytest
from amaranth.sim import Simulator

from contract.config import ArrayConfig, ConvEngineConfig
from contract.regmap import (
    ID_VALUE,
    REGISTERS,
    ROOT,
    Field,
    Register,
    by_name,
    pack_config,
    stale_files,
    unpack_add_lanes,
    unpack_config,
)
from contract.requant import (
    BIAS_WIDTH,
    MULTIPLIER_MAX,
    MULTIPLIER_MIN,
    MULTIPLIER_WIDTH,
    SHIFT_MAX,
    SHIFT_MIN,
    SHIFT_WIDTH,
)
from contract.streams import (
    POOL_MAX_WIDTH,
    pack_param_entry,
    param_entry_bits,
    param_entry_offsets,
    param_words,
)
from hw.conv_engine import param_word_layout
from hw.csr import ADDR_WIDTH, CsrBank
from hw.postprocess import PostProcessBank
from hw.top import AcceleratorTop
from sim.streams import csr_read, csr_write, register_access
from sw_driver import regs
from sw_driver.accelerator import Accelerator, AcceleratorError


def test_generated_files_are_current():
    stale = stale_files()
    assert not stale, f"regenerate with `python -m contract.regmap`: stale {stale}"


def test_bad_register_descriptions_are_refused():
    with pytest.raises(ValueError, match="access must be one of"):
        Register("X", 0x0, "WO", "")
    with pytest.raises(ValueError, match="not 32-bit aligned"):
        Register("X", 0x2, "RO", "")
    with pytest.raises(ValueError, match="field b overlaps"):
        Register("X", 0x0, "RO", "", (Field("a", 0, 4, ""), Field("b", 2, 4, "")))


def test_decoder_read_write_pulse_and_clear():
    dut = CsrBank()
    seen = {}

    async def bench(ctx):
        ctx.set(dut.id, ID_VALUE)

        write, read = register_access(ctx, dut.bus)

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


def test_every_byte_address_reads_its_register_or_zero():
    """The read multiplexer (a tree over the word address) against the map: each
    register reads its own value, strobes, unmapped words and unaligned addresses zero."""
    regs = REGISTERS
    dut = CsrBank()
    rng = np.random.default_rng(12)
    print("seed=12")
    values = {reg.name: int(rng.integers(1, 2**32)) for reg in regs}
    live = int(rng.integers(1, 2**32))
    want = {addr: 0 for addr in range(1 << ADDR_WIDTH)}
    for reg in regs:
        want[reg.offset] = 0 if reg.access == "W1P" else values[reg.name]
        if reg.access == "RW":
            want[reg.offset] &= reg.stored_mask
        if reg.access == "W1C":
            want[reg.offset] = values[reg.name] | live
    got = {}

    async def bench(ctx):
        for reg in regs:
            name = reg.name.lower()
            if reg.access == "RO":
                ctx.set(getattr(dut, name), values[reg.name])
            elif reg.access == "W1C":
                ctx.set(getattr(dut, f"{name}_set"), values[reg.name])
                ctx.set(getattr(dut, f"{name}_live"), live)
            elif reg.access == "RW":
                await csr_write(ctx, dut.bus, reg.offset, values[reg.name])
        await ctx.tick()
        for reg in regs:
            if reg.access == "W1C":
                ctx.set(getattr(dut, f"{reg.name.lower()}_set"), 0)
        for addr in range(1 << ADDR_WIDTH):
            got[addr] = await csr_read(ctx, dut.bus, addr)

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    wrong = [(hex(a), got[a], want[a]) for a in want if got[a] != want[a]]
    assert not wrong, f"first (address, read, expected): {wrong[:3]}"


def _field_mask(register):
    return sum(((1 << f.width) - 1) << f.lsb for f in register.fields)


def test_rw_registers_store_exactly_their_fields_bits():
    """Every RW register of the map, written all-ones, reads back its fields' bits and
    nothing else (the unstored bits read 0), and written zero reads 0."""
    rw = [reg for reg in REGISTERS if reg.access == "RW"]
    dut = CsrBank()
    got = {}

    async def bench(ctx):
        for reg in rw:
            await csr_write(ctx, dut.bus, reg.offset, 0xFFFFFFFF)
        for reg in rw:
            got[reg.name] = [await csr_read(ctx, dut.bus, reg.offset)]
        for reg in rw:
            await csr_write(ctx, dut.bus, reg.offset, 0)
            got[reg.name].append(await csr_read(ctx, dut.bus, reg.offset))

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    want = {reg.name: [_field_mask(reg), 0] for reg in rw}
    wrong = {name: [hex(v) for v in got[name]] for name in want if got[name] != want[name]}
    assert not wrong, f"(all-ones, zero) read back: {wrong}; expected the field masks"
    # The descriptor registers are as wide as the contract's fields, no wider.
    widths = {reg.name: _field_mask(reg).bit_length() for reg in rw}
    assert widths["CONV_IN_CHANNELS"] == 16 and widths["CONV_X_ZERO_POINT"] == 8
    assert widths["ADD_A_MULTIPLIER"] == MULTIPLIER_WIDTH and widths["OPCODE"] == 32
    assert widths["POOL_ENABLE"] == 1 and widths["IRQ_ENABLE"] == 2


def test_a_signed_field_reads_back_its_twos_complement_bits():
    """The driver writes a signed field masked to 32 bits; the register keeps the field's
    low bits, which the hardware reads as two's complement."""
    registers = by_name()
    dut = CsrBank()
    got = {}
    cases = {"CONV_X_ZERO_POINT": -128, "CONV_LO": -1, "CONV_GROUP_DX": -3,
             "CONV_ORIGIN_ADDR": -70000, "ADD_A_ZERO_POINT": 5}

    async def bench(ctx):
        for name, value in cases.items():
            await csr_write(ctx, dut.bus, registers[name].offset, value & 0xFFFFFFFF)
            got[name] = (await csr_read(ctx, dut.bus, registers[name].offset),
                         ctx.get(getattr(dut, name.lower())))

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    for name, value in cases.items():
        width = _field_mask(registers[name]).bit_length()
        low = value & ((1 << width) - 1)
        signed = low - (1 << width) if low >> (width - 1) else low
        assert got[name] == (low, low) and signed == value, (name, got[name], value)


def test_every_register_has_a_port():
    dut = CsrBank()
    dut._MustUse__silence = True  # only its ports are inspected
    for reg in REGISTERS:
        assert hasattr(dut, reg.name.lower())


# --- The contract: one fact, read by the RTL, the driver and the generated files ----------


def test_config_word_packs_and_unpacks():
    word = pack_config(rows=8, cols=16, acc_width=32)
    assert word == 8 | 16 << 8 | 32 << 16
    assert unpack_config(word) == {"rows": 8, "cols": 16, "acc_width": 32}
    # The driver's constants are generated from the same fields.
    assert regs.CONFIG_COLS_MASK == 0xFF00 and regs.CONFIG_COLS_SHIFT == 8


def test_config_word_says_how_many_lanes_an_add_datapath_serves():
    # 0 (every build before the field) is the default 8; the others round-trip.
    assert unpack_add_lanes(pack_config(rows=8, cols=8, acc_width=32)) == 8
    for lanes in (8, 4, 2, 1):
        word = pack_config(rows=8, cols=8, acc_width=32, add_lanes=lanes)
        assert unpack_add_lanes(word) == lanes
        assert unpack_config(word) == {"rows": 8, "cols": 8, "acc_width": 32}
    with pytest.raises(ValueError, match=r"add_lanes must be one of \[8, 4, 2, 1\], not 3"):
        pack_config(rows=8, cols=8, acc_width=32, add_lanes=3)
    with pytest.raises(ValueError, match=r"add_lanes must be one of \[8, 4, 2, 1\].*not 5"):
        ConvEngineConfig(add_lanes=5)
    assert ConvEngineConfig(add_lanes=4).name.endswith("-al4")
    assert "-al" not in ConvEngineConfig().name


def test_config_word_refuses_values_its_fields_cannot_hold():
    with pytest.raises(ValueError, match=r"CONFIG.cols holds 8 bits, so 0 to 255, not 256"):
        pack_config(rows=8, cols=256, acc_width=32)
    with pytest.raises(ValueError, match=r"CONFIG.rows holds 8 bits, so 0 to 255, not -1"):
        pack_config(rows=-1, cols=8, acc_width=32)


def test_error_codes_reach_the_driver_and_the_c_header():
    assert {code.name: int(code) for code in regs.ErrorCode} == {
        "NONE": 0, "BAD_OPCODE": 1, "BAD_DESCRIPTOR": 2, "FORCED": 0xEE, "BAD_RECORD": 0x10,
        "BAD_ADDRESS": 0x11}
    assert regs.ERROR_MEANINGS[2] == "bad descriptor"
    header = (ROOT / "twin/harness/tessera_regs.h").read_text()
    assert "#define TESSERA_ERROR_FORCED 0xeeu" in header
    assert "#define TESSERA_OP_POOL 2" in header


def test_param_entry_layout_is_the_hardwares():
    for cols in (1, 3, 8):
        layout = param_word_layout(cols)
        assert layout.size == param_entry_bits(cols)
        for name, (offset, width) in param_entry_offsets(cols).items():
            assert (layout[name].offset, layout[name].shape.elem_shape.width) == \
                (offset, width), f"field {name} at {cols} lanes"
    assert param_words(8) == 18  # 8 lanes x (32 + 31 + 6) bits = 552 bits


def test_param_entry_packs_lanes_little_endian():
    entry = pack_param_entry({"bias": [-1, 2], "multiplier": [MULTIPLIER_MIN, MULTIPLIER_MAX],
                              "shift": [SHIFT_MIN, SHIFT_MAX]}, 2)
    value = int.from_bytes(entry, "little")
    assert len(entry) == 4 * param_words(2)
    assert value & 0xFFFFFFFF == 0xFFFFFFFF and (value >> 32) & 0xFFFFFFFF == 2
    assert (value >> 64) & (2**31 - 1) == MULTIPLIER_MIN
    assert (value >> 95) & (2**31 - 1) == MULTIPLIER_MAX
    assert (value >> 126) & 63 == SHIFT_MIN and (value >> 132) & 63 == SHIFT_MAX
    with pytest.raises(ValueError, match="field 'shift' needs 2 lanes, not 1"):
        pack_param_entry({"bias": [0, 0], "multiplier": [0, 0], "shift": [1]}, 2)


def test_requant_widths_hold_the_models_ranges():
    assert (MULTIPLIER_WIDTH, SHIFT_WIDTH) == (31, 6)
    assert MULTIPLIER_MAX < 1 << MULTIPLIER_WIDTH and SHIFT_MAX < 1 << SHIFT_WIDTH
    bank = PostProcessBank(lanes=2)
    bank._MustUse__silence = True  # only its ports are inspected
    assert len(bank.multiplier[0]) == MULTIPLIER_WIDTH
    assert len(bank.shift[0]) == SHIFT_WIDTH
    assert len(bank.bias[0]) == BIAS_WIDTH


def test_rtl_top_publishes_the_contract():
    """The accelerator top, simulated: its ID, CONFIG and POOL_MAX_WIDTH registers and the
    error code of a bad opcode are the contract's values."""
    config = ConvEngineConfig(array=ArrayConfig(rows=2, cols=3), act_depth=64,
                              weight_depth=16, max_col_tiles=2)
    dut = AcceleratorTop(config)
    seen = {}

    async def bench(ctx):
        write, read = register_access(ctx, dut.csr)

        for name in ("ID", "CONFIG", "POOL_MAX_WIDTH", "PARAM_DEPTH"):
            seen[name] = await read(name)
        await write("OPCODE", regs.Opcode.NOP)  # no layer to start: refused as an opcode
        await write("CTRL", regs.CTRL_START_MASK)
        await ctx.tick()
        seen["STATUS"] = await read("STATUS")
        seen["ERROR_CODE"] = await read("ERROR_CODE")

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    assert unpack_config(seen["CONFIG"]) == {"rows": 2, "cols": 3, "acc_width": 32}
    assert seen == {"ID": ID_VALUE, "CONFIG": pack_config(rows=2, cols=3, acc_width=32),
                    "POOL_MAX_WIDTH": POOL_MAX_WIDTH, "PARAM_DEPTH": 2,
                    "STATUS": regs.STATUS_ERROR_MASK,
                    "ERROR_CODE": regs.ErrorCode.BAD_OPCODE}


class _Registers:
    """Just the discovery registers, as a device would answer them."""

    def __init__(self, **overrides):
        self.values = {regs.Reg.ID: ID_VALUE, regs.Reg.VERSION: regs.MAP_VERSION,
                       regs.Reg.CONFIG: pack_config(rows=4, cols=8, acc_width=32),
                       regs.Reg.ACT_DEPTH: 2048, regs.Reg.WEIGHT_DEPTH: 512,
                       regs.Reg.PARAM_DEPTH: 8, regs.Reg.POOL_MAX_WIDTH: 64,
                       # A build without the resident block reads 0 there.
                       regs.Reg.RES_DATA_WORDS: 0, regs.Reg.RES_PROGRAM_WORDS: 0}
        self.values.update({regs.Reg[name]: value for name, value in overrides.items()})

    def csr_read(self, offset):
        return self.values[offset]

    def csr_write(self, offset, value):
        pass


def test_driver_learns_the_configuration_from_the_registers():
    device = Accelerator(_Registers())
    assert device.config == ConvEngineConfig(array=ArrayConfig(rows=4, cols=8),
                                             act_depth=2048, weight_depth=512,
                                             max_col_tiles=8)
    assert device.pool_max_width == 64


def test_driver_refuses_another_device_or_map_major_version():
    with pytest.raises(AcceleratorError, match="ID register reads 0x00000000, expected "
                                               "0x54455353"):
        Accelerator(_Registers(ID=0))
    with pytest.raises(AcceleratorError, match=r"register map version 1\.0 is not supported"):
        Accelerator(_Registers(VERSION=1 << 16))
    Accelerator(_Registers(VERSION=regs.MAP_VERSION + 1))  # a newer minor version is fine
