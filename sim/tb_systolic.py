"""cocotb testbench: the systolic GEMM array against the golden model.

Driver (operand beats, optional idle cycles) + monitor (result beats, optional stalls) +
golden model (``models.gemm``) + in-order scoreboard. Configuration arrives through the
environment (``TESSERA_ROWS``, ``TESSERA_COLS``, ``TESSERA_ACC_WIDTH``, ``TESSERA_PUMP``,
``TESSERA_SEED``) because the Verilog has no HDL parameters: one netlist per configuration.
A double-pumped array (``TESSERA_PUMP`` 2) runs its processing elements on a second clock,
``array_clk``, at twice the design clock (``sim.cocotb_util.clock_and_reset``).
"""

import json
import os

import cocotb
import numpy as np
from cocotb.triggers import with_timeout

from contract.config import ArrayConfig
from models.gemm import gemm_int8
from sim.cocotb_util import clock_and_reset, first_difference, receive_stream, send_stream
from sim.packing import OperandPacker, ResultUnpacker
from sw_driver.gemm_tiling import assemble_results, operand_beats, plan_gemm


def _config():
    return ArrayConfig(rows=int(os.environ["TESSERA_ROWS"]),
                       cols=int(os.environ["TESSERA_COLS"]),
                       acc_width=int(os.environ.get("TESSERA_ACC_WIDTH", "32")),
                       pump=int(os.environ.get("TESSERA_PUMP", "1")))


def _seed():
    return int(os.environ.get("TESSERA_SEED", "1"))


class OperandDriver:
    """Drives ``operands``: one beat per accepted handshake, idle cycles at random."""

    def __init__(self, dut, config, rng, idle=0.0):
        self.dut, self.rng, self.idle = dut, rng, idle
        self.packer = OperandPacker(config.rows, config.cols)
        self.accept_cycles = []  # cycle number of every accepted beat

    async def send(self, a, b, cycle_counter):
        words = [self.packer.pack(a_col, b_row, last) for a_col, b_row, last
                 in operand_beats(a, b, self.packer.rows, self.packer.cols)]
        await send_stream(self.dut, "operands", words, rng=self.rng, idle=self.idle,
                          accepted=lambda _: self.accept_cycles.append(cycle_counter.value))


class ResultMonitor:
    """Accepts ``results`` beats, holding ``ready`` low at random to apply backpressure."""

    def __init__(self, dut, config, rng, stall=0.0):
        self.dut, self.rng, self.stall = dut, rng, stall
        self.unpacker = ResultUnpacker(config.cols, config.acc_width)
        self.rows, self.last_flags, self.cycles = [], [], []

    async def receive(self, count, cycle_counter):
        def record(word):
            values, last = self.unpacker.unpack(word)
            self.rows.append(values)
            self.last_flags.append(last)
            self.cycles.append(cycle_counter.value)

        await receive_stream(self.dut, "results", count, rng=self.rng, stall=self.stall,
                             received=record)


async def start(dut):
    """Clock, reset, idle interfaces; returns a running cycle counter."""
    return await clock_and_reset(dut, ("operands__valid", "results__ready"))


def check_gemm(a, b, monitor, config, label):
    """Scoreboard: compare the assembled result with the golden GEMM."""
    plan = plan_gemm(a.shape, b.shape, config.rows, config.cols)
    context = (f"seed={_seed()} config={config.as_dict()} case={label} "
               f"M={plan.m} K={plan.k} N={plan.n}")
    expected_last = [(i % config.rows) == config.rows - 1 for i in range(plan.result_beats)]
    assert monitor.last_flags == expected_last, f"{context}: wrong `last` flags on results"
    got = assemble_results(monitor.rows, plan)
    want = gemm_int8(a, b)
    assert np.array_equal(got, want), f"{context}: {first_difference(got, want)}"


async def run_gemm(dut, config, a, b, rng, *, idle=0.0, stall=0.0, label=""):
    counter = await start(dut)
    driver = OperandDriver(dut, config, rng, idle)
    monitor = ResultMonitor(dut, config, rng, stall)
    plan = plan_gemm(a.shape, b.shape, config.rows, config.cols)
    receiving = cocotb.start_soon(monitor.receive(plan.result_beats, counter))
    # A hang is a failure with a message, never a test that runs forever: allow 10x the
    # cycles the array needs even under the heaviest idle/stall pattern tested.
    slowdown = 1.0 / ((1.0 - idle) * (1.0 - stall))
    budget = int(10 * slowdown * (plan.beats + plan.tiles * 2 * (config.rows + config.cols)
                                  + 100))
    try:
        await with_timeout(cocotb.start_soon(driver.send(a, b, counter)), budget * 10, "ns")
        await with_timeout(receiving, budget * 10, "ns")
    except TimeoutError as error:
        raise AssertionError(
            f"seed={_seed()} config={config.as_dict()} case={label}: no progress after "
            f"{budget} cycles ({len(driver.accept_cycles)}/{plan.beats} beats accepted, "
            f"{len(monitor.rows)}/{plan.result_beats} result rows received)") from error
    check_gemm(a, b, monitor, config, label)
    return driver, monitor


def random_problems(rng, config, count):
    """Random shapes around the array size: K=1 first, M and N rarely multiples of R, C."""
    problems = []
    for index in range(count):
        m = int(rng.integers(1, 2 * config.rows + 2))
        n = int(rng.integers(1, 2 * config.cols + 2))
        k = 1 if index == 0 else int(rng.integers(1, 3 * max(config.rows, config.cols) + 1))
        a = rng.integers(-128, 128, (m, k), dtype=np.int8)
        b = rng.integers(-128, 128, (k, n), dtype=np.int8)
        problems.append((f"random{index}", a, b))
    return problems


@cocotb.test()
@cocotb.parametrize(
    traffic=[("smooth", 0.0, 0.0), ("stalls", 0.0, 0.4), ("idle+stalls", 0.3, 0.3)])
async def test_random_gemms(dut, traffic):
    """Random seeded shapes; the result stream is stalled at random."""
    name, idle, stall = traffic
    config = _config()
    rng = np.random.default_rng([_seed(), len(name)])
    dut._log.info("seed=%d traffic=%s config=%s", _seed(), name, config.as_dict())
    for label, a, b in random_problems(rng, config, int(os.environ.get("TESSERA_CASES", "12"))):
        await run_gemm(dut, config, a, b, rng, idle=idle, stall=stall, label=f"{name}/{label}")


@cocotb.test()
async def test_extreme_values(dut):
    """-128 * -128 summed over a long K, all zeros, and alternating extremes."""
    config = _config()
    rng = np.random.default_rng(_seed())
    m, n = config.rows + 1, config.cols + 1
    k_long = 600
    cases = [
        ("all -128, long K", np.full((m, k_long), -128, np.int8),
         np.full((k_long, n), -128, np.int8)),
        ("all zero", np.zeros((m, 5), np.int8), np.zeros((5, n), np.int8)),
        ("-128 x 127", np.full((m, 40), -128, np.int8), np.full((40, n), 127, np.int8)),
        ("random extremes", rng.choice(np.array([-128, 127], np.int8), (m, 33)),
         rng.choice(np.array([-128, -1, 0, 127], np.int8), (33, n))),
    ]
    for label, a, b in cases:
        await run_gemm(dut, config, a, b, rng, stall=0.25, label=label)


@cocotb.test()
async def test_steady_state_throughput(dut):
    """With K >= max(R, C) and a ready sink, the array accepts a beat (R*C MACs) on
    every cycle: the operand handshake never stalls from the first beat to the last."""
    config = _config()
    rng = np.random.default_rng(_seed())
    k = 4 * max(config.rows, config.cols)
    m, n = 2 * config.rows, 3 * config.cols
    a = rng.integers(-128, 128, (m, k), dtype=np.int8)
    b = rng.integers(-128, 128, (k, n), dtype=np.int8)
    driver, monitor = await run_gemm(dut, config, a, b, rng, label="throughput")
    plan = plan_gemm(a.shape, b.shape, config.rows, config.cols)
    span = driver.accept_cycles[-1] - driver.accept_cycles[0] + 1
    macs = plan.beats * config.rows * config.cols
    report = {
        "config": config.as_dict(), "beats": plan.beats, "input_cycles": span,
        "macs_per_cycle": macs / span, "peak_macs_per_cycle": config.rows * config.cols,
        "latency_cycles": monitor.cycles[-1] - driver.accept_cycles[-1],
        "total_cycles": monitor.cycles[-1] - driver.accept_cycles[0] + 1,
    }
    dut._log.info("throughput: %s", report)
    if "TESSERA_REPORT" in os.environ:
        with open(os.environ["TESSERA_REPORT"], "w") as f:
            json.dump(report, f, indent=2)
    assert span == plan.beats, (
        f"seed={_seed()} config={config.as_dict()}: {plan.beats} beats took {span} cycles; "
        f"steady state must accept one beat per cycle")
