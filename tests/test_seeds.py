"""The session seed reaches every xdist worker, and a failure prints the command that
reproduces it (run as a child pytest on tests/data/probe_seeds.py)."""

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

PROBE = "tests/data/probe_seeds.py"
ROOT = Path(__file__).resolve().parent.parent


def _pytest(args, probe_dir, seed=None):
    env = {k: v for k, v in os.environ.items()
           if k not in ("TESSERA_SEED", "PYTEST_XDIST_WORKER", "PYTEST_ADDOPTS")}
    env["TESSERA_SEED_PROBE_DIR"] = str(probe_dir)
    if seed is not None:
        env["TESSERA_SEED"] = str(seed)
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)


def _seen(probe_dir):
    return {path.name: path.read_text().split() for path in Path(probe_dir).iterdir()}


def test_workers_share_the_session_seed_and_failures_print_their_repro(tmp_path):
    first = tmp_path / "xdist"
    first.mkdir()
    # As make test runs it: two workers, the shared-build scheduler (tests/conftest.py).
    run = _pytest(["-n", "2", "--dist", "loadgroup", PROBE], first)
    out = run.stdout
    assert run.returncode == 1, out + run.stderr
    header = re.search(r"tessera seed: (\d+)", out)
    assert header, out
    session = header.group(1)
    seen = _seen(first)
    assert len(seen) == 7, seen
    assert {worker for worker, _, _ in seen.values()} == {"gw0", "gw1"}, seen
    assert {s for _, s, _ in seen.values()} == {session}, (
        f"header says {session}, the workers used {seen}")

    # The failure names its seeds and the exact command, in its report and at the end.
    nodeid = f"{PROBE}::test_fails"
    commands = re.findall(rf"^(?:reproduce: )?(TESSERA_SEED=\d+ \S+ -m pytest .*{nodeid})$",
                          out, re.MULTILINE)
    assert len(commands) == 2 and commands[0] == commands[1], out
    assert f"this test's seed {seen['test_fails'][2]}" in out, out

    # That command, run alone and without xdist, gives the test the same seed.
    second = tmp_path / "alone"
    second.mkdir()
    words = shlex.split(commands[0])
    seed = words[0].split("=")[1]
    assert seed == session
    rerun = _pytest(words[words.index("pytest") + 1:], second, seed=seed)
    assert rerun.returncode == 1, rerun.stdout
    assert _seen(second)["test_fails"][1:] == seen["test_fails"][1:]


def test_shared_builds_name_real_test_files_and_group_them():
    import conftest

    for group, modules in conftest.SHARED_BUILDS.items():
        for module in modules:
            assert (ROOT / "tests" / f"{module}.py").exists(), f"{group}: no {module}.py"
            assert conftest.work_unit(f"tests/{module}.py::test_x[a-b]") == group
    alone = "tests/test_seeds.py::test_shared_builds_name_real_test_files_and_group_them"
    assert conftest.work_unit(alone) == alone
