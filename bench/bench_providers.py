"""Whole-model throughput of the session's providers (``bench/results/providers.json``).

A ResNet-8-like network (32x32x3 input; a 3x3 stem; three residual stages of 16, 32 and 64
channels, the last two strided with 1x1 projections; global average pool; a 10-way Gemm;
about 12.5 M multiply-accumulates per image), quantized by ``quantize_static`` (QDQ,
per-channel int8 weights, int8 activations, seeded calibration). The model zoo's
``models.zoo.random_models.resnet8`` is used where it exists; otherwise the same
architecture is built here with ``onnx.helper`` (:func:`resnet8`).

Measured in one run, on the same seeded inputs, at batch 1, 32 and 64 (images/s, median of
repeats): onnxruntime's CPU provider with 2 and 1 intra-op threads (its default graph
optimizations, which fuse QDQ groups into integer kernels), Tessera ``"cpu"`` and Tessera
``"opencl"``. Tessera's two providers are first checked to give identical outputs.
``OPENBLAS_NUM_THREADS=1`` so that NumPy does not compete with OpenCL's threads.
"""

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import logging
import tempfile
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper
from onnxruntime.quantization import (
    CalibrationDataReader,
    QuantFormat,
    QuantType,
    quantize_static,
)

from bench.common import images_per_second, metric, write_results
from models.zoo.reference import onnxruntime_session
from sw_driver import InferenceSession
from sw_driver.providers import OpenCLProvider

SEED = 2025
BATCHES = (1, 32, 64)
REPEATS = 7
MIN_SECONDS = 0.2  # each repeat runs the model at least this long (batch 1 is short)
ORT_THREADS = (2, 1)
TARGET_OPENCL = 0.25  # opencl / onnxruntime at batch 64 (the 2-thread session)
TARGET_CPU = 1 / 6    # cpu / onnxruntime: within 6x
INPUT_SHAPE = (3, 32, 32)


# ---------------------------------------------------------------- the model

def _conv(nodes, inits, rng, name, x, cin, cout, k, stride=1, relu=True):
    fan_in = cin * k * k
    inits[f"{name}_W"] = rng.standard_normal((cout, cin, k, k)) * (1.5 / np.sqrt(fan_in))
    inits[f"{name}_B"] = rng.standard_normal(cout) * 0.1
    pad = k // 2
    out = f"{name}_out"
    nodes.append(helper.make_node("Conv", [x, f"{name}_W", f"{name}_B"], [out], name=name,
                                  kernel_shape=[k, k], pads=[pad] * 4,
                                  strides=[stride, stride]))
    if relu:
        nodes.append(helper.make_node("Relu", [out], [f"{name}_relu"], name=f"{name}_relu"))
        return f"{name}_relu"
    return out


def _block(nodes, inits, rng, name, x, cin, cout, stride):
    """Two 3x3 convolutions plus the skip (a strided 1x1 projection when the shape changes)."""
    h = _conv(nodes, inits, rng, f"{name}_a", x, cin, cout, 3, stride)
    h = _conv(nodes, inits, rng, f"{name}_b", h, cout, cout, 3, relu=False)
    skip = x if stride == 1 and cin == cout else _conv(nodes, inits, rng, f"{name}_proj", x,
                                                       cin, cout, 1, stride, relu=False)
    nodes.append(helper.make_node("Add", [h, skip], [f"{name}_sum"], name=f"{name}_add"))
    nodes.append(helper.make_node("Relu", [f"{name}_sum"], [f"{name}_out"],
                                  name=f"{name}_relu"))
    return f"{name}_out"


def resnet8(rng):
    """The float ResNet-8-like model (input ``x`` (N, 3, 32, 32), output ``y`` (N, 10))."""
    nodes, inits = [], {}
    h = _conv(nodes, inits, rng, "stem", "x", 3, 16, 3)
    h = _block(nodes, inits, rng, "stage1", h, 16, 16, 1)
    h = _block(nodes, inits, rng, "stage2", h, 16, 32, 2)
    h = _block(nodes, inits, rng, "stage3", h, 32, 64, 2)
    nodes.append(helper.make_node("GlobalAveragePool", [h], ["gap"], name="gap"))
    nodes.append(helper.make_node("Flatten", ["gap"], ["flat"], name="flatten"))
    inits["fc_W"] = rng.standard_normal((10, 64)) * (1.5 / 8)
    inits["fc_B"] = rng.standard_normal(10) * 0.1
    nodes.append(helper.make_node("Gemm", ["flat", "fc_W", "fc_B"], ["y"], name="fc",
                                  transB=1))
    graph = helper.make_graph(
        nodes, "resnet8",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", *INPUT_SHAPE])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 10])],
        [numpy_helper.from_array(v.astype(np.float32), k) for k, v in inits.items()])
    # IR 8 / opset 13: what this onnxruntime loads (as in tests/qdq_models.py).
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)],
                              ir_version=8)
    onnx.checker.check_model(model)
    return model


class _Calibration(CalibrationDataReader):
    def __init__(self, rng, batches=4, batch=16):
        self._data = iter([{"x": rng.standard_normal((batch, *INPUT_SHAPE))
                            .astype(np.float32)} for _ in range(batches)])

    def get_next(self):
        return next(self._data, None)


def build_qdq(seed, folder):
    """``(path, source)``: the seeded QDQ ResNet-8-like model written into ``folder``."""
    try:
        from models.zoo import random_models
    except ImportError:
        return _build_local(seed, folder), "bench/bench_providers.py resnet8()"
    _, qdq_path = random_models.build("resnet8", folder)
    return qdq_path, "models.zoo.random_models.resnet8"


def _build_local(seed, folder):
    folder = Path(folder)
    float_path, qdq_path = folder / "resnet8_float.onnx", folder / "resnet8_qdq.onnx"
    onnx.save(resnet8(np.random.default_rng(seed)), float_path)
    # quantize_static logs pre-processing advice on every call; not useful here.
    logging.getLogger().setLevel(logging.ERROR)
    quantize_static(str(float_path), str(qdq_path), _Calibration(np.random.default_rng(seed + 1)),
                    quant_format=QuantFormat.QDQ, per_channel=True,
                    weight_type=QuantType.QInt8, activation_type=QuantType.QInt8)
    return qdq_path


def ort_session(path, threads):
    """onnxruntime's default (fused) session, as users run it, on ``threads`` threads."""
    return onnxruntime_session(path, optimized=True, threads=threads)


def measure(path, batch, rng):
    """``{runner name: images/s}`` for every runner at ``batch``; checks cpu == opencl."""
    x = rng.standard_normal((batch, *INPUT_SHAPE)).astype(np.float32)
    runners = {f"onnxruntime_{t}thread": ort_session(path, t) for t in ORT_THREADS}
    runners["tessera_cpu"] = InferenceSession(path, providers=["cpu"])
    runners["tessera_opencl"] = InferenceSession(path, providers=["opencl"])
    feed = {runners["tessera_cpu"].get_inputs()[0].name: x}
    (want,) = runners["tessera_cpu"].run(None, feed)
    (got,) = runners["tessera_opencl"].run(None, feed)
    if not np.array_equal(got, want):
        raise AssertionError(f"opencl and cpu outputs differ at batch {batch} (seed {SEED})")
    return images_per_second({name: (lambda s=session: s.run(None, feed))
                              for name, session in runners.items()}, batch,
                             repeats=REPEATS, min_seconds=MIN_SECONDS)


def main():
    """Measure, print a table and write ``bench/results/providers.json``."""
    rng = np.random.default_rng(SEED)
    metrics, table = [], []
    with tempfile.TemporaryDirectory() as tmp:
        path, source = build_qdq(SEED, tmp)
        device = OpenCLProvider().device_name
        for batch in BATCHES:
            rates = measure(path, batch, rng)
            peer = "onnxruntime_2thread"
            for name, value in rates.items():
                metrics.append(metric(f"resnet8_batch{batch}_{name}", round(value, 1),
                                      "images/s"))
                table.append((batch, name, value, value / rates[peer]))
            for name, target in (("tessera_opencl", TARGET_OPENCL), ("tessera_cpu", TARGET_CPU)):
                for threads in ORT_THREADS:
                    ref = f"onnxruntime_{threads}thread"
                    ratio = rates[name] / rates[ref]
                    claimed = batch == 64 or name == "tessera_cpu"
                    metrics.append(metric(
                        f"resnet8_batch{batch}_{name}_over_{ref}", round(ratio, 3), "x",
                        peer=ref, peer_value=round(rates[ref], 1),
                        target=round(target, 3) if claimed and threads == 2 else None))
    out = write_results(
        "providers", metrics, model="ResNet-8-like QDQ int8, 32x32x3, ~12.5 M MAC/image",
        model_source=source,
        opencl_device=device, repeats=REPEATS, min_seconds_per_repeat=MIN_SECONDS,
        seed=SEED, openblas_num_threads=os.environ.get("OPENBLAS_NUM_THREADS"),
        onnxruntime=ort.__version__,
        # Other jobs share the machine: the load says how much the figures can be trusted.
        load_average_at_end=[round(v, 2) for v in os.getloadavg()])
    print(f"{'batch':>5}  {'runner':22s} {'images/s':>10}  {'x onnxruntime 2 threads':>24}")
    for batch, name, value, ratio in table:
        print(f"{batch:5d}  {name:22s} {value:10.1f}  {ratio:24.3f}")
    return out


if __name__ == "__main__":
    main()
