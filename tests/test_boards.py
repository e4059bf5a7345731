"""Board tops of the whole accelerator (hw/boards/accelerator.py, hw/boards/pll.py): PLL
divider search, baud divisors, refusals, and the elaborated top of every board.

The place and route itself is not run here (minutes on ECP5): ``make bitstream BOARD=...``
does that, and docs/boards.md has the figures it measured.
"""

import json
from dataclasses import replace

import pytest

from contract.config import ArrayConfig, ConvEngineConfig
from contract.config_file import PRESETS
from hw import bitstream
from hw.boards import pll
from hw.boards.accelerator import AcceleratorBoardTop, uart_divisor
from tessera.board_report import print_summary


def _text(plan, suffix):
    content = plan.files[f"{bitstream.TOP_NAME}.{suffix}"]
    return content if isinstance(content, str) else content.decode()


# --- PLL settings -------------------------------------------------------------------------

@pytest.mark.parametrize("f_out", [25.0, 50.0, 75.0, 100.0, 120.0, 125.0, 150.0, 200.0])
def test_ecp5_pll_reaches_common_clocks_inside_the_data_sheet_ranges(f_out):
    s = pll.ecp5_pll_settings(25.0, f_out)
    assert s.f_out_mhz == pytest.approx(f_out, rel=1e-9)
    assert pll.ECP5_PFD_MHZ[0] <= s.f_pfd_mhz <= pll.ECP5_PFD_MHZ[1]
    assert pll.ECP5_VCO_MHZ[0] <= s.f_vco_mhz <= pll.ECP5_VCO_MHZ[1]
    assert s.clki_div in pll.ECP5_CLKI_DIV and s.clkfb_div in pll.ECP5_CLKFB_DIV
    assert s.clkop_div in pll.ECP5_CLKOP_DIV
    # The primitive's equations, written out once more.
    assert 25.0 * s.clkfb_div / s.clki_div == pytest.approx(f_out)


def test_ecp5_pll_125_mhz_dividers():
    s = pll.ecp5_pll_settings(25.0, 125.0)
    assert (s.clki_div, s.clkfb_div, s.clkop_div) == (1, 5, 6)  # VCO 750 MHz, the highest
    assert s.as_dict()["f_vco_mhz"] == 750.0


@pytest.mark.parametrize("f_out, divs", [(24.0, (0, 63, 5)), (36.0, (0, 47, 4)),
                                         (48.0, (0, 63, 4)), (30.0, (0, 79, 5))])
def test_ice40_pll_settings(f_out, divs):
    s = pll.ice40_pll_settings(12.0, f_out)
    assert (s.divr, s.divf, s.divq) == divs
    assert s.f_out_mhz == pytest.approx(f_out)
    assert pll.ICE40_PFD_MHZ[0] <= s.f_pfd_mhz <= pll.ICE40_PFD_MHZ[1]
    assert pll.ICE40_VCO_MHZ[0] <= s.f_vco_mhz <= pll.ICE40_VCO_MHZ[1]
    assert s.filter_range == 1  # 12 MHz at the phase detector


def test_ice40_pll_near_frequency_within_tolerance():
    s = pll.ice40_pll_settings(12.0, 33.3, tolerance=0.01)
    assert abs(s.f_out_mhz - 33.3) <= 0.333
    with pytest.raises(pll.PllError, match="nearest setting"):
        pll.ice40_pll_settings(12.0, 33.3, tolerance=1e-6)


@pytest.mark.parametrize("family, f_in, f_out, span", [
    ("ecp5", 25.0, 500.0, "3.125-400 MHz"), ("ecp5", 25.0, 2.0, "3.125-400 MHz"),
    ("ice40", 12.0, 300.0, "16-275 MHz"), ("ice40", 12.0, 10.0, "16-275 MHz"),
])
def test_unreachable_frequency_is_refused_naming_the_range(family, f_in, f_out, span):
    find = pll.ecp5_pll_settings if family == "ecp5" else pll.ice40_pll_settings
    with pytest.raises(pll.PllError, match=f"cannot make {f_out:g} MHz from {f_in:g} MHz") \
            as info:
        find(f_in, f_out)
    assert span in str(info.value)


def test_ecp5_frequency_between_settings_is_refused_with_the_nearest():
    # 25 MHz * fb / ci with a PFD of at least 3.125 MHz: 123.457 is 1.25% from 125.
    with pytest.raises(pll.PllError, match=r"within 0.5%.*nearest setting: 125 MHz"):
        pll.ecp5_pll_settings(25.0, 123.457)


@pytest.mark.parametrize("value", [0, -1, "fast", True, None])
def test_pll_frequency_must_be_a_number(value):
    with pytest.raises(pll.PllError, match=f"f_out_mhz must be a positive frequency in MHz, "
                                           f"not {value!r}"):
        pll.ecp5_pll_settings(25.0, value)


# --- UART divisor -------------------------------------------------------------------------

def test_uart_divisor_at_the_board_clocks():
    divisor, error = uart_divisor(125.0)
    assert divisor == 42 and error == pytest.approx(abs(125e6 / 42 - 3e6) / 3e6)
    assert error < 0.008
    assert uart_divisor(24.0) == (8, 0.0)
    assert uart_divisor(50.0, 1_000_000) == (50, 0.0)


def test_uart_divisor_refuses_an_inexact_or_too_small_one():
    with pytest.raises(ValueError, match=r"3000000 baud at 10 MHz needs 3.33 clock cycles per "
                                         r"bit .* nearby: 9 or 12 MHz"):
        uart_divisor(10.0)
    with pytest.raises(ValueError, match="divisor of at least 2"):
        uart_divisor(4.0)
    with pytest.raises(ValueError, match="baud must be a positive integer, not 0"):
        uart_divisor(125.0, 0)


# --- tops -----------------------------------------------------------------------------------

def test_board_defaults_fit_their_devices():
    counts = {board: bitstream.multipliers_needed(bitstream.default_config(board))
              for board in bitstream.KNOWN_BOARDS if board.startswith("ulx3s")}
    assert counts == {"ulx3s-85f": 80, "ulx3s-45f": 64, "ulx3s-25f": 28}
    assert bitstream.default_config("ulx3s-85f") == ConvEngineConfig()
    assert bitstream.default_config("icebreaker").array == ArrayConfig(rows=1, cols=1)


def test_unknown_board_is_refused_with_the_list():
    with pytest.raises(ValueError, match="unknown board 'de10'; known boards: icebreaker, "
                                         "ulx3s-25f, ulx3s-45f, ulx3s-85f"):
        bitstream.board_top("de10")


def test_accelerator_that_does_not_fit_is_refused_before_any_tool():
    with pytest.raises(ValueError, match=r"the 8x8 accelerator needs 80 multipliers \(64 in "
                                         r"the array, the rest in post-processing\); "
                                         r"ulx3s-25f \(LFE5U-25F\) has 28"):
        bitstream.board_top("ulx3s-25f", ConvEngineConfig())
    with pytest.raises(TypeError, match="config must be a ConvEngineConfig"):
        bitstream.board_top("ulx3s-85f", ArrayConfig())
    # Block RAM: the 45F's preset with a 40 K-word data memory is 5 DP16KD over.
    big = replace(bitstream.default_config("ulx3s-45f"), resident_words=40960,
                  program_words=6144)
    with pytest.raises(ValueError, match=r"the accelerator needs 113 DP16KD block RAMs "
                                         r"\(activations 12, weights 4, resident data 80, "
                                         r"resident program 12, host bridge 3, pool 2\); "
                                         r"ulx3s-45f "
                                         r"\(LFE5U-45F\) has 108"):
        bitstream.board_top("ulx3s-45f", big)


def test_a_board_build_with_a_model_in_it_initialises_its_memories():
    """The netlist of a board build with a boot image holds the image's words as the
    memories' initial contents and its checksum as the checksum registers' initial value
    (what Yosys maps to DP16KD initialisation and flip-flop init, so the bitstream has
    them); the image is refused where the configuration has no resident block."""
    from contract.resident import BootImage

    image = BootImage(program=[0xA5A5A5A5, 7], data=[0x12345678, 0x9ABCDEF0, 3])
    _, top, plan = bitstream.prepare_build("ulx3s-25f", PRESETS["ulx3s-25f-resident"],
                                           image=image)
    rtlil = _text(plan, "il")
    for word in (*image.checksum, 0xA5A5A5A5, 0x9ABCDEF0):
        assert f"{word:032b}" in rtlil, hex(word)
    assert top.image is image
    with pytest.raises(ValueError, match="a boot image needs a configuration with resident"):
        bitstream.prepare_build("icebreaker", image=image)


def test_unreachable_clock_is_refused_by_the_board_top():
    with pytest.raises(pll.PllError, match="ECP5 PLL cannot make 450 MHz from 25 MHz"):
        bitstream.board_top("ulx3s-85f", clock_mhz=450)
    with pytest.raises(ValueError, match="3000000 baud at 37.5 MHz needs 12.50 clock cycles"):
        # 37.5 MHz is a PLL setting (25 * 3 / 2), but 12 cycles per bit is 4% off.
        AcceleratorBoardTop(ConvEngineConfig(array=ArrayConfig(rows=1, cols=1)),
                            family="ecp5", board_clock_mhz=25.0, clock_mhz=37.5)


def test_ulx3s_85f_top_elaborates_with_pll_uart_and_clock():
    platform, top, plan = bitstream.prepare_build("ulx3s-85f")
    assert top.config == bitstream.default_config("ulx3s-85f") and not top.config.resident
    assert top.clock_mhz == 62.5 and top.divisor == 21
    rtlil = _text(plan, "il")
    assert rtlil.count("cell \\EHXPLLL ") == 1
    for name, value in (("CLKI_DIV", 2), ("CLKFB_DIV", 5), ("CLKOP_DIV", 12)):
        assert f"parameter \\{name} {value}\n" in rtlil
    assert 'parameter \\FEEDBK_PATH "CLKOP"' in rtlil
    lpf = _text(plan, "lpf")
    # The oscillator pin keeps its own 25 MHz: nextpnr derives the PLL output's constraint.
    assert 'FREQUENCY PORT "clk25_0__io" 25000000.0 HZ;' in lpf
    assert 'LOCATE COMP "uart_0__rx__io" SITE "M1";' in lpf
    assert 'LOCATE COMP "uart_0__tx__io" SITE "L4";' in lpf
    commands = json.loads(plan.files[f"build_{bitstream.TOP_NAME}.json"])["commands"]
    nextpnr = commands[1]
    assert nextpnr[0] == "nextpnr-ecp5" and "--85k" in nextpnr
    assert "--timing-allow-fail" in nextpnr and "--router" not in nextpnr  # nextpnr's own
    assert bitstream.KEEP_PE_REGISTERS in _text(plan, "ys")
    assert bitstream.KEEP_COPIES in _text(plan, "ys")


def test_each_blocks_reset_copy_reaches_it_over_a_global_network():
    """On the ECP5 each block's reset copy (hw.soft_reset) drives a DCCA, whose output is
    the block's domain reset: the reset leaves the general routing (the address
    generator's was the most congested net of a 16-row build)."""
    _, _, plan = bitstream.prepare_build("ulx3s-85f")
    rtlil = _text(plan, "il")
    for block in ("engine", "pool", "addrgen", "array", "postprocess"):
        assert (f"cell \\DCCA \\{block}_reset_dcca\n"
                f"    connect \\CLKI \\{block}_reset_copy [0]\n") in rtlil, block
    # Without a platform (the twin's netlist) the copy itself is the domain's reset.
    from amaranth import Module, Signal
    from amaranth.back import rtlil as rtlil_back

    from hw.soft_reset import with_own_reset

    m, inner, bit = Module(), Module(), Signal()
    inner.d.sync += bit.eq(~bit)
    m.submodules.block = with_own_reset(m, "block", Signal(), inner)
    twin = rtlil_back.convert(m, ports=[bit])
    assert "DCCA" not in twin and "block_reset_copy" in twin


def test_a_pumped_array_gets_the_plls_second_output_at_twice_the_clock():
    config = replace(PRESETS["ulx3s-85f"], array=ArrayConfig(rows=16, cols=8, pump=2))
    settings = pll.ecp5_pll_settings(25.0, 62.5, array_mhz=125.0)
    assert settings.f_array_mhz == pytest.approx(125.0)
    assert settings.clkop_div % 2 == 0 and settings.clkos_div * 2 == settings.clkop_div
    _, top, plan = bitstream.prepare_build("ulx3s-85f", config)
    assert (top.clock_mhz, top.array_clock_mhz) == (62.5, 125.0)
    rtlil = _text(plan, "il")
    for name, value in (("CLKOP_DIV", 12), ("CLKOS_DIV", 6)):
        assert f"parameter \\{name} {value}\n" in rtlil
    assert 'parameter \\CLKOS_ENABLE "ENABLED"' in rtlil
    # Two PEs a multiplier: the array's 128 on 64, the bank's 16 besides.
    assert bitstream.multipliers_needed(config) == 64 + 16
    # Without a second PLL output in use on the iCE40 boards, the pumped array is refused.
    with pytest.raises(ValueError, match="second PLL output"):
        AcceleratorBoardTop(replace(config, array=ArrayConfig(rows=2, cols=2, pump=2)),
                            family="iCE40", board_clock_mhz=12.0, clock_mhz=18.0)


def test_a_pumped_array_runs_at_the_array_clock_its_configuration_asks():
    config = replace(PRESETS["ulx3s-85f"], array=ArrayConfig(rows=16, cols=8, pump=2),
                     array_clock_mhz=100.0)
    _, top, plan = bitstream.prepare_build("ulx3s-85f", config)
    assert (top.clock_mhz, top.array_clock_mhz) == (62.5, 100.0)
    settings = top.pll_settings
    assert settings.f_vco_mhz / settings.clkop_div == pytest.approx(62.5)
    assert f"parameter \\CLKOS_DIV {settings.clkos_div}\n" in _text(plan, "il")
    # 64 multipliers at 100 MHz.
    assert bitstream.peak_throughput(config, top.array_clock_mhz, True)["peak_gops"] == 12.8
    # Above twice the design clock the array waits for the engine's beats: no more than
    # 128 MACs a design cycle count.
    assert bitstream.peak_throughput(config, 150.0, True, clock_mhz=62.5)["peak_gops"] == 16.0
    # A second output the VCO that makes the first cannot divide down to is refused.
    with pytest.raises(pll.PllError, match="for the array beside 62.5 MHz"):
        pll.ecp5_pll_settings(25.0, 62.5, array_mhz=101.7)


def test_peak_of_a_pumped_array_counts_its_multipliers_at_their_clock():
    config = replace(PRESETS["ulx3s-85f"], array=ArrayConfig(rows=16, cols=8, pump=2))
    # 64 multipliers at 125 MHz: the 16x8 array's MACs at the engine's 62.5 MHz.
    assert bitstream.peak_throughput(config, 125.0, True)["peak_gops"] == 16.0


def test_router_is_passed_to_nextpnr():
    _, _, plan = bitstream.prepare_build("ulx3s-25f", router="router2")
    nextpnr = json.loads(plan.files[f"build_{bitstream.TOP_NAME}.json"])["commands"][1]
    assert nextpnr[nextpnr.index("--router") + 1] == "router2"


@pytest.mark.parametrize("board, device", [("ulx3s-45f", "--45k"), ("ulx3s-25f", "--25k")])
def test_smaller_ulx3s_tops_elaborate(board, device):
    platform, top, plan = bitstream.prepare_build(board)
    config = bitstream.default_config(board)
    assert top.config == config
    assert bitstream.multipliers_needed(config) <= bitstream.MULTIPLIERS[platform.device]
    assert _text(plan, "il").count("cell \\EHXPLLL ") == 1
    commands = json.loads(plan.files[f"build_{bitstream.TOP_NAME}.json"])["commands"]
    assert device in commands[1]


def test_icebreaker_top_uses_the_pad_pll_and_the_ftdi_uart():
    platform, top, plan = bitstream.prepare_build("icebreaker")
    assert top.clock_mhz == 18.0 and top.divisor == 6 and top.baud_error == 0.0
    rtlil = _text(plan, "il")
    assert rtlil.count("cell \\SB_PLL40_PAD ") == 1
    for name, value in (("DIVR", 0), ("DIVF", 47), ("DIVQ", 5), ("FILTER_RANGE", 1)):
        assert f"parameter \\{name} {value}\n" in rtlil
    pcf = _text(plan, "pcf")
    for line in ("set_io clk12_0__io 35", "set_io uart_0__rx__io 6",
                 "set_io uart_0__tx__io 9", "set_frequency clk12_0__io 12.0"):
        assert line in pcf
    assert "synth_ice40 -dsp" in _text(plan, "ys")


def test_rows_and_cols_change_the_array_of_the_board_configuration():
    import dataclasses

    config = dataclasses.replace(bitstream.default_config("ulx3s-85f"),
                                 array=ArrayConfig(rows=4, cols=6))
    _, top, plan = bitstream.prepare_build("ulx3s-85f", config, clock_mhz=100)
    assert (top.config.rows, top.config.cols) == (4, 6) and top.divisor == 33
    rtlil = _text(plan, "il")
    assert rtlil.count("cell \\EHXPLLL ") == 1
    assert "parameter \\CLKOP_DIV 8\n" in rtlil  # 100 MHz: VCO 800 MHz, the highest


# --- reports --------------------------------------------------------------------------------

def _accelerator_report(constraint_mhz):
    from pathlib import Path

    raw = json.loads((Path(__file__).parent / "data" / "nextpnr_report_ulx3s85f.json")
                     .read_text())
    parsed = bitstream.parse_nextpnr_report(raw)
    for entry in parsed["fmax"].values():
        entry["constraint_mhz"] = constraint_mhz
    return raw, parsed


def test_timing_verdict_names_the_path_and_the_log():
    raw, parsed = _accelerator_report(125.0)
    paths = bitstream.critical_path(raw)
    clock, fmax, failure = bitstream.timing_verdict(parsed, paths, 125.0, "b/nextpnr.log")
    assert fmax == clock["achieved_mhz"] > 125.0 and failure is None
    _, fmax, failure = bitstream.timing_verdict(parsed, paths, 250.0, "b/nextpnr.log")
    assert fmax < 250.0
    assert failure.startswith(f"nextpnr reached {fmax:g} MHz, below the 250 MHz clock; "
                              f"critical path ")
    assert failure.endswith("log: b/nextpnr.log")
    _, _, failure = bitstream.timing_verdict({"fmax": {}}, {}, 125.0, "x.log")
    assert "no fmax" in failure


def test_accelerator_summary_fits_one_screen():
    from rich.console import Console

    raw, parsed = _accelerator_report(125.0)
    report = {
        "board": "ulx3s-85f", "kind": "accelerator", "device": "LFE5U-85F",
        "config": ConvEngineConfig().as_dict(), "board_clock_mhz": 25.0, "target_mhz": 125.0,
        "clock_mhz": 125.0, "fmax_mhz": 130.0, "timing_met": True,
        **bitstream.peak_throughput(ConvEngineConfig(), 125.0, True),
        "pll": {"primitive": "EHXPLLL"}, "uart": {"baud": 3000000, "divisor": 42,
                                                  "baud_error_percent": 0.794},
        **parsed, "critical_path": bitstream.critical_path(raw),
        "wall_time_s": {"synthesis_s": 150.0, "place_and_route_s": 300.0, "pack_s": 9.0},
        "bitstream": "build/ulx3s-85f/top.bit",
        "logs": {"yosys": "build/ulx3s-85f/yosys.log",
                 "nextpnr": "build/ulx3s-85f/nextpnr.log"},
    }
    console = Console(record=True, width=100)
    print_summary(report, console=console)
    text = console.export_text()
    assert "whole accelerator, 8x8 array" in text
    assert "PLL makes 125 MHz from 25 MHz" in text and "divisor 42" in text
    assert "build/ulx3s-85f/nextpnr.log" in text
    assert "peak: 16 GOP/s (8x8 MACs at 125 MHz)" in text
    assert len(text.splitlines()) <= 24


def test_peak_throughput_counts_only_a_met_clock():
    """The issue's figure: 2 x MACs x the array's clock, and nothing where timing failed."""
    config = replace(ConvEngineConfig(), array=ArrayConfig(rows=6, cols=8))
    assert bitstream.peak_throughput(config, 62.5, True) == {
        "array_clock_mhz": 62.5, "peak_gops": 6.0}
    assert bitstream.peak_throughput(config, 62.5, False)["peak_gops"] is None


def test_cli_refuses_an_unreachable_clock_without_running_tools(capsys):
    from tessera.cli import main

    assert main(["bitstream", "--board", "icebreaker", "--clock-mhz", "300",
                 "--build", "/nonexistent/never"]) == 2
    out = capsys.readouterr().out
    assert "iCE40 PLL cannot make 300 MHz from 12 MHz" in out and "16-275 MHz" in out
    assert main(["bitstream", "--board", "nope"]) == 2
    assert "known boards: icebreaker" in capsys.readouterr().out


# --- the iCEBreaker configuration runs the digits CNN --------------------------------------

@pytest.mark.slow
def test_icebreaker_configuration_runs_digits_bit_exact_on_its_twin():
    """The Verilator twin of exactly the configuration the iCEBreaker build uses (1x1 lean
    engine, 1 KiB activation buffer) runs the digits CNN identically to the cpu provider; conv2's
    weights exceed the small buffers and are split into several passes, and what the device
    does not run falls back to the cpu with the reason."""
    from models.zoo import DIGITS_QDQ, load_digits_split
    from sw_driver import InferenceSession
    from sw_driver.providers import SimProvider
    from tests.assertions import assert_exact

    config = bitstream.default_config("icebreaker")
    _, _, x, _ = load_digits_split()
    feed = {"input": x[:8]}
    (want,) = InferenceSession(DIGITS_QDQ, providers=["cpu"]).run(None, feed)
    sim = SimProvider(config, log=lambda message: None)
    try:
        session = InferenceSession(DIGITS_QDQ, providers=[sim, "cpu"])
        (got,) = session.run(None, feed)
        profile = {entry["layer"]: entry for entry in session.profile()}
    finally:
        sim.close()
    assert_exact(got, want, "digits, 8 test images, icebreaker configuration",
                 names=("session", "cpu"), same_dtype=True)
    on_device = {name for name, entry in profile.items() if entry["provider"] == "sim"}
    assert on_device == {"conv1", "pool1", "conv2", "gap", "fc"}
    # Built without performance counters: no cycle count in the profile rather than a 0.
    assert not [name for name in on_device if "cycles" in profile[name]], profile
    assert "1x1 engine" in profile["conv2"]["reason"]
    # 32 column tiles of 16 * 3 * 3 = 144 weight words, seven a pass in the 1024-word
    # buffer: 4 608 words in 5 passes.
    assert "in 5 pass(es)" in profile["conv2"]["reason"]
    for name, entry in profile.items():
        if name not in on_device:
            assert entry["provider"] == "cpu"
            assert entry["reason"].startswith("sim declined: "), entry


def test_failed_place_and_route_says_what_is_over_capacity(tmp_path):
    import sys

    script = ("print('Info:                ICESTORM_LC:   11618/   5280   220%');"
              "print('Info:               ICESTORM_RAM:      23/     30    76%');"
              "print(\"ERROR: Unable to place cell 'x', no BELs remaining\"); exit(125)")
    with pytest.raises(bitstream.BitstreamError) as info:
        bitstream.tools.run_tool("nextpnr", [sys.executable, "-c", script], tmp_path, None,
                            tmp_path / "nextpnr.log", lambda line: None)
    message = str(info.value)
    assert "exit status 125" in message and str(tmp_path / "nextpnr.log") in message
    assert "ICESTORM_LC:   11618/   5280   220%" in message
    assert "ICESTORM_RAM" not in message  # within capacity: not a reason
    assert "no BELs remaining" in message


def test_design_clock_precedence():
    import dataclasses

    config = bitstream.default_config("ulx3s-85f")
    assert bitstream.design_clock_mhz("ulx3s-85f", config) == 62.5
    clocked = dataclasses.replace(config, clock_mhz=100.0)
    assert bitstream.design_clock_mhz("ulx3s-85f", clocked) == 100.0
    assert bitstream.design_clock_mhz("ulx3s-85f", clocked, 75.0) == 75.0
    assert bitstream.board_top("ulx3s-85f", clocked).clock_mhz == 100.0


def test_source_state_names_the_commit(tmp_path):
    import re

    state = bitstream.source_state()
    assert re.fullmatch(r"[0-9a-f]{40}", state["commit"])
    assert isinstance(state["dirty"], bool)
    assert bitstream.source_state(tmp_path)["commit"] is None  # not a git work tree


def test_the_85f_resident_preset_has_its_own_clock_and_router():
    """The 85F with the resident block is built at the clock it met and with the router that
    routes it, without being asked; the other presets take the board's clock and nextpnr's
    router."""
    resident = PRESETS["ulx3s-85f-resident"]
    assert bitstream.design_clock_mhz("ulx3s-85f", resident) == 54
    assert bitstream.default_router("ulx3s-85f", resident) == "router2"
    assert bitstream.default_router("ulx3s-85f", PRESETS["ulx3s-85f"]) is None
    for board in ("ulx3s-45f", "ulx3s-25f"):
        config = PRESETS[f"{board}-resident"]
        assert bitstream.design_clock_mhz(board, config) == 62.5, board
        assert bitstream.default_router(board, config) is None, board
    # The clock the PLL makes for it still divides into 3 Mbaud within 2 %.
    top = bitstream.board_top("ulx3s-85f", resident)
    assert top.clock_mhz == pytest.approx(54.1667, abs=1e-3) and top.divisor == 18


def test_the_85f_pumped_preset_builds_at_the_clocks_it_met_with_router2():
    """The 16x8 on its own clock: 62.5 MHz for the engine and the PLL's 89.29 for the
    array (CLKOS 7 of a 625 MHz VCO) without being asked, router2 (router1 does not route
    it), its multipliers on the 85F, and a peak above the 8x8 default's."""
    pumped = PRESETS["ulx3s-85f-pumped"]
    assert bitstream.default_router("ulx3s-85f", pumped) == "router2"
    assert bitstream.design_clock_mhz("ulx3s-85f", pumped) == 62.5
    top = bitstream.board_top("ulx3s-85f", pumped)
    assert top.array_clock_mhz == pytest.approx(625 / 7)
    assert (top.pll_settings.clkop_div, top.pll_settings.clkos_div) == (10, 7)
    assert bitstream.multipliers_needed(pumped) == 64 + 16 <= 156
    peak = bitstream.peak_throughput(pumped, top.array_clock_mhz, True)["peak_gops"]
    default = bitstream.default_config("ulx3s-85f")
    assert peak == 11.429 > bitstream.peak_throughput(default, 62.5, True)["peak_gops"] == 8.0
