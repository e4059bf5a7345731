"""What a new user meets at the front door: each make target's own variables, `make help`
against the README, `tessera run`'s inputs (dtype, NaN, non-.npy files, saturation, random
samples said aloud), the bitstream report's clock and what `tessera build --dry-run` writes.
Make is run with -n (nothing executes); the CLI runs in-process."""

import json
import os
import re
import subprocess
import types
from pathlib import Path

import numpy as np
import pytest

from models.zoo import DIGITS_QDQ
from tessera.cli import main
from tessera.commands.run import SATURATION_WARN_FRACTION

ROOT = Path(__file__).resolve().parent.parent
# Variables a parent make (make test) or the caller's shell could hand to the child make.
_MAKE_ENV_DROP = ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES", "OUT", "MODEL",
                  "DRY", "BOARD", "CALIB", "METHOD", "DATASET", "INPUT")


def make_n(*args):
    """The commands ``make -n ARGS`` would run (nothing runs), one string."""
    env = {k: v for k, v in os.environ.items() if k not in _MAKE_ENV_DROP}
    result = subprocess.run(["make", "--no-print-directory", "-n", *args], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return result.stdout.replace("\\\n", " ")


def tessera_line(output, command):
    """The one `tessera COMMAND ...` line of make -n output, its words."""
    lines = [line.split() for line in output.splitlines()
             if re.search(rf"/tessera {command}\b", line)]
    assert len(lines) == 1, output
    return lines[0]


# ------------------------------------------------------------------ make's variables

def test_build_model_does_not_take_quantizes_output_file():
    words = tessera_line(make_n("build-model", f"MODEL={DIGITS_QDQ.relative_to(ROOT)}",
                                "BOARD=ulx3s-85f", "DRY=1"), "build")
    assert "--out" not in words and "--dry-run" in words, words
    assert not any("digits_tessera_qdq" in word for word in words), words
    words = tessera_line(make_n("build-model", "OUT=build/mine"), "build")
    assert words[words.index("--out") + 1] == "build/mine"


def test_quantize_keeps_its_default_output_file():
    words = tessera_line(make_n("quantize"), "quantize")
    assert words[words.index("-o") + 1] == "build/zoo/digits_tessera_qdq.onnx"
    words = tessera_line(make_n("quantize", "OUT=build/q.onnx"), "quantize")
    assert words[words.index("-o") + 1] == "build/q.onnx"


def test_build_out_that_is_a_file_is_one_line(tmp_path, capsys):
    out = tmp_path / "digits_tessera_qdq.onnx"
    out.write_bytes(b"a model")
    assert main(["build", str(DIGITS_QDQ), "--board", "ulx3s-85f", "--dry-run",
                 "--out", str(out)]) == 2
    text = "".join(capsys.readouterr().out.split())  # rich wraps long paths anywhere
    assert f"--out{out}isafile" in text and "Traceback" not in text
    assert out.read_bytes() == b"a model"


def test_make_help_lists_every_target_the_readme_names():
    readme = (ROOT / "README.md").read_text()
    rules = set(re.findall(r"^([a-z][a-z0-9-]*):", (ROOT / "Makefile").read_text(),
                           re.MULTILINE))
    named = set(re.findall(r"`make ([a-z][a-z0-9-]*)", readme)) & rules
    assert {"build-model", "sweep", "run", "quantize"} <= named  # the regex finds them
    help_text = make_n("help")  # -n prints the @echo lines themselves
    listed = set(re.findall(r"\bmake ([a-z][a-z0-9-]*)", help_text))
    assert named - {"help"} <= listed, f"not in make help: {sorted(named - {'help'} - listed)}"


# ------------------------------------------------------------------ tessera run's inputs

def _run(capsys, *extra):
    code = main(["run", str(DIGITS_QDQ), *extra])
    captured = capsys.readouterr()
    return code, " ".join(captured.out.split()), captured.err


def test_run_without_data_says_the_inputs_are_random(capsys):
    code, out, _ = _run(capsys, "--samples", "4", "--seed", "3")
    assert code == 0
    assert "4 random samples (--seed 3)" in out
    assert "accuracy needs labelled data: --dataset digits (make run DATASET=digits)" in out
    code, out, _ = _run(capsys, "--dataset", "digits", "--batch", "450")
    assert code == 0 and "random" not in out


def test_run_refuses_an_integer_input_as_the_api_does(tmp_path, capsys):
    from sw_driver import InferenceSession
    from sw_driver.errors import InputError

    x = np.random.default_rng(0).integers(-128, 128, (2, 1, 8, 8)).astype(np.int8)
    with pytest.raises(InputError, match="dtype int8"):
        InferenceSession(str(DIGITS_QDQ)).run(None, {"input": x})
    np.save(tmp_path / "x.npy", x)
    code, _, err = _run(capsys, "--input", str(tmp_path / "x.npy"))
    assert code == 2
    assert "holds int8 values; input 'input' takes real values as float32" in err
    assert "(q - zero_point) * scale" in err


def test_run_reads_a_float64_input_as_float32(tmp_path, capsys):
    np.save(tmp_path / "x.npy", np.random.default_rng(0).random((2, 1, 8, 8)))
    code, out, err = _run(capsys, "--input", str(tmp_path / "x.npy"))
    assert code == 0 and "2 samples" in out and "warning" not in err


def test_non_finite_input_prints_the_value_plainly(tmp_path, capsys):
    from sw_driver import InferenceSession
    from sw_driver.errors import InputError

    x = np.random.default_rng(0).random((3, 1, 8, 8), dtype=np.float32)
    x[2, 0, 3, 4] = np.nan
    with pytest.raises(InputError) as raised:
        InferenceSession(str(DIGITS_QDQ)).run(None, {"input": x})
    assert "(nan at index (2, 0, 3, 4))" in str(raised.value)
    assert "np.float32" not in str(raised.value)
    np.save(tmp_path / "x.npy", x)
    code, _, err = _run(capsys, "--input", str(tmp_path / "x.npy"), "--batch", "2")
    assert code == 2 and "np.float32" not in err
    # The index in the file, not in the batch the sample landed in.
    assert "1 non-finite value(s), the first nan at index (2, 0, 3, 4)" in err


@pytest.mark.parametrize("content", [b"hello, not an array", b"PK\x03\x04 a zip"])
def test_non_npy_input_does_not_mention_pickles(content, tmp_path, capsys):
    path = tmp_path / "x.npy"
    path.write_bytes(content)
    code, _, err = _run(capsys, "--input", str(path))
    assert code == 2 and f"input '{path}' is not a .npy array file" in err
    assert "pickle" not in err
    assert main(["run-dataset", str(DIGITS_QDQ), "--input", str(path),
                 "--out", str(tmp_path / "y.npy")]) == 2
    err = capsys.readouterr().err
    assert "is not a .npy array file" in err and "pickle" not in err


def test_object_array_input_says_objects(tmp_path, capsys):
    np.save(tmp_path / "x.npy", np.array([1, "a"], dtype=object), allow_pickle=True)
    code, _, err = _run(capsys, "--input", str(tmp_path / "x.npy"))
    assert code == 2 and "holds Python objects" in err and "allow_pickle" not in err


def _saturating(fraction, rng):
    """Digits inputs in range ([0, 1]) with ``fraction`` of the values at 1e30."""
    x = rng.random((4, 1, 8, 8), dtype=np.float32)
    flat = x.reshape(-1)
    flat[rng.choice(flat.size, round(fraction * flat.size), replace=False)] = 1e30
    return x


def test_saturating_input_warns_above_the_stated_fraction(tmp_path, capsys):
    rng = np.random.default_rng(0)
    limit = SATURATION_WARN_FRACTION
    np.save(tmp_path / "all.npy", np.full((4, 1, 8, 8), 1e30, np.float32))
    code, out, err = _run(capsys, "--input", str(tmp_path / "all.npy"))
    assert code == 0 and "4 samples" in out  # a warning, not a refusal
    warning = " ".join(err.split())
    assert warning.startswith("warning: 100.0% of the values of --input ")
    assert "(256 of 256) lie outside [0, 1]" in warning
    assert f"more than {limit:.0%})" in warning
    under, over = 2, 4  # of 256 values: 0.8 % and 1.6 %, either side of 1 %
    assert under / 256 <= limit < over / 256
    np.save(tmp_path / "under.npy", _saturating(under / 256, rng))
    np.save(tmp_path / "over.npy", _saturating(over / 256, rng))
    assert _run(capsys, "--input", str(tmp_path / "under.npy"))[2] == ""
    assert "1.6% of the values" in _run(capsys, "--input", str(tmp_path / "over.npy"))[2]


def test_the_saturation_fraction_is_documented():
    text = " ".join((ROOT / "docs" / "runtime.md").read_text().split())
    assert f"more than {SATURATION_WARN_FRACTION:.0%} of its values" in text


# ------------------------------------------------------------------ bitstream report

def _stand_in_tools(monkeypatch):
    """`tessera bitstream`'s flow with the tools stood in for (an iCE40 that reaches
    24 MHz); returns the keyword arguments each build was prepared with."""
    from hw.bitstream import flow

    platform = types.SimpleNamespace(device="iCE40UP5K", package="SG48", family="iCE40")
    prepared = []

    def fake_prepare(board, config, *, clock_mhz, baud, seed, image=None, router=None):
        prepared.append({"clock_mhz": clock_mhz, "seed": seed})
        pll = types.SimpleNamespace(as_dict=lambda: {"primitive": "SB_PLL40_PAD"})
        top = types.SimpleNamespace(clock_mhz=clock_mhz, array_clock_mhz=clock_mhz,
                                    pll_settings=pll, divisor=6, baud_error=0.0)
        return platform, top, None

    raw = {"utilization": {"ICESTORM_LC": {"used": 4000, "available": 5280}},
           "fmax": {"$glbnet$clk": {"achieved": 24.0, "constraint": 18.0}}}

    def fake_run(platform, plan, build_dir, env, say):
        logs = {step: str(build_dir / f"{step}.log") for step in ("yosys", "nextpnr", "pack")}
        times = {"elaborate_s": 1.0, "synthesis_s": 1.0, "place_and_route_s": 1.0,
                 "pack_s": 1.0}
        return times, build_dir / "top.bin", raw, logs

    monkeypatch.setattr(flow, "prepare_build", fake_prepare)
    monkeypatch.setattr(flow, "run_plan", fake_run)
    monkeypatch.setattr(flow, "tool_versions", lambda family, env: {})
    monkeypatch.setattr(flow, "source_state", lambda: {})
    monkeypatch.setattr(flow, "tool_env", lambda: {})
    return prepared


def test_bitstream_report_config_carries_the_clock(tmp_path, monkeypatch, capsys):
    """`tessera bitstream --board icebreaker` with the tools stood in for: the report's
    configuration has the clock the build ran at, not None beside it."""
    from hw.bitstream import flow

    _stand_in_tools(monkeypatch)
    assert flow.default_config("icebreaker").clock_mhz is None  # the case that matters
    assert main(["bitstream", "--board", "icebreaker", "--build", str(tmp_path)]) == 0
    report = json.loads((tmp_path / "icebreaker" / "report.json").read_text())
    assert report["clock_mhz"] == 18.0
    assert report["config"]["clock_mhz"] == report["target_mhz"] == 18.0
    # No resident block on the UP5K's preset, no image; no DP16KD on an iCE40.
    assert report["image"] is None and report["block_ram"] == {}
    capsys.readouterr()


def test_bitstream_seed_reaches_nextpnr_and_the_report(tmp_path, monkeypatch, capsys):
    """`--seed N` is the placer seed the build is prepared with (nextpnr's `--seed`) and
    the one its report records; without it, the flow's fixed seed."""
    from hw.bitstream import DEFAULT_SEED

    prepared = _stand_in_tools(monkeypatch)
    assert main(["bitstream", "--board", "icebreaker", "--build", str(tmp_path / "a")]) == 0
    assert main(["bitstream", "--board", "icebreaker", "--seed", "7",
                 "--build", str(tmp_path / "b")]) == 0
    assert [p["seed"] for p in prepared] == [DEFAULT_SEED, 7] and DEFAULT_SEED != 7
    for folder, seed in (("a", DEFAULT_SEED), ("b", 7)):
        report = json.loads((tmp_path / folder / "icebreaker" / "report.json").read_text())
        assert report["seed"] == seed
    capsys.readouterr()


# ------------------------------------------------------------------ build --dry-run

def test_dry_run_says_what_it_writes(tmp_path, capsys):
    assert main(["build", str(DIGITS_QDQ), "--board", "icebreaker", "--dry-run",
                 "--out", str(tmp_path)]) == 0
    lines = [line.strip() for line in capsys.readouterr().out.splitlines()]
    said = lines.index("dry run: nothing built (no Verilog, no bitstream); wrote only the "
                       "plan:")
    assert lines[said + 1] == (f"{tmp_path / 'report.json'}  the prediction, per-layer "
                               f"costs, CPU fallbacks")
    assert lines[said + 2] == (f"{tmp_path / 'run-config.json'}  the chosen configuration "
                               f"(--config FILE)")
    assert not any(line.startswith("wrote ") for line in lines)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.json", "run-config.json"]
