"""cocotb test behind bench/bench_twin.py: the twin's own netlist (``twin.netlist``)
running the bench layer with Python on every cycle, driven as the twin's C++ harness
drives it (``twin/harness/harness.cpp``) and as ``Accelerator.conv2d`` programs it.

Per pass of the layer: the performance counters read, the pass program's CSR writes, its
host-to-device words offered while every device-to-host beat is taken (``c2h.ready`` held
high, as the harness holds it), the status read, the counters read again. So cocotb and the
twin simulate the same Verilog doing the same work; the report gives the simulated cycles
(the PERF_CYCLES differences, summed over the passes, as ``Accelerator.last_counters``
sums them) and the wall-clock and CPU time around the layer.
"""

import json
import os
import time

import cocotb
import numpy as np
from cocotb.clock import Clock
from cocotb.triggers import Event, ReadOnly, RisingEdge, SimTimeoutError, with_timeout

from bench.conv_cases import bench_layer, golden
from contract.config import ConvEngineConfig
from sim.cocotb_util import first_difference, send_stream, testbench_seed
from sw_driver import regs
from sw_driver.accelerator import pass_program
from sw_driver.conv_lowering import assemble_output, lower_conv2d
from sw_driver.regs import Reg

CLOCK_NS = 10
class TwinPorts:
    """The twin netlist's ports under the names the shared cocotb helpers use (``clk``,
    ``rst``); every other name is the netlist's own."""

    def __init__(self, dut):
        self._dut, self.clk, self.rst = dut, dut.clock, dut.reset

    def __getattr__(self, name):
        return getattr(self._dut, name)


class HarnessTransport:
    """The twin harness's calls as coroutines: a CSR access takes two cycles (the twin's
    input register, then the core), every device-to-host beat is taken as it shows."""

    def __init__(self, ports):
        self.ports, self.received = ports, []
        self._wanted, self._enough = 0, Event()
        ports.c2h__ready.value = 1
        cocotb.start_soon(self._take_results())

    async def _take_results(self):
        ports = self.ports
        while True:
            await ReadOnly()
            if ports.c2h__valid.value:
                self.received.append(ports.c2h__payload.value.to_unsigned() & 0xFFFFFFFF)
                if len(self.received) >= self._wanted:
                    self._enough.set()
            await RisingEdge(ports.clk)

    async def csr_write(self, offset, value):
        ports = self.ports
        ports.csr__addr.value, ports.csr__w_data.value, ports.csr__w_en.value = offset, value, 1
        await RisingEdge(ports.clk)
        ports.csr__w_en.value = 0
        await RisingEdge(ports.clk)

    async def csr_read(self, offset):
        ports = self.ports
        ports.csr__addr.value, ports.csr__r_en.value = offset, 1
        await RisingEdge(ports.clk)
        ports.csr__r_en.value = 0
        await RisingEdge(ports.clk)
        await ReadOnly()
        value = ports.csr__r_data.value.to_unsigned()
        await RisingEdge(ports.clk)
        return value

    async def dma_write(self, data):
        words = np.frombuffer(data, dtype="<u4")
        last = len(words) - 1
        await send_stream(self.ports, "h2c", [int(word) | (int(index == last) << 32)
                                              for index, word in enumerate(words)])

    async def dma_read(self, nbytes, budget):
        count = nbytes // 4
        self._wanted = count
        self._enough.clear()
        if len(self.received) < count:
            try:
                await with_timeout(self._enough.wait(), budget * CLOCK_NS, "ns")
            except SimTimeoutError:
                raise AssertionError(f"seed={testbench_seed()}: {len(self.received)} of "
                                     f"{count} result words after {budget} cycles") from None
        words, self.received = self.received[:count], self.received[count:]
        await RisingEdge(self.ports.clk)  # out of the read-only phase
        return np.array(words, dtype="<u4").tobytes()


async def run_pass(transport, program, budget):
    """One pass as ``Accelerator.run_program`` runs it; returns (beats, cycles)."""
    before = await transport.csr_read(Reg.PERF_CYCLES)
    for offset, value in program.csr_writes:
        await transport.csr_write(offset, value)
    sender = cocotb.start_soon(transport.dma_write(program.h2c))
    raw = await transport.dma_read(program.c2h_bytes, budget)
    await sender
    status = await transport.csr_read(Reg.STATUS)
    assert status & regs.STATUS_DONE_MASK and not status & regs.STATUS_ERROR_MASK, (
        f"seed={testbench_seed()} pass {program.name}: status {status:#x} after the results")
    after = await transport.csr_read(Reg.PERF_CYCLES)
    return program.decode(raw), (after - before) % 2**32


@cocotb.test()
async def bench_twin_netlist_layer(dut):
    config = ConvEngineConfig.from_env(os.environ)
    seed = testbench_seed()
    layer = bench_layer(seed)
    ports = TwinPorts(dut)
    cocotb.start_soon(Clock(ports.clk, CLOCK_NS, unit="ns").start())
    for name in ("h2c__valid", "c2h__ready", "csr__w_en", "csr__r_en", "dbg_force_error",
                 "flush"):
        getattr(ports, name).value = 0
    ports.rst.value = 1
    for _ in range(3):
        await RisingEdge(ports.clk)
    ports.rst.value = 0
    await RisingEdge(ports.clk)  # the netlist registers its reset
    transport = HarnessTransport(ports)
    assert await transport.csr_read(Reg.ID) == regs.ID_VALUE
    passes = lower_conv2d(layer["x"], layer["w"], layer["bias"], layer["multiplier"],
                          layer["shift"], x_zero_point=layer["zx"], y_zero_point=layer["zy"],
                          lo=layer["lo"], hi=layer["hi"], stride=layer["stride"],
                          padding=layer["padding"], config=config, name="bench")
    started, cpu_started = time.perf_counter(), time.process_time()
    beats, cycles = [], 0
    for engine_pass in passes:
        got, pass_cycles = await run_pass(transport, pass_program(engine_pass, config),
                                          budget=10_000_000)
        beats.append(got)
        cycles += pass_cycles
    seconds, cpu_seconds = time.perf_counter() - started, time.process_time() - cpu_started
    got = assemble_output(passes, beats, layer["w"].shape[0])
    want = golden(layer)
    assert np.array_equal(got, want), f"seed={seed}: {first_difference(got, want)}"
    with open(os.environ["TESSERA_REPORT"], "w") as f:
        json.dump({"cycles": cycles, "seconds": seconds, "cpu_seconds": cpu_seconds,
                   "passes": len(passes)}, f)
