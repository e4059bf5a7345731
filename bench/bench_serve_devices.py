"""`tessera serve` on the Verilator twin and on OpenCL: the two-tenant flood of
``bench/bench_serve.py`` with the digits CNN on a ``twin`` device (providers "sim", then
"cpu") and on an ``opencl`` device (PoCL here; "opencl", then "cpu"), and the latency
predictor's error on each (targets: p95 within 10 % on the twin, 25 % on OpenCL).

Per device, phases each on a fresh server with the device's runs in a worker process:
capacity (32 closed-loop clients, ``max_batch`` 16, as ``bench_serve``); tenant A alone
(one client, batch 1), whose p50 sets A's SLO at 3x, then at sparse arrivals; A at 20 % of
capacity with B at 180 %, B alone at 200 % (:func:`bench.bench_serve.capacity_phase` and
:func:`bench.bench_serve.two_tenants`, as for the CPU). Every answer is checked bit
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
    capacity_phase,
    phase_groups,
    reference,
    two_tenants,
)
from bench.common import metric, write_results
from tessera.serve.plot import plot_tenants

#: The devices measured: each model session tries the device's provider, the CPU for the
#: layers it declines.
DEVICES = {"twin": {"device": "twin", "providers": ("sim", "cpu")},
           "opencl": {"device": "opencl", "providers": ("opencl", "cpu")}}
#: Targets for the predictor's p95 error.
PREDICTOR_TARGETS = {"twin": 0.10, "opencl": 0.25}


def measure(name, folder, inputs, expected):
    """One device's phases (:func:`bench.bench_serve.capacity_phase` and
    :func:`bench.bench_serve.two_tenants` on it): ``(phases, A's SLO in ms)``."""
    setting = DEVICES[name]
    phases = {"capacity_max_batch_16": capacity_phase(folder, DIGITS, inputs, expected, 16,
                                                      f"{name}_capacity", **setting)}
    capacity = phases["capacity_max_batch_16"]["throughput"]
    more, slo_ms = two_tenants(folder, DIGITS, inputs, expected, capacity, name, **setting)
    phases.update(more)
    return phases, slo_ms


def device_metrics(name, phases, slo_ms):
    capacity, predictor = phases["capacity_max_batch_16"]["throughput"], phases["predictor"]
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
            phases, slo_ms = measure(name, folder, inputs, expected)
            results[name] = {"phases": phases, "slo_ms": slo_ms}
            metrics += device_metrics(name, phases, slo_ms)
    metrics.append(metric("lost or wrong answers (all phases, all devices)",
                          sum(p["lost"] + p["wrong"] for r in results.values()
                              for k, p in r["phases"].items()
                              if k not in ("predictor", "workers")),
                          "requests", target="0"))
    path = write_results("serve_devices", metrics, seed=SEED, seconds_per_phase=SECONDS,
                         devices={n: DEVICES[n] for n in names},
                         priority_lanes=LANES == "1", results=results)
    plot_tenants(phase_groups({n: r["phases"] for n, r in results.items()}),
                 path.with_suffix(".png"),
                 f"tessera serve on {' and '.join(names)}, digits, {SECONDS:g} s phases")
    print(f"plot: {path.with_suffix('.png')}")


if __name__ == "__main__":
    main(tuple(sys.argv[1:]) or tuple(DEVICES))
