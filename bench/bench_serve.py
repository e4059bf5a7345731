"""``tessera serve`` under load (issue 14): batching gain, two tenants at twice capacity,
soft isolation, and the latency predictor's error; writes ``bench/results/serve.json``.

The server runs as a child process (``tessera serve`` on 127.0.0.1, an ephemeral port) and
the load generator (:mod:`bench.serve_load`) in this process, so both share this machine's
cores: figures from a 2-core machine measure the client too. Every answer is checked bit
for bit against a direct ``InferenceSession.run`` of the same input, and the bench fails if
any is wrong or lost.

Phases (the digits CNN on the CPU provider, one device worker, one-image binary requests):

1. capacity: 32 closed-loop clients, ``max_batch`` 1 then 16 -> requests/s of each, ratio;
2. unloaded latency: one client, batch 1 -> p50; tenant A's SLO is 3x that;
3. two tenants: A (high priority, SLO) at 20 % of capacity and B (low, best effort) at the
   rest of 2x capacity, Poisson arrivals -> per-tenant p50/p95/p99/p99.9, SLO attainment,
   429/503 counts, lost and wrong answers;
4. B alone at 2x capacity -> B's share of the capacity (soft isolation gives it all);
5. the predictor's error (``/v2/models/digits/stats``) after phase 3, p50/p95 of
   |predicted - measured| / measured, per run size.
"""

import os
import tempfile
from pathlib import Path

import numpy as np

from bench.common import metric, write_results
from bench.serve_load import (
    TenantLoad,
    free_port,
    get_json,
    run_load,
    serve_subprocess,
    server_counts,
    summarize,
)
from sw_driver import InferenceSession

ROOT = Path(__file__).resolve().parent.parent
DIGITS = ROOT / "models" / "zoo" / "digits_qdq.onnx"
TOKEN_A = "bench-tenant-a-token-000000"
TOKEN_B = "bench-tenant-b-token-111111"
SEED = 14
#: Seconds per phase (short: the machine is shared; BENCH_SERVE_SECONDS overrides).
SECONDS = float(os.environ.get("BENCH_SERVE_SECONDS", "6"))


def config_text(max_batch, slo_ms=None, rate_b=100_000.0):
    slo = "" if slo_ms is None else f"slo_ms = {slo_ms:.3f}"
    return f"""
[server]
host = "127.0.0.1"
[devices.cpu]
workers = 1
max_queue = 32
[models.digits]
path = "{DIGITS.as_posix()}"
providers = ["cpu"]
max_batch = {max_batch}
[tenants.a]
token = "{TOKEN_A}"
models = ["digits"]
priority = "high"
{slo}
rate = 100000
burst = 100000
[tenants.b]
token = "{TOKEN_B}"
models = ["digits"]
priority = "low"
rate = {rate_b}
burst = {max(1, int(rate_b / 10))}
"""


def tenant(name, inputs, expected, **load):
    token = TOKEN_A if name == "a" else TOKEN_B
    return TenantLoad(name, token, "digits", inputs, expected, **load)


def serve(folder, text, tag):
    path = Path(folder) / f"{tag}.toml"
    path.write_text(text)
    return serve_subprocess(path, free_port(), log=Path(folder) / f"{tag}.log")


def warm(url, inputs, expected):
    """A short closed-loop load: imports, caches and the predictor's first sizes."""
    load = tenant("b", inputs, expected, concurrency=8)
    run_load(url, [load], duration=1.0, max_requests=400, seed=SEED)
    check(summarize(load, 1.0))


def check(summary):
    """Nothing lost, nothing wrong, nothing answered twice: else the bench fails."""
    bad = {k: summary[k] for k in ("lost", "wrong", "answered_twice") if summary[k]}
    if bad or summary["checked"] != summary["answered"]:
        raise AssertionError(f"tenant {summary['tenant']}: {bad}, checked "
                             f"{summary['checked']} of {summary['answered']} answers")
    return summary


def main():
    session = InferenceSession(str(DIGITS))
    rng = np.random.default_rng(SEED)
    print(f"seed {SEED}, {SECONDS:g} s per phase")
    inputs = [rng.random((1, 1, 8, 8), dtype=np.float32) for _ in range(64)]
    expected = [session.run(None, {"input": x})[0] for x in inputs]
    metrics, phases = [], {}
    with tempfile.TemporaryDirectory(prefix="bench_serve_") as folder:
        capacity = {}
        for max_batch in (1, 16):
            with serve(folder, config_text(max_batch), f"capacity{max_batch}") as url:
                warm(url, inputs, expected)
                load = tenant("b", inputs, expected, concurrency=32)
                seconds = run_load(url, [load], duration=SECONDS, seed=SEED)
                phases[f"capacity_max_batch_{max_batch}"] = summary = check(
                    summarize(load, seconds))
                capacity[max_batch] = summary["throughput"]
                stats = get_json(url, "/v2/models/digits/stats", TOKEN_B)["predictor"]
                phases[f"capacity_max_batch_{max_batch}"]["predictor"] = stats
        metrics.append(metric("requests/s, max_batch 1, 32 clients", round(capacity[1], 1),
                              "req/s"))
        metrics.append(metric("dynamic batching speedup (max_batch 16 vs 1)",
                              round(capacity[16] / capacity[1], 2), "x",
                              peer="max_batch 1 req/s", peer_value=round(capacity[1], 1),
                              target=">= 3"))
        with serve(folder, config_text(1), "unloaded") as url:
            warm(url, inputs, expected)
            load = tenant("a", inputs, expected, concurrency=1)
            seconds = run_load(url, [load], duration=min(SECONDS, 3.0), max_requests=500,
                               seed=SEED)
            phases["unloaded_batch1"] = check(summarize(load, seconds))
        unloaded = phases["unloaded_batch1"]["latency_p50_ms"]
        slo_ms = 3 * unloaded
        full = capacity[16]
        rate_a, rate_b = 0.2 * full, 1.8 * full
        with serve(folder, config_text(16, slo_ms, rate_b=1.5 * full), "mixed") as url:
            warm(url, inputs, expected)
            a = tenant("a", inputs, expected, rate=rate_a, slo_ms=slo_ms)
            b = tenant("b", inputs, expected, rate=rate_b)
            seconds = run_load(url, [a, b], duration=SECONDS, seed=SEED, connections=128)
            phases["mixed_a"], phases["mixed_b"] = (check(summarize(a, seconds)),
                                                    check(summarize(b, seconds)))
            predictor = get_json(url, "/v2/models/digits/stats", TOKEN_A)["predictor"]
            phases["mixed_a"]["server_side"] = server_counts(url, "a")
        with serve(folder, config_text(16), "b_alone") as url:
            warm(url, inputs, expected)
            b = tenant("b", inputs, expected, rate=2 * full)
            seconds = run_load(url, [b], duration=SECONDS, seed=SEED, connections=128)
            phases["b_alone"] = check(summarize(b, seconds))
    ma, mb = phases["mixed_a"], phases["mixed_b"]
    metrics += [
        metric("tenant A unloaded p50 (batch 1)", round(unloaded, 3), "ms"),
        metric("tenant A SLO (3x unloaded p50)", round(slo_ms, 3), "ms"),
        metric("tenant A SLO attainment (of requests sent)", round(ma["slo_attainment"], 5),
               "fraction", target=">= 0.999"),
        metric("tenant A SLO attainment, server-side (answered, receipt to response)",
               ma["server_side"]["slo_attainment_answered"], "fraction",
               note="the server's own clock: leaves out time queued in the load generator, "
                    "which shares this machine's cores"),
        metric("tenant A p99 under 2x load", round(ma["latency_p99_ms"] or -1, 3), "ms"),
        metric("tenant A refused (503) under 2x load", ma["by_status"].get("503", 0),
               "requests"),
        metric("tenant B 429 under 2x load", mb["by_status"].get("429", 0), "requests"),
        metric("tenant B 503 (shed/full) under 2x load", mb["by_status"].get("503", 0),
               "requests"),
        metric("tenant B alone: share of capacity", round(phases["b_alone"]["throughput"]
                                                           / full, 3), "fraction",
               peer="capacity req/s (max_batch 16)", peer_value=round(full, 1),
               target=">= 0.9"),
        metric("predictor p50 error (mixed load)", predictor["prediction_error_p50"],
               "fraction"),
        metric("predictor p95 error (mixed load)", predictor["prediction_error_p95"],
               "fraction", target="<= 0.25 (CPU)"),
        metric("lost or wrong answers (all phases)",
               sum(p["lost"] + p["wrong"] for p in phases.values()), "requests", target="0"),
    ]
    write_results("serve", metrics, seed=SEED, seconds_per_phase=SECONDS,
                  model="digits_qdq.onnx", provider="cpu", phases=phases,
                  predictor=predictor)


if __name__ == "__main__":
    main()
