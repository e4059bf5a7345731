"""Spatial vs temporal sharing of one FPGA between two tenants.

Two ways to give two tenants one ECP5-85F-class device, for the digits CNN
(``models/zoo/digits_qdq.onnx``):

- **temporal**: one 8x8 engine (preset ``ulx3s-85f``), its time shared: every request of
  either tenant queues for the one engine (non-preemptive, first come first served, a
  run never shared);
- **spatial**: two 4x4 engines (preset ``ulx3s-25f``: the same buffer depths) placed side
  by side by :class:`hw.multi_top.MultiTop`, one per tenant (hard isolation).

Device time comes from the cycle model (``sw_driver.providers.costs.device_work``: the passes the
driver would run, counted) at the board clock, never from the twin's wall time, which is a
simulator's. With ``--twin`` each configuration also runs the model once on its Verilator
twin (built on first use, minutes) and the measured ``PERF_CYCLES`` of its layers are
recorded beside the model's.

Latency per tenant is then a discrete-event simulation of the device queue (seeded Poisson
arrivals, one image per request, every service time its predicted device time), for three
kinds of traffic: both tenants at equal rates, one tenant alone, and one tenant bursty
beside a steady one. Throughput is images per second at saturation. Resources: Yosys
``synth_ecp5`` of both tops, as ``bench/bench_synth.py`` does it (cached under
``build/synth/``; minutes on the first run).

Usage: ``python -m bench.bench_spatial [--twin] [--no-synth] [--requests N]``
"""

import argparse
import hashlib
import json
import sys
from pathlib import Path

import numpy as np

from bench.common import metric, require_counters, write_results
from contract.config_file import PRESETS

MODEL = Path(__file__).resolve().parent.parent / "models" / "zoo" / "digits_qdq.onnx"
TEMPORAL = ("ulx3s-85f", 1)
SPATIAL = ("ulx3s-25f", 2)
#: The board clock when a preset names none: the "pcie" provider's default (150 MHz).
DEFAULT_CLOCK_MHZ = 150.0
SEED = 14
BUILD = Path("build") / "synth"


def clock_hz(config):
    return (config.clock_mhz or DEFAULT_CLOCK_MHZ) * 1e6


# ------------------------------------------------------------------ synthesis

def multi_netlist(config, instances):
    """RTLIL of :class:`~hw.multi_top.MultiTop` (or the single top for one instance), named
    as ``bench_synth`` expects its top so its Yosys script is reused unchanged."""
    from amaranth.back import rtlil

    from bench.bench_synth import TOP_NAME
    from hw.multi_top import MultiTop
    from hw.top import AcceleratorTop

    top = AcceleratorTop(config) if instances == 1 else MultiTop(config, instances=instances)
    return rtlil.convert(top, name=TOP_NAME, emit_src=False)


def synthesize(preset, instances, *, say=print):
    """``{cell: count}`` of the whole top (:data:`bench.bench_synth.CELLS`) for
    ``instances`` engines of ``preset``, synthesized or read from the cache."""
    from bench.bench_synth import CELLS, SCRIPT, module_cells, run_yosys

    config = PRESETS[preset]
    text = multi_netlist(config, instances)
    key = hashlib.sha256((text + SCRIPT).encode()).hexdigest()[:16]
    folder = BUILD / f"spatial-{preset}-x{instances}-{key}"
    stat_path = folder / "stat.json"
    if not stat_path.exists():
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "top.il").write_text(text)
        say(f"synth: {instances} x {preset} in {folder}; this takes minutes")
        run_yosys(folder, say)
    cells = module_cells(json.loads(stat_path.read_text()))
    return {cell: sum(counts.get(cell, 0) for counts in cells.values()) for cell in CELLS}


# ------------------------------------------------------------------ device time

def model_cycles(config, path=MODEL):
    """``(cycles per image, {layer: cycles})`` of the model's accelerator layers on
    ``config`` (the planner's pass counts, batch 1); layers the engine does not run
    (quantize, global average pool, flatten) are the host's and left out of device time."""
    from sw_driver.importer import import_model
    from sw_driver.providers.costs import device_work
    from sw_driver.shapes import infer_shapes

    graph = import_model(str(path))
    shapes = infer_shapes(graph, 1)
    layers = {}
    for layer in graph.layers:
        try:
            layers[layer.name] = device_work(layer, shapes[layer.inputs[0]], config).cycles
        except ValueError:
            continue  # not an accelerator layer
    return sum(layers.values()), layers


def twin_cycles(config, path=MODEL, seed=SEED):
    """``{layer: PERF_CYCLES}`` of one run of the model on the Verilator twin of
    ``config`` (built on first use; minutes), and whether its output matched the CPU's."""
    from sw_driver import InferenceSession
    from sw_driver.providers.sim import SimProvider

    require_counters(config, "bench_spatial")
    provider = SimProvider(config, log=lambda message: None)
    session = InferenceSession(str(path), providers=[provider])
    x = np.random.default_rng(seed).random((1, 1, 8, 8), dtype=np.float32)
    got = session.run(None, {"input": x})[0]
    want = InferenceSession(str(path), providers=["cpu"]).run(None, {"input": x})[0]
    layers = {layer.name: provider.cycles(layer) for layer in session.graph.layers
              if provider.cycles(layer) is not None}
    return layers, bool(np.array_equal(got, want))


# ------------------------------------------------------------------ queueing

def poisson_arrivals(rng, rate, count):
    """``count`` arrival times of a Poisson process of ``rate`` per second."""
    return np.cumsum(rng.exponential(1.0 / rate, count))


def bursty_arrivals(rng, mean_rate, count, burst=32):
    """Arrivals in bursts of ``burst`` back-to-back requests, the bursts Poisson, at
    ``mean_rate`` requests per second on average."""
    starts = poisson_arrivals(rng, mean_rate / burst, -(-count // burst))
    return np.repeat(starts, burst)[:count]


def serve_fcfs(arrivals, service):
    """Latencies of requests served first come first served by one engine that runs one
    at a time to the end (non-preemptive), each taking ``service`` seconds."""
    latencies = np.empty(len(arrivals))
    free = 0.0
    for i, t in enumerate(arrivals):
        start = max(t, free)
        free = start + service
        latencies[i] = free - t
    return latencies


def serve_fcfs_pool(arrivals, service, engines):
    """Latencies of requests served first come first served by ``engines`` equal engines,
    each request starting on the one free first (the server's least predicted finish time
    with equal devices), non-preemptive."""
    free = np.zeros(engines)
    latencies = np.empty(len(arrivals))
    for i, t in enumerate(arrivals):
        k = int(np.argmin(free))
        free[k] = max(t, free[k]) + service
        latencies[i] = free[k] - t
    return latencies


def serve_priority(high, low, service):
    """Latencies ``(high's, low's)`` on one non-preemptive engine that, whenever it is
    free, starts the oldest waiting ``high`` request if any, else the oldest ``low`` one
    (the serving scheduler's priority classes, ``tessera/serve/queueing.py``)."""
    out = {0: np.empty(len(high)), 1: np.empty(len(low))}
    queues, heads, free = (high, low), [0, 0], 0.0
    while heads[0] < len(high) or heads[1] < len(low):
        waiting = [k for k in (0, 1) if heads[k] < len(queues[k])
                   and queues[k][heads[k]] <= free]
        if waiting:
            k = waiting[0]
        else:  # idle: the next arrival, the high class on a tie
            k = min((k for k in (0, 1) if heads[k] < len(queues[k])),
                    key=lambda k: (queues[k][heads[k]], k))
        t = queues[k][heads[k]]
        free = max(free, t) + service
        out[k][heads[k]] = free - t
        heads[k] += 1
    return out[0], out[1]


def _quantiles(latencies):
    return {"p50": float(np.percentile(latencies, 50)),
            "p99": float(np.percentile(latencies, 99))}


def simulate(traffic, service_temporal, service_spatial, engines=2):
    """Per tenant ``{p50, p99}`` latency (seconds) under temporal sharing (one engine, all
    tenants' requests in arrival order; and, with two tenants, A's before B's), spatial
    sharing (one engine per tenant) and the ``engines`` small engines shared by all
    (``spatial_shared``: no instance given to a tenant).
    ``traffic`` maps tenant -> arrival times."""
    tenants = sorted(traffic)
    merged = np.concatenate([traffic[t] for t in tenants])
    owner = np.concatenate([[t] * len(traffic[t]) for t in tenants])
    order = np.argsort(merged, kind="stable")
    temporal = np.empty(len(merged))
    temporal[order] = serve_fcfs(merged[order], service_temporal)
    pooled = np.empty(len(merged))
    pooled[order] = serve_fcfs_pool(merged[order], service_spatial, engines)
    result = {}
    for tenant in tenants:
        result[tenant] = {"temporal": _quantiles(temporal[owner == tenant]),
                          "spatial": _quantiles(serve_fcfs(traffic[tenant], service_spatial)),
                          "spatial_shared": _quantiles(pooled[owner == tenant])}
    if tenants == ["A", "B"]:  # A latency-critical: the temporal engine with A first
        high, low = serve_priority(traffic["A"], traffic["B"], service_temporal)
        result["A"]["temporal_priority"] = _quantiles(high)
        result["B"]["temporal_priority"] = _quantiles(low)
    return result


def scenarios(capacity, requests, seed=SEED):
    """The traffic compared, as fractions of the temporal engine's capacity (images/s)."""
    rng = np.random.default_rng(seed)
    return {
        "balanced: A and B Poisson at 0.3 each": {
            "A": poisson_arrivals(rng, 0.3 * capacity, requests),
            "B": poisson_arrivals(rng, 0.3 * capacity, requests)},
        "A alone, Poisson at 0.45": {
            "A": poisson_arrivals(rng, 0.45 * capacity, requests)},
        "A Poisson at 0.2, B in bursts of 32 at mean 0.3": {
            "A": poisson_arrivals(rng, 0.2 * capacity, requests),
            "B": bursty_arrivals(rng, 0.3 * capacity, requests)},
    }


# ------------------------------------------------------------------ the bench

def _us(seconds):
    return round(seconds * 1e6, 2)


def run(requests=20_000, *, synth=True, twin=False, say=print):
    """Compute every figure; returns ``(metrics, context)`` for :func:`write_results`."""
    (t_preset, _), (s_preset, s_count) = TEMPORAL, SPATIAL
    t_cfg, s_cfg = PRESETS[t_preset], PRESETS[s_preset]
    t_cycles, t_layers = model_cycles(t_cfg)
    s_cycles, s_layers = model_cycles(s_cfg)
    t_service, s_service = t_cycles / clock_hz(t_cfg), s_cycles / clock_hz(s_cfg)
    t_capacity, s_capacity = 1.0 / t_service, s_count / s_service
    metrics = [
        metric("temporal device time per image", _us(t_service), "us",
               note=f"{t_cycles} cycles on 1 x {t_preset} at {clock_hz(t_cfg) / 1e6:g} MHz"),
        metric("spatial device time per image", _us(s_service), "us",
               note=f"{s_cycles} cycles on one of {s_count} x {s_preset} at "
                    f"{clock_hz(s_cfg) / 1e6:g} MHz"),
        metric("temporal throughput", round(t_capacity), "images/s"),
        metric("spatial throughput", round(s_capacity), "images/s", peer="temporal",
               peer_value=round(t_capacity)),
        metric("spatial / temporal throughput", round(s_capacity / t_capacity, 3), "ratio"),
    ]
    results = {}
    for name, traffic in scenarios(t_capacity, requests).items():
        results[name] = simulate(traffic, t_service, s_service, s_count)
        for tenant, figures in results[name].items():
            for mode in figures:
                for q in ("p50", "p99"):
                    metrics.append(metric(f"{name} | {tenant} {mode} {q}",
                                          _us(figures[mode][q]), "us"))
    context = {"model": str(MODEL.relative_to(MODEL.parents[2])),
               "temporal": {"preset": t_preset, "instances": 1,
                            "cycles_per_image": t_cycles, "layers": t_layers},
               "spatial": {"preset": s_preset, "instances": s_count,
                           "cycles_per_image": s_cycles, "layers": s_layers},
               "requests_per_tenant": requests, "seed": SEED, "latency": results,
               "device_time": "planner cycle model x clock; host layers and the link are "
                              "not device time"}
    if twin:
        for mode, cfg, modelled in (("temporal", t_cfg, t_layers), ("spatial", s_cfg,
                                                                    s_layers)):
            say(f"twin: {mode} ({cfg.rows}x{cfg.cols}); building it may take minutes")
            measured, exact = twin_cycles(cfg)
            context[mode]["twin_layers"] = measured
            context[mode]["twin_bit_exact"] = exact
            total = sum(measured.values())
            metrics.append(metric(f"{mode} twin cycles per image", total, "cycles",
                                  peer="cycle model", peer_value=sum(modelled.values()),
                                  note="PERF_CYCLES of one run; a pool fused into its conv "
                                       "costs no pass of its own on the twin"))
    if synth:
        for mode, (preset, count) in (("temporal", TEMPORAL), ("spatial", SPATIAL)):
            cells = synthesize(preset, count, say=say)
            context[mode]["resources"] = cells
            for cell, value in cells.items():
                metrics.append(metric(f"{mode} {cell}", value, "cells",
                                      note=f"{count} x {preset}, synth_ecp5 out of context"))
    return metrics, context


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--twin", action="store_true",
                        help="also run the model once on each configuration's twin")
    parser.add_argument("--no-synth", action="store_true", help="skip the resource counts")
    parser.add_argument("--requests", type=int, default=20_000,
                        help="requests per tenant in each simulated traffic (default 20000)")
    args = parser.parse_args(argv if argv is not None else [])
    metrics, context = run(args.requests, synth=not args.no_synth, twin=args.twin)
    return write_results("spatial", metrics, **context)


if __name__ == "__main__":
    main(sys.argv[1:])
