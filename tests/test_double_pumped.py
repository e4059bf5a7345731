"""The double-pumped array (hw.double_pumped) in Amaranth's simulator, with its two clocks:
the same results as the golden GEMM, under stalls on both streams, at clock ratios with and
without a phase relation, and at one beat per engine cycle once it runs."""

import numpy as np
import pytest
from amaranth import Module, ResetInserter, Signal
from amaranth.sim import Simulator

from contract.config import ArrayConfig
from hw.double_pumped import ARRAY_DOMAIN, DoublePumpedArray, PumpedCore
from models.gemm import gemm_int8
from sim.streams import run_bounded, stream_get, stream_put
from sw_driver.gemm_tiling import assemble_results, operand_beats, plan_gemm

SYNC_PERIOD = 16e-9


def _payload(a_col, b_row, last):
    """An ``operands`` beat from ``operand_beats``' tuple."""
    return {"a": [int(v) for v in a_col], "b": [int(v) for v in b_row], "last": last}


def _simulate(config, a, b, rng, *, array_period, array_phase=None, stall_operands=0.0,
              stall_results=0.0):
    """The array's result rows for ``a @ b`` (planned as the engine tiles it), and the
    engine cycles from the first operand offered to the last result taken."""
    dut = DoublePumpedArray(config)
    plan = plan_gemm(a.shape, b.shape, config.rows, config.cols)
    beats = list(operand_beats(a, b, config.rows, config.cols))
    # Stall patterns drawn up front, so the two testbenches do not share the generator.
    operand_waits = rng.random(len(beats)) < stall_operands
    result_waits = rng.random(plan.result_beats) < stall_results
    rows, cycles = [], {}

    async def producer(ctx):
        cycles["start"] = ctx.get(counter)
        for beat, wait in zip(beats, operand_waits, strict=True):
            if wait:
                await ctx.tick()
            await stream_put(ctx, dut.operands, _payload(*beat))

    async def consumer(ctx):
        for index, wait in enumerate(result_waits):
            if wait:
                await ctx.tick()
            payload = await stream_get(ctx, dut.results)
            rows.append([int(v) for v in payload.c])
            assert bool(payload.last) == (index % config.rows == config.rows - 1)
        cycles["end"] = ctx.get(counter)

    top = Module()
    top.submodules.dut = dut
    counter = Signal(32)
    top.d.sync += counter.eq(counter + 1)
    sim = Simulator(top)
    sim.add_clock(SYNC_PERIOD)
    sim.add_clock(array_period, domain=ARRAY_DOMAIN, phase=array_phase)
    sim.add_testbench(producer)
    sim.add_testbench(consumer)
    deadline = SYNC_PERIOD * (20 * len(beats) + 50 * plan.result_beats + 500)
    assert run_bounded(sim, deadline), "the array stopped (results missing)"
    return assemble_results(rows, plan), cycles["end"] - cycles["start"]


def _check(got, want, seed):
    assert np.array_equal(got, want), (
        f"seed={seed}: first difference at {np.argwhere(got != want)[0].tolist()}")


@pytest.mark.parametrize("rows,cols", [(2, 3), (4, 4), (8, 2)])
def test_pumped_array_matches_golden_under_stalls(rows, cols, rng, seed):
    config = ArrayConfig(rows=rows, cols=cols)
    m, k, n = (int(v) for v in rng.integers(1, 3 * max(rows, cols), 3))
    a = rng.integers(-128, 128, (m, k), dtype=np.int8)
    b = rng.integers(-128, 128, (k, n), dtype=np.int8)
    got, _ = _simulate(config, a, b, rng, array_period=SYNC_PERIOD / 2,
                       array_phase=SYNC_PERIOD / 4, stall_operands=0.3, stall_results=0.4)
    _check(got, gemm_int8(a, b), seed)


@pytest.mark.parametrize("rows,cols,stall", [(4, 4, 0.8), (2, 6, 0.8), (2, 6, 0.0)])
def test_pumped_array_keeps_room_for_its_results(rows, cols, stall, rng, seed):
    # The core never stalls: a tile's rows leave a fixed time after its end entered, so
    # a tile may end only while the result crossing has room for them. Many short tiles
    # (K = 2) against a slow consumer put far more rows through than the crossing holds;
    # against a fast one, tile ends come as close as the drain allows.
    config = ArrayConfig(rows=rows, cols=cols)
    a = rng.integers(-128, 128, (rows * 10, 2), dtype=np.int8)
    b = rng.integers(-128, 128, (2, cols * 6), dtype=np.int8)
    got, _ = _simulate(config, a, b, rng, array_period=SYNC_PERIOD / 2,
                       array_phase=SYNC_PERIOD / 4, stall_results=stall)
    _check(got, gemm_int8(a, b), seed)


@pytest.mark.parametrize("ratio", [2.0, 2.3, 3.0])
def test_pumped_array_needs_no_phase_relation(ratio, rng, seed):
    # The crossings are asynchronous FIFOs: any array clock at least twice as fast gives
    # the same results, in any phase.
    config = ArrayConfig(rows=4, cols=2)
    a = rng.integers(-128, 128, (9, 11), dtype=np.int8)
    b = rng.integers(-128, 128, (11, 5), dtype=np.int8)
    period = SYNC_PERIOD / ratio
    got, _ = _simulate(config, a, b, rng, array_period=period,
                       array_phase=float(rng.random()) * period, stall_results=0.2)
    _check(got, gemm_int8(a, b), seed)


def test_pumped_array_takes_a_beat_every_engine_cycle(rng, seed):
    # Long tiles at the pumping ratio: the operands cross at one beat per engine cycle, so
    # the run takes the beats plus a bounded latency (the crossings and the drain), not
    # twice the beats.
    config = ArrayConfig(rows=4, cols=4)
    a = rng.integers(-128, 128, (8, 64), dtype=np.int8)
    b = rng.integers(-128, 128, (64, 8), dtype=np.int8)
    got, cycles = _simulate(config, a, b, rng, array_period=SYNC_PERIOD / 2,
                            array_phase=SYNC_PERIOD / 4)
    _check(got, gemm_int8(a, b), seed)
    beats = len(list(operand_beats(a, b, 4, 4)))
    assert beats <= cycles <= beats + 40, f"seed={seed}: {cycles} cycles for {beats} beats"


def test_pumped_array_refuses_an_odd_row_count():
    with pytest.raises(ValueError, match="even number of rows, not rows=3"):
        PumpedCore(ArrayConfig(rows=3, cols=2))


def test_a_soft_reset_of_the_engine_empties_the_pumped_array(rng, seed):
    # The engine's soft reset is a ResetInserter on `sync`: it must also empty the
    # crossings and reset the processing elements, which run on the other clock, or the
    # next pass reads what the aborted one left in them.
    config = ArrayConfig(rows=4, cols=2)
    a = rng.integers(-128, 128, (6, 9), dtype=np.int8)
    b = rng.integers(-128, 128, (9, 3), dtype=np.int8)
    plan = plan_gemm(a.shape, b.shape, config.rows, config.cols)
    beats = list(operand_beats(a, b, config.rows, config.cols))
    soft = Signal()
    dut = DoublePumpedArray(config)
    top = Module()
    top.submodules.dut = ResetInserter(soft)(dut)
    rows = []

    async def bench(ctx):
        # An aborted pass: a tile and a half in, then the soft reset before its results
        # are taken.
        for beat in beats[:int(1.5 * len(beats) / plan.tiles)]:
            await stream_put(ctx, dut.operands, _payload(*beat))
        await ctx.tick().repeat(30)
        ctx.set(soft, 1)
        await ctx.tick()
        ctx.set(soft, 0)
        await ctx.tick().repeat(3)
        for beat in beats:
            await stream_put(ctx, dut.operands, _payload(*beat))

    async def consumer(ctx):
        await ctx.tick().until(soft)
        await ctx.tick().repeat(4)
        for _ in range(plan.result_beats):
            rows.append([int(v) for v in (await stream_get(ctx, dut.results)).c])

    sim = Simulator(top)
    sim.add_clock(SYNC_PERIOD)
    sim.add_clock(SYNC_PERIOD / 2, domain=ARRAY_DOMAIN, phase=SYNC_PERIOD / 4)
    sim.add_testbench(bench)
    sim.add_testbench(consumer)
    # The pass twice (aborted, then whole), bounded as _simulate bounds one.
    deadline = 2 * SYNC_PERIOD * (20 * len(beats) + 50 * plan.result_beats + 500)
    assert run_bounded(sim, deadline), f"seed={seed}: the array stopped"
    _check(assemble_results(rows, plan), gemm_int8(a, b), seed)
