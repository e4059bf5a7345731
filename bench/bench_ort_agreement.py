"""Tessera and onnxruntime's fused kernels against the ONNX QDQ reference, with the CPU's
features (``bench/results/ort_agreement.json``).

The reference is onnxruntime with graph optimizations off (DequantizeLinear -> float op ->
QuantizeLinear): the same on every CPU. Measured on the shipped digits CNN and the random
zoo models (ResNet-8, depthwise-separable), seeded inputs: the share of output elements
bit-exact and within 1 LSB, and the largest difference, for

- Tessera's ``cpu``, ``opencl`` and ``sim`` (the Verilator twin, fewer samples) providers;
- onnxruntime's default session, whose fused QLinearConv / QGemm depend on the CPU
  (``bench.ort_cpu``): exact sums with VNNI, possibly saturated ones without.

Where Tessera departs from the reference it is by 1 LSB on an element whose real value lies
within float32 error of a rounding tie (``docs/semantics.md``); the fused session's
departures on CPUs without VNNI are larger. The figures are recorded, never asserted here.
"""

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import tempfile
from pathlib import Path

import numpy as np
import onnxruntime as ort

from bench.common import metric, write_results
from bench.ort_cpu import cpu_features, fused_int8_gemm_is_exact
from models.zoo import DIGITS_QDQ, digits, random_models
from models.zoo.reference import onnxruntime_session
from sw_driver import InferenceSession

SEED = 17
SAMPLES = 256
TWIN_SAMPLES = 16  # the twin simulates every cycle: a few images are enough for agreement
TARGET_EXACT = 0.999
TARGET_WITHIN_1 = 1.0


def _models(tmp):
    """(name, QDQ path, inputs) for every measured model."""
    _, _, x_test, _ = digits.load_digits_split()
    yield "digits", DIGITS_QDQ, x_test[:SAMPLES]
    for name in random_models.MODELS:
        _, qdq = random_models.build(name, Path(tmp))
        yield name, qdq, random_models.random_inputs(np.random.default_rng(SEED), SAMPLES)


def _agreement(ours, reference, scale):
    diff = np.rint(np.abs(ours.astype(np.float64) - reference.astype(np.float64)) / scale)
    return {"exact": float((diff == 0).mean()), "within_1": float((diff <= 1).mean()),
            "max_lsb": int(diff.max(initial=0)), "elements": int(diff.size)}


def _runners():
    yield "tessera_cpu", ["cpu"], SAMPLES
    yield "tessera_opencl", ["opencl", "cpu"], SAMPLES
    yield "tessera_sim", ["sim", "cpu"], TWIN_SAMPLES


def main():
    """Measure, print a table and write ``bench/results/ort_agreement.json``."""
    metrics, rows = [], []
    exact_gemm, why = fused_int8_gemm_is_exact()
    with tempfile.TemporaryDirectory() as tmp:
        for model, path, x in _models(tmp):
            session = InferenceSession(str(path), providers=["cpu"])
            name = session.get_inputs()[0].name
            last = session.graph.layers[-1]
            scale = last.scale if last.op == "Dequantize" else 1 / 256
            (reference,) = onnxruntime_session(path).run(None, {name: x})
            (fused,) = onnxruntime_session(path, optimized=True).run(None, {name: x})
            results = {"onnxruntime_fused": _agreement(fused, reference, scale)}
            for runner, providers, samples in _runners():
                try:
                    ours = InferenceSession(str(path), providers=providers)
                except Exception as exc:  # a provider this machine lacks is reported, not fatal
                    print(f"{model}: {runner} unavailable: {exc}")
                    continue
                (out,) = ours.run(None, {name: x[:samples]})
                results[runner] = _agreement(out, reference[:samples], scale)
            for runner, figures in results.items():
                tessera = runner.startswith("tessera")
                # Every figure is against the unfused reference (the document says so).
                metrics.append(metric(
                    f"{model}_{runner}_bit_exact", round(figures["exact"], 5), "fraction",
                    target=TARGET_EXACT if tessera else None,
                    note=f"of {figures['elements']} output elements"))
                metrics.append(metric(
                    f"{model}_{runner}_within_1_lsb", round(figures["within_1"], 5), "fraction",
                    target=TARGET_WITHIN_1 if tessera else None))
                metrics.append(metric(f"{model}_{runner}_max_lsb", figures["max_lsb"], "LSB"))
                rows.append((model, runner, figures))
    print(f"{'model':10} {'runner':20} {'exact':>9} {'within 1':>9} {'max':>4}")
    for model, runner, f in rows:
        print(f"{model:10} {runner:20} {f['exact']:9.4%} {f['within_1']:9.4%} {f['max_lsb']:4d}")
    features = cpu_features()
    print(f"CPU: {features['model']} ({', '.join(features['flags'])}); fused int8 GEMM exact: "
          f"{exact_gemm} ({why})")
    out = write_results("ort_agreement", metrics, reference="onnxruntime, graph optimizations "
                        "off (ORT_DISABLE_ALL)", onnxruntime=ort.__version__, cpu=features,
                        fused_int8_gemm_exact=exact_gemm, fused_int8_gemm_reason=why, seed=SEED)
    print(f"wrote {out}")
