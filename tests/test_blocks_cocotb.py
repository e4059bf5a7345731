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


@pytest.mark.slow
def test_waves_are_written_as_fst(seed):
    build = BlockBuild("maxpool", lanes=2, max_width=12)
    _, waves = run_testbench("sim.tb_blocks", build, seed=seed, waves=True,
                             name=f"pytest-waves-{seed}")
    assert waves.exists() and waves.stat().st_size > 1000, f"no waveform at {waves}"
    assert waves.read_bytes()[:1] == b"\x00"  # FST's header block, not VCD text
