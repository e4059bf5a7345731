"""`tessera serve` on the Verilator twin (issue 14): the two-tenant flood of
``bench/bench_serve.py`` with the digits CNN on a ``twin`` device (providers "sim", then
"cpu"), and the latency predictor's error there (target: p95 within 10 % on the twin).

Phases, each on a fresh server with the device's runs in a worker process: capacity
(8 closed-loop clients, ``max_batch`` 16); tenant A alone (one client, batch 1), whose
p50 sets A's SLO at 3x; A at 20 % of capacity with B at 180 %, B alone at 200 %
(:func:`bench.bench_serve.flood`). Every answer is checked bit for bit against the CPU
session. The predictor's figures come from the flooded server's ``/stats``: its relative
error p50 / p95 overall and per run size, beside each size's own jitter (how far the runs
spread around their median). Writes ``bench/results/serve_twin.json`` and ``.png``.
"""

import os
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

#: The twin's device: the model's session tries the twin ("sim"), the CPU for the rest.
TWIN = {"device": "twin", "providers": ("sim", "cpu")}
#: Issue 14's target for the predictor's p95 error on the twin.
PREDICTOR_TARGET = 0.10


def main():
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    rng = np.random.default_rng(SEED)
    phases = {}
    with tempfile.TemporaryDirectory(prefix="bench_serve_twin_") as folder:
        inputs, expected = reference(DIGITS, (1, 1, 8, 8), rng)
        with serve(folder, config_text(DIGITS, 16, **TWIN), "capacity") as url:
            warm(url, inputs, expected)
            load = tenant("b", inputs, expected, concurrency=8)
            seconds = run_load(url, [load], duration=SECONDS, seed=SEED)
            phases["capacity_max_batch_16"] = check(summarize(load, seconds))
        capacity = phases["capacity_max_batch_16"]["throughput"]
        with serve(folder, config_text(DIGITS, 1, **TWIN), "unloaded") as url:
            warm(url, inputs, expected)
            load = tenant("a", inputs, expected, concurrency=1)
            seconds = run_load(url, [load], duration=min(SECONDS, 3.0), max_requests=500,
                               seed=SEED)
            phases["unloaded_batch1"] = check(summarize(load, seconds))
        slo_ms = 3 * phases["unloaded_batch1"]["latency_p50_ms"]
        _, phases["mixed_a"], phases["mixed_b"], stats, server, phases["b_alone"] = flood(
            folder, DIGITS, inputs, expected, capacity, slo_ms, "twin", lanes=LANES == "1",
            **TWIN)
    phases["mixed_a"]["server_side"] = server
    predictor = stats["predictor"]
    a, alone = phases["mixed_a"], phases["b_alone"]
    metrics = [
        metric("twin: requests/s, max_batch 16, 8 clients", round(capacity, 1), "req/s"),
        metric("twin: A's unloaded batch-1 p50", round(phases["unloaded_batch1"][
            "latency_p50_ms"], 2), "ms"),
        metric("twin: A's SLO attainment (requests sent), A 20 % + B 180 % of capacity",
               round(a["slo_attainment"], 4), "fraction", target=">= 0.999",
               note=f"SLO {slo_ms:.2f} ms (3x A's unloaded p50); server-side "
                    f"{server['slo_attainment_answered']}"),
        metric("twin: B alone at 2x capacity, share of capacity",
               round(alone["throughput"] / capacity, 3), "fraction", target=">= 0.9"),
        metric("twin: predictor error p95", predictor["prediction_error_p95"], "fraction",
               target=f"<= {PREDICTOR_TARGET}",
               note=f"p50 {predictor['prediction_error_p50']}, over "
                    f"{predictor['runs_measured']} runs of the flooded server"),
        metric("twin: lost or wrong answers (all phases)",
               sum(p["lost"] + p["wrong"] for p in phases.values()), "requests",
               target="0"),
    ]
    for size, figures in predictor["prediction_error_by_images"].items():
        print(f"  predictor, {size:>2} image(s): {figures['runs']:>5} runs, p50 "
              f"{figures['p50']:.3f}, p95 {figures['p95']:.3f}, the runs' own jitter p95 "
              f"{figures['jitter_p95']:.3f}")
    path = write_results("serve_twin", metrics, seed=SEED, seconds_per_phase=SECONDS,
                         device=TWIN, priority_lanes=LANES == "1", slo_ms=slo_ms,
                         phases=phases, predictor=predictor)
    plot_tenants(phase_groups({"twin": phases}), path.with_suffix(".png"),
                 f"tessera serve on the Verilator twin, digits, {SECONDS:g} s phases")
    print(f"plot: {path.with_suffix('.png')}")


if __name__ == "__main__":
    main()
