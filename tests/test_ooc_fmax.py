"""bench/ooc_fmax.py's block names: each listed block is built, and the names of the retired
standalone post-processing blocks get an error naming the bank and the blocks."""

import pytest

from bench.ooc_fmax import BLOCKS, RETIRED, make_block
from twin.blocks import BlockBuild


@pytest.mark.parametrize("name", BLOCKS)
def test_every_listed_block_is_built(name):
    block = make_block(name, 2, 3)
    block._MustUse__silence = True  # constructed only; the fmax run elaborates it
    assert block.signature.members, f"{name}: a block without ports"


@pytest.mark.parametrize("name", sorted(RETIRED))
def test_retired_blocks_name_the_bank(name):
    with pytest.raises(SystemExit, match=rf"block '{name}' .* was retired; .* block "
                                         r"'postprocess'\. Blocks: addrgen, maxpool, "):
        make_block(name, 8, 8)


def test_unknown_block_lists_the_blocks():
    with pytest.raises(SystemExit, match=r"unknown block 'requantizer'; blocks: addrgen, "):
        make_block("requantizer", 8, 8)


def test_cocotb_block_builds_name_the_blocks():
    with pytest.raises(ValueError, match=r"block must be one of \('postprocess', 'maxpool', "
                                         r"'host_loader', 'result_writer'\), not "
                                         r"'residual_add'"):
        BlockBuild("residual_add")
