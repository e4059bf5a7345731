"""Quick check of the array in Amaranth's own simulator (no Verilator needed)."""

import numpy as np
from amaranth.sim import Simulator

from contract.config import ArrayConfig
from hw.systolic import SystolicArray
from models.gemm import gemm_int8
from sim.streams import stream_get, stream_put
from sw_driver.gemm_tiling import assemble_results, operand_beats, plan_gemm


def test_small_array_matches_golden(rng, seed):
    config = ArrayConfig(rows=2, cols=3)
    dut = SystolicArray(config)
    a = rng.integers(-128, 128, (5, 4), dtype=np.int8)
    b = rng.integers(-128, 128, (4, 7), dtype=np.int8)
    plan = plan_gemm(a.shape, b.shape, config.rows, config.cols)
    rows = []

    async def producer(ctx):
        for a_col, b_row, last in operand_beats(a, b, config.rows, config.cols):
            await stream_put(ctx, dut.operands, {
                "a": [int(v) for v in a_col], "b": [int(v) for v in b_row], "last": last})

    async def consumer(ctx):
        for index in range(plan.result_beats):
            payload = await stream_get(ctx, dut.results)
            rows.append([int(v) for v in payload.c])
            assert bool(payload.last) == (index % config.rows == config.rows - 1)

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(producer)
    sim.add_testbench(consumer)
    sim.run()
    got = assemble_results(rows, plan)
    want = gemm_int8(a, b)
    assert np.array_equal(got, want), f"seed={seed}: first difference at " \
        f"{np.argwhere(got != want)[0].tolist()}"
