"""Shared by the benchmark scripts: the JSON every benchmark writes (kept with the product in
``tessera.results``, since the sweep and the soak write it too), each figure printed as it is
written, and the timing helpers."""

import statistics
import time

import numpy as np

# Where they go and what this process wrote (RESULTS, WRITTEN) live in tessera.results alone,
# so that there is one value to patch.
from tessera.results import metric, write_results

__all__ = ["images_per_second", "metric", "random_feeds", "require_counters", "write_results"]


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


def random_feeds(session, batch, seed):
    """A feed of ``batch`` uniform [0, 1) images, seeded, for ``session``'s first input."""
    info = session.get_inputs()[0]
    rng = np.random.default_rng(seed)
    return {info.name: rng.random([batch, *info.shape[1:]], dtype=np.float32)}


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
