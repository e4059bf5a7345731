"""The post-processing bank (hw/postprocess.py) on Verilator through cocotb: passes
alternating requantization and residual add under random idle input and random
backpressure, a protocol monitor on every stream, every beat against the golden models."""

import pytest

from twin.blocks import BlockBuild
from twin.runner import run_testbench


@pytest.mark.slow
@pytest.mark.parametrize("lanes", [8, 3, 16])
def test_bank_against_golden_under_backpressure(lanes, seed):
    build = BlockBuild("postprocess", lanes=lanes)
    print(f"seed={seed} block={build.as_dict()}")
    run_testbench("sim.tb_postprocess", build, seed=seed, name=f"pytest-{seed}")
