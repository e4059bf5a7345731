"""The top's stream components (host loader, output writer) on Verilator through cocotb,
each alone with random stalls on both sides of every stream and a protocol monitor."""

import pytest

from twin.blocks import BlockBuild
from twin.runner import run_testbench


@pytest.mark.slow
@pytest.mark.parametrize("build", [BlockBuild("host_loader", lanes=5),
                                   BlockBuild("host_loader", lanes=1),
                                   BlockBuild("result_writer", lanes=5),
                                   BlockBuild("result_writer", lanes=4)],
                         ids=lambda b: b.name)
def test_component_against_the_host_words(build, seed):
    print(f"seed={seed} block={build.as_dict()}")
    run_testbench("sim.tb_components", build, seed=seed, name=f"pytest-{seed}")
