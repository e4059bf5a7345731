"""Speed of the Verilator twin against cocotb driving the same layer cycle by cycle.

The layer: a 3x3 convolution, 32 -> 32 channels at 16x16 (the issue's reference layer), on
an 8x8 array. The twin runs the whole accelerator top through the driver
(``Accelerator.conv2d`` over ``SimTransport``); cocotb runs the convolution engine with
Python on every cycle (``sim/tb_conv_bench.py``). Both are checked against the golden
model. Also the twin's host overhead: the share of the layer's wall time that is not
simulating cycles. Medians of repeats, OPENBLAS_NUM_THREADS=1.
"""

import json
import os
import statistics
import tempfile
import time

import numpy as np

from bench.common import metric, write_results
from contract.config import ArrayConfig, ConvEngineConfig
from models.conv import conv2d
from models.requant import requantize
from sim.runner import run_testbench
from sim.tb_conv_bench import BENCH_LAYER, bench_layer
from sw_driver.accelerator import Accelerator
from sw_driver.transport.sim import SimTransport

CONFIG = ConvEngineConfig(array=ArrayConfig(rows=8, cols=8), act_depth=8192,
                          weight_depth=2048, max_col_tiles=16)
REPEATS = 3
SEED = 1


def golden(layer):
    acc = conv2d(layer["x"], layer["w"], layer["bias"], x_zero_point=layer["zx"],
                 stride=layer["stride"], padding=layer["padding"])
    return requantize(acc, layer["multiplier"], layer["shift"], layer["zy"], layer["lo"],
                      layer["hi"])


def twin_layer(layer):
    transport = SimTransport.open(CONFIG)
    accelerator = Accelerator(transport)
    want = golden(layer)
    rates, overheads, seconds = [], [], []
    for _ in range(REPEATS):
        started = time.perf_counter()
        got = accelerator.conv2d(layer["x"], layer["w"], layer["bias"], layer["multiplier"],
                                 layer["shift"], x_zero_point=layer["zx"],
                                 y_zero_point=layer["zy"], lo=layer["lo"], hi=layer["hi"],
                                 stride=layer["stride"], padding=layer["padding"])
        wall = time.perf_counter() - started
        if not np.array_equal(got, want):
            raise AssertionError("twin result differs from the golden model")
        cycles = accelerator.last_counters.cycles
        accelerator.reset()  # clears `done`, so the interrupt does not end the run early
        pure_start = time.perf_counter()
        ran = transport.twin.run(cycles)  # the same cycles with no host work around them
        if ran != cycles:
            raise AssertionError(f"the idle run stopped after {ran} of {cycles} cycles")
        pure = time.perf_counter() - pure_start
        rates.append(cycles / wall)
        overheads.append(max(0.0, 1.0 - pure / wall))
        seconds.append(wall)
    transport.close()
    return {"cycles_per_second": statistics.median(rates),
            "host_overhead": statistics.median(overheads),
            "seconds": statistics.median(seconds), "cycles": cycles,
            "macs": accelerator.last_counters.macs}


def cocotb_layer():
    with tempfile.TemporaryDirectory() as tmp:
        report_path = os.path.join(tmp, "report.json")
        env = {"TESSERA_REPORT": report_path, **CONFIG.env()}
        run_testbench("sim.tb_conv_bench", CONFIG, seed=SEED, name="bench-twin",
                      extra_env=env)
        with open(report_path) as f:
            report = json.load(f)
    return {"cycles_per_second": report["cycles"] / report["seconds"], **report}


def main():
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    layer = bench_layer(SEED)
    twin = twin_layer(layer)
    cocotb = cocotb_layer()
    label = (f"conv {BENCH_LAYER['kernel']}x{BENCH_LAYER['kernel']} {BENCH_LAYER['c_in']}->"
             f"{BENCH_LAYER['c_out']} {BENCH_LAYER['size'][0]}x{BENCH_LAYER['size'][1]}")
    metrics = [
        metric("twin_cycles_per_second", round(twin["cycles_per_second"]), "cycles/s",
               target=1_000_000),
        metric("cocotb_cycles_per_second", round(cocotb["cycles_per_second"]), "cycles/s"),
        metric("twin_speedup_over_cocotb",
               round(twin["cycles_per_second"] / cocotb["cycles_per_second"], 1), "x",
               peer="cocotb driving the same layer cycle by cycle, same run",
               peer_value=round(cocotb["cycles_per_second"]), target=40),
        metric("twin_host_overhead", round(twin["host_overhead"], 4),
               "fraction of the layer's wall time", target=0.10),
        metric("twin_layer_seconds", round(twin["seconds"], 4), "s"),
        metric("twin_layer_cycles", twin["cycles"], "cycles",
               note="whole pass: loading, compute, results"),
        metric("cocotb_layer_cycles", cocotb["cycles"], "cycles"),
        metric("cocotb_layer_seconds", round(cocotb["seconds"], 2), "s"),
    ]
    return write_results("twin", metrics, config=CONFIG.as_dict(), layer=label)


if __name__ == "__main__":
    main()
