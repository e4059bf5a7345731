"""The accelerator top driven by the driver's layer programs through cocotb on Verilator."""

import pytest

from contract.config import ArrayConfig, ConvEngineConfig
from twin.runner import run_testbench
from twin.system import TopBuild

BUILD = TopBuild(ConvEngineConfig(array=ArrayConfig(rows=4, cols=4), act_depth=2048,
                                  weight_depth=512, max_col_tiles=8))


@pytest.mark.slow
def test_layer_programs_through_cocotb(seed):
    print(f"seed={seed} config={BUILD.name}")
    run_testbench("sim.tb_system", BUILD, seed=seed, name=f"pytest-{seed}")
