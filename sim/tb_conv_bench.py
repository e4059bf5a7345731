"""cocotb test behind bench/bench_twin.py: one given convolution layer driven cycle by cycle
from Python, checked against the golden model, with its wall-clock time reported."""

import json
import os
import time

import cocotb
import numpy as np

from sim.cocotb_util import testbench_seed
from sim.tb_conv import _config, make_layer, run_layer, start

# Shared with bench/bench_twin.py so both sides simulate the identical layer.
BENCH_LAYER = {"kernel": 3, "stride": 1, "c_in": 32, "c_out": 32, "size": (16, 16)}


def bench_layer(seed):
    layer = make_layer(np.random.default_rng(seed), **BENCH_LAYER)
    layer["padding"] = (BENCH_LAYER["kernel"] // 2,) * 4
    return layer


@cocotb.test()
async def bench_conv_layer(dut):
    config = _config()
    seed = testbench_seed()
    counter = await start(dut)
    started, cpu_started = time.perf_counter(), time.process_time()
    first = counter.value
    # run_layer raises with the first differing element if the RTL disagrees.
    await run_layer(dut, config, bench_layer(seed), np.random.default_rng(seed), counter,
                    label="bench")
    # Wall-clock and CPU time (this process: Verilator and the Python testbench): on a
    # shared machine the second is less disturbed by other jobs.
    report = {"cycles": counter.value - first, "seconds": time.perf_counter() - started,
              "cpu_seconds": time.process_time() - cpu_started}
    with open(os.environ["TESSERA_REPORT"], "w") as f:
        json.dump(report, f)
