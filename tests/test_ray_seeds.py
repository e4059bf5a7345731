"""Regression at scale: ``tessera soak --seeds`` on a real local Ray (docs/scale-out.md).

A provider made to mismatch on purpose (``tests/soak_double.py``, loaded through
``TESSERA_SOAK_PROVIDERS``) runs beside ``cpu``. The report must name exactly the
(seed, index) pairs the double corrupts, found here without the soak, and each printed
repro command, run as one shell command, must repeat that mismatch. The seeds are fixed
(1-3, printed): the double's choice is what varies between cases.
"""

import json
import os
import shlex
import subprocess
from pathlib import Path

import pytest

from sw_driver.providers import CPUProvider
from tessera import results
from tessera.cli import main
from tessera.ray_cluster import RayClusterError, import_ray
from tessera.soak import draw_case
from tessera.soak.golden import golden_output

try:
    import_ray()  # a local Ray must first be told to stay on 127.0.0.1
except RayClusterError as exc:
    pytest.skip(str(exc), allow_module_level=True)

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning:ray.*")

ROOT = Path(__file__).resolve().parent.parent
DOUBLE = ROOT / "tests" / "soak_double.py"
SEEDS, COUNT = (1, 2, 3), 15
ARGV = ["soak", "--seeds", "1-3", "--count", str(COUNT), "--providers", "cpu,corrupt",
        "--no-onnxruntime"]


def _expected_mismatches():
    """(seed, index) of every case the double corrupts and the CPU provider runs."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("soak_double_here", DOUBLE)
    double = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(double)
    cpu, expected = CPUProvider(), set()
    for seed in SEEDS:
        for index in range(COUNT):
            case = draw_case(seed, index)
            try:
                golden_output(case)
            except Exception:  # a case the golden model rejects fails no backend
                continue
            if cpu.supports(case.layer, tuple(case.inputs[0].shape)) is None \
                    and double.corrupts(case.inputs):
                expected.add((seed, index))
    return expected


def _run(monkeypatch, tmp_path, *extra):
    monkeypatch.setattr(results, "RESULTS", tmp_path)
    assert main([*ARGV, *extra]) == 1  # mismatches found: exit status 1
    document = json.loads((tmp_path / "soak_seeds.json").read_text())
    document.get("machine", {}).pop("load", None)  # the load average when it was written
    return document


def test_seeds_on_ray_name_every_planted_mismatch_and_each_repro_repeats_it(
        monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("TESSERA_SOAK_PROVIDERS", str(DOUBLE))
    expected = _expected_mismatches()
    print(f"seeds {SEEDS}, {COUNT} cases each; the double corrupts {sorted(expected)}")
    assert expected and len(expected) < len(SEEDS) * COUNT  # some cases fail, not all
    assert len({seed for seed, _ in expected}) > 1  # spread over several seeds

    on_ray = _run(monkeypatch, tmp_path / "ray", "--ray")
    out = capsys.readouterr().out
    assert "ray: 3 seeds x 15 configurations in" in out
    found = [(m["seed"], m["index"], m["backend"]) for m in on_ray["mismatches"]]
    assert sorted(found) == found  # reported in (seed, index) order
    assert {(s, i) for s, i, _ in found} == expected and len(found) == len(expected)
    assert {b for _, _, b in found} == {"corrupt"}  # the real CPU provider never fails
    for seed, index in expected:
        assert f"MISMATCH seed {seed} corrupt case {index} (" in out, (seed, index)

    local = _run(monkeypatch, tmp_path / "local")  # the same run as one local loop
    for document in (on_ray, local):
        document.pop("date")
        document.pop("wall_seconds")
        document.pop("ray")
        document["metrics"] = [m for m in document["metrics"]
                               if m["name"] not in ("soak_seeds_seconds",
                                                    "soak_seeds_per_second")]
    assert on_ray == local

    seed, index = min(expected)
    failure = next(m for m in on_ray["mismatches"] if (m["seed"], m["index"]) == (seed, index))
    repro = failure["repro"]
    assert repro == (f"TESSERA_SOAK_PROVIDERS={shlex.quote(str(DOUBLE))} .venv/bin/tessera "
                     f"soak --seed {seed} --only {index} --backends corrupt")
    env = {k: v for k, v in os.environ.items() if k != "TESSERA_SOAK_PROVIDERS"}
    done = subprocess.run(["bash", "-c", repro], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 1, done.stdout + done.stderr
    assert f"case {index} of seed {seed}: " in done.stdout
    assert f"corrupt: mismatch {failure['detail']}" in " ".join(done.stdout.split())

    # the --index/--providers spelling, on a case the double leaves alone: it passes
    clean = next(i for i in range(COUNT) if (seed, i) not in expected)
    done = subprocess.run(
        ["bash", "-c", f"TESSERA_SOAK_PROVIDERS={shlex.quote(str(DOUBLE))} .venv/bin/tessera "
                       f"soak --seed {seed} --index {clean} --providers corrupt"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"case {clean} of seed {seed}: " in done.stdout


def test_bad_seeds_and_plugins_are_named(monkeypatch, capsys):
    assert main(["soak", "--seeds", "3-1"]) == 2
    assert "--seeds must be" in capsys.readouterr().err
    assert main(["soak", "--seeds", "1-2", "--index", "4"]) == 2
    assert "--seeds runs whole seeds" in capsys.readouterr().err
    monkeypatch.setenv("TESSERA_SOAK_PROVIDERS", "/nonexistent/plugin.py")
    assert main(["soak", "--seeds", "1", "--providers", "cpu"]) == 2
    err = capsys.readouterr().err
    assert "TESSERA_SOAK_PROVIDERS: cannot import '/nonexistent/plugin.py'" in err
    assert "Traceback" not in err
