"""The serving scheduler alone, on a simulated clock.

Tenant A (high priority, SLO = 3x its unloaded latency) sends Poisson traffic at 20 % of
the device's batched capacity and best-effort tenant B at 180 %, as in
``bench/bench_serve.py``, but nothing runs: a run of ``n`` images takes a modelled time,
``base + per_image * n`` times a log-normal jitter, and each request pays a fixed HTTP
cost. The server's own :class:`~tessera.serve.admission.Admission` and
:class:`~tessera.serve.queueing.DeviceQueue` admit, order and batch the requests, and the
batch is formed as the server forms it (``tessera/serve/app.py``, ``launch``). So the
figures are those of the scheduling policy, without the HTTP front end, the load generator
or the other jobs that share the development machine's two cores, which dominate the live
bench there.

Three batch bounds while A is active: ``none`` (priority and deadlines only, batches up to
``max_batch``), ``median`` (the rule before: a batch's median prediction within the SLO
less its margin and less A's own one-image run) and ``tail`` (the rule now,
:meth:`Admission.batch_limit`). :func:`scheduler_figures` gives the figures of the bench's
two models (``bench/bench_serve.py`` records them); ``python -m tessera.serve.simulate``
prints them as JSON.
"""

import asyncio
import heapq
import itertools
import json
import math

import numpy as np

from .admission import SLO_MARGIN, Admission
from .config import DeviceConfig, TenantConfig

__all__ = ["MODELS", "RULES", "scheduler_figures", "simulate"]

RULES = ("none", "median", "tail")
#: Modelled run times (seconds: fixed, per image) of the bench's models on the CPU provider,
#: from runs on a quiet moment of the development machine (docs/serving.md), and the HTTP
#: cost of one request (unloaded latency less the run).
MODELS = {"digits": (0.6e-3, 0.02e-3), "resnet8": (0.4e-3, 1.45e-3)}
HTTP_SECONDS = 1.5e-3


def _previous_limit(admission, model, max_batch, leader_images, run_budget, slo):
    """The bound before this rule: median prediction within ``slo`` x (1 - margin) less
    A's own one-image run."""
    budget = min(run_budget, slo * (1 - SLO_MARGIN) - admission.predict(model, 1))
    images = max_batch
    while images > leader_images and admission.predict(model, images) > budget:
        images -= 1
    return images


def simulate(rule, *, base, per_image, sigma, seconds=30.0, seed=0, max_batch=16,
             max_queue=32, http=HTTP_SECONDS, load=2.0, share_a=0.2):
    """Serve A and B for ``seconds`` simulated seconds under batch bound ``rule``; per
    tenant figures (A: SLO attainment of requests sent, refusals, p99; B: throughput as a
    share of the batched capacity, mean batch)."""
    if rule not in RULES:
        raise ValueError(f"rule must be one of {RULES}, not {rule!r}")
    return asyncio.run(_simulate(rule, base, per_image, sigma, seconds, seed, max_batch,
                                 max_queue, http, load, share_a))


async def _simulate(rule, base, per_image, sigma, seconds, seed, max_batch, max_queue, http,
                    load, share_a):
    rng = np.random.default_rng(seed)
    now = [0.0]
    clock = lambda: now[0]  # noqa: E731 - the admission's and queue's clock

    def run_seconds(images):
        return (base + per_image * images) * math.exp(sigma * rng.standard_normal())

    one = base + per_image
    slo = 3 * (http + one)
    capacity = max_batch / (base + per_image * max_batch)
    tenants = {"a": TenantConfig("a", "a" * 16, ("m",), "high", slo * 1e3, 1e9, 10**9),
               "b": TenantConfig("b", "b" * 16, ("m",), "low", None, 1e9, 10**9)}
    admission = Admission({"cpu": DeviceConfig("cpu", 1, max_queue)}, tenants, clock=clock)
    admission.add_model("m", one, max_batch=max_batch)
    for images in range(1, max_batch + 1):  # the medians a warm-up would leave
        modelled = base + per_image * images
        admission._predictors["m", "cpu"].observe(images, modelled, modelled)
    queue = admission.queues["cpu"]
    events, order = [], itertools.count()  # (time, order, kind, payload)
    latencies = {"a": [], "b": []}
    refused = {"a": 0, "b": 0}
    batches = []

    def launch(leader):
        own = admission.predict("m", leader.images)
        run_budget = (leader.deadline - now[0] + own) * (1 - SLO_MARGIN)
        if rule == "none":
            limit = max_batch
        elif rule == "median":
            limit = _previous_limit(admission, "m", max_batch, leader.images, run_budget, slo)
        else:
            limit = admission.batch_limit("m", "cpu", max_batch, leader.images, run_budget)
        batch = [leader, *queue.gather(leader, limit, lambda n: admission.predict("m", n))]
        images = sum(t.images for t in batch)
        batches.append((leader.tenant, images))
        took = run_seconds(images)
        heapq.heappush(events, (now[0] + took, next(order), "done", (batch, took)))

    queue.launch = launch
    for tenant, share in (("a", share_a), ("b", load - share_a)):
        t = 0.0
        while True:
            t += rng.exponential(1.0 / (share * capacity))
            if t >= seconds:
                break
            heapq.heappush(events, (t, next(order), "arrive", tenant))
    while events:
        now[0], _, kind, payload = heapq.heappop(events)
        if kind == "arrive":
            tenant = tenants[payload]
            _, refusal = admission.admit(
                "m", None, 1, None if tenant.slo_ms is None else slo, tenant.priority,
                key="k", payload=now[0], now=now[0], tenant=payload)
            if refusal is not None:  # 503: counts as a miss for A
                refused[payload] += 1
            continue
        (leader, *riders), took = payload
        for ticket in (leader, *riders):
            latencies[ticket.tenant].append(now[0] - ticket.payload + http)
        for ticket in riders:  # as the server does: the leader's run teaches the predictor
            admission.done("m", "cpu", ticket, None)
        admission.done("m", "cpu", leader, took, images=leader.images + sum(
            t.images for t in riders), predicted=leader.work)
    sent_a = len(latencies["a"]) + refused["a"]
    within = sum(1 for v in latencies["a"] if v <= slo)
    b_images = [n for who, n in batches if who == "b"]
    return {"rule": rule, "sigma": sigma, "seconds": seconds, "seed": seed,
            "slo_ms": slo * 1e3, "capacity_per_s": capacity,
            "a_sent": sent_a, "a_refused": refused["a"],
            "a_slo_attainment": within / sent_a if sent_a else None,
            "a_p99_ms": _quantile(latencies["a"], 0.99) * 1e3,
            "b_answered": len(latencies["b"]), "b_refused": refused["b"],
            "b_share_of_capacity": len(latencies["b"]) / seconds / capacity,
            "b_mean_batch": sum(b_images) / len(b_images) if b_images else None,
            "tail_factor": admission.stats("m")["tail_factor"]}


def _quantile(values, q):
    values = sorted(values)
    return values[min(len(values) - 1, math.ceil(q * len(values)) - 1)] if values else math.nan


#: Tenant A's requests per simulated run (enough to tell 99.9 % from 99 %), and the run-time
#: jitters: log-normal sigma 0.1 (a dedicated core) and 0.35 (p95 of a run 1.8x its median,
#: as measured on the shared 2-core machine under the bench's load).
REQUESTS_A = 4000
SIGMAS = (0.1, 0.35)


def scheduler_figures():
    """:func:`simulate` per model of :data:`MODELS`, jitter of :data:`SIGMAS` and rule of
    :data:`RULES` (seed 14, :data:`REQUESTS_A` of tenant A's requests each): a list of
    ``{"model": name, **figures}``."""
    results = []
    for name, (base, per_image) in MODELS.items():
        capacity = 16 / (base + per_image * 16)
        for sigma in SIGMAS:
            for rule in RULES:
                results.append({"model": name, **simulate(
                    rule, base=base, per_image=per_image, sigma=sigma, seed=14,
                    seconds=REQUESTS_A / (0.2 * capacity))})
    return results


def main():
    print(json.dumps(scheduler_figures(), indent=1))


if __name__ == "__main__":
    main()
