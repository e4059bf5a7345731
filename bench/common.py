"""Shared by the benchmark scripts: the JSON every benchmark writes."""

import datetime
import json
import os
import platform
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"


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


def write_results(benchmark, metrics, **context):
    """Write ``bench/results/<benchmark>.json`` and return its path."""
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
    return path
