"""A failed Verilator build or cocotb run reports the tool's or the testbench's own message,
and `tessera demo-array` checks its arguments before it builds anything.

The runs use the 1x1 array (also built by ``test_systolic_cocotb.py``, so usually cached).
"""

import os

import pytest

import twin.runner
from contract.config import ArrayConfig
from tessera import cli
from tessera.commands.demo import DEMO_MAX_SIDE
from twin.outcomes import failure_lines, first_build_errors, read_outcomes
from twin.runner import SimBuildError, TestbenchFailed, build_array, run_testbench

TINY = ArrayConfig(rows=1, cols=1)


def _demo_env(tmp_path, shape):
    return {"TESSERA_DEMO_SHAPE": shape, "TESSERA_REPORT": str(tmp_path / "report.json")}


@pytest.mark.slow
def test_a_failing_testbench_raises_its_own_message(tmp_path, seed):
    with pytest.raises(TestbenchFailed) as info:
        run_testbench("sim.tb_demo", TINY, seed=seed, name="pytest-failure",
                      extra_env=_demo_env(tmp_path, "0,3,2"))
    error = info.value
    assert error.failures == ["demo_gemm: ValueError: M must be at least 1, got 0"]
    assert str(error).startswith(f"1 of 1 cocotb tests failed in sim.tb_demo on r1c1a32 "
                                 f"(seed {seed}):\n  demo_gemm: ValueError: M must be at "
                                 f"least 1, got 0\nlog: ")
    assert error.log.name == "sim.log" and error.log.exists()


@pytest.mark.slow
def test_the_testbench_environment_beats_the_shell(tmp_path, seed, monkeypatch):
    # cocotb lays the shell's environment over extra_env; the runner must not let it, or an
    # exported TESSERA_SEED would replace every testbench's seed. A valid shape in the shell,
    # a bad one for the testbench: the testbench must see (and fail on) its own.
    monkeypatch.setenv("TESSERA_DEMO_SHAPE", "2,2,2")
    monkeypatch.setenv("TESSERA_SEED", "12345")
    with pytest.raises(TestbenchFailed) as info:
        run_testbench("sim.tb_demo", TINY, seed=seed, name="pytest-env",
                      extra_env=_demo_env(tmp_path, "0,3,2"))
    assert info.value.failures == ["demo_gemm: ValueError: M must be at least 1, got 0"]
    assert os.environ["TESSERA_DEMO_SHAPE"] == "2,2,2"
    assert os.environ["TESSERA_SEED"] == "12345"


@pytest.mark.slow
def test_demo_array_prints_the_testbench_error_not_a_traceback(tmp_path, monkeypatch,
                                                                capsys):
    # The arguments are checked first, so a bad shape can only reach the testbench here:
    # the real run, with the shape replaced on its way in.
    real = twin.runner.run_testbench

    def with_bad_shape(module, config, **kwargs):
        kwargs["extra_env"] = dict(kwargs["extra_env"], TESSERA_DEMO_SHAPE="3,0,2")
        return real(module, config, **kwargs)

    monkeypatch.setattr(twin.runner, "run_testbench", with_bad_shape)
    assert cli.main(["demo-array", "--rows", "1", "--cols", "1"]) == 1
    out = capsys.readouterr().out
    assert "error: 1 of 1 cocotb tests failed in sim.tb_demo on r1c1a32" in out
    assert "demo_gemm: ValueError: K must be at least 1, got 0" in out
    assert "Traceback" not in out


@pytest.mark.parametrize(("option", "value"), [("--m", "0"), ("--k", "-3"), ("--n", "1025"),
                                               ("--m", "many")])
def test_demo_array_checks_its_sizes_before_building(option, value, monkeypatch, capsys):
    def must_not_run(*args, **kwargs):
        raise AssertionError("run_testbench was called for a bad argument")

    monkeypatch.setattr(twin.runner, "run_testbench", must_not_run)
    with pytest.raises(SystemExit) as info:
        cli.main(["demo-array", option, value])
    assert info.value.code == 2  # argparse's usage error
    assert (f"argument {option}: must be an integer from 1 to {DEMO_MAX_SIDE}, not "
            f"{value!r}") in capsys.readouterr().err


def test_a_failing_verilator_build_quotes_its_errors(tmp_path, monkeypatch):
    def broken_verilog(config, build_root):
        path = tmp_path / "broken" / "systolic_array.v"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("module systolic_array(input clk);\n  wire x = ;\nendmodule\n")
        return path

    monkeypatch.setattr(twin.runner, "_write_verilog", broken_verilog)
    lines = []
    with pytest.raises(SimBuildError) as info:
        build_array(TINY, build_root=tmp_path / "build", log=lines.append)
    message = str(info.value)
    build_log = tmp_path / "build" / "r1c1a32" / "verilator" / "build.log"
    assert message.startswith("Verilator failed to build r1c1a32 (")
    assert "%Error" in message and "systolic_array.v:2" in message
    assert message.endswith(f"log: {build_log}")
    assert lines == [f"Verilator: building r1c1a32 (log: {build_log})"]


RESULTS = """<?xml version='1.0' encoding='utf-8'?>
<testsuites name="cocotb tests"><testsuite name="sim.tb" tests="4">
<testcase name="ok" time="0.1"><properties>
  <property name="sim_time_duration" value="4260.0" /></properties></testcase>
<testcase name="bad" time="0.1"><failure message="seed=3 M=2: got 5, want 6"
  type="AssertionError">Traceback (most recent call last):
AssertionError: seed=3 M=2: got 5, want 6</failure></testcase>
<testcase name="crashed" time="0.1"><error>Traceback (most recent call last):
RuntimeError: the DUT hung</error></testcase>
<testcase name="other" time="0.0"><skipped message="Test was skipped" /></testcase>
</testsuite></testsuites>
"""


def test_outcomes_carry_the_testbench_messages(tmp_path):
    path = tmp_path / "results.xml"
    path.write_text(RESULTS)
    outcomes = read_outcomes(path)
    assert [(o.name, o.result, o.sim_us) for o in outcomes] == [
        ("ok", "PASS", 4.26), ("bad", "FAIL", 0.0), ("crashed", "FAIL", 0.0),
        ("other", "SKIP", 0.0)]
    assert failure_lines(outcomes) == ["bad: AssertionError: seed=3 M=2: got 5, want 6",
                                       "crashed: RuntimeError: the DUT hung"]


def test_build_errors_fall_back_to_the_log_tail(tmp_path):
    log = tmp_path / "build.log"
    log.write_text("\n".join(f"line {i}" for i in range(20)) + "\n")
    assert first_build_errors(log, limit=3) == "line 17\nline 18\nline 19"
    log.write_text("ok\n%Error: a.v:2:12: syntax error\nmore\nmake: *** [all] Error 2\n")
    assert first_build_errors(log) == "%Error: a.v:2:12: syntax error\nmake: *** [all] Error 2"
    assert first_build_errors(tmp_path / "missing.log") == ""


@pytest.mark.slow
def test_a_failing_twin_build_quotes_the_tool_error(tmp_path, monkeypatch):
    from contract.config import ConvEngineConfig
    from twin import dma

    config = ConvEngineConfig(array=TINY, act_depth=256, weight_depth=64, max_col_tiles=2)
    monkeypatch.setattr(dma, "YOSYS_SCRIPT", "read_rtlil {source}\nno_such_pass\n"
                                              "write_verilog {target}\n")
    lines = []
    with pytest.raises(dma.TwinBuildError) as info:
        dma.build_twin(config, build_root=tmp_path, log=lines.append)
    message = str(info.value)
    assert message.startswith("Yosys failed to build the twin (exit 1):\n")
    assert "ERROR: No such command: no_such_pass" in message
    assert message.endswith("build.log") and "log: " + str(tmp_path) in message
    assert lines[0] == f"twin: generating the netlist for {config.name}"
