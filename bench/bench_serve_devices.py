"""`tessera serve` on the Verilator twin and on OpenCL (issue 14): the two-tenant flood of
``bench/bench_serve.py`` with the digits CNN on a ``twin`` device (providers "sim", then
"cpu") and on an ``opencl`` device (PoCL here; "opencl", then "cpu"), and the latency
predictor's error on each (targets: p95 within 10 % on the twin, 25 % on OpenCL).

Per device, phases each on a fresh server with the device's runs in a worker process:
capacity (32 closed-loop clients, ``max_batch`` 16, as ``bench_serve``); tenant A alone
(one client, batch 1), whose p50 sets A's SLO at 3x; A at 20 % of capacity with B at
180 %, B alone at 200 % (:func:`bench.bench_serve.flood`). Every answer is checked bit
for bit against the CPU session. The predictor's figures come from the flooded server's
``/stats``: its relative error p50 / p95 overall and per run size, beside each size's own
jitter (how far the runs spread around their median). Writes
``bench/results/serve_devices.json`` and ``.png``.
``python -m bench.bench_serve_devices twin`` (or ``opencl``) runs one device.
"""

import os
import sys
import tempfile

import numpy as np

from bench.bench_serve import (
    DIGITS,
    LANES,
    SECONDS,
    SEED,
    check,
    config_text,
    flood,
    phase_groups,
    reference,
    serve,
    tenant,
    warm,
)
from bench.common import metric, write_results
from bench.serve_load import run_load, summarize
from bench.serve_plot import plot_tenants

#: The devices measured: each model session tries the device's provider, the CPU for the
#: layers it declines.
DEVICES = {"twin": {"device": "twin", "providers": ("sim", "cpu")},
           "opencl": {"device": "opencl", "providers": ("opencl", "cpu")}}
#: Issue 14's targets for the predictor's p95 error.
PREDICTOR_TARGETS = {"twin": 0.10, "opencl": 0.25}


def measure(name, folder, inputs, expected):
    """One device's phases: ``(phases, the flooded server's predictor, A's SLO in ms)``."""
    setting, phases = DEVICES[name], {}
    with serve(folder, config_text(DIGITS, 16, **setting), f"{name}_capacity") as url:
        warm(url, inputs, expected)
        load = tenant("b", inputs, expected, concurrency=32)
        seconds = run_load(url, [load], duration=SECONDS, seed=SEED)
        phases["capacity_max_batch_16"] = check(summarize(load, seconds))
    capacity = phases["capacity_max_batch_16"]["throughput"]
    with serve(folder, config_text(DIGITS, 1, **setting), f"{name}_unloaded") as url:
        warm(url, inputs, expected)
        load = tenant("a", inputs, expected, concurrency=1)
        seconds = run_load(url, [load], duration=min(SECONDS, 3.0), max_requests=500,
                           seed=SEED)
        phases["unloaded_batch1"] = check(summarize(load, seconds))
    slo_ms = 3 * phases["unloaded_batch1"]["latency_p50_ms"]
    _, phases["mixed_a"], phases["mixed_b"], stats, server, phases["b_alone"] = flood(
        folder, DIGITS, inputs, expected, capacity, slo_ms, name, lanes=LANES == "1",
        **setting)
    phases["mixed_a"]["server_side"] = server
    return phases, stats["predictor"], slo_ms


def device_metrics(name, phases, predictor, slo_ms):
    capacity = phases["capacity_max_batch_16"]["throughput"]
    a, alone = phases["mixed_a"], phases["b_alone"]
    for size, figures in predictor["prediction_error_by_images"].items():
        print(f"  {name} predictor, {size:>2} image(s): {figures['runs']:>5} runs, p50 "
              f"{figures['p50']:.3f}, p95 {figures['p95']:.3f}, the runs' own jitter p95 "
              f"{figures['jitter_p95']:.3f}")
    return [
        metric(f"{name}: requests/s, max_batch 16, 32 clients", round(capacity, 1),
               "req/s"),
        metric(f"{name}: A's unloaded batch-1 p50",
               round(phases["unloaded_batch1"]["latency_p50_ms"], 2), "ms"),
        metric(f"{name}: A's SLO attainment (requests sent), A 20 % + B 180 % of capacity",
               round(a["slo_attainment"], 4), "fraction", target=">= 0.999",
               note=f"SLO {slo_ms:.2f} ms (3x A's unloaded p50); server-side "
                    f"{a['server_side']['slo_attainment_answered']}"),
        metric(f"{name}: B alone at 2x capacity, share of capacity",
               round(alone["throughput"] / capacity, 3), "fraction", target=">= 0.9"),
        metric(f"{name}: predictor error p95", predictor["prediction_error_p95"], "fraction",
               target=f"<= {PREDICTOR_TARGETS[name]}",
               note=f"p50 {predictor['prediction_error_p50']}, over "
                    f"{predictor['runs_measured']} runs of the flooded server"),
    ]


def main(names=tuple(DEVICES)):
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    unknown = sorted(set(names) - set(DEVICES))
    if unknown:
        raise SystemExit(f"unknown device(s) {unknown}; known: {sorted(DEVICES)}")
    rng = np.random.default_rng(SEED)
    results, metrics = {}, []
    with tempfile.TemporaryDirectory(prefix="bench_serve_devices_") as folder:
        inputs, expected = reference(DIGITS, (1, 1, 8, 8), rng)
        for name in names:
            phases, predictor, slo_ms = measure(name, folder, inputs, expected)
            results[name] = {"phases": phases, "predictor": predictor, "slo_ms": slo_ms}
            metrics += device_metrics(name, phases, predictor, slo_ms)
    metrics.append(metric("lost or wrong answers (all phases, all devices)",
                          sum(p["lost"] + p["wrong"] for r in results.values()
                              for p in r["phases"].values()), "requests", target="0"))
    path = write_results("serve_devices", metrics, seed=SEED, seconds_per_phase=SECONDS,
                         devices={n: DEVICES[n] for n in names},
                         priority_lanes=LANES == "1", results=results)
    plot_tenants(phase_groups({n: r["phases"] for n, r in results.items()}),
                 path.with_suffix(".png"),
                 f"tessera serve on {' and '.join(names)}, digits, {SECONDS:g} s phases")
    print(f"plot: {path.with_suffix('.png')}")


if __name__ == "__main__":
    main(tuple(sys.argv[1:]) or tuple(DEVICES))
