"""The attention GEMMs on the Verilator twin (``bench/results/attention_device.json``).

Activation x activation MatMuls run as Dense passes whose weights are the second operand
(:mod:`sw_driver.matmul_lowering`). Measured here, each on the device's own PERF_CYCLES
counter over all of its passes, beside the driver's cycle model
(:func:`~sw_driver.matmul_lowering.matmul_work`) and, as the peer in the same run, a Dense
projection over the same tokens:

- the zoo ViT's shapes (4 images, 2 heads, 17 tokens, head dim 16): ``Q @ K^T`` and
  ``attention @ V`` with the zero points onnxruntime's int8 quantization gives them (both
  operands asymmetric; the softmax output at -128), and the same products with a zero
  point of 0 on the weights side, which needs no repeated input columns;
- the zoo ViT in integer mode on 4 digits through ``["sim", "cpu"]``: the share of the
  twin's cycles its 4 MatMul layers take beside its 14 Dense layers.

A GEMM's ideal is its multiply-accumulates (M * N * K per slice, the repeated columns not
counted) over the R x C MACs the array does per cycle; utilization is ideal / measured.
"""

import os

import numpy as np

from bench.common import metric, require_counters, write_results
from models.requant import requantize
from models.sequence import matmul_int
from sw_driver import InferenceSession
from sw_driver import graph as g
from sw_driver.matmul_lowering import matmul_work
from sw_driver.providers.costs import device_work
from sw_driver.providers.sim import DEFAULT_CONFIG, SimProvider

#: The engine measured (``tessera bench --config`` replaces it).
CONFIG = DEFAULT_CONFIG
SEED = 16
IMAGES, HEADS, TOKENS, HEAD_DIM = 4, 2, 17, 16
#: name -> (first operand shape, second operand shape, z_a, z_b)
GEMMS = {
    "scores": ((IMAGES, HEADS, TOKENS, HEAD_DIM), (IMAGES, HEADS, HEAD_DIM, TOKENS), 3, -7),
    "context": ((IMAGES, HEADS, TOKENS, TOKENS), (IMAGES, HEADS, TOKENS, HEAD_DIM), -128, 4),
    "scores_zb0": ((IMAGES, HEADS, TOKENS, HEAD_DIM), (IMAGES, HEADS, HEAD_DIM, TOKENS), 3, 0),
    "context_zb0": ((IMAGES, HEADS, TOKENS, TOKENS), (IMAGES, HEADS, TOKENS, HEAD_DIM), -128,
                    0),
}


def _record(name, cycles, estimate, macs, config):
    ideal = macs / (config.rows * config.cols)
    return {"gemm": name, "cycles": int(cycles), "estimate_cycles": int(estimate),
            "estimate_error": round(abs(estimate - cycles) / cycles, 4), "macs": int(macs),
            "ideal_cycles": round(ideal, 1), "utilization": round(ideal / cycles, 4)}


def measure_gemms(provider, config):
    """Each GEMM of :data:`GEMMS` and the Dense peer on the twin, checked against the
    golden model; one record each."""
    rng = np.random.default_rng(SEED)
    records = []
    for name, (shape_a, shape_b, za, zb) in GEMMS.items():
        layer = g.MatMul(name, ("a", "b"), "y", a_zero_point=za, b_zero_point=zb,
                         multiplier=1 << 30, shift=18, y_zero_point=0)
        a = rng.integers(-128, 128, shape_a).astype(np.int8)
        b = rng.integers(-128, 128, shape_b).astype(np.int8)
        got = provider.run(layer, [a, b])
        want = requantize(matmul_int(a, za, b, zb), layer.multiplier, layer.shift, 0, -128,
                          127)
        if not np.array_equal(got, want):
            raise AssertionError(f"{name}: the twin's MatMul differs from the golden model")
        macs = np.prod(shape_a[:-1], dtype=np.int64) * shape_a[-1] * shape_b[-1]
        records.append(_record(name, provider.cycles(layer),
                               matmul_work(layer, shape_a, shape_b, config).cycles, macs,
                               config))
    # The peer: a D x D projection over the same tokens (the ViT's q/k/v Dense layers).
    width = HEADS * HEAD_DIM
    dense = g.Dense("projection", ("x",), "y",
                    weight=rng.integers(-127, 128, (width, width)).astype(np.int8),
                    bias=np.zeros(width, np.int32), x_zero_point=3,
                    multiplier=np.full(width, 1 << 30), shift=np.full(width, 18))
    x = rng.integers(-128, 128, (IMAGES, TOKENS, width)).astype(np.int8)
    provider.run(dense, [x])
    records.append(_record("projection", provider.cycles(dense),
                           device_work(dense, x.shape, config).cycles,
                           IMAGES * TOKENS * width * width, config))
    return records


def measure_vit(provider):
    """Twin cycles of the zoo ViT's MatMul and Dense layers in integer mode, 4 digits."""
    from models.zoo.digits import load_digits_split

    path = "models/zoo/vit_qdq.onnx"
    _, _, x, _ = load_digits_split()
    x = x.astype(np.float32).reshape(len(x), 1, 8, 8)[:IMAGES]
    want = InferenceSession(path, providers=["cpu"], sequence_mode="integer") \
        .run(None, {"input": x})[0]
    session = InferenceSession(path, providers=[provider, "cpu"], sequence_mode="integer")
    got = session.run(None, {"input": x})[0]
    if not np.array_equal(got, want):
        raise AssertionError("zoo ViT: the twin's output differs from the cpu provider's")
    rows = session.profile()
    return {op: [int(r["cycles"]) for r in rows if r["op"] == op and r["provider"] == "sim"]
            for op in ("MatMul", "Dense")}


def main():
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    require_counters(CONFIG, "bench_attention_device")
    provider = SimProvider(CONFIG, log=lambda message: None)
    try:
        records = measure_gemms(provider, CONFIG)
        vit = measure_vit(provider)
    finally:
        provider.close()
    for r in records:
        print(f"  {r['gemm']:12} {r['cycles']:>7} cycles  model {r['estimate_cycles']:>7} "
              f"({r['estimate_error']:.1%})  util {r['utilization']:.3f}")
    by = {r["gemm"]: r for r in records}
    worst = max(records, key=lambda r: r["estimate_error"])
    matmul, dense = sum(vit["MatMul"]), sum(vit["Dense"])
    metrics = [
        metric("scores_utilization", by["scores"]["utilization"], "fraction",
               peer="projection", peer_value=by["projection"]["utilization"],
               note=f"Q @ K^T, {IMAGES}x{HEADS} slices of {TOKENS}x{HEAD_DIM} @ "
                    f"{HEAD_DIM}x{TOKENS}, z_b != 0 (K repeated once)"),
        metric("context_utilization", by["context"]["utilization"], "fraction",
               peer="projection", peer_value=by["projection"]["utilization"],
               note=f"attention @ V, {TOKENS}x{TOKENS} @ {TOKENS}x{HEAD_DIM}, z_b != 0"),
        metric("scores_utilization_zb0", by["scores_zb0"]["utilization"], "fraction",
               peer="scores", peer_value=by["scores"]["utilization"],
               note="the same Q @ K^T with z_b = 0: no repeated input columns"),
        metric("context_utilization_zb0", by["context_zb0"]["utilization"], "fraction",
               peer="context", peer_value=by["context"]["utilization"]),
        metric("projection_utilization", by["projection"]["utilization"], "fraction",
               note=f"Dense {HEADS * HEAD_DIM}x{HEADS * HEAD_DIM} over the same "
                    f"{IMAGES * TOKENS} tokens"),
        metric("cycle_model_error", worst["estimate_error"], "fraction",
               note=f"largest |model - twin| / twin, at {worst['gemm']}"),
        metric("vit_matmul_cycles", matmul, "cycles", peer="vit_dense_cycles",
               peer_value=dense,
               note=f"zoo ViT, integer mode, {IMAGES} digits: its {len(vit['MatMul'])} "
                    f"MatMul layers on the twin beside its {len(vit['Dense'])} Dense "
                    f"layers ({matmul / max(1, matmul + dense):.1%} of the GEMM cycles)"),
    ]
    return write_results("attention_device", metrics, config=CONFIG.as_dict(),
                         gemms=records, vit_layer_cycles=vit)


if __name__ == "__main__":
    main()
