"""How busy the systolic array is over whole layers of the zoo's ResNet-8 (and the depthwise
layers of its depthwise-separable stack), counted on the Verilator twin at batch 1.

Every layer the "sim" provider runs is timed by the device's own PERF_CYCLES counter over
all of its passes, so a layer's cycles include every load (parameters, weights,
activations), the array's compute, its drain and the output stream. A layer's ideal is its
multiply-accumulates divided by the R x C MACs the array does per cycle; its utilization is
ideal / measured. The whole model's utilization is the sum of the ideals over the sum of
the measured cycles of every layer that ran on the twin (residual adds and the dense head
included, so time spent outside the array counts against it).

Beside each layer: the driver's cycle estimate (``sw_driver.providers.costs.device_work``, which
the planner uses), and ``cycle_model_error``, the largest |estimate - twin| / twin; and
its ``host_link_bound``, the most any array could reach on it when its input crosses the
host link: ideal / max(ideal, input words), one 32-bit word a cycle
(``contract.streams``). A depthwise 3x3 layer has 9 MACs per input byte (2.25 at stride
2) against the array's R x C a cycle, so its bound is low whatever the array does.
"""

import os
import time

import numpy as np

from bench.common import metric, require_counters, write_results
from contract.streams import ACTIVATIONS_PER_WORD
from sw_driver import InferenceSession
from sw_driver import graph as g
from sw_driver.providers.costs import device_work, macs
from sw_driver.providers.sim import DEFAULT_CONFIG, SimProvider
from sw_driver.shapes import infer_shapes

#: The engine measured: the one the "sim" provider builds for the zoo (``tessera bench
#: --config`` replaces it).
CONFIG = DEFAULT_CONFIG
SEED = 11
#: Targets: utilization of the array per layer kind and model, and the cycle model's error.
TARGETS = {"whole_layer_utilization_3x3": 0.85, "whole_layer_utilization_1x1": 0.60,
           "whole_layer_utilization_depthwise": 0.50, "whole_model_utilization": 0.75,
           "cycle_model_error": 0.05}


def _kind(layer):
    """``"3x3"``, ``"1x1"``, ``"depthwise"``, ``"dense"`` or the layer's op."""
    if isinstance(layer, g.Conv):
        if layer.groups > 1:
            return "depthwise"
        return f"{layer.weight.shape[2]}x{layer.weight.shape[3]}"
    if isinstance(layer, g.Dense):
        return "dense"
    return layer.op


def host_link_bound(layer, shape, ideal):
    """Upper bound of a convolution's whole-layer utilization set by the host link alone:
    ``ideal`` over the cycles its input activations take at a word a cycle (a strided 1x1
    without padding sends only the pixels it reads; see
    ``sw_driver.accelerator.skip_strided_1x1``). Weights and the output (which a fused
    pool shrinks) are left out, so it is an upper bound. None for other layers."""
    if not isinstance(layer, g.Conv):
        return None
    _, c, h, w = shape
    (sh, sw), kh, kw = layer.stride, *layer.weight.shape[2:]
    if (kh, kw) == (1, 1) and sh == sw > 1 and not any(layer.padding):
        h, w = -(-h // sh), -(-w // sw)
    return round(ideal / max(ideal, c * h * w / ACTIVATIONS_PER_WORD), 4)


def measure(name, provider, config, select=None):
    """Run zoo model ``name`` at batch 1 with ``provider`` first; one record per layer that
    ran on the twin (``select(layer)`` filters them)."""
    from models.zoo import random_models

    qdq_path = random_models.build(name)[1]
    session = InferenceSession(str(qdq_path), providers=[provider, "cpu"])
    x = random_models.random_inputs(np.random.default_rng(SEED), 1)
    (want,) = InferenceSession(str(qdq_path), providers=["cpu"]).run(None, {"input": x})
    started = time.perf_counter()
    (got,) = session.run(None, {"input": x})
    wall = time.perf_counter() - started
    if not np.array_equal(got, want):
        raise AssertionError(f"zoo {name}: the twin's output differs from the cpu provider's")
    layers = {layer.name: layer for layer in session.graph.layers}
    shapes = infer_shapes(session.graph, 1)
    records = []
    for entry in session.profile():
        layer = layers[entry["layer"]]
        if entry["provider"] != provider.name or (select and not select(layer)):
            continue
        shape = shapes[layer.inputs[0]]
        cycles = entry["cycles"]
        ideal = macs(layer, shape) / (config.rows * config.cols)
        estimate = device_work(layer, shape, config).cycles
        records.append({
            "model": name, "layer": layer.name, "kind": _kind(layer),
            "in_shape": list(shape), "channels": int(shape[1]), "cycles": int(cycles),
            "ideal_cycles": round(ideal, 1), "utilization": round(ideal / cycles, 4),
            "host_link_bound": host_link_bound(layer, shape, ideal),
            "estimate_cycles": int(estimate),
            "estimate_error": round(abs(estimate - cycles) / cycles, 4)})
    return records, wall


def _bound_text(bound):
    return "  -  " if bound is None else f"{bound:.3f}"


def _utilization(records):
    return round(sum(r["ideal_cycles"] for r in records)
                 / max(1, sum(r["cycles"] for r in records)), 4)


def main():
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    require_counters(CONFIG, "bench_utilization")
    # Layer at a time: every layer's own PERF_CYCLES (a resident run counts a segment's).
    provider = SimProvider(CONFIG, resident=False, log=lambda message: None)
    try:
        resnet, resnet_wall = measure("resnet8", provider, CONFIG)
        depthwise, _ = measure("dwsep", provider, CONFIG,
                               select=lambda layer: _kind(layer) == "depthwise")
    finally:
        provider.close()
    for r in resnet + depthwise:
        print(f"  {r['model']:8} {r['layer']:12} {r['kind']:9} {str(r['in_shape']):18} "
              f"{r['cycles']:>8} cycles  util {r['utilization']:.3f} "
              f"(link bound {_bound_text(r['host_link_bound'])})  "
              f"model {r['estimate_cycles']:>8} ({r['estimate_error']:.1%})")
    conv3 = [r for r in resnet if r["kind"] == "3x3" and r["channels"] >= 16]
    conv1 = [r for r in resnet if r["kind"] == "1x1"]
    total_cycles = sum(r["cycles"] for r in resnet)
    everything = resnet + depthwise
    worst = max(everything, key=lambda r: r["estimate_error"])
    metrics = [
        metric("whole_layer_utilization_3x3", min(r["utilization"] for r in conv3),
               "fraction", target=TARGETS["whole_layer_utilization_3x3"],
               note=f"lowest of {len(conv3)} ResNet-8 3x3 layers with >= 16 input channels; "
                    f"together {_utilization(conv3)}"),
        metric("whole_layer_utilization_1x1", min(r["utilization"] for r in conv1),
               "fraction", target=TARGETS["whole_layer_utilization_1x1"],
               note=f"lowest of {len(conv1)} ResNet-8 1x1 stride-2 projections"),
        metric("whole_layer_utilization_depthwise", min(r["utilization"] for r in depthwise),
               "fraction", target=TARGETS["whole_layer_utilization_depthwise"],
               note=f"lowest of {len(depthwise)} depthwise 3x3 layers of the zoo's dwsep"),
        metric("depthwise_host_link_bound", min(r["host_link_bound"] for r in depthwise),
               "fraction", note="the most any array could reach on the lowest depthwise "
                                "layer with its input crossing the 32-bit host link "
                                "(ideal / max(ideal, input words))"),
        metric("whole_model_utilization", _utilization(resnet), "fraction",
               target=TARGETS["whole_model_utilization"],
               note="ResNet-8 at batch 1: ideal MAC cycles / twin cycles over every layer "
                    "on the twin (convolutions, adds, dense)"),
        metric("cycle_model_error", worst["estimate_error"], "fraction",
               target=TARGETS["cycle_model_error"],
               note=f"largest |driver estimate - twin| / twin, at {worst['model']} "
                    f"{worst['layer']}"),
        metric("resnet8_twin_cycles", total_cycles, "cycles"),
        metric("twin_cycles_per_second", round(total_cycles / resnet_wall), "cycles/s",
               note="ResNet-8 batch 1 through the session: device cycles / wall time, host "
                    "work (CPU layers, DMA packing) included"),
    ]
    return write_results("utilization", metrics, config=CONFIG.as_dict(), layers=everything)


if __name__ == "__main__":
    main()
