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


def test_link_rows_and_segment_lines():
    """The demo's link table prices the bytes on the UART and XDMA, and the profile's
    segment lines fit 80 columns with and without a link model."""
    from tessera.tables import WIDTH, segment_lines

    rows = demo.link_rows({"resident": (76, 5885, 7, True),
                           "layer at a time": (7368, 3050, 7, False)}, 50e6, batch=10)
    assert rows[0] == ("resident", "76", "118 us", "253 us", "12 us")
    assert rows[1][3] == "24.56 ms"  # 7,368 bytes at 10 bits a byte, 3 Mbaud
    segment = {"index": 0, "passes": 24, "link_bytes_per_inference": 3084,
               "link_bytes_layer_at_a_time": 344224, "link_seconds": None,
               "compute_seconds": 1.9e-3, "clock_hz": 50e6}
    lines = segment_lines({"stem": {"segment": segment}, "b1": {}})
    assert len(lines) == 2 and "no model (twin)" in lines[1] and "1.90 ms" in lines[1]
    segment["link_seconds"] = 0.0103
    line = segment_lines({"stem": {"segment": segment}})[1]
    assert "link 10.30 ms" in line
    assert all(len(text) <= WIDTH for text in lines + [line])
