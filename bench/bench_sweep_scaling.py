"""How a sweep scales: the same eight real builds run one at a time, two at a
time in local processes, and as Ray tasks on a local Ray, each time from empty build
folders, so nothing is cached between the three.

A build here is the bare systolic array of one size on the ULX3S-85F under its on-chip
pattern loader (``hw.bitstream.build_array_bitstream``: Yosys, nextpnr, ecppack through
YoWASP), 15 s to a minute each: the whole accelerator takes 30-50 minutes a build on
this machine, so eight of them would not fit a session. What is measured is the runners,
not the design, and a short real build stresses their overhead more than a long one.

Also Ray's own cost per task: the median round trip of an empty task on the same local
Ray, as a fraction of the mean build (target: at most 5 %). Figures are wall
times of one run each on a 2-core machine; the load average at the start is recorded,
since other work on the machine changes every figure.
"""

import os
import statistics
import tempfile
import time
from pathlib import Path

from bench.common import metric, write_results
from tessera.explore.sweep import LocalRunner, RayRunner

BOARD = "ulx3s-85f"
#: Eight array sizes: builds of 15 s to a minute each here.
SIZES = ((4, 4), (4, 6), (6, 4), (6, 6), (4, 8), (8, 4), (6, 8), (8, 6))
#: Targets: a sweep on two workers takes at most 0.55 of the serial time; an empty Ray
#: task costs at most 5 % of a mean build.
TARGET_RATIO = 0.55
TARGET_RAY_OVERHEAD = 0.05
EMPTY_TASKS = 20


def build_array(spec, build):
    """One job: the bare ``rows`` x ``cols`` array on ``board``, built into its own folder
    below ``build``; returns the job with its wall time and fmax (plain data, so it crosses
    process and Ray boundaries)."""
    from rich.console import Console

    from contract.config import ArrayConfig
    from hw.bitstream import build_array_bitstream
    from tessera.board_report import console_say

    board, rows, cols = spec["board"], spec["rows"], spec["cols"]
    folder = Path(build) / f"r{rows}c{cols}"
    folder.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    with open(folder / "progress.log", "w") as log:
        report = build_array_bitstream(board, ArrayConfig(rows=rows, cols=cols),
                                       build_root=folder, say=console_say(Console(file=log)))
    fmax = [clock["achieved_mhz"] for clock in report["fmax"].values()]
    return {**spec, "wall_s": round(time.monotonic() - started, 2),
            "fmax_mhz": min(fmax) if fmax else None}


def run_all(runner, specs, label):
    """Wall seconds to build every spec with ``runner`` from empty folders, and the
    per-job records."""
    with tempfile.TemporaryDirectory(prefix=f"tessera-sweep-{label}-") as build:
        started = time.monotonic()
        records = list(runner.run(build_array, specs, build=build))
        wall = time.monotonic() - started
    missing = [s for s in specs if not any(r["rows"] == s["rows"] and r["cols"] == s["cols"]
                                           for r in records)]
    if missing or len(records) != len(specs):
        raise AssertionError(f"{label}: {len(records)} results for {len(specs)} jobs; "
                             f"missing {missing}")
    print(f"  {label}: {len(records)} builds in {wall:.1f} s")
    return wall, records


def empty_task_seconds():
    """Median round trip of an empty Ray task on a local Ray (launch, run, result)."""
    from tessera import ray_cluster

    def nothing():
        return None

    with ray_cluster.connect(ray_cluster.LOCAL) as ray:
        task = ray.remote(num_cpus=1)(nothing)
        ray.get(task.remote())  # the first starts a worker process
        times = []
        for _ in range(EMPTY_TASKS):
            started = time.perf_counter()
            ray.get(task.remote())
            times.append(time.perf_counter() - started)
    return statistics.median(times)


def main():
    specs = [{"board": BOARD, "rows": r, "cols": c} for r, c in SIZES]
    load = os.getloadavg()[0]
    print(f"sweep scaling: {len(specs)} bare-array builds on {BOARD}, load average {load:.2f}")
    serial, records = run_all(LocalRunner(1), specs, "serial")
    local2, _ = run_all(LocalRunner(2), specs, "local-2")
    ray_wall, _ = run_all(RayRunner(), specs, "ray")
    mean_build = statistics.mean(r["wall_s"] for r in records)
    empty = empty_task_seconds()
    metrics = [
        metric("serial_sweep_seconds", round(serial, 1), "s",
               note=f"{len(specs)} builds one at a time, mean {mean_build:.1f} s a build"),
        metric("local_two_workers_over_serial", round(local2 / serial, 3), "fraction",
               peer="the same builds one at a time, same run", peer_value=round(serial, 1),
               target=f"<= {TARGET_RATIO}"),
        metric("ray_two_cpus_over_serial", round(ray_wall / serial, 3), "fraction",
               peer="the same builds one at a time, same run", peer_value=round(serial, 1),
               target=f"<= {TARGET_RATIO}"),
        metric("ray_task_overhead_over_build", round(empty / mean_build, 5), "fraction",
               peer="mean build time, same run", peer_value=round(mean_build, 2),
               target=f"<= {TARGET_RAY_OVERHEAD}",
               note=f"median round trip of an empty Ray task {empty * 1e3:.2f} ms"),
    ]
    return write_results("sweep_scaling", metrics, board=BOARD, sizes=[list(s) for s in SIZES],
                         load_average_at_start=round(load, 2), builds=records)


if __name__ == "__main__":
    main()
