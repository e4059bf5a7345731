"""A build without the performance counters (``ConvEngineConfig.perf_counters = False``, the
``icebreaker`` preset): the configuration field, the CONFIG register's ``no_perf`` bit, the
top whose PERF_* registers read 0, and the driver and benches that say the device has no
counters instead of reporting zeros."""

from dataclasses import replace

import numpy as np
import pytest
from amaranth.sim import Simulator

from bench.common import require_counters
from contract.config import ArrayConfig, ConvEngineConfig
from contract.regmap import (
    REGISTERS,
    by_name,
    implemented_registers,
    pack_config,
    resident_registers,
    unpack_features,
)
from hw.top import AcceleratorTop
from sim.streams import csr_read, csr_write
from sw_driver import regs
from sw_driver.accelerator import NO_PERF, Accelerator, AcceleratorError, Counters
from sw_driver.regs import MAP_VERSION, Reg
from sw_driver.transport.base import Transport

SMALL = ConvEngineConfig(array=ArrayConfig(rows=2, cols=2), act_depth=64, weight_depth=16,
                         max_col_tiles=2)
NO_PERF_CONFIG = replace(SMALL, perf_counters=False)
PERF_NAMES = {reg.name for reg in REGISTERS if reg.name.startswith("PERF_")}


# --- the registers a build without counters implements (the field: test_optional_blocks.py)

def test_a_build_without_counters_implements_every_register_but_theirs():
    # Every register of the core (the resident block's are a block of their own).
    every = {reg.name for reg in REGISTERS} - {reg.name for reg in resident_registers()}
    assert len(PERF_NAMES) == 6
    without = {reg.name for reg in implemented_registers(perf_counters=False, depthwise=True)}
    assert every - without == PERF_NAMES
    neither = {reg.name for reg in implemented_registers(residual_add=False,
                                                         perf_counters=False, depthwise=True)}
    assert every - neither == PERF_NAMES | {n for n in every if n.startswith("ADD_")}


# --- the accelerator top ---------------------------------------------------------------------

@pytest.mark.parametrize("perf_counters", [True, False])
def test_the_top_without_counters_says_so_and_reads_zero(perf_counters):
    """The top, simulated for a few hundred cycles: with counters PERF_CYCLES counts them,
    without it (and every PERF_* word) reads 0 and CONFIG has ``no_perf``."""
    dut = AcceleratorTop(replace(SMALL, perf_counters=perf_counters))
    registers = by_name()
    seen = {}

    async def bench(ctx):
        await ctx.tick().repeat(200)
        seen["CONFIG"] = await csr_read(ctx, dut.csr, registers["CONFIG"].offset)
        for name in sorted(PERF_NAMES):
            await csr_write(ctx, dut.csr, registers[name].offset, 0xFFFFFFFF)  # read-only
            seen[name] = await csr_read(ctx, dut.csr, registers[name].offset)

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    assert unpack_features(seen["CONFIG"])["perf_counters"] is perf_counters
    if perf_counters:
        assert seen["PERF_CYCLES"] > 200, seen
    else:
        assert {name: seen[name] for name in PERF_NAMES} == dict.fromkeys(PERF_NAMES, 0)


# --- the driver and the benches ---------------------------------------------------------------

class PoolDevice(Transport):
    """A device of ``config`` whose passes finish at once with zero results; it records
    every register read."""

    def __init__(self, config):
        self.values = {Reg.ID: 0x54455353, Reg.VERSION: MAP_VERSION,
                       Reg.CONFIG: pack_config(rows=config.rows, cols=config.cols,
                                               acc_width=config.acc_width,
                                               residual_add=config.residual_add,
                                               perf_counters=config.perf_counters),
                       Reg.ACT_DEPTH: config.act_depth, Reg.WEIGHT_DEPTH: config.weight_depth,
                       Reg.PARAM_DEPTH: config.max_col_tiles, Reg.POOL_MAX_WIDTH: 128,
                       Reg.STATUS: regs.STATUS_DONE_MASK}
        self.reads = []

    def csr_read(self, offset):
        self.reads.append(Reg(offset).name)
        return self.values.get(offset, 0)

    def csr_write(self, offset, value):
        pass

    def dma_write(self, data):
        pass

    def dma_read(self, nbytes, *, deadline=None):
        return bytes(nbytes)

    def abort_dma(self):
        pass


def test_the_driver_reads_no_counters_from_a_device_without_them():
    device = PoolDevice(NO_PERF_CONFIG)
    accelerator = Accelerator(device)
    assert accelerator.config == NO_PERF_CONFIG and not accelerator.has_counters
    y = accelerator.max_pool2d(np.zeros((1, 2, 4, 4), np.int8))
    assert y.shape == (1, 2, 2, 2)
    assert not PERF_NAMES & set(device.reads), device.reads
    assert accelerator.last_cycles is None
    for read in (lambda: accelerator.last_counters, accelerator.counters):
        with pytest.raises(AcceleratorError, match="no performance counters to read: this "
                                                   "device was built without performance "
                                                   "counters .*no_perf bit is set"):
            read()
    assert "which is not a measurement" in NO_PERF


def test_the_driver_reads_the_counters_of_a_device_with_them():
    device = PoolDevice(SMALL)
    accelerator = Accelerator(device)
    accelerator.max_pool2d(np.zeros((1, 2, 4, 4), np.int8))
    assert PERF_NAMES <= set(device.reads)
    assert accelerator.last_counters == Counters() and accelerator.last_cycles == 0


def test_a_bench_refuses_a_configuration_without_counters():
    assert require_counters(SMALL, "bench_x") is SMALL
    with pytest.raises(ValueError, match=r"^bench_x reads the device's performance counters, "
                                         r"but configuration .*-noperf has perf_counters = "
                                         r"false"):
        require_counters(NO_PERF_CONFIG, "bench_x")
