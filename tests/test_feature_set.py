"""A build without the residual add (``ConvEngineConfig.residual_add = False``, the
``icebreaker`` preset): the configuration field, the bank's multipliers, the bank's
requantization alone, the refused ADD start, the CONFIG register's ``no_add`` bit and the
driver's fallback with its reason."""

import gc
import warnings
from dataclasses import replace

import numpy as np
import pytest
from amaranth.hdl import UnusedElaboratable
from amaranth.sim import Simulator
from fake_device import Registers

from contract.config import ArrayConfig, ConvEngineConfig
from contract.descriptor import ADD_PARAM_FIELDS
from contract.postprocess import bank_rescalers, postprocess_multipliers, requant_units
from contract.regmap import (
    ERROR_CODES,
    OPCODES,
    REGISTERS,
    implemented_registers,
    pack_config,
    resident_registers,
    unpack_features,
)
from hw.postprocess import PostProcessBank
from hw.sequencer import CommandSequencer, Phase
from hw.top import AcceleratorTop
from models.requant import requantize
from sim.streams import register_access, run_bounded, stream_get, stream_put
from sw_driver import graph as g
from sw_driver import regs
from sw_driver.accelerator import Accelerator, AcceleratorError
from sw_driver.planner import Planner
from sw_driver.providers import CPUProvider, PCIeProvider

SMALL = ConvEngineConfig(array=ArrayConfig(rows=2, cols=2), act_depth=64, weight_depth=16,
                         max_col_tiles=2)
NO_ADD = replace(SMALL, residual_add=False)


# --- the post-processing bank (the field itself: test_optional_blocks.py) -------------------

@pytest.mark.parametrize("lanes, with_add, without", [(2, 12, 4), (8, 16, 16), (1, 12, 4),
                                                     (4, 12, 8)])
def test_multipliers_of_the_bank_with_and_without_the_add(lanes, with_add, without):
    assert postprocess_multipliers(lanes) == with_add
    assert postprocess_multipliers(lanes, residual_add=False) == without
    assert bank_rescalers(lanes, residual_add=False) == requant_units(lanes)
    with pytest.raises(ValueError, match="residual_add must be true or false, not 'yes'"):
        bank_rescalers(lanes, residual_add="yes")


def test_the_bank_checks_the_flag_with_the_contracts_message():
    with warnings.catch_warnings():
        # The refused bank is never elaborated: Amaranth would warn when it is collected.
        warnings.simplefilter("ignore", UnusedElaboratable)
        with pytest.raises(ValueError, match=r"^residual_add must be true or false, not 1$"):
            PostProcessBank(lanes=2, residual_add=1)
        gc.collect()


def test_the_icebreaker_build_asks_for_the_arrays_multipliers_only():
    from hw import bitstream

    config = bitstream.default_config("icebreaker")
    # The 1x1 array's one; the serial requantizer of a lean build without the add has
    # none. The pipelined bank's rescaler would take four, the add's datapath twelve.
    assert bitstream.multipliers_needed(config) == 1
    assert bitstream.multipliers_needed(replace(config, pipelined=True)) == 5
    assert bitstream.multipliers_needed(replace(config, residual_add=True)) == 13


@pytest.mark.parametrize("lanes", [2, 3])
def test_a_bank_without_the_add_requantizes_bit_exact_and_takes_no_operands(lanes, rng,
                                                                            seed):
    bank = PostProcessBank(lanes=lanes, residual_add=False)
    assert (bank.rescalers, bank.add_units) == (requant_units(lanes), 0)
    with pytest.raises(ValueError, match="no add mode"):
        bank.cycles_per_beat(adding=True)
    beats = 24
    acc = rng.integers(-2**20, 2**20, (beats, lanes), dtype=np.int64)
    bias = rng.integers(-2**16, 2**16, lanes)
    multiplier = rng.integers(2**30, 2**31, lanes)
    shift = rng.integers(20, 40, lanes)
    zero_point = int(rng.integers(-128, 128))
    got, operands_ready = [], []

    async def feed(ctx):
        # `adding` high must change nothing: the bank has no add mode.
        ctx.set(bank.adding, 1)
        ctx.set(bank.operands.valid, 1)
        ctx.set(bank.bias, [int(v) for v in bias])
        ctx.set(bank.multiplier, [int(v) for v in multiplier])
        ctx.set(bank.shift, [int(v) for v in shift])
        ctx.set(bank.params, {"zero_point": zero_point, "lo": -128, "hi": 127})
        for index, row in enumerate(acc):
            operands_ready.append(ctx.get(bank.operands.ready))
            await stream_put(ctx, bank.accumulators,
                             {"acc": [int(v) for v in row], "last": index == beats - 1})

    async def drain(ctx):
        for _ in range(beats):
            while rng.random() < 0.3:
                await ctx.tick()
            got.append([int(v) for v in (await stream_get(ctx, bank.results)).y])

    sim = Simulator(bank)
    sim.add_clock(1e-8)
    sim.add_testbench(feed)
    sim.add_testbench(drain)
    run_bounded(sim, (200 + 20 * lanes * beats) * 1e-8)
    assert len(got) == beats, f"seed={seed}: {len(got)} of {beats} result beats came out"
    want = requantize((acc + bias).astype(np.int32), multiplier, shift, zero_point, -128, 127,
                      axis=1).astype(np.int64)
    got = np.array(got, dtype=np.int64)
    if not np.array_equal(got, want):
        index = tuple(int(i) for i in np.argwhere(got != want)[0])
        raise AssertionError(f"seed={seed} lanes={lanes}: first difference at {list(index)}:"
                             f" RTL {got[index]} != golden {want[index]}")
    assert not any(operands_ready)


# --- the refused start ----------------------------------------------------------------------

def test_the_sequencer_without_the_add_refuses_add_as_an_unknown_opcode():
    seen = {}
    for residual_add in (True, False):
        dut = CommandSequencer(residual_add=residual_add)

        async def bench(ctx, dut=dut, residual_add=residual_add):
            for name, value in dict(opcode=OPCODES["ADD"], stream_beats=3).items():
                ctx.set(getattr(dut.command, name), value)
            ctx.set(dut.start, 1)
            error = ctx.get(dut.set_error)
            await ctx.tick()
            ctx.set(dut.start, 0)
            seen[residual_add] = (error, ctx.get(dut.error_code), Phase(ctx.get(dut.phase)))

        sim = Simulator(dut)
        sim.add_clock(1e-8)
        sim.add_testbench(bench)
        sim.run()
    assert seen == {True: (0, 0, Phase.STREAM),
                    False: (1, ERROR_CODES["BAD_OPCODE"][0], Phase.IDLE)}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UnusedElaboratable)  # refused, never elaborated
        with pytest.raises(ValueError, match="residual_add must be true or false, not 0"):
            CommandSequencer(residual_add=0)
        gc.collect()


def test_the_top_without_the_add_says_so_and_refuses_an_add_start():
    """The accelerator top of a no-add build, simulated: CONFIG carries ``no_add``, an ADD
    start ends in the error flag with BAD_OPCODE, and a POOL start still runs."""
    dut = AcceleratorTop(NO_ADD)
    seen = {}

    async def bench(ctx):
        write, read = register_access(ctx, dut.csr)

        seen["CONFIG"] = await read("CONFIG")
        await write("ADD_A_MULTIPLIER", 0x5A5A5A5A)  # not implemented: dropped, reads 0
        await write("POOL_WIDTH", 77)
        seen["ADD_A_MULTIPLIER"] = await read("ADD_A_MULTIPLIER")
        seen["POOL_WIDTH"] = await read("POOL_WIDTH")
        await write("OPCODE", regs.Opcode.ADD)
        await write("STREAM_BEATS", 1)
        await write("CTRL", regs.CTRL_START_MASK)
        await ctx.tick()
        seen["ADD"] = (await read("STATUS"), await read("ERROR_CODE"))
        await write("STATUS", regs.STATUS_ERROR_MASK)
        for name, value in (("OPCODE", regs.Opcode.POOL), ("POOL_WIDTH", 2),
                            ("POOL_HEIGHT", 2), ("POOL_FRAMES", 1), ("STREAM_BEATS", 4),
                            ("CTRL", regs.CTRL_START_MASK)):
            await write(name, value)
        await ctx.tick()
        seen["POOL"] = (await read("STATUS"), await read("ERROR_CODE"))

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    assert seen == {
        "CONFIG": pack_config(rows=2, cols=2, acc_width=32, residual_add=False),
        "ADD_A_MULTIPLIER": 0, "POOL_WIDTH": 77,
        "ADD": (regs.STATUS_ERROR_MASK, regs.ErrorCode.BAD_OPCODE),
        "POOL": (regs.STATUS_BUSY_MASK, 0)}
    assert seen["CONFIG"] >> regs.CONFIG_NO_ADD_SHIFT & 1 == 1
    assert unpack_features(seen["CONFIG"]) == {"residual_add": False, "perf_counters": True,
                                               "csr_readback": True, "pipelined": True,
                                               "depthwise": False, "resident_add": False}
    assert unpack_features(pack_config(rows=2, cols=2, acc_width=32)) == {
        "residual_add": True, "perf_counters": True, "csr_readback": True, "pipelined": True,
        "depthwise": False, "resident_add": False}


def test_a_build_without_the_add_implements_every_register_but_the_adds():
    every = {reg.name for reg in REGISTERS}
    resident = {reg.name for reg in resident_registers()}
    assert resident and all(name.startswith("RES_") for name in resident)
    # The depthwise fields' registers only on a build with the mode (an added feature).
    depthwise = {"CONV_DEPTHWISE", "CONV_DW_TILE_DADDR"}
    assert {reg.name for reg in implemented_registers(resident=True, depthwise=True)} == every
    assert {reg.name for reg in implemented_registers()} == every - resident - depthwise
    every -= resident | depthwise
    without = {reg.name for reg in implemented_registers(residual_add=False)}
    assert every - without == {f"ADD_{name.upper()}" for name, *_ in ADD_PARAM_FIELDS}
    assert {"CONFIG", "CTRL", "STATUS", "OPCODE", "STREAM_BEATS", "CONV_IN_CHANNELS",
            "PERF_CYCLES"} <= without


# --- the driver ---------------------------------------------------------------------------

#: The pool width the discovery-registers fake reports (any width the tests' pools fit).
POOL_WIDTH = 128


def test_the_driver_learns_the_feature_and_places_add_on_the_cpu_with_the_reason():
    assert Accelerator(Registers(SMALL, pool_max_width=POOL_WIDTH)).config == SMALL
    accelerator = Accelerator(Registers(NO_ADD, pool_max_width=POOL_WIDTH))
    assert accelerator.config == NO_ADD
    a = np.zeros((1, 2, 2, 2), np.int8)
    with pytest.raises(AcceleratorError, match="res: this device was built without the "
                                               "residual add"):
        accelerator.add(a, 0.1, 0, a, 0.1, 0, 0.1, 0, name="res")

    add = g.Add("res", ("a", "b"), "y", a_scale=0.1, b_scale=0.1, y_scale=0.1)
    graph = g.Graph(layers=[add], inputs=[g.TensorInfo("a", ["N", 2, 4, 4], "tensor(int8)"),
                                          g.TensorInfo("b", ["N", 2, 4, 4], "tensor(int8)")],
                    outputs=[g.TensorInfo("y", None)])
    with_add = PCIeProvider(transport=Registers(SMALL, pool_max_width=POOL_WIDTH))
    assert with_add.supports(add) is None
    without = PCIeProvider(transport=Registers(NO_ADD, pool_max_width=POOL_WIDTH))
    [(_, provider, reason)] = Planner().place(graph, [without, CPUProvider()])
    assert provider.name == "cpu"
    assert reason.startswith("pcie declined: this device was built without the residual add "
                             "(its CONFIG register's no_add bit is set)"), reason


# --- the iCE40 wide product -----------------------------------------------------------------

class _Ice40:
    """Stands in for an iCE40 platform: the generators read only its ``family``."""
    family = "iCE40"


@pytest.mark.parametrize("value_bits", [32, 9])
def test_the_ice40_wide_product_is_exact_with_its_latency_under_stalls(value_bits, rng,
                                                                        seed):
    """Four unsigned 16 x 16 products and the sign's correction give ``value *
    multiplier`` exactly, PRODUCT_LATENCY enabled cycles later."""
    from amaranth import Module, Signal, signed

    from hw.wide_multiply import PRODUCT_LATENCY, pipelined_product

    m = Module()
    value, multiplier, en = Signal(signed(value_bits)), Signal(31), Signal()
    product = pipelined_product(m, value, multiplier, en=en, name="w", platform=_Ice40())
    low, high = -(1 << value_bits - 1), (1 << value_bits - 1) - 1
    values = [low, high, -1, 0, 1, *(int(v) for v in rng.integers(low, high + 1, 60))]
    multipliers = [(1 << 31) - 1, 1 << 30, 0, 1, (1 << 31) - 1,
                   *(int(v) for v in rng.integers(0, 1 << 31, 60))]
    got = []

    async def bench(ctx):
        pending = []
        for v, mu in zip(values + [0] * PRODUCT_LATENCY, multipliers + [0] * PRODUCT_LATENCY,
                         strict=True):
            while rng.random() < 0.3:  # a stalled cycle moves nothing
                ctx.set(en, 0)
                await ctx.tick()
            ctx.set(value, v)
            ctx.set(multiplier, mu)
            ctx.set(en, 1)
            await ctx.tick()
            pending.append(ctx.get(product))
        got.extend(pending[PRODUCT_LATENCY - 1:][:len(values)])

    sim = Simulator(m)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    want = [v * mu for v, mu in zip(values, multipliers, strict=True)]
    for index, (g_, w_) in enumerate(zip(got, want, strict=True)):
        assert g_ == w_, (f"seed={seed} value_bits={value_bits}: product {index} "
                          f"{values[index]} * {multipliers[index]}: RTL {g_} != {w_}")
