"""make sweep: job keys (content hashes), the cache, the pluggable runner, the results
and the plot. No build runs here: the runner is a stand-in that records what it is
asked."""

import json
import os
import subprocess
import sys

import pytest

from contract.config import ArrayConfig, ConvEngineConfig
from tessera.explore import sweep


def engine(rows, cols, act=4096, weight=1024):
    return ConvEngineConfig(array=ArrayConfig(rows=rows, cols=cols), act_depth=act,
                            weight_depth=weight)


def fake_record(spec, fmax=120.0):
    job = sweep.SweepJob.from_spec(spec)
    c = job.config
    return {**spec, "label": job.label, "family": "ecp5", "rows": c.rows, "cols": c.cols,
            "clock_mhz": 100.0, "fmax_mhz": fmax, "timing_met": True,
            "resources": {"LUT4": {"used": 9000 + 100 * c.rows * c.cols, "available": 83640},
                          "MULT18X18D": {"used": c.rows * c.cols + 16, "available": 156},
                          "DP16KD": {"used": 20, "available": 208}},
            "peak_gops": round(2 * c.rows * c.cols * fmax / 1e3, 3)}


class RecordingRunner:
    """Runs nothing: answers each spec with a made-up record and remembers the specs."""

    def __init__(self):
        self.specs = []

    def run(self, function, specs, build, sources):
        for spec in specs:
            self.specs.append(spec)
            record = fake_record(spec)
            record["key"] = sweep.job_key(sweep.SweepJob.from_spec(spec), sources)
            folder = sweep.Path(build) / record["key"]
            folder.mkdir(parents=True)
            (folder / sweep.RESULT_NAME).write_text(json.dumps(record))
            yield record


# ------------------------------------------------------------------ keys and cache

def test_job_key_is_a_stable_content_hash():
    job = sweep.SweepJob("ulx3s-85f", engine(4, 4))
    key = sweep.job_key(job, sources="fixed")
    # The same inputs give the same key in another process (no hash randomisation).
    script = ("from tessera.explore import sweep; from contract.config import *; "
              "print(sweep.job_key(sweep.SweepJob('ulx3s-85f', ConvEngineConfig("
              "array=ArrayConfig(rows=4, cols=4), act_depth=4096, weight_depth=1024)), "
              "sources='fixed'))")
    other = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                           check=True).stdout.strip()
    assert key == other and len(key) == 16
    assert sweep.job_key(sweep.SweepJob.from_spec(job.spec()), "fixed") == key
    # Anything that changes the netlist or the build changes the key.
    assert sweep.job_key(sweep.SweepJob("ulx3s-85f", engine(4, 8)), "fixed") != key
    assert sweep.job_key(sweep.SweepJob("ulx3s-45f", engine(4, 4)), "fixed") != key
    assert sweep.job_key(sweep.SweepJob("ulx3s-85f", engine(4, 4, act=2048)), "fixed") != key
    assert sweep.job_key(sweep.SweepJob("ulx3s-85f", engine(4, 4), seed=2), "fixed") != key
    assert sweep.job_key(sweep.SweepJob("ulx3s-85f", engine(4, 4), clock_mhz=100.0),
                         "fixed") != key
    assert sweep.job_key(job, sources="edited") != key


def test_source_digest_covers_hw_and_contract(tmp_path):
    for folder in ("hw", "contract"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "a.py").write_text("x = 1\n")
    before = sweep.source_digest(tmp_path)
    (tmp_path / "contract" / "a.py").write_text("x = 2\n")
    assert sweep.source_digest(tmp_path) != before
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "b.py").write_text("")
    assert sweep.source_digest(tmp_path) == sweep.source_digest(tmp_path)


def test_cached_jobs_are_not_run_again(tmp_path):
    jobs = [sweep.SweepJob("ulx3s-85f", engine(2, 2)), sweep.SweepJob("ulx3s-85f", engine(4, 4))]
    runner, lines = RecordingRunner(), []
    first = sweep.run_sweep(jobs, runner, build=tmp_path, say=lines.append)
    assert [s["config"]["array"]["rows"] for s in runner.specs] == [2, 4]
    assert [r["rows"] for r in first] == [2, 4]
    assert any(line.startswith("  [2/2]") and "fmax 120.0 MHz" in line for line in lines)

    runner2, lines2 = RecordingRunner(), []
    more = jobs + [sweep.SweepJob("ulx3s-85f", engine(8, 8))]
    second = sweep.run_sweep(more, runner2, build=tmp_path, say=lines2.append)
    assert [s["config"]["array"]["rows"] for s in runner2.specs] == [8]  # only the new one
    assert [r["rows"] for r in second] == [2, 4, 8]
    assert sum(line.startswith("  cached") for line in lines2) == 2
    assert "1 build(s) to run, 2 cached" in lines2[2]


def test_default_jobs_leave_out_what_the_board_cannot_hold():
    jobs = sweep.default_jobs([(2, 2), (4, 4), (8, 8)], ["ulx3s-85f", "icebreaker"])
    assert [(j.board, j.config.rows) for j in jobs] == [
        ("ulx3s-85f", 2), ("ulx3s-85f", 4), ("ulx3s-85f", 8), ("icebreaker", 2)]
    # Each board keeps its default configuration's buffers and optional blocks.
    assert jobs[-1].config.act_depth == 1024
    assert not jobs[-1].config.pipelined and not jobs[-1].config.residual_add
    assert jobs[0].config.pipelined and jobs[0].config.residual_add


def test_parse_sizes():
    assert sweep.parse_sizes("2x2, 4X8") == [(2, 2), (4, 8)]
    for bad in ("4", "0x2", "ax2", "2x2x2"):
        with pytest.raises(ValueError, match="must look like RxC"):
            sweep.parse_sizes(bad)


# ------------------------------------------------------------------ runners

def test_ray_runner_is_chosen_by_the_flag_and_imports_no_ray():
    import argparse

    parser = argparse.ArgumentParser()
    sweep.add_arguments(parser)
    assert isinstance(sweep.make_runner(parser.parse_args([])), sweep.LocalRunner)
    runner = sweep.make_runner(parser.parse_args(["--ray", "10.0.0.1:6379"]))
    assert isinstance(runner, sweep.RayRunner) and runner.address == "10.0.0.1:6379"
    assert sweep.make_runner(parser.parse_args(["--ray"])).address is None
    assert sweep.make_runner(parser.parse_args(["--jobs", "3"])).workers == 3
    script = ("import sys, argparse; from tessera.explore import sweep; "
              "p = argparse.ArgumentParser(); "
              "sweep.add_arguments(p); sweep.make_runner(p.parse_args(['--ray'])); "
              "print('ray' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         check=True).stdout.strip()
    assert out == "False"


def _square(spec, **kwargs):
    return {"n": spec * spec, **kwargs}


def test_local_runner_runs_every_job_in_processes():
    results = list(sweep.LocalRunner(2).run(_square, [1, 2, 3], tag="x"))
    assert sorted(r["n"] for r in results) == [1, 4, 9]
    assert all(r["tag"] == "x" for r in results)


# ------------------------------------------------------------------ results and plot

def test_summarize_report_and_metrics():
    job = sweep.SweepJob("ulx3s-85f", engine(8, 8))
    report = {"family": "ecp5", "device": "LFE5U-85F", "clock_mhz": 125.0,
              "fmax_mhz": 131.5, "timing_met": True,
              "resources": {"MULT18X18D": {"used": 80, "available": 156, "percent": 51.3}},
              "wall_time_s": {"synthesis_s": 1.0}, "logs": {}, "critical_path": {}}
    record = sweep.summarize_report(job, report)
    assert record["peak_gops"] == pytest.approx(2 * 64 * 131.5 / 1e3)
    assert record["resources"] == {"MULT18X18D": {"used": 80, "available": 156}}
    metrics = {m["name"]: m for m in sweep.sweep_metrics([record])}
    assert metrics[f"{job.label} fmax"]["value"] == 131.5
    assert metrics[f"{job.label} MULT18X18D"]["note"] == "of 156"
    failed = {**job.spec(), "label": job.label, "error": "nextpnr failed; see x.log"}
    assert sweep.sweep_metrics([failed])[0]["value"] == "failed"


def test_plot_writes_a_png(tmp_path):
    records = [fake_record(sweep.SweepJob("ulx3s-85f", engine(n, n)).spec(), 100 + n)
               for n in (2, 4, 8)]
    path = sweep.plot(records, tmp_path / "sweep.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert path.stat().st_size > 10_000


def test_unknown_board_in_a_sweep(capsys):
    from tessera.cli import main

    assert main(["sweep", "--boards", "ulx3s-85f,de10"]) == 2
    out = " ".join(capsys.readouterr().out.split())
    assert "unknown board 'de10'; known boards: icebreaker, ulx3s-25f" in out


def test_stale_results_are_taken_only_when_asked(tmp_path, monkeypatch):
    """After hw/ or contract/ change, a job is rebuilt; with stale_ok its earlier build is
    taken, marked as built from older sources."""
    job = sweep.SweepJob("ulx3s-85f", engine(2, 2))
    monkeypatch.setattr(sweep, "source_digest", lambda root=None: "A")
    sweep.run_sweep([job], RecordingRunner(), build=tmp_path, say=lambda line: None)
    first = tmp_path / sweep.job_key(job, "A") / sweep.RESULT_NAME
    os.utime(first, (first.stat().st_mtime - 1000,) * 2)  # unambiguously the older one
    monkeypatch.setattr(sweep, "source_digest", lambda root=None: "B")
    runner = RecordingRunner()
    (fresh,) = sweep.run_sweep([job], runner, build=tmp_path, say=lambda line: None)
    assert len(runner.specs) == 1 and "stale_sources" not in fresh
    monkeypatch.setattr(sweep, "source_digest", lambda root=None: "C")
    runner, lines = RecordingRunner(), []
    (stale,) = sweep.run_sweep([job], runner, build=tmp_path, say=lines.append, stale_ok=True)
    assert runner.specs == [] and stale["stale_sources"] is True
    assert stale["key"] == sweep.job_key(job, "B")  # the newest of the earlier builds
    assert "built from older sources" in lines[0]
    other = sweep.SweepJob("ulx3s-85f", engine(2, 4))
    assert sweep.stale_result(other, tmp_path) is None


@pytest.mark.filterwarnings("ignore::DeprecationWarning:ray.*")
def test_ray_runner_runs_the_jobs_as_ray_tasks():
    """The same runner interface on a local Ray: every job comes back (in any order)."""
    results = list(sweep.RayRunner().run(sweep.parse_sizes, ["2x2", "4x8", "1x3"]))
    assert sorted(results) == [[(1, 3)], [(2, 2)], [(4, 8)]]


def test_pack_only_jobs_have_their_own_key_and_full_jobs_keep_theirs():
    full = sweep.SweepJob("ulx3s-85f", engine(4, 8))
    pack = sweep.SweepJob("ulx3s-85f", engine(4, 8), mode="pack")
    assert "mode" not in full.spec() and pack.spec()["mode"] == "pack"
    assert sweep.job_key(full, "s") != sweep.job_key(pack, "s")
    assert sweep.SweepJob.from_spec(pack.spec()) == pack
    assert pack.label.endswith("(pack only)")
    with pytest.raises(ValueError, match="mode must be one of"):
        sweep.SweepJob("ulx3s-85f", engine(2, 2), mode="route")
    record = {**fake_record(pack.spec()), "fmax_mhz": None, "peak_gops": None}
    names = [m["name"] for m in sweep.sweep_metrics([record])]
    assert names and not any("fmax" in n or "peak" in n for n in names)


def test_utilization_is_read_from_a_nextpnr_log(tmp_path):
    log = tmp_path / "top.tim"
    log.write_text("Info: Device utilisation:\n"
                   "Info: \t          MULT18X18D:      48/    156    30%\n"
                   "Info: \t        TRELLIS_COMB:   18263/  83640    21%\n"
                   "Info: Packing IOs..\n")
    assert sweep.utilization_from_log(log) == {
        "MULT18X18D": {"used": 48, "available": 156},
        "TRELLIS_COMB": {"used": 18263, "available": 83640}}
    log.write_text("ERROR: nothing\n")
    with pytest.raises(ValueError, match="no device utilisation lines"):
        sweep.utilization_from_log(log)


def test_cached_only_builds_nothing(tmp_path):
    built = sweep.SweepJob("ulx3s-85f", engine(2, 2))
    sweep.run_sweep([built], RecordingRunner(), build=tmp_path, say=lambda line: None)
    runner, lines = RecordingRunner(), []
    new = sweep.SweepJob("ulx3s-85f", engine(4, 4))
    records = sweep.run_sweep([built, new], runner, build=tmp_path, say=lines.append,
                              cached_only=True)
    assert runner.specs == [] and [r["rows"] for r in records] == [2]
    assert any(line.startswith("  not built ulx3s-85f 4x4") for line in lines)


def test_a_full_job_is_not_answered_by_a_pack_only_build(tmp_path, monkeypatch):
    pack = sweep.SweepJob("ulx3s-85f", engine(2, 2), mode="pack")
    monkeypatch.setattr(sweep, "source_digest", lambda root=None: "A")
    sweep.run_sweep([pack], RecordingRunner(), build=tmp_path, say=lambda line: None)
    full = sweep.SweepJob("ulx3s-85f", engine(2, 2))
    assert sweep.stale_result(full, tmp_path) is None
    assert sweep.stale_result(pack, tmp_path)["mode"] == "pack"
