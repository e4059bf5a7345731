"""The results file every measurement writes (``bench/results/<name>.json``), each figure
printed as it is written: the benchmarks, the sweep and the soak share the one format that
``python -m bench.report`` turns into the tables of ``docs/performance.md``."""

import datetime
import json
import os
import platform
from pathlib import Path

#: Where the figures go: beside the benchmarks that write most of them.
RESULTS = Path(__file__).resolve().parent.parent / "bench" / "results"
#: ``(path, number of metrics)`` of every results file written by this process, in order:
#: what ``tessera bench`` sums up at the end.
WRITTEN = []


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
        # The load average says how shared the machine was while it measured.
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                    "load": round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg")
                    else None},
        **context,
        "metrics": metrics,
    }
    path.write_text(json.dumps(document, indent=2) + "\n")
    for entry in metrics:
        print(format_metric(entry))
    print(f"wrote {len(metrics)} metric{'' if len(metrics) == 1 else 's'} to {path}")
    WRITTEN.append((path, len(metrics)))
    return path
