"""Cycle counts of the systolic array in RTL simulation (Verilator), against the ideal.

For GEMMs of several shapes on the 8x8 array: cycles from the first operand beat to the
last result beat, against the ideal ``padded MACs / (R*C)``; and the steady-state rate.
"""

import json
import os
import tempfile

from bench.common import metric, write_results
from contract.config import ArrayConfig
from twin.runner import run_testbench

SHAPES = [(64, 256, 64), (16, 64, 16), (8, 8, 8), (64, 4, 64)]


def run_shape(config, shape, seed=1):
    with tempfile.TemporaryDirectory() as tmp:
        report_path = os.path.join(tmp, "report.json")
        run_testbench("sim.tb_demo", config, seed=seed, name="bench-" + "x".join(map(str, shape)),
                      extra_env={"TESSERA_DEMO_SHAPE": ",".join(map(str, shape)),
                                 "TESSERA_REPORT": report_path})
        with open(report_path) as f:
            return json.load(f)


def main():
    config = ArrayConfig(rows=8, cols=8)
    metrics = []
    for shape in SHAPES:
        report = run_shape(config, shape)
        ideal = report["padded_macs"] / (config.rows * config.cols)
        label = "x".join(map(str, shape))
        metrics.append(metric(f"gemm_{label}_cycles", report["cycles"], "cycles",
                              peer="ideal padded_macs/(R*C)", peer_value=ideal))
        metrics.append(metric(f"gemm_{label}_utilization", round(ideal / report["cycles"], 4),
                              "fraction of R*C MACs per cycle"))
    return write_results("array", metrics, config=config.as_dict())


if __name__ == "__main__":
    main()
