"""One hardware configuration, read from a file or a preset (contract/config_file.py), and
taken by every command that builds or simulates hardware (``--config``, make ``CONFIG=``)."""

import json
import subprocess
from dataclasses import replace
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

from contract.config import ArrayConfig, ConvEngineConfig
from contract.config_file import (
    DEFAULT_PRESET,
    PRESETS,
    ConfigFileError,
    config_to_dict,
    dumps_json,
    dumps_toml,
    load_config,
    parse_config,
    write_config,
)
from models.zoo import DIGITS_QDQ
from tessera.cli import main

REPO = Path(__file__).resolve().parents[1]
TWO_BY_TWO = ConvEngineConfig(array=ArrayConfig(rows=2, cols=2), act_depth=2048,
                              weight_depth=1024, max_col_tiles=16)


def _one_line_error(capsys):
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert "Traceback" not in err
    return lines[0]


def test_presets_and_the_one_default():
    assert {"default", "tiny", "ulx3s-85f", "icebreaker"} <= PRESETS.keys()
    assert all(isinstance(config, ConvEngineConfig) for config in PRESETS.values())
    assert DEFAULT_PRESET == "default"
    # The "sim" provider builds the default preset when given no configuration.
    from sw_driver.providers.sim import DEFAULT_CONFIG

    assert PRESETS["default"] == DEFAULT_CONFIG
    assert PRESETS["tiny"] == TWO_BY_TWO
    assert PRESETS["icebreaker"].array == ArrayConfig(rows=1, cols=1)
    # The 85F's engine is the plain ConvEngineConfig's; its resident preset adds the block.
    assert PRESETS["ulx3s-85f"] == ConvEngineConfig()
    assert PRESETS["ulx3s-85f-resident"] == replace(ConvEngineConfig(), resident_words=36864,
                                                    program_words=8192, clock_mhz=54)
    from hw.bitstream.registry import block_rams_needed, check_fits
    for board in ("ulx3s-85f", "ulx3s-45f", "ulx3s-25f"):
        assert not PRESETS[board].resident, board
        assert PRESETS[f"{board}-resident"].resident, board
        check_fits(board, PRESETS[f"{board}-resident"])  # multipliers and DP16KD
    # nextpnr placed 113
    assert block_rams_needed(PRESETS["ulx3s-85f-resident"])["total"] == 113
    assert load_config("tiny") is PRESETS["tiny"]


@pytest.mark.parametrize("suffix", ["toml", "json"])
@pytest.mark.parametrize("name", sorted(PRESETS))
def test_round_trip(tmp_path, name, suffix):
    config = PRESETS[name]
    path = write_config(config, tmp_path / f"{name}.{suffix}")
    assert load_config(path) == config
    assert load_config(str(path)) == config


def test_round_trip_with_every_field_set(tmp_path):
    config = ConvEngineConfig(array=ArrayConfig(rows=3, cols=5), act_depth=777,
                              weight_depth=99, max_col_tiles=3, clock_mhz=62.5,
                              residual_add=False, perf_counters=False,
                              csr_readback=False, pipelined=False, depthwise=True,
                              resident_add=True, resident_words=5000, program_words=300,
                              add_lanes=2)
    assert parse_config(json.loads(dumps_json(config))) == config
    (tmp_path / "c.toml").write_text(dumps_toml(config))
    assert load_config(tmp_path / "c.toml") == config
    assert config_to_dict(config) == {"act_depth": 777, "weight_depth": 99, "max_col_tiles": 3,
                                      "stream_width": 32, "clock_mhz": 62.5,
                                      "residual_add": False, "perf_counters": False,
                                      "csr_readback": False, "pipelined": False,
                                      "depthwise": True, "resident_add": True,
                                      "resident_words": 5000,
                                      "program_words": 300, "add_lanes": 2,
                                      "array": {"rows": 3, "cols": 5, "acc_width": 32,
                                                "pump": 1}}
    # An unset clock is left out of the file rather than written as a value TOML lacks.
    assert "clock_mhz" not in config_to_dict(PRESETS["default"])
    # The double-pumped array (no depthwise mode, so not in the configuration above).
    pumped = replace(PRESETS["ulx3s-85f"], array=ArrayConfig(rows=16, cols=8, pump=2))
    (tmp_path / "p.toml").write_text(dumps_toml(pumped))
    assert load_config(tmp_path / "p.toml") == pumped
    assert pumped.name.startswith("conv_engine-r16c8a32p2-")
    # Its own clock, which the netlist's name leaves out as it does the design clock.
    clocked = replace(pumped, clock_mhz=62.5, array_clock_mhz=100.0)
    (tmp_path / "c2.toml").write_text(dumps_toml(clocked))
    assert load_config(tmp_path / "c2.toml") == clocked
    assert clocked.name == pumped.name and clocked.array_clock_ratio() == Fraction(8, 5)


def test_a_file_overrides_its_base_preset(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text('base = "tiny"\nact_depth = 512\n[array]\nrows = 3\n')
    assert load_config(path) == replace(TWO_BY_TWO, act_depth=512,
                                        array=ArrayConfig(rows=3, cols=2))
    path.write_text("[array]\ncols = 4\n")  # no base: the default preset
    assert load_config(path) == replace(PRESETS["default"], array=ArrayConfig(rows=8, cols=4))


SIZES = "an integer from 1 to 64"
BAD_TOML = [
    ("[array]\nrows = 0", f"array.rows must be {SIZES}, not 0"),
    ("[array]\ncols = -2", f"array.cols must be {SIZES}, not -2"),
    ("[array]\nrows = 65", f"array.rows must be {SIZES}, not 65"),
    ('[array]\nrows = "8"', f"array.rows must be {SIZES}, not '8' (a string)"),
    ("[array]\nrows = 2.0", f"array.rows must be {SIZES}, not 2.0 (a number)"),
    ("[array]\nacc_width = 16",
     "array.acc_width must be 32 (the only value the hardware is built for), not 16"),
    ("act_depth = 0", "act_depth must be an integer from 1 to 16777216, not 0"),
    ("weight_depth = -1", "weight_depth must be an integer from 1 to 1048576, not -1"),
    ("max_col_tiles = 4097", "max_col_tiles must be an integer from 1 to 4096, not 4097"),
    ("max_col_tiles = true",
     "max_col_tiles must be an integer from 1 to 4096, not True (a boolean)"),
    ("stream_width = 64",
     "stream_width must be 32 (the only value the hardware is built for), not 64"),
    ("clock_mhz = 0", "clock_mhz must be a number from 1 to 1000, not 0"),
    ("clock_mhz = nan", "clock_mhz must be a number from 1 to 1000, not nan (a number)"),
    ('clock_mhz = "fast"', "clock_mhz must be a number from 1 to 1000, not 'fast' (a string)"),
    ("array_clock_mhz = 0", "array_clock_mhz must be a number from 1 to 1000, not 0"),
    # The default preset's array is on the design clock.
    ("array_clock_mhz = 100", "array_clock_mhz is the clock of an array on its own clock "
                              "(array.pump 2)"),
    ("rows = 2", "unknown field 'rows'; known fields: base, array.rows, array.cols, "
                 "array.acc_width, array.pump, act_depth, weight_depth, max_col_tiles, "
                 "stream_width, clock_mhz"),
    ("[array]\nrowz = 2", "unknown field 'array.rowz'; known fields: base, array.rows"),
    ("array = 4", "array must be a table ([array]) of array.rows, array.cols, "
                  "array.acc_width, array.pump, not 4"),
    ('base = "huge"', "base must be a preset name, one of default, tiny, ulx3s-85f"),
    ("act_depth = ", "not valid TOML ("),
    ("resident_words = -1", "resident_words must be an integer from 0 to 1048576, not -1"),
    ("program_words = 65537", "program_words must be an integer from 0 to 65536, not 65537"),
    # The default preset has both memories: one without the other is refused.
    ("resident_words = 0", "resident_words and program_words are both 0 (no resident "
                           "execution) or both positive"),
]


@pytest.mark.parametrize(("text", "message"), BAD_TOML)
def test_bad_fields_are_refused_naming_file_field_and_range(tmp_path, text, message):
    path = tmp_path / "bad.toml"
    path.write_text(text + "\n")
    with pytest.raises(ConfigFileError) as info:
        load_config(path)
    assert str(info.value).startswith(f"{path}: {message}"), str(info.value)


@pytest.mark.parametrize(("name", "text", "message"), [
    ("bad.json", '{"act_depth": 0}', "act_depth must be an integer from 1 to 16777216, not 0"),
    ("bad.json", '{"array": {"cols": null}}', f"array.cols must be {SIZES}, not None"),
    ("bad.json", "[8, 8]", "a configuration is a table of fields, not [8, 8] (a list)"),
    ("bad.json", "{rows: 8}", "not valid JSON ("),
    ("bad.yaml", "rows: 8", "a configuration file is .toml or .json, not '.yaml'"),
])
def test_bad_files_are_refused(tmp_path, name, text, message):
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(ConfigFileError) as info:
        load_config(path)
    assert str(info.value).startswith(f"{path}: {message}"), str(info.value)


def test_missing_file_names_the_presets(tmp_path):
    with pytest.raises(ConfigFileError, match=r"nope\.toml: no such configuration file, and "
                                              r"not a preset \(presets: default, tiny, "):
        load_config(tmp_path / "nope.toml")


def test_cli_builds_the_configured_array(tmp_path, capsys):
    path = tmp_path / "two.toml"
    write_config(replace(TWO_BY_TWO, array=ArrayConfig(rows=2, cols=3)), path)
    assert main(["verilog", "--config", str(path), "--build", str(tmp_path / "b")]) == 0
    verilog = (tmp_path / "b" / "r2c3a32" / "systolic_array.v").read_text()
    # Operands: two rows and three columns of int8 plus last (41 bits); results: a row of
    # three int32 plus last (97 bits).
    assert "input [40:0] operands__payload;" in verilog
    assert "output [96:0] results__payload;" in verilog
    # --rows overrides the file's array; --cols keeps it.
    assert main(["verilog", "--config", str(path), "--rows", "1",
                 "--build", str(tmp_path / "b")]) == 0
    assert (tmp_path / "b" / "r1c3a32" / "systolic_array.v").is_file()


def test_cli_builds_the_configured_accelerator(tmp_path):
    path = tmp_path / "engine.json"
    path.write_text(json.dumps({"base": "tiny", "act_depth": 512, "weight_depth": 64}))
    assert main(["verilog", "--target", "xdma", "--config", str(path),
                 "--build", str(tmp_path)]) == 0
    (top,) = tmp_path.glob("conv_engine-r2c2a32-x512-w64-t16-xdma/*.v")
    assert "module tessera_xdma(" in top.read_text()


@pytest.mark.parametrize("command", [
    ["verilog"], ["verilog", "--target", "xdma"], ["demo-array"], ["demo"], ["sim"],
    ["bench", "twin"], ["soak", "--count", "1"], ["bitstream", "--board", "icebreaker"],
    ["run", str(DIGITS_QDQ), "--providers", "sim"],
])
def test_every_command_refuses_a_bad_config_in_one_line(tmp_path, capsys, command):
    path = tmp_path / "bad.toml"
    path.write_text("[array]\nrows = 0\n")
    assert main([*command, "--config", str(path)]) == 2
    assert _one_line_error(capsys) == (f"error: {path}: array.rows must be an integer from 1 "
                                       f"to 64, not 0")


def test_run_config_needs_a_twin_provider(capsys):
    assert main(["run", str(DIGITS_QDQ), "--providers", "cpu", "--config", "tiny"]) == 2
    assert "--config builds the twin providers (sim, uart-twin); none is in --providers cpu" \
        in _one_line_error(capsys)


def test_run_on_the_twin_of_a_configuration_file(tmp_path, monkeypatch):
    import sw_driver.providers as providers

    built = []

    class Recording(providers.SimProvider):
        def __init__(self, config=None, **kwargs):
            built.append(config)
            super().__init__(config, **kwargs)

    # The CLI passes --config as the "sim" provider's option; the session builds it.
    monkeypatch.setitem(providers.PROVIDERS, "sim", Recording)
    path = tmp_path / "tiny.toml"
    path.write_text('base = "tiny"\n')
    x = np.random.default_rng(7).random((6, 1, 8, 8), dtype=np.float32)
    np.save(tmp_path / "x.npy", x)
    assert main(["run", str(DIGITS_QDQ), "--input", str(tmp_path / "x.npy"), "--providers",
                 "sim", "--config", str(path), "-o", str(tmp_path / "twin.npy")]) == 0
    assert built == [TWO_BY_TWO]
    assert main(["run", str(DIGITS_QDQ), "--input", str(tmp_path / "x.npy"), "--providers",
                 "cpu", "-o", str(tmp_path / "cpu.npy")]) == 0
    twin, cpu = np.load(tmp_path / "twin.npy"), np.load(tmp_path / "cpu.npy")
    assert twin.shape == (6, 10)
    np.testing.assert_array_equal(twin, cpu)


def test_make_passes_config_and_the_array_shorthand():
    def dry(*args):
        return subprocess.run(["make", "-n", "-o", ".venv/.setup-stamp", *args], cwd=REPO,
                              capture_output=True, text=True, check=True).stdout

    assert "tessera verilog --config tiny --rows 3" in dry("verilog", "CONFIG=tiny", "R=3")
    assert "demo-array --config x.toml  --cols 4" in dry("demo-array", "CONFIG=x.toml", "C=4")
    for target in ("sim", "demo", "bench", "soak", "verilog-xdma", "bitstream",
                   "bitstream-array"):
        assert "--config tiny" in dry(target, "CONFIG=tiny"), target
    assert "--config" not in dry("verilog")


def test_bitstream_builds_the_configuration_instead_of_the_boards(tmp_path, monkeypatch):
    import hw.bitstream
    import tessera.board_report

    calls = []

    def fake_build(board, config, build_root="build", *, clock_mhz=None, **kwargs):
        calls.append((board, config, clock_mhz))  # nextpnr is not what is tested here
        return {"timing_met": True}

    monkeypatch.setattr(hw.bitstream, "build_bitstream", fake_build)
    monkeypatch.setattr(tessera.board_report, "print_summary", lambda report, console: None)
    path = tmp_path / "board.toml"
    path.write_text('base = "icebreaker"\nclock_mhz = 24\n[array]\ncols = 2\n')
    assert main(["bitstream", "--board", "icebreaker", "--config", str(path)]) == 0
    assert main(["bitstream", "--board", "icebreaker", "--config", str(path), "--rows", "2",
                 "--clock-mhz", "12"]) == 0
    assert main(["bitstream", "--board", "icebreaker"]) == 0
    # The preset's 1x1 array with the file's two columns, then the command line's rows.
    board = replace(PRESETS["icebreaker"], array=ArrayConfig(rows=1, cols=2), clock_mhz=24.0)
    assert calls == [("icebreaker", board, 24.0),
                     ("icebreaker", replace(board, array=ArrayConfig(rows=2, cols=2)), 12.0),
                     ("icebreaker", hw.bitstream.default_config("icebreaker"), None)]


def test_bench_and_soak_build_their_twin_for_the_configuration(tmp_path, monkeypatch, capsys):
    import bench.bench_uart as bench_uart
    import tessera.soak.console as soak_console
    from bench.run import main as bench_main

    path = tmp_path / "c.toml"
    path.write_text('base = "tiny"\nact_depth = 1000\n')
    wanted = replace(TWO_BY_TWO, act_depth=1000)
    seen = []
    monkeypatch.setattr(bench_uart, "CONFIG", bench_uart.CONFIG)  # restored afterwards
    monkeypatch.setattr(bench_uart, "main", lambda: seen.append(bench_uart.CONFIG))
    # What `tessera bench uart --config FILE` runs as its child (tests/test_bench_output.py
    # checks that it passes these arguments).
    assert bench_main(["uart", "--config", str(path)]) == 0
    assert seen == [wanted]

    def open_backends(names, log=print, sim_config=None):
        seen.append(sim_config)
        raise ValueError("stopped before any twin is built")

    monkeypatch.setattr(soak_console, "open_backends", open_backends)
    assert main(["soak", "--only", "0", "--backends", "sim", "--config", str(path)]) == 2
    assert seen == [wanted, wanted]
    assert "stopped before any twin is built" in _one_line_error(capsys)


def test_sim_runs_each_testbench_on_the_configuration():
    from tessera.commands.hardware import _testbench_configs
    from twin.system import TopBuild
    from twin.testbenches import TESTBENCHES

    tiny = PRESETS["tiny"]
    assert _testbench_configs(TESTBENCHES["systolic"], tiny) == (tiny.array,)
    assert _testbench_configs(TESTBENCHES["conv"], tiny) == (tiny,)
    assert _testbench_configs(TESTBENCHES["system"], tiny) == (TopBuild(tiny),)
    # The block testbenches take lane counts, not an engine: they keep their own builds.
    assert _testbench_configs(TESTBENCHES["blocks"], tiny) == TESTBENCHES["blocks"].configs
    assert _testbench_configs(TESTBENCHES["conv"], None) == TESTBENCHES["conv"].configs
