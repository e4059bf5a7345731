"""Cycles per layer on the accelerator (RTL, through the Verilator twin) against the ideal
``useful MACs / (R*C)``, for the layers of a ResNet-8-like network and a depthwise-separable
network on an 8x8 array.

Per layer, from the device's counters summed over its passes (:func:`layer_metrics`):

- pass cycles (PERF_BUSY: from each start to its last result word) and the utilization
  ``ideal / pass cycles``, which cannot exceed 1: the array issues at most one step of
  R*C MACs a cycle;
- issue rate (PERF_MACS / (R*C) per pass cycle: how often the array advanced) and the
  useful share of what it issued (``ideal / issued steps``: padding rows, lanes past the
  last channel), whose product is the utilization;
- input cycles (PERF_BUSY - PERF_COMPUTE: until the last input word is in) and drain
  cycles (PERF_COMPUTE: the rest). The activations and the later column tiles' weights
  stream in while the array computes, so the array works in both; neither is a "compute
  phase" on its own.

Every layer is checked bit-exact against the golden model on the way. Where the lost
cycles go is written up in docs/performance.md.
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
from twin.dma import Twin

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


def layer_figures(useful_macs, counters, peak):
    """A layer's figures from its counters (:class:`sw_driver.accelerator.Counters`, summed
    over its passes) and its ``useful_macs``, on an array of ``peak`` = R*C MACs a cycle.

    Returns a dict: ``ideal`` (useful MACs / peak), ``pass_cycles`` (PERF_BUSY),
    ``utilization`` (ideal / pass cycles), ``issue_rate`` (issued steps / pass cycles),
    ``useful_share`` (ideal / issued steps), ``input_cycles`` (PERF_BUSY - PERF_COMPUTE)
    and ``drain_cycles`` (PERF_COMPUTE). The three fractions lie in [0, 1].

    Raises
    ------
    ValueError
        Counters no array could produce (more MACs issued than R*C a busy cycle, fewer
        issued than the layer needs, more drain cycles than busy ones): the figures would
        be impossible, so none are given.
    """
    ideal, issued = useful_macs / peak, counters.macs / peak
    problems = []
    if counters.busy <= 0:
        problems.append(f"PERF_BUSY {counters.busy}")
    if issued > counters.busy:
        problems.append(f"{counters.macs} MACs issued in {counters.busy} busy cycles, more "
                        f"than {peak} a cycle")
    if counters.macs < useful_macs:
        problems.append(f"{counters.macs} MACs issued for a layer of {useful_macs}")
    if not 0 <= counters.compute <= counters.busy:
        problems.append(f"PERF_COMPUTE {counters.compute} outside 0..PERF_BUSY "
                        f"{counters.busy}")
    if problems:
        raise ValueError(f"impossible counters for a layer of {useful_macs} MACs on "
                         f"{peak} MACs a cycle ({counters}): {'; '.join(problems)}")
    return {"ideal": ideal, "pass_cycles": counters.busy,
            "utilization": ideal / counters.busy, "issue_rate": issued / counters.busy,
            "useful_share": ideal / issued if issued else 0.0,
            "input_cycles": counters.busy - counters.compute,
            "drain_cycles": counters.compute}


def utilization_target(c_in, c_out, size, kernel, stride, depthwise):
    """The utilization a layer is held to (None: no target): 0.85 for 3x3 convolutions
    with at least 16 channels each side and an output at least 16 wide."""
    return 0.85 if (kernel == 3 and not depthwise and min(c_in, c_out) >= 16
                    and size // stride >= 16) else None


def layer_metrics(name, figures, target=None):
    """The metrics of one layer's :func:`layer_figures`."""
    return [
        metric(f"{name} pass_cycles", figures["pass_cycles"], "cycles",
               peer="ideal useful MACs/(R*C)", peer_value=round(figures["ideal"]),
               note="PERF_BUSY over the layer's passes: each start to its last result word"),
        metric(f"{name} utilization", round(figures["utilization"], 4), "fraction",
               target=target, note="ideal / pass cycles"),
        metric(f"{name} issue_rate", round(figures["issue_rate"], 4), "fraction",
               note="pass cycles in which the array advanced (PERF_MACS / (R*C))"),
        metric(f"{name} useful_share", round(figures["useful_share"], 4), "fraction",
               note="useful MACs / MACs issued (padding rows, idle lanes)"),
        metric(f"{name} input_cycles", figures["input_cycles"], "cycles",
               note="until the last input word is in (PERF_BUSY - PERF_COMPUTE); the "
                    "array computes meanwhile"),
        metric(f"{name} drain_cycles", figures["drain_cycles"], "cycles",
               note="after the last input word (PERF_COMPUTE)"),
    ]


def main():
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    require_counters(CONFIG, "bench_conv")
    started = time.perf_counter()
    accelerator = Accelerator(SimTransport(Twin(CONFIG), cycle_budget=50_000_000))
    rng = np.random.default_rng(2026)
    peak = CONFIG.rows * CONFIG.cols
    metrics, table = [], []
    for name, c_in, c_out, size, kernel, stride, depthwise in RESNET8 + SEPARABLE:
        macs, counters = run_layer(accelerator, rng, c_in, c_out, size, kernel, stride,
                                   depthwise)
        figures = layer_figures(macs, counters, peak)
        target = utilization_target(c_in, c_out, size, kernel, stride, depthwise)
        metrics += layer_metrics(name, figures, target)
        table.append((name, figures))
    path = write_results("conv", metrics, config=CONFIG.as_dict(),
                         wall_seconds=round(time.perf_counter() - started, 1))
    print(f"{'layer':34} {'cycles':>7} {'ideal':>7} {'util':>6} {'issue':>6} {'useful':>6} "
          f"{'input':>6}")
    for name, f in table:
        print(f"{name[:34]:34} {f['pass_cycles']:7d} {round(f['ideal']):7d} "
              f"{f['utilization']:6.1%} {f['issue_rate']:6.1%} {f['useful_share']:6.1%} "
              f"{f['input_cycles']:6d}")
    return path


if __name__ == "__main__":
    main()
