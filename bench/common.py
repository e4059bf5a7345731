"""Shared by the benchmark scripts: the JSON every benchmark writes, each figure printed as
it is written."""

import datetime
import json
import os
import platform
import statistics
import time
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"
#: ``(path, number of metrics)`` of every results file written by this process, in order:
#: what ``tessera bench`` sums up at the end.
WRITTEN = []


def require_counters(config, bench):
    """Refuse to measure ``config`` when it has no performance counters: ``bench`` reads
    them (PERF_*), and such a device's zeros are not a measurement."""
    if not config.perf_counters:
        raise ValueError(
            f"{bench} reads the device's performance counters, but configuration "
            f"{config.name} has perf_counters = false: its device is built without them "
            f"(the PERF_* registers read 0); measure a configuration with "
            f"perf_counters = true")
    return config


def metric(name, value, unit, *, peer=None, peer_value=None, target=None, note=None):
    """One measured figure; where a ratio is claimed, name the peer measured in the same run."""
    entry = {"name": name, "value": value, "unit": unit}
    if peer is not None:
        entry["peer"] = peer
        entry["peer_value"] = peer_value
    if target is not None:
        entry["target"] = target
    if note is not None:
        entry["note"] = note
    return entry


def format_metric(entry):
    """One line for a metric: name, value and unit, then its peer and target if any."""
    value = entry["value"]
    shown = f"{value:,}" if isinstance(value, (int, float)) and not isinstance(value, bool) \
        else str(value)
    line = f"  {entry['name']:<48} {shown:>14} {entry['unit']}"
    if "peer" in entry:
        line += f"  (peer {entry['peer']}: {entry['peer_value']})"
    if "target" in entry:
        line += f"  (target {entry['target']})"
    return line


def write_results(benchmark, metrics, **context):
    """Write ``bench/results/<benchmark>.json``, print each metric, and return the path."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{benchmark}.json"
    document = {
        "benchmark": benchmark,
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        **context,
        "metrics": metrics,
    }
    path.write_text(json.dumps(document, indent=2) + "\n")
    for entry in metrics:
        print(format_metric(entry))
    print(f"wrote {len(metrics)} metric{'' if len(metrics) == 1 else 's'} to {path}")
    WRITTEN.append((path, len(metrics)))
    return path


def _timed(run, batch, min_seconds):
    """Images/s of back-to-back calls of ``run`` lasting at least ``min_seconds``."""
    calls, start = 0, time.perf_counter()
    while True:
        run()
        calls += 1
        elapsed = time.perf_counter() - start
        if elapsed >= min_seconds:
            return calls * batch / elapsed


def images_per_second(runs, batch, *, repeats, min_seconds):
    """``{name: median images/s}`` for ``{name: run}`` (each call of ``run`` does ``batch``
    images), after one warm-up call each (weight upload, kernel builds, first allocations).

    The repeats are interleaved (one of each runner in turn) so that load from other
    processes on the machine falls on every runner alike rather than on whichever ran then.
    """
    for run in runs.values():
        run()
    rates = {name: [] for name in runs}
    for _ in range(repeats):
        for name, run in runs.items():
            rates[name].append(_timed(run, batch, min_seconds))
    return {name: statistics.median(values) for name, values in rates.items()}
