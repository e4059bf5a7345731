"""`tessera demo`: the digits CNN on the twin, the CPU and onnxruntime.

The command itself runs here on the 4x4 twin of ``test_providers_sim.py`` (the same cached
build) and 24 images, so it stays well under a minute; `make demo` runs the default 8x8
twin on all 450 images.
"""

import numpy as np
import pytest
from test_providers_sim import CONFIG

from sw_driver.providers import sim as sim_module
from tessera import cli, demo
from tessera.commands import demo as demo_commands


@pytest.mark.slow
def test_demo_command_on_a_small_twin(monkeypatch, capsys):
    monkeypatch.setattr(sim_module, "DEFAULT_CONFIG", CONFIG)
    assert cli.main(["demo", "--samples", "24", "--batch", "10"]) == 0
    out = capsys.readouterr().out
    assert "4x4 accelerator" in out
    assert "identical (every logit, bit for bit)" in out
    for label in ("float, onnxruntime", "int8, Tessera on the 4x4 twin", "int8, Tessera cpu",
                  "int8, onnxruntime"):
        assert label in out, label
    for layer in ("conv1", "conv2", "fc", "pool1"):
        assert layer in out, layer


def test_demo_pieces():
    x = np.zeros((5, 1, 8, 8), np.float32)
    result = demo.DemoResult(labels=np.array([0, 1, 2, 3, 4]))
    result.outputs["twin"] = np.eye(5, 10, dtype=np.float32)
    result.outputs["cpu"] = result.outputs["twin"].copy()
    assert result.identical and result.accuracy("twin") == 1.0
    result.outputs["cpu"][0, 0] = np.nextafter(np.float32(1), np.float32(2))
    assert not result.identical
    totals = {}
    entry = {"layer": "conv1", "op": "Conv", "provider": "sim", "seconds": 0.5, "bytes": 10,
             "cycles": 7, "reason": "sim: Conv"}
    demo.accumulate(totals, [entry])
    demo.accumulate(totals, [entry])
    assert totals["conv1"]["seconds"] == 1.0 and totals["conv1"]["cycles"] == 14
    assert totals["conv1"]["bytes"] == 20
    assert len(x) == 5


def test_demo_rejects_a_bad_batch(capsys):
    assert cli.main(["demo", "--batch", "0"]) == 2
    assert "--batch must be a positive integer" in capsys.readouterr().err


def test_the_gemm_array_demo_is_still_there():
    args = cli.build_parser().parse_args(["demo-array", "--rows", "4", "--cols", "4"])
    assert args.func is demo_commands.cmd_demo_array and (args.rows, args.m) == (4, 40)
