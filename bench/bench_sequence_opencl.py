"""The zoo ViT on OpenCL (``bench/results/sequence_opencl.json``).

Images per second of ``models/zoo/vit_qdq.onnx`` (patch embedding, 2 encoder blocks, class
token; 8x8 digits) at batch 1 and 64, four runners measured in the same run:

- ``tessera_opencl_cpu``: ``providers=["opencl", "cpu"]``: the weight GEMMs (Dense) and the
  attention MatMuls of two activations on OpenCL, the float sequence layers of the
  ORT-compatible mode (LayerNorm, GELU's Erf, elementwise float ops, data movement) on the
  CPU provider;
- ``tessera_cpu``: ``providers=["cpu"]``;
- ``tessera_integer_opencl_cpu`` and ``tessera_integer_cpu``: the same two in
  ``sequence_mode="integer"``, where Softmax, LayerNorm and GELU are the integer-only layers
  (on OpenCL in the first);
- ``onnxruntime_1thread`` / ``onnxruntime_2thread``: onnxruntime's default (fused) CPU
  session on the same QDQ file.

Each opencl run is checked bit-identical to its mode's cpu run first. Also recorded: the share of
logits equal to onnxruntime's unfused QDQ graph (the ORT-compatible reference), and the
per-layer placement (layer counts and summed seconds per op and provider, from the session
profile of one batch-64 run), and the batched MatMul kernel alone on a larger attention
product (:func:`attention_matmul_metrics`). Medians over interleaved repeats;
``OPENBLAS_NUM_THREADS=1``.
"""

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import math
import statistics
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

from bench.common import images_per_second, metric, write_results
from models.requant import requantize
from models.sequence import matmul_int
from models.zoo.digits import load_digits_split
from models.zoo.reference import onnxruntime_session
from sw_driver import InferenceSession
from sw_driver.opencl import OpenCLRuntime
from sw_driver.opencl.sequence_kernels import batched_matmul_requant
from sw_driver.providers.opencl import OpenCLProvider
from sw_driver.providers.options import environment_option

SEED = 16
#: The attention product timed on its own: Q (sequences, heads, tokens, head size) @ K^T.
ATTENTION_Q, ATTENTION_KT = (8, 4, 128, 64), (8, 4, 64, 128)
MODEL = Path(__file__).resolve().parent.parent / "models" / "zoo" / "vit_qdq.onnx"
BATCHES = (1, 64)
REPEATS = 5
MIN_SECONDS = 0.15  # per runner per repeat: the whole bench stays near 25 s
ORT_THREADS = (1, 2)


def placement(profile):
    """``{op: {provider: {"layers": n, "seconds": s}}}`` of one run's profile."""
    table = defaultdict(lambda: defaultdict(lambda: {"layers": 0, "seconds": 0.0}))
    for row in profile:
        cell = table[row["op"]][row["provider"]]
        cell["layers"] += 1
        cell["seconds"] += row["seconds"]
    return {op: {p: {"layers": c["layers"], "seconds": round(c["seconds"], 6)}
                 for p, c in by.items()} for op, by in sorted(table.items())}


def attention_matmul_metrics(repeats):
    """GOP/s of the batched MatMul kernel on one attention product, ``Q @ K^T`` of 8
    sequences x 4 heads x 128 tokens x 64 per head, against the golden NumPy code
    (``matmul_int`` + ``requantize``, what the "cpu" provider runs), outputs checked equal."""
    rt = OpenCLRuntime(environment_option("opencl", "device"))
    rng = np.random.default_rng(SEED)
    a = rng.integers(-128, 128, ATTENTION_Q, dtype=np.int8)
    b = rng.integers(-128, 128, ATTENTION_KT, dtype=np.int8)
    kw = dict(a_zero_point=3, b_zero_point=-5, multiplier=(1 << 30) + 12345, shift=21,
              y_zero_point=-2)

    def golden():
        return requantize(matmul_int(a, 3, b, -5), kw["multiplier"], kw["shift"], -2)

    want = golden()
    da, db = rt.to_device(a), rt.to_device(b)
    if not np.array_equal(batched_matmul_requant(rt, da, db, **kw).get(), want):
        raise AssertionError("the batched MatMul kernel differs from the golden model")
    device, host = [], []
    for _ in range(repeats):
        rt.finish()
        start = time.perf_counter()
        for _ in range(10):
            batched_matmul_requant(rt, da, db, **kw)
        rt.finish()
        device.append((time.perf_counter() - start) / 10)
        start = time.perf_counter()
        golden()
        host.append(time.perf_counter() - start)
    ops = 2 * math.prod(ATTENTION_Q) * ATTENTION_KT[-1]
    kernel, numpy_rate = ops / statistics.median(device) / 1e9, ops / statistics.median(host) / 1e9
    shape = "x".join(map(str, ATTENTION_Q))
    return [metric(f"attention_matmul_{shape}_kernel", round(kernel, 2), "GOP/s",
                   peer="golden_numpy", peer_value=round(numpy_rate, 3),
                   note="Q @ K^T on the device (inputs resident), requantization included")]


def main(batches=BATCHES, repeats=REPEATS, min_seconds=MIN_SECONDS):
    """Measure, print and write ``bench/results/sequence_opencl.json``; returns its path."""
    _, _, digits, _ = load_digits_split()
    digits = digits.astype(np.float32).reshape(len(digits), 1, 8, 8)
    sessions = {f"tessera{infix}_{name}": InferenceSession(
        str(MODEL), providers=providers, sequence_mode=mode)
        for infix, mode in (("", "ort"), ("_integer", "integer"))
        for name, providers in (("opencl_cpu", ["opencl", "cpu"]), ("cpu", ["cpu"]))}
    opencl, cpu = sessions["tessera_opencl_cpu"], sessions["tessera_cpu"]
    name = cpu.get_inputs()[0].name
    device = OpenCLProvider().device_name
    metrics, layout = [], None
    for batch in batches:
        feed = {name: digits[:batch]}
        for infix in ("", "_integer"):
            (want,) = sessions[f"tessera{infix}_cpu"].run(None, feed)
            (other,) = sessions[f"tessera{infix}_opencl_cpu"].run(None, feed)
            if not np.array_equal(other, want):
                raise AssertionError(f"opencl and cpu logits differ at batch {batch} "
                                     f"({infix[1:] or 'ort'} mode)")
        (got,) = opencl.run(None, feed)
        if layout is None or batch == max(batches):
            layout = placement(opencl.profile())
            integer_layout = placement(sessions["tessera_integer_opencl_cpu"].profile())
        (reference,) = onnxruntime_session(MODEL).run(None, feed)
        runners = dict(sessions)
        runners.update({f"onnxruntime_{t}thread": onnxruntime_session(MODEL, optimized=True,
                                                                      threads=t)
                        for t in ORT_THREADS})
        rates = images_per_second({k: (lambda s=s, f=feed: s.run(None, f))
                                   for k, s in runners.items()}, batch, repeats=repeats,
                                  min_seconds=min_seconds)
        peer = "onnxruntime_1thread"
        for runner, value in rates.items():
            entry = {} if runner == peer else {"peer": peer,
                                               "peer_value": round(rates[peer], 1)}
            metrics.append(metric(f"vit_batch{batch}_{runner}", round(value, 1), "images/s",
                                  **entry))
        for infix in ("", "_integer"):
            ref = f"tessera{infix}_cpu"
            metrics.append(metric(
                f"vit_batch{batch}{infix}_opencl_cpu_over_cpu",
                round(rates[f"tessera{infix}_opencl_cpu"] / rates[ref], 3), "x", peer=ref,
                peer_value=round(rates[ref], 1)))
        metrics.append(metric(f"vit_batch{batch}_logits_equal_onnxruntime_unfused",
                              round(float((got == reference).mean()), 5), "fraction",
                              note="the ORT-compatible reference: graph optimizations off"))
        (integer,) = sessions["tessera_integer_opencl_cpu"].run(None, feed)
        metrics.append(metric(
            f"vit_batch{batch}_integer_top1_agreement_onnxruntime_unfused",
            round(float((integer.argmax(-1) == reference.argmax(-1)).mean()), 5), "fraction",
            note="integer-only mode: its logits differ from onnxruntime's by design"))
    metrics += attention_matmul_metrics(min(repeats, 3))
    on_opencl = sorted(op for op, by in layout.items() if "opencl" in by)
    integer_on_opencl = sorted(op for op, by in integer_layout.items() if "opencl" in by)
    return write_results(
        "sequence_opencl", metrics, model=str(MODEL.relative_to(MODEL.parents[2])),
        opencl_device=device, repeats=repeats, min_seconds_per_repeat=min_seconds,
        openblas_num_threads=os.environ.get("OPENBLAS_NUM_THREADS"),
        ops_on_opencl=on_opencl, integer_ops_on_opencl=integer_on_opencl,
        placement_batch=max(batches), placement=layout, integer_placement=integer_layout,
        note=("opencl rows of Quantize/Dequantize/Softmax are the provider's host code; "
              "seconds of opencl rows are device-profiled (finish_profile)"),
        load_average_at_end=[round(v, 2) for v in os.getloadavg()])


if __name__ == "__main__":
    main()
