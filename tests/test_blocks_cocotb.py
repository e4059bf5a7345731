"""The 2x2 max-pool block on Verilator through cocotb (the post-processing bank has its own:
test_postprocess_cocotb.py)."""

import pytest

from twin.blocks import BlockBuild
from twin.runner import run_testbench


@pytest.mark.slow
def test_max_pool_against_golden(seed):
    build = BlockBuild("maxpool", lanes=2, max_width=12)
    print(f"seed={seed} block={build.as_dict()}")
    run_testbench("sim.tb_blocks", build, seed=seed, name=f"pytest-{seed}")


@pytest.mark.slow
def test_waves_are_written_as_fst(seed):
    build = BlockBuild("maxpool", lanes=2, max_width=12)
    _, waves = run_testbench("sim.tb_blocks", build, seed=seed, waves=True,
                             name=f"pytest-waves-{seed}")
    assert waves.exists() and waves.stat().st_size > 1000, f"no waveform at {waves}"
    assert waves.read_bytes()[:1] == b"\x00"  # FST's header block, not VCD text
