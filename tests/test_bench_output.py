"""`tessera bench` (``python -m bench``) prints each metric as it is written to
bench/results/*.json, and ends with a summary that names failed benchmarks in their own words."""

import importlib
import json
import subprocess
import sys
import types

import pytest

from bench import common
from bench import run as bench_run
from tessera import cli
from tessera import results as written_results
from twin.runner import TestbenchFailed


@pytest.fixture
def results(tmp_path, monkeypatch):
    """bench/results in a temporary folder, and a fresh record of what was written.

    The test works inside that folder so that, as in real use (``bench/results/...`` below
    the repository), the summary shows a short relative path: an absolute temporary path is
    long enough for the table to fold it, splitting the name the test looks for."""
    monkeypatch.setattr(written_results, "RESULTS", tmp_path)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(written_results, "WRITTEN", [])
    return tmp_path


def _array_metrics():
    return [common.metric("gemm_8x8x8_cycles", 1234, "cycles", peer="ideal", peer_value=8.0),
            common.metric("gemm_8x8x8_utilization", 0.0065, "fraction", target=0.85)]


def test_each_metric_is_printed_as_it_is_written(results, capsys):
    path = common.write_results("array", _array_metrics(), config={"rows": 8})
    lines = capsys.readouterr().out.splitlines()
    assert lines == [
        f"  {'gemm_8x8x8_cycles':<48} {'1,234':>14} cycles  (peer ideal: 8.0)",
        f"  {'gemm_8x8x8_utilization':<48} {'0.0065':>14} fraction  (target 0.85)",
        f"wrote 2 metrics to {results / 'array.json'}",
    ]
    assert json.loads(path.read_text())["metrics"] == _array_metrics()
    assert written_results.WRITTEN == [(results / "array.json", 2)]


def test_bench_summary_names_each_benchmark_and_its_failure(results, monkeypatch, capsys):
    def array_main():
        common.write_results("array", _array_metrics())

    def twin_main():
        raise TestbenchFailed("1 of 1 cocotb tests failed in sim.tb_conv_bench on r4c4a32 "
                              "(seed 1):\n  bench: AssertionError: cycles [3] differ")

    fakes = {"bench.bench_array": array_main, "bench.bench_twin": twin_main}
    real = importlib.import_module
    monkeypatch.setattr(importlib, "import_module", lambda name, *args: (
        types.SimpleNamespace(main=fakes[name]) if name in fakes else real(name, *args)))
    assert bench_run.main(["array", "twin"]) == 1
    out = capsys.readouterr().out
    assert "gemm_8x8x8_cycles" in out and "1,234 cycles" in out
    # The testbench's own words, "[3]" included (not eaten as markup), and no traceback.
    assert "bench twin failed: 1 of 1 cocotb tests failed in sim.tb_conv_bench" in out
    assert "bench: AssertionError: cycles [3] differ" in out and "Traceback" not in out
    summary = out[out.index("benchmarks"):]
    assert "array" in summary and "ok" in summary and "twin" in summary
    assert "failed" in summary and "array.json" in summary
    assert out.rstrip().endswith("2 benchmark(s): 2 metric(s) written, 1 failed")


def test_tessera_bench_runs_the_benchmarks_as_their_own_program(monkeypatch):
    """The product does not import the benchmarks that measure it: `tessera bench` starts
    ``python -m bench`` with its names and --config, and returns its exit status."""
    calls = []
    monkeypatch.setattr(subprocess, "call", lambda command: calls.append(command) or 3)
    assert cli.main(["bench", "array", "twin", "--config", "tiny"]) == 3
    assert calls == [[sys.executable, "-m", "bench", "array", "twin", "--config", "tiny"]]


def test_unknown_benchmark_is_named(capsys):
    assert bench_run.main(["array", "nosuch"]) == 2
    assert "unknown benchmark(s) nosuch" in capsys.readouterr().out
