"""Cycles per layer on the accelerator (RTL, through the Verilator twin) against the ideal
``useful MACs / (R*C)``, for the layers of a ResNet-8-like network and a depthwise-separable
network on an 8x8 array.

Per layer: compute cycles (PERF_COMPUTE: from the end of loading to the last result word),
loading cycles (the rest of PERF_BUSY: parameters, weights, activations over the 32-bit
stream), utilization of the compute phase and of the whole layer. Every layer is checked
bit-exact against the golden model on the way. Where the lost cycles go is written up in
docs/performance.md.
"""

import os
import time

import numpy as np

from bench.common import metric, require_counters, write_results
from contract.config import ArrayConfig, ConvEngineConfig
from models.conv import conv2d
from models.requant import requantize
from sw_driver.accelerator import Accelerator
from sw_driver.transport.sim import SimTransport

CONFIG = ConvEngineConfig(array=ArrayConfig(rows=8, cols=8), act_depth=16384,
                          weight_depth=8192, max_col_tiles=16)

# (name, C_in, C_out, H=W, kernel, stride, depthwise)
RESNET8 = [
    ("resnet8.stem 3x3 3->16 32x32", 3, 16, 32, 3, 1, False),
    ("resnet8.s1 3x3 16->16 32x32", 16, 16, 32, 3, 1, False),
    ("resnet8.s2a 3x3 16->32 s2 32x32", 16, 32, 32, 3, 2, False),
    ("resnet8.s2b 3x3 32->32 16x16", 32, 32, 16, 3, 1, False),
    ("resnet8.s2sc 1x1 16->32 s2 32x32", 16, 32, 32, 1, 2, False),
    ("resnet8.s3a 3x3 32->64 s2 16x16", 32, 64, 16, 3, 2, False),
    ("resnet8.s3b 3x3 64->64 8x8", 64, 64, 8, 3, 1, False),
]
SEPARABLE = [
    ("separable.dw1 3x3 dw 32 16x16", 32, 32, 16, 3, 1, True),
    ("separable.pw1 1x1 32->64 16x16", 32, 64, 16, 1, 1, False),
    ("separable.dw2 3x3 dw 64 s2 16x16", 64, 64, 16, 3, 2, True),
    ("separable.pw2 1x1 64->128 8x8", 64, 128, 8, 1, 1, False),
]


def run_layer(accelerator, rng, c_in, c_out, size, kernel, stride, depthwise):
    x = rng.integers(-128, 128, (1, c_in, size, size), dtype=np.int8)
    w = rng.integers(-128, 128, (c_out, 1 if depthwise else c_in, kernel, kernel),
                     dtype=np.int8)
    bias = rng.integers(-2**14, 2**14, c_out).astype(np.int32)
    mult = rng.integers(2**30, 2**31, c_out)
    shift = np.full(c_out, 24)
    groups = c_in if depthwise else 1
    pad = kernel // 2
    got = accelerator.conv2d(x, w, bias, mult, shift, x_zero_point=-3, y_zero_point=1,
                             stride=stride, padding=pad, groups=groups)
    want = requantize(conv2d(x, w, bias, x_zero_point=-3, stride=stride, padding=pad,
                             groups=groups), mult, shift, 1)
    if not np.array_equal(got, want):
        raise AssertionError("accelerator output differs from the golden model")
    oh, ow = want.shape[2:]
    macs = c_out * oh * ow * (1 if depthwise else c_in) * kernel * kernel
    return macs, accelerator.last_counters


def main():
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    require_counters(CONFIG, "bench_conv")
    started = time.perf_counter()
    accelerator = Accelerator(SimTransport.open(CONFIG, cycle_budget=50_000_000))
    rng = np.random.default_rng(2026)
    peak = CONFIG.rows * CONFIG.cols
    metrics, table = [], []
    for name, c_in, c_out, size, kernel, stride, depthwise in RESNET8 + SEPARABLE:
        macs, counters = run_layer(accelerator, rng, c_in, c_out, size, kernel, stride,
                                   depthwise)
        ideal = macs / peak
        loading = counters.busy - counters.compute
        compute_util = ideal / counters.compute
        layer_util = ideal / counters.busy
        metrics += [
            metric(f"{name} compute_cycles", counters.compute, "cycles",
                   peer="ideal useful MACs/(R*C)", peer_value=round(ideal)),
            metric(f"{name} compute_utilization", round(compute_util, 4), "fraction",
                   target=0.85 if (kernel == 3 and not depthwise and min(c_in, c_out) >= 16
                                   and size // stride >= 16) else None),
            metric(f"{name} loading_cycles", loading, "cycles"),
            metric(f"{name} layer_utilization", round(layer_util, 4), "fraction",
                   note="including loading, which does not overlap compute yet"),
        ]
        table.append((name, counters.compute, round(ideal), compute_util, loading, layer_util))
    path = write_results("conv", metrics, config=CONFIG.as_dict(),
                         wall_seconds=round(time.perf_counter() - started, 1))
    print(f"{'layer':38} {'compute':>8} {'ideal':>8} {'util':>6} {'loading':>8} {'w/ load':>7}")
    for name, compute, ideal, util, loading, layer_util in table:
        print(f"{name:38} {compute:8d} {ideal:8d} {util:6.1%} {loading:8d} {layer_util:7.1%}")
    return path


if __name__ == "__main__":
    main()
