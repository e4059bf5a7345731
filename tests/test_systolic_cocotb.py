"""cocotb testbenches of the systolic GEMM array on Verilator, run from pytest."""

import pytest

from contract.config import ArrayConfig
from twin.runner import run_testbench

CONFIGS = [
    ArrayConfig(rows=8, cols=8),   # the configuration the bitstream targets
    ArrayConfig(rows=3, cols=5),   # non-square, not a power of two
    ArrayConfig(rows=1, cols=1),   # degenerate edge
    ArrayConfig(rows=4, cols=2),   # more rows than columns
    ArrayConfig(rows=4, cols=3, pump=2),  # double-pumped: two clocks (hw/double_pumped.py)
]


@pytest.mark.slow
@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: c.name)
def test_systolic_array_against_golden(config, seed):
    print(f"seed={seed} config={config.as_dict()}")
    # Under pytest, the cocotb runner raises when any cocotb test fails.
    run_testbench("sim.tb_systolic", config, seed=seed, name=f"pytest-{seed}")
