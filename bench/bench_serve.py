"""``tessera serve`` under load: batching gain, two tenants at twice capacity,
soft isolation, and the latency predictor's error; writes ``bench/results/serve.json``.

The server runs as a child process (``tessera serve`` on 127.0.0.1, an ephemeral port) and
the load generator (:mod:`tessera.serve.loadgen`) in this process, or, where two tenants send at
once, in one process per tenant (a flood in one event loop delayed the other tenant's
requests in the client). All share this machine's cores: figures from a 2-core machine
measure the clients too, and each phase records the load average after it. Every answer is
checked bit for bit against a direct ``InferenceSession.run`` of the same input, and the
bench fails if any is wrong or lost.

Phases (CPU provider, one device worker, one-image binary requests), for the digits CNN
(front-end bound: a run is 0.5 ms) and then a ResNet-8-like model (device bound: 5 ms):

1. capacity: 32 closed-loop clients, ``max_batch`` 1 (digits only) and 16 -> requests/s,
   the batching ratio;
2. unloaded latency: one client, batch 1 -> p50; tenant A's SLO is 3x that; and the same
   requests as sparse Poisson arrivals (20/s, each onto an idle server) -> p50, against
   three times which A's attainment is also reported;
3. two tenants: A (high priority, SLO) at 20 % of capacity and B (low, best effort) at the
   rest of 2x capacity, Poisson arrivals, each from its own process (B's at nice
   ``BENCH_SERVE_B_NICE``, default 10) -> per-tenant p50/p95/p99/p99.9, SLO attainment
   (load generator and server side), 429/503 counts, lost and wrong answers;
4. B alone at 2x capacity -> B's share of the capacity: each tenant holds a soft quota of
   half the device, so B runs past its half only by borrowing A's idle one;
5. the predictor's error (``/v2/models/m/stats``) after phase 3, p50/p95 of
   |predicted - measured| / measured, per run size;
6. the scheduler alone on a simulated clock (:mod:`tessera.serve.simulate`): tenant A's
   SLO attainment under the tail batch bound, the median bound before it, and no bound,
   with modelled run times and no front end or other load.

Where the runs execute is ``BENCH_SERVE_PROCESS`` (``[devices.cpu] process``): ``worker``
(default: a worker process of their own, no GIL shared with the HTTP front end) or
``thread`` (the server's own threads, as before); with ``worker`` the mixed phase also
records what a round trip to the worker costs beyond the run. To compare the two on one
machine, interleaved (about 3 minutes a run; each run rewrites ``bench/results/serve.json``)::

    for p in thread worker thread worker; do
        BENCH_SERVE_PROCESS=$p .venv/bin/python -m bench.bench_serve && \
            cp bench/results/serve.json /tmp/serve_${p}_$(date +%H%M).json
    done

or, finer grained, ``python -m bench.bench_serve --compare-processes 3`` (about 4 minutes):
the ResNet-8-like model's mixed and B-alone phases under each, alternated phase by phase
with one SLO for both, into ``bench/results/serve_process.json``. In the same way
``--compare lanes ROUNDS digits|resnet8`` sets priority lanes against one front end (into
``serve_lanes_MODEL.json``), the runs where ``BENCH_SERVE_PROCESS`` says.

``BENCH_SERVE_LANES`` (default 1) turns ``[server] priority_lanes`` on for the two-tenant
and B-alone phases: tenant B's HTTP is parsed in a second process at a lower CPU priority,
and only its tensors reach the main process's scheduler (tessera/serve/lanes.py).
"""

import json
import os
import sys
import tempfile
from pathlib import Path

import numpy as np

from bench.common import metric, write_results
from models.zoo import random_models
from sw_driver import InferenceSession
from tessera.serve.loadgen import (
    TenantLoad,
    free_port,
    get_json,
    run_load,
    serve_subprocess,
    server_counts,
    summarize,
)
from tessera.serve.plot import plot_tenants
from tessera.serve.simulate import scheduler_figures

ROOT = Path(__file__).resolve().parent.parent
DIGITS = ROOT / "models" / "zoo" / "digits_qdq.onnx"
TOKEN_A = "bench-tenant-a-token-000000"
TOKEN_B = "bench-tenant-b-token-111111"
SEED = 14
#: Seconds per phase (short: the machine is shared; BENCH_SERVE_SECONDS overrides).
SECONDS = float(os.environ.get("BENCH_SERVE_SECONDS", "6"))
#: Requests/s of the sparse unloaded phase (one at a time onto an idle server).
SPARSE_RATE = 20.0
#: Where the device's runs execute: "worker" (a process of their own) or "thread".
PROCESS = os.environ.get("BENCH_SERVE_PROCESS", "worker")
#: ``[server] priority_lanes`` in the two-tenant phases: "1" (tenant B's HTTP in the side
#: lane's process) or "0" (one front end for both).
LANES = os.environ.get("BENCH_SERVE_LANES", "1")
#: ``nice`` increment of tenant B's open-loop load generator (its own process) where it
#: floods: two tenants and B alone. On the server's own two cores, at 10 it stands for
#: clients on other machines (interleaved on digits: A's attainment 0.35 -> 0.50;
#: docs/serving.md). Tenant A's client runs at the server's priority, and so do the
#: closed-loop capacity clients: a niced one was the bottleneck there (1,224 against
#: 1,890 requests/s on digits at max_batch 16).
B_NICE = int(os.environ.get("BENCH_SERVE_B_NICE", "10"))


def config_text(model_path, max_batch, slo_ms=None, rate_b=100_000.0, process=None,
                lanes=False, workers=1, lane_batch_ms=2.0, device="cpu", providers=("cpu",)):
    """The server's TOML: model ``m`` on ``device`` (its session's ``providers``), tenants
    A (high, ``slo_ms``) and B (low, best effort, ``rate_b`` requests/s), soft halves."""
    slo = "" if slo_ms is None else f"slo_ms = {slo_ms:.3f}"
    return f"""
[server]
host = "127.0.0.1"
priority_lanes = {"true" if lanes else "false"}
lane_batch_ms = {lane_batch_ms}
[devices.{device}]
workers = {workers}
max_queue = 32
process = "{process or PROCESS}"
[models.m]
path = "{Path(model_path).as_posix()}"
providers = {json.dumps(list(providers))}
device = "{device}"
max_batch = {max_batch}
[tenants.a]
token = "{TOKEN_A}"
models = ["m"]
priority = "high"
{slo}
quota = {{ {device} = 0.5 }}
isolation = "soft"
rate = 100000
burst = 100000
[tenants.b]
token = "{TOKEN_B}"
models = ["m"]
priority = "low"
quota = {{ {device} = 0.5 }}
isolation = "soft"
rate = {rate_b}
burst = {max(1, int(rate_b / 10))}
"""


def tenant(name, inputs, expected, **load):
    token = TOKEN_A if name == "a" else TOKEN_B
    return TenantLoad(name, token, "m", inputs, expected, **load)


def serve(folder, text, tag):
    path = Path(folder) / f"{tag}.toml"
    path.write_text(text)
    return serve_subprocess(path, free_port(), log=Path(folder) / f"{tag}.log")


def warm(url, inputs, expected):
    """A short closed-loop load: imports, caches and the predictor's first sizes."""
    load = tenant("b", inputs, expected, concurrency=8)
    run_load(url, [load], duration=1.0, max_requests=400, seed=SEED)
    check(summarize(load, 1.0))


def reference(model_path, shape, rng, count=64):
    session = InferenceSession(str(model_path))
    inputs = [rng.random(shape, dtype=np.float32) for _ in range(count)]
    return inputs, [session.run(None, {"input": x})[0] for x in inputs]


def capacity_phase(folder, model_path, inputs, expected, max_batch, tag, **settings):
    """Phase 1: 32 closed-loop clients on a fresh server configured with ``max_batch`` and
    ``settings`` (:func:`config_text`'s); B's checked summary (its ``throughput`` is the
    capacity)."""
    with serve(folder, config_text(model_path, max_batch, **settings), tag) as url:
        warm(url, inputs, expected)
        load = tenant("b", inputs, expected, concurrency=32)
        return check(summarize(load, run_load(url, [load], duration=SECONDS, seed=SEED)))


def two_tenants(folder, model_path, inputs, expected, capacity, tag, **settings):
    """Phases 2-5 for one model on servers configured with ``settings`` (:func:`config_text`'s;
    its ``device``, default "cpu"): A's unloaded p50 and SLO, A + B at 2x ``capacity``, B
    alone at 2x, the predictor; returns ``(phases, slo_ms)``."""
    phases = {}
    with serve(folder, config_text(model_path, 1, **settings), f"{tag}_unloaded") as url:
        warm(url, inputs, expected)
        load = tenant("a", inputs, expected, concurrency=1)
        seconds = run_load(url, [load], duration=min(SECONDS, 3.0), max_requests=500,
                           seed=SEED)
        phases["unloaded_batch1"] = check(summarize(load, seconds))
        # The same requests one at a time onto an idle server (Poisson, SPARSE_RATE/s):
        # each wakes every process on its path, which back-to-back requests keep awake.
        load = tenant("a", inputs, expected, rate=SPARSE_RATE)
        seconds = run_load(url, [load], duration=min(SECONDS, 3.0), seed=SEED)
        phases["unloaded_sparse"] = check(summarize(load, seconds))
    slo_ms = 3 * phases["unloaded_batch1"]["latency_p50_ms"]
    sparse_slo_ms = 3 * phases["unloaded_sparse"]["latency_p50_ms"]
    a, phases["mixed_a"], phases["mixed_b"], stats, server, phases["b_alone"] = flood(
        folder, model_path, inputs, expected, capacity, slo_ms, tag, lanes=LANES == "1",
        **settings)
    phases["predictor"] = stats["predictor"]
    phases["workers"] = stats["balancing"]["devices"][settings.get("device", "cpu")].get(
        "workers")
    phases["mixed_a"]["server_side"] = server
    within = sum(1 for r in a.records if r.status == 200 and r.latency * 1e3 <= sparse_slo_ms)
    phases["mixed_a"]["sparse_slo"] = {"slo_ms": sparse_slo_ms,
                                       "attainment": within / max(1, len(a.records))}
    return phases, slo_ms


def flood(folder, model_path, inputs, expected, capacity, slo_ms, tag, *, b_nice=B_NICE,
          **settings):
    """Phases 3 and 4 on fresh servers configured with ``settings`` (:func:`config_text`'s):
    A at 20 % of ``capacity`` with ``slo_ms`` and B at 1.8x, then B alone at 2x, B's client
    at ``b_nice``. Returns ``(A's load, A's summary, B's summary, the model's /stats, A's
    server-side counts, B alone's summary)``."""
    with serve(folder, config_text(model_path, 16, slo_ms, rate_b=1.5 * capacity, **settings),
               f"{tag}_mixed") as url:
        warm(url, inputs, expected)
        a = tenant("a", inputs, expected, rate=0.2 * capacity, slo_ms=slo_ms)
        b = tenant("b", inputs, expected, rate=1.8 * capacity, nice=b_nice)
        seconds = run_load(url, [a, b], duration=SECONDS, seed=SEED, connections=128,
                           processes=True)
        mixed_a, mixed_b = check(summarize(a, seconds)), check(summarize(b, seconds))
        stats = get_json(url, "/v2/models/m/stats", TOKEN_A)
        server = server_counts(url, "a")
    with serve(folder, config_text(model_path, 16, **settings), f"{tag}_b_alone") as url:
        warm(url, inputs, expected)
        alone = tenant("b", inputs, expected, rate=2 * capacity, nice=b_nice)
        seconds = run_load(url, [alone], duration=SECONDS, seed=SEED, connections=128,
                           processes=True)
        alone = check(summarize(alone, seconds))
    return a, mixed_a, mixed_b, stats, server, alone


def tenant_metrics(label, phases, slo_ms, capacity):
    ma, mb = phases["mixed_a"], phases["mixed_b"]
    predictor = phases["predictor"]
    return [
        metric(f"{label}: tenant A unloaded p50 (batch 1)",
               round(phases["unloaded_batch1"]["latency_p50_ms"], 3), "ms"),
        metric(f"{label}: tenant A SLO (3x unloaded p50)", round(slo_ms, 3), "ms"),
        metric(f"{label}: tenant A SLO attainment (of requests sent)",
               round(ma["slo_attainment"], 5), "fraction", target=">= 0.999"),
        metric(f"{label}: tenant A unloaded p50, sparse arrivals (batch 1, "
               f"{SPARSE_RATE:g}/s)", round(phases["unloaded_sparse"]["latency_p50_ms"], 3),
               "ms", note="each request onto an idle server: back-to-back requests keep "
                          "every process on the path awake"),
        metric(f"{label}: tenant A SLO attainment against 3x the sparse unloaded p50",
               round(ma["sparse_slo"]["attainment"], 5), "fraction", target=">= 0.999",
               note=f"SLO {ma['sparse_slo']['slo_ms']:.3f} ms"),
        metric(f"{label}: tenant A SLO attainment, server-side (answered)",
               ma["server_side"]["slo_attainment_answered"], "fraction",
               note="the server's own clock, receipt to response: leaves out time queued in "
                    "the load generator, which shares this machine's cores"),
        metric(f"{label}: tenant A p99 under 2x load", round(ma["latency_p99_ms"] or -1, 3),
               "ms"),
        metric(f"{label}: tenant A refused (503) under 2x load",
               ma["by_status"].get("503", 0), "requests"),
        metric(f"{label}: tenant B answered / 429 / 503 under 2x load",
               f"{mb['answered']} / {mb['by_status'].get('429', 0)} / "
               f"{mb['by_status'].get('503', 0)}", "requests"),
        metric(f"{label}: tenant B alone: share of capacity",
               round(phases["b_alone"]["throughput"] / capacity, 3), "fraction",
               peer="capacity req/s (max_batch 16)", peer_value=round(capacity, 1),
               target=">= 0.9"),
        metric(f"{label}: predictor p50 error (mixed load)",
               predictor["prediction_error_p50"], "fraction"),
        metric(f"{label}: predictor p95 error (mixed load)",
               predictor["prediction_error_p95"], "fraction", target="<= 0.25 (CPU)"),
        metric(f"{label}: predictor tail factor (p90 measured/predicted, mixed load)",
               predictor.get("tail_factor"), "x",
               note="what bounds batches while tenant A is active (admission.py)"),
        metric(f"{label}: load average (1 min) after the mixed phase",
               ma["load_average_1min"], "", note="2 cores, shared with other jobs"),
    ] + ([] if not phases.get("workers") else [
        metric(f"{label}: worker round trip beyond the run, p50 / p95 (mixed load)",
               f"{phases['workers'][0]['transfer_ms_p50']} / "
               f"{phases['workers'][0]['transfer_ms_p95']}", "ms",
               note="pipe, pickled arrays and the waits of the server's run thread and "
                    "the worker for a core"),
    ])


def simulation_metrics(simulated):
    """Per model and jitter: A's SLO attainment under the tail bound, beside the median
    bound (the rule before) and no bound; B's share of the capacity meanwhile."""
    found = {(r["model"], r["sigma"], r["rule"]): r for r in simulated}
    metrics = []
    for model, sigma in dict.fromkeys((r["model"], r["sigma"]) for r in simulated):
        tail, median, none = (found[model, sigma, rule] for rule in ("tail", "median", "none"))
        metrics.append(metric(
            f"simulated scheduler, {model}, jitter {sigma}: tenant A SLO attainment",
            round(tail["a_slo_attainment"], 5), "fraction", peer="median bound (before)",
            peer_value=round(median["a_slo_attainment"], 5), target=">= 0.999",
            note=f"no bound: {none['a_slo_attainment']:.4f}; B's share of capacity "
                 f"{tail['b_share_of_capacity']:.2f} (median bound "
                 f"{median['b_share_of_capacity']:.2f}); SLO {tail['slo_ms']:.2f} ms; "
                 f"{tail['a_sent']} A requests; no HTTP front end, no other load"))
    return metrics


def check(summary):
    """Nothing lost, nothing wrong, nothing answered twice: else the bench fails."""
    bad = {k: summary[k] for k in ("lost", "wrong", "answered_twice") if summary[k]}
    if bad or summary["checked"] != summary["answered"]:
        raise AssertionError(f"tenant {summary['tenant']}: {bad}, checked "
                             f"{summary['checked']} of {summary['answered']} answers")
    # Other jobs share the machine: the 1-minute load average when the phase ended.
    summary["load_average_1min"] = round(os.getloadavg()[0], 2)
    return summary


def main():
    if PROCESS not in ("thread", "worker"):
        raise SystemExit(f"BENCH_SERVE_PROCESS must be thread or worker, not {PROCESS!r}")
    if LANES not in ("0", "1"):
        raise SystemExit(f"BENCH_SERVE_LANES must be 0 or 1, not {LANES!r}")
    rng = np.random.default_rng(SEED)
    load_before = round(os.getloadavg()[0], 2)
    print(f"seed {SEED}, {SECONDS:g} s per phase, runs in a {PROCESS}, priority lanes "
          f"{'on' if LANES == '1' else 'off'}, B's client at nice {B_NICE}, load average "
          f"{load_before}")
    metrics, results = [], {}
    with tempfile.TemporaryDirectory(prefix="bench_serve_") as folder:
        inputs, expected = reference(DIGITS, (1, 1, 8, 8), rng)
        capacity, phases = {}, {}
        for max_batch in (1, 16):
            phases[f"capacity_max_batch_{max_batch}"] = summary = capacity_phase(
                folder, DIGITS, inputs, expected, max_batch, f"capacity{max_batch}")
            capacity[max_batch] = summary["throughput"]
        metrics.append(metric("digits: requests/s, max_batch 1, 32 clients",
                              round(capacity[1], 1), "req/s"))
        metrics.append(metric("digits: dynamic batching speedup (max_batch 16 vs 1)",
                              round(capacity[16] / capacity[1], 2), "x",
                              peer="max_batch 1 req/s", peer_value=round(capacity[1], 1),
                              target=">= 3"))
        more, slo_ms = two_tenants(folder, DIGITS, inputs, expected, capacity[16], "digits")
        phases.update(more)
        metrics += tenant_metrics("digits", phases, slo_ms, capacity[16])
        results["digits"] = phases
        # A model whose runs, not the HTTP front end, bound the server: the ResNet-8-like
        # zoo model (about 5 ms a run of one 3x32x32 image on the CPU provider).
        _, resnet = random_models.build("resnet8", folder)
        inputs, expected = reference(resnet, (1, 3, 32, 32), rng)
        phases = {"capacity_max_batch_16": capacity_phase(folder, resnet, inputs, expected,
                                                          16, "resnet8_capacity")}
        full = phases["capacity_max_batch_16"]["throughput"]
        metrics.append(metric("resnet8: requests/s, max_batch 16, 32 clients", round(full, 1),
                              "req/s"))
        more, slo_ms = two_tenants(folder, resnet, inputs, expected, full, "resnet8")
        phases.update(more)
        metrics += tenant_metrics("resnet8", phases, slo_ms, full)
        results["resnet8"] = phases
    # The server's admission and queue on a simulated clock, per model, jitter and batch
    # bound.
    simulated = scheduler_figures()
    metrics += simulation_metrics(simulated)
    metrics.append(metric("lost or wrong answers (all phases)",
                          sum(p["lost"] + p["wrong"] for r in results.values()
                              for k, p in r.items() if k not in ("predictor", "workers")),
                          "requests", target="0"))
    path = write_results("serve", metrics, seed=SEED, seconds_per_phase=SECONDS,
                         provider="cpu", process=PROCESS, priority_lanes=LANES == "1",
                         b_client_nice=B_NICE, load_average_1min_at_start=load_before,
                         models=["digits_qdq.onnx", "random_models resnet8"],
                         phases=results, scheduler_simulation=simulated)
    plot_tenants(phase_groups(results), path.with_suffix(".png"),
                 f"bench_serve: tenants A (SLO) and B (best effort), {SECONDS:g} s phases")
    print(f"plot: {path.with_suffix('.png')}")


def phase_groups(results):
    """``[(label, [tenant summary])]`` of every load phase of every model, for the plot
    (the mixed phase's two tenants side by side)."""
    groups = []
    for model, phases in results.items():
        for name, phase in phases.items():
            if isinstance(phase, dict) and "tenant" in phase:
                label = f"{model} {name.removesuffix('_a').removesuffix('_b')}"
                if groups and groups[-1][0] == label:
                    groups[-1][1].append(phase)
                else:
                    groups.append((label, [phase]))
    return groups


#: What ``--compare`` sets against what: the peer first, then the variant measured.
COMPARISONS = {
    "processes": {"thread": {"process": "thread"}, "worker": {"process": "worker"}},
    "lanes": {"one front end": {"lanes": False}, "priority lanes": {"lanes": True}},
    "lane_batching": {"lane_batch_ms 0": {"lane_batch_ms": 0},
                      "lane_batch_ms 2": {"lane_batch_ms": 2}},
    "workers": {"1 worker": {"workers": 1}, "2 workers": {"workers": 2}},
    # B's load generator shares the server's two cores at 2x capacity; at nice 10 it
    # stands for clients on other machines (what it offers is still counted as sent).
    "client_nice": {"B's client at nice 0": {"b_nice": 0},
                    "B's client at nice 10": {"b_nice": 10}},
}


def compare(kind, rounds, model_name):
    """Two server settings (``COMPARISONS[kind]``) interleaved on one machine, on the
    digits or the ResNet-8-like model: one SLO and one capacity for both (measured once,
    the peer's setting), then per round the mixed phase (A + B at 2x) and B alone at 2x
    under each, the order swapped every round so that a drift of the machine's load falls
    on both. Writes ``serve_{kind}_{model}.json`` (``serve_process.json`` for the
    original threads-against-workers run on ResNet-8)."""
    rng = np.random.default_rng(SEED)
    (peer, peer_settings), (variant, _) = COMPARISONS[kind].items()
    base = {"process": PROCESS, "lanes": LANES == "1", "b_nice": B_NICE}
    rounds_out = []
    with tempfile.TemporaryDirectory(prefix="bench_serve_") as folder:
        if model_name == "digits":
            model, shape = DIGITS, (1, 1, 8, 8)
        else:
            _, model = random_models.build("resnet8", folder)
            shape = (1, 3, 32, 32)
        inputs, expected = reference(model, shape, rng)
        settings = {**base, **peer_settings}
        settings.pop("b_nice")
        capacity = capacity_phase(folder, model, inputs, expected, 16, "capacity",
                                  **settings)["throughput"]
        with serve(folder, config_text(model, 1, **settings), "unloaded") as url:
            warm(url, inputs, expected)
            load = tenant("a", inputs, expected, concurrency=1)
            seconds = run_load(url, [load], duration=3.0, max_requests=500, seed=SEED)
            slo_ms = 3 * check(summarize(load, seconds))["latency_p50_ms"]
        print(f"{model_name}: capacity {capacity:.1f} req/s, SLO {slo_ms:.2f} ms")
        for index in range(rounds):
            order = list(COMPARISONS[kind].items())
            for name, changed in (order if index % 2 == 0 else order[::-1]):
                tag = f"r{index}_{name.replace(' ', '_').replace(chr(39), '')}"
                _, ma, mb, stats, server, alone = flood(
                    folder, model, inputs, expected, capacity, slo_ms, tag,
                    **{**base, **changed})
                workers = stats["balancing"]["devices"]["cpu"].get("workers") or [{}]
                row = {"round": index, "setting": name,
                       "a_slo_attainment_sent": ma["slo_attainment"],
                       "a_slo_attainment_server": server["slo_attainment_answered"],
                       "a_p50_ms": ma["latency_p50_ms"], "a_p99_ms": ma["latency_p99_ms"],
                       "a_503": ma["by_status"].get("503", 0),
                       "b_answered_mixed": mb["answered"], "b_sent_mixed": mb["sent"],
                       "b_alone_share": alone["throughput"] / capacity,
                       "predictor_p50": stats["predictor"]["prediction_error_p50"],
                       "predictor_p95": stats["predictor"]["prediction_error_p95"],
                       "transfer_ms_p50": workers[0].get("transfer_ms_p50"),
                       "transfer_ms_p95": workers[0].get("transfer_ms_p95"),
                       "load_average_1min": alone["load_average_1min"]}
                print(json.dumps(row), flush=True)
                rounds_out.append(row)
    metrics = []
    for key, unit in (("a_slo_attainment_sent", "fraction"),
                      ("a_slo_attainment_server", "fraction"), ("b_alone_share", "fraction"),
                      ("predictor_p95", "fraction"), ("predictor_p50", "fraction"),
                      ("a_p50_ms", "ms"), ("a_p99_ms", "ms")):
        medians = {n: float(np.median([r[key] for r in rounds_out if r["setting"] == n]))
                   for n in (peer, variant)}
        metrics.append(metric(f"{model_name}: {key}, median of {rounds} rounds, {variant}",
                              round(medians[variant], 4), unit, peer=f"{peer} (same rounds)",
                              peer_value=round(medians[peer], 4)))
    name = ("serve_process" if (kind, model_name) == ("processes", "resnet8")
            else f"serve_{kind}_{model_name}")
    write_results(name, metrics, seed=SEED, seconds_per_phase=SECONDS, capacity=capacity,
                  slo_ms=slo_ms, base_settings=base, rounds=rounds_out)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--compare-processes"]:  # the original comparison's spelling
        compare("processes", int(sys.argv[2]) if len(sys.argv) > 2 else 3, "resnet8")
    elif sys.argv[1:2] == ["--compare"]:
        compare(sys.argv[2], int(sys.argv[3]), sys.argv[4] if len(sys.argv) > 4 else "resnet8")
    else:
        main()
