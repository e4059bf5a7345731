"""Post-processing blocks on Verilator through cocotb (residual add, 2x2 max pool)."""

import pytest

from sim.blocks import BlockBuild
from sim.runner import run_testbench


@pytest.mark.slow
@pytest.mark.parametrize("build", [BlockBuild("residual_add", lanes=3),
                                   BlockBuild("maxpool", lanes=2, max_width=12)],
                         ids=lambda b: b.name)
def test_block_against_golden(build, seed):
    print(f"seed={seed} block={build.as_dict()}")
    run_testbench("sim.tb_blocks", build, seed=seed, name=f"pytest-{seed}")
