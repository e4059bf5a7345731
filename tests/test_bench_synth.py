"""bench/bench_synth.py's statistics reader and JSON writer, on a made-up Yosys ``stat
-json`` document (the synthesis itself is a benchmark: minutes, not a test)."""

import json

import pytest

from bench import bench_synth, common
from tessera import results


def fake_stat():
    """Modules as Amaranth names them, with the counts a small top might have."""
    def module(**cells):
        return {"num_cells_by_type": cells}

    return {"modules": {
        "\\accelerator_top": module(LUT4=100, TRELLIS_FF=50),
        "\\accelerator_top.csr": module(LUT4=10, TRELLIS_FF=20),
        "\\accelerator_top.engine": module(LUT4=30),
        "\\accelerator_top.engine.array": module(MULT18X18D=16, LUT4=200, TRELLIS_FF=300),
        "\\accelerator_top.engine.array.pe0": module(LUT4=5),
        "\\accelerator_top.engine.postprocess": module(MULT18X18D=4, LUT4=40),
        "\\accelerator_top.engine.postprocess.r0": module(MULT18X18D=8, LUT4=60),
        "\\accelerator_top.engine.act_buffer0": module(DP16KD=2),
        "\\accelerator_top.pool": module(LUT4=7, DP16KD=1),
        # Not below "engine.array" although its name starts the same way.
        "\\accelerator_top.engine.array_shadow": module(MULT18X18D=1),
    }}


def test_blocks_sum_their_subtree():
    blocks = bench_synth.block_cells(bench_synth.module_cells(fake_stat()))
    assert blocks["array"] == {"MULT18X18D": 16, "LUT4": 205, "TRELLIS_FF": 300, "DP16KD": 0}
    assert blocks["postprocess"]["MULT18X18D"] == 12
    assert blocks["conv_engine"]["MULT18X18D"] == 29
    assert blocks["conv_engine"]["DP16KD"] == 2
    assert blocks["total"] == {"MULT18X18D": 29, "LUT4": 452, "TRELLIS_FF": 370,
                               "DP16KD": 3}
    # (29 - 16) multipliers outside the array over its 16.
    assert bench_synth.dsp_fraction(blocks) == pytest.approx(13 / 16)


def test_json_names_every_block_and_the_fraction(tmp_path, monkeypatch):
    monkeypatch.setattr(results, "RESULTS", tmp_path)
    monkeypatch.setattr(results, "WRITTEN", [])
    blocks = bench_synth.block_cells(bench_synth.module_cells(fake_stat()))
    path = common.write_results("synth", bench_synth.synth_metrics(blocks), blocks=blocks)
    document = json.loads(path.read_text())
    values = {entry["name"]: entry["value"] for entry in document["metrics"]}
    assert values["postprocess_dsp_fraction"] == round(13 / 16, 4)
    fraction = next(e for e in document["metrics"] if e["name"] == "postprocess_dsp_fraction")
    assert fraction["target"] == 0.25 and "misses the target" in fraction["note"]
    assert values["total MULT18X18D"] == 29
    for block in ("array", "postprocess", "maxpool", "conv_engine"):
        for cell in ("MULT18X18D", "LUT4", "TRELLIS_FF", "DP16KD"):
            assert values[f"{block} {cell}"] == blocks[block][cell]
    assert document["blocks"]["postprocess"]["MULT18X18D"] == 12


def test_a_missing_block_is_named():
    stat = fake_stat()
    del stat["modules"]["\\accelerator_top.pool"]
    with pytest.raises(ValueError, match="no module 'accelerator_top.pool' for block "
                                         "'maxpool'"):
        bench_synth.block_cells(bench_synth.module_cells(stat))
