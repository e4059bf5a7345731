"""cocotb test behind `make demo`: one random GEMM on the array, checked and timed."""

import json
import os

import cocotb
import numpy as np

from sim.tb_systolic import _config, _seed, run_gemm
from sw_driver.gemm_tiling import plan_gemm


@cocotb.test()
async def demo_gemm(dut):
    config = _config()
    m, k, n = (int(v) for v in os.environ["TESSERA_DEMO_SHAPE"].split(","))
    rng = np.random.default_rng(_seed())
    a = rng.integers(-128, 128, (m, k), dtype=np.int8)
    b = rng.integers(-128, 128, (k, n), dtype=np.int8)
    # run_gemm raises with the first differing element if the RTL disagrees.
    driver, monitor = await run_gemm(dut, config, a, b, rng, label="demo")
    plan = plan_gemm(a.shape, b.shape, config.rows, config.cols)
    first = driver.accept_cycles[0]
    report = {
        "config": config.as_dict(), "seed": _seed(), "m": m, "k": k, "n": n,
        "tiles": plan.tiles, "beats": plan.beats, "macs": m * k * n,
        "padded_macs": plan.beats * config.rows * config.cols,
        "cycles": monitor.cycles[-1] - first + 1,
        "input_cycles": driver.accept_cycles[-1] - first + 1,
        "bit_exact": True,
    }
    with open(os.environ["TESSERA_REPORT"], "w") as f:
        json.dump(report, f, indent=2)
