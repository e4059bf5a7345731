"""``make sweep``: whole-accelerator builds over array sizes x boards, in parallel, cached.

Each job is one configuration on one board, built by the real board flow
(:func:`hw.bitstream.build_bitstream`: the accelerator behind its UART bridge and PLL,
YoWASP Yosys, nextpnr, pack) into ``build/sweep/<key>/``, where ``key`` hashes the job's
inputs (board, configuration, clock, seed) and the sources that go into the netlist
(``hw/`` and ``contract/``). A job whose folder already holds ``result.json`` is not run
again, so a sweep that is interrupted or extended only builds what is new.

Jobs are pure functions of their inputs, so the same :func:`run_job` runs in a local
process pool (:class:`LocalRunner`, up to the core count) or as Ray tasks
(:class:`RayRunner`, ``--ray [ADDRESS]``; Ray is imported only then).

The results go to ``bench/results/sweep.json`` (one entry per job: fmax, LUT/FF/DSP/EBR
used and available, peak GOP/s = 2·R·C·fmax, wall times, the log folder) and a plot,
``bench/results/sweep.png``. The same results calibrate the resource model
(``tessera/explore/resource_model.py``, ``--fit``).

Usage: ``python -m tessera.explore.sweep [--sizes 2x2,4x4,8x8] [--boards ulx3s-85f,icebreaker]
[--jobs N] [--ray [ADDRESS]] [--fit]``
"""

import argparse
import concurrent.futures
import hashlib
import json
import os
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from contract.config import ArrayConfig, ConvEngineConfig
from tessera.results import metric, write_results

from .resource_model import RESULT_NAME, SWEEP_BUILD

ROOT = Path(__file__).resolve().parent.parent
BUILD = SWEEP_BUILD
#: Bumped when what a job records changes, so old cached results are not mixed in.
FLOW_VERSION = 1
DEFAULT_SIZES = ((2, 2), (4, 4), (8, 8))
DEFAULT_BOARDS = ("ulx3s-85f", "icebreaker")
#: What a Ray task asks for: one core (Yosys and nextpnr run single-threaded here) and
#: the memory an 8x8 85F place and route was seen to need, so Ray packs no more builds on
#: a node than it can hold.
MODES = ("full", "pack")
TASK_CPUS = 1
TASK_MEMORY = 3 * 1024 ** 3


@dataclass(frozen=True)
class SweepJob:
    """One build of the sweep: ``config`` on ``board`` with the design clock
    ``clock_mhz`` (``None``: the board's default) and nextpnr seed ``seed``."""

    board: str
    config: ConvEngineConfig
    clock_mhz: float | None = None
    seed: int = 1
    #: ``"full"``: synthesis, place and route, pack (resources and fmax); ``"pack"``:
    #: synthesis and nextpnr's packing only (resources in a fraction of the time, no fmax).
    mode: str = "full"

    def __post_init__(self):
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, not {self.mode!r}")

    def spec(self):
        """The job as plain data (what a result records and the key hashes)."""
        spec = {"board": self.board, "config": self.config.as_dict(),
                "clock_mhz": self.clock_mhz, "seed": self.seed, "flow": FLOW_VERSION}
        if self.mode != "full":  # full builds keep the keys they had before modes
            spec["mode"] = self.mode
        return spec

    @classmethod
    def from_spec(cls, spec):
        config = dict(spec["config"])
        array = ArrayConfig(**config.pop("array"))
        return cls(board=spec["board"], config=ConvEngineConfig(array=array, **config),
                   clock_mhz=spec.get("clock_mhz"), seed=spec.get("seed", 1),
                   mode=spec.get("mode", "full"))

    @property
    def label(self):
        c = self.config
        return (f"{self.board} {c.rows}x{c.cols} act {c.act_depth} w {c.weight_depth}"
                + ("" if self.clock_mhz is None else f" @ {self.clock_mhz:g} MHz")
                + ("" if self.mode == "full" else f" ({self.mode} only)"))


def source_digest(root=ROOT):
    """Hash of the Python sources a netlist is generated from (``hw/``, ``contract/``)."""
    digest = hashlib.sha256()
    for folder in ("hw", "contract"):
        for path in sorted((root / folder).rglob("*.py")):
            digest.update(str(path.relative_to(root)).encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()


def job_key(job, sources=None):
    """Content hash of a job: its spec (key order does not matter) and the sources."""
    sources = source_digest() if sources is None else sources
    text = json.dumps(job.spec(), sort_keys=True) + sources
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def cached_result(job, build=BUILD, sources=None):
    """The stored result of ``job`` for these sources, or ``None``."""
    path = Path(build) / job_key(job, sources) / RESULT_NAME
    return json.loads(path.read_text()) if path.exists() else None


def summarize_report(job, report):
    """The sweep's record of one board build report (``hw.bitstream`` ``report.json``)."""
    c = job.config
    fmax = report.get("fmax_mhz")
    resources = {name: {"used": entry["used"], "available": entry["available"]}
                 for name, entry in report.get("resources", {}).items()}
    return {
        **job.spec(),
        "label": job.label,
        "family": report.get("family"),
        "device": report.get("device"),
        "rows": c.rows, "cols": c.cols,
        "pll_clock_mhz": report.get("clock_mhz"),
        "fmax_mhz": fmax,
        "timing_met": report.get("timing_met"),
        "resources": resources,
        "peak_gops": None if fmax is None else round(2 * c.rows * c.cols * fmax / 1e3, 3),
        "wall_time_s": report.get("wall_time_s"),
        "logs": report.get("logs"),
        "critical_path": report.get("critical_path"),
    }


def run_job(spec, build=str(BUILD), sources=None):
    """Build one job (given as :meth:`SweepJob.spec` data, so it crosses process and Ray
    boundaries as plain data) and return its record; a failed build returns a record with
    ``error`` (the tool's reason and its log) instead of raising, so one failure does not
    stop a sweep. The record is stored as ``result.json`` in the job's folder."""
    from rich.console import Console

    from hw.bitstream import BitstreamError, build_bitstream
    from tessera.board_report import console_say

    job = SweepJob.from_spec(spec)
    folder = Path(build) / job_key(job, sources)
    folder.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    with open(folder / "progress.log", "w") as log:
        console = Console(file=log, highlight=False, width=120)
        try:
            if job.mode == "pack":
                report = pack_only(job, folder, console)
            else:
                report = build_bitstream(job.board, job.config, build_root=folder,
                                         clock_mhz=job.clock_mhz, seed=job.seed,
                                         say=console_say(console))
            record = summarize_report(job, report)
        except (BitstreamError, ValueError, OSError) as error:
            record = {**job.spec(), "label": job.label, "error": str(error)}
    record["key"] = folder.name
    record["job_wall_s"] = round(time.monotonic() - started, 1)
    (folder / RESULT_NAME).write_text(json.dumps(record, indent=2) + "\n")
    return record


_UTILIZATION = re.compile(r"^Info:\s+(\w+):\s+(\d+)/\s*(\d+)\s+\d+%")


def utilization_from_log(path):
    """nextpnr's "Device utilisation" lines of a log, in its report's form
    (``{cell: {"used", "available"}}``); the last table wins."""
    utilization = {}
    for line in Path(path).read_text(errors="replace").splitlines():
        found = _UTILIZATION.match(line.strip("\r"))
        if found:
            cell, used, available = found.groups()
            utilization[cell] = {"used": int(used), "available": int(available)}
    if not utilization:
        raise ValueError(f"{path}: no device utilisation lines")
    return utilization


def _has_utilization(path):
    try:
        return bool(utilization_from_log(path))
    except (OSError, ValueError):
        return False


def pack_only(job, folder, console):
    """Synthesis and nextpnr ``--pack-only`` of the board build: the resource counts of
    a full build (placement and routing change no cell counts) without its fmax."""
    import shlex
    import subprocess

    from hw.bitstream import (
        NEXTPNR_REPORT_NAME,
        TOP_NAME,
        BitstreamError,
        parse_nextpnr_report,
        prepare_build,
    )
    from hw.bitstream.tools import tool_command
    from hw.toolchain import tool_env

    platform, _, plan = prepare_build(job.board, job.config, clock_mhz=job.clock_mhz,
                                      seed=job.seed)
    build_dir = folder / job.board
    plan.extract(build_dir)
    env = tool_env()
    commands = json.loads((build_dir / f"build_{TOP_NAME}.json").read_text())["commands"]
    times = {}
    for step, command in zip(("yosys", "nextpnr"), commands[:2], strict=True):
        argv = tool_command(command, env)
        yosys_log = build_dir / f"{TOP_NAME}.rpt"  # Amaranth's script logs there
        if step == "yosys" and (build_dir / f"{TOP_NAME}.json").exists() and \
                yosys_log.exists() and "End of script" in yosys_log.read_text(errors="replace"):
            continue  # same key, same netlist: an earlier attempt synthesized it already
        if step == "nextpnr":
            # Nothing is placed, so nothing can be written as a bitstream configuration.
            if "--textcfg" in argv:
                del argv[argv.index("--textcfg"):argv.index("--textcfg") + 2]
            argv.append("--pack-only")
        console.print(f"  {step}: {shlex.join(argv)[:100]}", markup=False)
        started = time.monotonic()
        with open(build_dir / f"{step}.log", "w") as log:
            done = subprocess.run(argv, cwd=build_dir, env=env, stdout=log,
                                  stderr=subprocess.STDOUT, check=False)
        times[f"{step}_s"] = round(time.monotonic() - started, 1)
        # nextpnr-ice40 0.11 ends a pack-only run over the device's capacity with a trap
        # after its utilisation table: the counts, which are all this run is for, stand.
        packed_anyway = step == "nextpnr" and _has_utilization(build_dir / f"{TOP_NAME}.tim")
        if done.returncode != 0 and not packed_anyway:
            raise BitstreamError(f"{step} failed (exit {done.returncode}); see "
                                 f"{build_dir / (step + '.log')}")
    report_path = build_dir / NEXTPNR_REPORT_NAME
    raw = json.loads(report_path.read_text()) if report_path.exists() else \
        {"utilization": utilization_from_log(build_dir / f"{TOP_NAME}.tim"), "fmax": {}}
    parsed = parse_nextpnr_report(raw, platform.family)
    return {"family": platform.family, "device": platform.device, "clock_mhz": None,
            "fmax_mhz": None, "timing_met": None, "resources": parsed["resources"],
            "wall_time_s": times,
            "logs": {step: str(build_dir / f"{step}.log") for step in ("yosys", "nextpnr")}}


class LocalRunner:
    """Runs jobs in a pool of local processes (``workers`` at a time)."""

    def __init__(self, workers=None):
        self.workers = max(1, workers or os.cpu_count() or 1)

    def run(self, function, specs, **kwargs):
        """Yield ``function(spec, **kwargs)`` for each spec, in the order they finish."""
        with concurrent.futures.ProcessPoolExecutor(self.workers) as pool:
            futures = [pool.submit(function, spec, **kwargs) for spec in specs]
            for future in concurrent.futures.as_completed(futures):
                yield future.result()


class RayRunner:
    """Runs the same jobs as Ray tasks, each declaring :data:`TASK_CPUS` and
    :data:`TASK_MEMORY`: a local Ray (``address`` None) or the cluster at ``HOST:PORT``
    (``tessera.ray_cluster.connect``; the sources must be the same on every node)."""

    def __init__(self, address=None):
        self.address = address

    def run(self, function, specs, **kwargs):
        from tessera import ray_cluster

        with ray_cluster.connect(self.address or ray_cluster.LOCAL) as ray:
            task = ray.remote(num_cpus=TASK_CPUS, memory=TASK_MEMORY)(function)
            pending = [task.remote(spec, **kwargs) for spec in specs]
            while pending:
                done, pending = ray.wait(pending, num_returns=1)
                yield ray.get(done[0])


def run_sweep(jobs, runner=None, build=BUILD, say=print, *, stale_ok=False,
              cached_only=False):
    """Build every job not already cached; return the records in the jobs' order.

    With ``stale_ok``, a job built before from other sources (``hw/``, ``contract/``
    changed since) is taken as it is, marked ``stale_sources``, rather than rebuilt. With
    ``cached_only`` nothing is built: the jobs without a result are left out (and named).
    """
    sources = source_digest()
    records, todo = {}, []
    for job in jobs:
        cached = cached_result(job, build, sources)
        if cached is None and stale_ok:
            cached = stale_result(job, build)
            if cached is not None:
                cached = {**cached, "stale_sources": True}
        if cached is not None:
            stale = " built from older sources" if cached.get("stale_sources") else ""
            say(f"  cached   {job.label}  ({cached.get('key')}{stale})")
            records[job_key(job, sources)] = cached
        else:
            todo.append(job)
    if todo and cached_only:
        for job in todo:
            say(f"  not built {job.label} (left out: --cached-only)")
        jobs = [job for job in jobs if job not in todo]
        todo = []
    if todo:
        runner = LocalRunner() if runner is None else runner
        say(f"sweep: {len(todo)} build(s) to run, {len(records)} cached")
        started = time.monotonic()
        for index, record in enumerate(runner.run(run_job, [j.spec() for j in todo],
                                                  build=str(build), sources=sources), 1):
            what = (f"error: {record['error'][:80]}" if "error" in record
                    else f"fmax {record['fmax_mhz']} MHz")
            say(f"  [{index}/{len(todo)}] {time.monotonic() - started:7.1f} s  "
                f"{record['label']}: {what}")
            records[record["key"]] = record
    return [records[job_key(job, sources)] for job in jobs]


def parse_sizes(text):
    """``"2x2,4x8"`` -> ``[(2, 2), (4, 8)]``; a clear error names the bad item."""
    sizes = []
    for item in text.split(","):
        parts = item.strip().lower().split("x")
        if len(parts) != 2 or not all(p.isdigit() and int(p) > 0 for p in parts):
            raise ValueError(f"array size must look like RxC (e.g. 4x8), not {item!r}")
        sizes.append((int(parts[0]), int(parts[1])))
    return sizes


def default_jobs(sizes=DEFAULT_SIZES, boards=DEFAULT_BOARDS):
    """Jobs for ``sizes`` x ``boards``, leaving out sizes whose multipliers the board
    lacks (the board's default configuration's buffers and optional blocks are kept: the
    iCEBreaker's jobs are lean engines without the residual add, as its build is)."""
    from contract.config import OPTIONAL_BLOCKS
    from hw.bitstream import default_config

    from .resource_model import board_limits, fits_structurally

    jobs = []
    for board in boards:
        base = default_config(board)
        for rows, cols in sizes:
            config = ConvEngineConfig(array=ArrayConfig(rows=rows, cols=cols),
                                      act_depth=base.act_depth,
                                      weight_depth=base.weight_depth,
                                      max_col_tiles=base.max_col_tiles,
                                      **{block: getattr(base, block)
                                         for block in OPTIONAL_BLOCKS})
            if fits_structurally(config, board_limits(board)):
                jobs.append(SweepJob(board, config))
    return jobs


def _clock(record):
    """The clock a build ran at (records of the first sweeps kept it as ``clock_mhz``)."""
    return record.get("pll_clock_mhz", record.get("clock_mhz"))


def stale_result(job, build=BUILD):
    """The newest stored result of ``job``'s spec built from *other* sources, or None:
    what ``--stale-ok`` takes instead of rebuilding when only unrelated files changed."""
    found = []
    for path in Path(build).glob(f"*/{RESULT_NAME}"):
        record = json.loads(path.read_text())
        if "error" in record:
            continue
        same = all(record.get(k) == v for k, v in job.spec().items() if k != "clock_mhz")
        # A full job needs a full build; a pack-only job takes either.
        same = same and (job.mode == "pack" or record.get("mode", "full") == "full")
        if same and (job.clock_mhz is None or _clock(record) == job.clock_mhz):
            found.append((path.stat().st_mtime, record))
    return max(found, key=lambda item: item[0])[1] if found else None


def sweep_metrics(records):
    """The benchmark's metrics: per build, fmax, peak GOP/s and each resource's use."""
    entries = []
    for record in records:
        label = record["label"]
        if "error" in record:
            entries.append(metric(f"{label} build", "failed", "", note=record["error"][:200]))
            continue
        if record.get("fmax_mhz") is None:  # a pack-only job: resources, no fmax
            pass
        else:
            entries.append(metric(f"{label} fmax", record["fmax_mhz"], "MHz",
                                  note=f"clock {_clock(record)} MHz, timing "
                                       f"{'met' if record['timing_met'] else 'missed'}"))
            entries.append(metric(f"{label} peak", record["peak_gops"], "GOP/s",
                                  note="2*R*C*fmax"))
        for name, entry in record["resources"].items():
            entries.append(metric(f"{label} {name}", entry["used"], "cells",
                                  note=f"of {entry['available']}"))
    return entries


def plot(records, path):
    """fmax, resource use (% of the device) and peak GOP/s per build, one panel each."""
    import matplotlib

    matplotlib.use("Agg")  # files only: no display on build machines
    import matplotlib.pyplot as plt

    good = [r for r in records if "error" not in r and r.get("fmax_mhz") is not None]
    labels = [f"{r['board']}\n{r['rows']}x{r['cols']}" for r in good]
    x = range(len(good))
    figure, axes = plt.subplots(1, 3, figsize=(14, 4.5))
    axes[0].bar(x, [r["fmax_mhz"] for r in good], color="tab:blue")
    axes[0].set_ylabel("fmax (MHz, nextpnr)")
    names = sorted({n for r in good for n in r["resources"]})
    width = 0.8 / max(1, len(names))
    for i, name in enumerate(names):
        use = [100 * r["resources"][name]["used"] / r["resources"][name]["available"]
               if name in r["resources"] and r["resources"][name]["available"] else 0
               for r in good]
        axes[1].bar([k + i * width for k in x], use, width, label=name)
    axes[1].set_ylabel("% of the device used")
    axes[1].legend(fontsize=7)
    axes[2].bar(x, [r["peak_gops"] for r in good], color="tab:green")
    axes[2].set_ylabel("peak GOP/s = 2*R*C*fmax")
    for axis in axes:
        axis.set_xticks(list(x), labels, fontsize=8)
    figure.suptitle("Tessera sweep: whole accelerator per board (YoWASP Yosys + nextpnr)")
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path


def make_runner(args):
    """The job runner the options ask for (Ray only imported with ``--ray``)."""
    if args.ray is not None:
        return RayRunner(None if args.ray == "local" else args.ray)
    return LocalRunner(args.jobs)


def add_arguments(parser):
    """The sweep's options (shared by ``python -m tessera.explore.sweep`` and ``tessera sweep``)."""
    parser.add_argument("--sizes", default=",".join(f"{r}x{c}" for r, c in DEFAULT_SIZES),
                        help="array sizes RxC, comma-separated (default: %(default)s)")
    parser.add_argument("--boards", default=",".join(DEFAULT_BOARDS),
                        help="boards, comma-separated (default: %(default)s)")
    parser.add_argument("--jobs", type=int, default=None,
                        help="builds at a time (default: the core count)")
    parser.add_argument("--ray", nargs="?", const="local", default=None, metavar="ADDRESS",
                        help="run the builds as Ray tasks (a local Ray, or the cluster at "
                             "ADDRESS)")
    parser.add_argument("--stale-ok", action="store_true",
                        help="take a configuration's earlier build even when hw/ or "
                             "contract/ changed since (marked stale_sources)")
    parser.add_argument("--cached-only", action="store_true",
                        help="build nothing: report the configurations already built")
    parser.add_argument("--fit", action="store_true",
                        help="refit tessera/explore/resource_model.json from the sweep's builds")


def main(argv=None, say=print):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_arguments(parser)
    return run_from_args(parser.parse_args(argv), say)


def run_from_args(args, say=print):
    """Run the sweep the parsed options describe; returns the results path."""
    from hw.bitstream import KNOWN_BOARDS

    boards = [b.strip() for b in args.boards.split(",") if b.strip()]
    unknown = [b for b in boards if b not in KNOWN_BOARDS]
    if unknown:
        raise ValueError(f"unknown board {unknown[0]!r}; known boards: "
                         f"{', '.join(sorted(KNOWN_BOARDS))}")
    if args.jobs is not None and args.jobs < 1:
        raise ValueError(f"--jobs must be a positive integer, not {args.jobs!r}")
    jobs = default_jobs(parse_sizes(args.sizes), boards)
    records = run_sweep(jobs, make_runner(args), say=say, stale_ok=args.stale_ok,
                        cached_only=args.cached_only)
    path = write_results("sweep", sweep_metrics(records), records=records,
                         tool="hw.bitstream.build_bitstream (YoWASP Yosys, nextpnr), "
                              "one seed, whole accelerator behind the UART bridge")
    if any("error" not in r for r in records):
        say(f"plot: {plot(records, path.with_suffix('.png'))}")
    if args.fit:
        from .resource_model import main as fit_main
        fit_main(["--fit"])
    return path


if __name__ == "__main__":
    main(sys.argv[1:])
