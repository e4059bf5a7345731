"""OpenCL convolution throughput and launch overhead (``bench/results/opencl.json``).

- GOP/s (2 ops per MAC) of Tessera's tiled implicit-GEMM convolution kernel on a 3x3,
  32 -> 32 channel, 32x32 layer (padding 1) at batch 1 and 16, against the naive
  one-work-item-per-output kernel in ``bench/naive_conv.cl``, measured in the same run on
  the same device, inputs and output checked bit-exact against ``models/`` first.
- Per-launch cost of a small layer through the runtime: enqueued back to back (one wait at
  the end) versus a ``finish`` after each launch.

Medians of repeated timings; ``OPENBLAS_NUM_THREADS=1`` so NumPy's golden model does not
compete with the OpenCL threads. Device: ``TESSERA_OPENCL_DEVICE`` when set (the "opencl"
provider's fallback, ``sw_driver/providers/options.py``), else as ``OpenCLRuntime()`` picks
it.
"""

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import statistics
import time
from pathlib import Path

import numpy as np
import pyopencl as cl

from bench.common import metric, write_results
from models import conv, requant
from sw_driver.opencl import OpenCLRuntime
from sw_driver.opencl.program import build_program, load_sources
from sw_driver.providers.options import environment_option

CHANNELS, SIZE, KERNEL = 32, 32, 3
BATCHES = (1, 16)
REPEATS = 7
TARGET_RATIO = 3.0


def median_time(run, calls, repeats=REPEATS, finish=None):
    """Median over ``repeats`` of the mean seconds per call of ``calls`` calls."""
    times = []
    for _ in range(repeats):
        finish()
        start = time.perf_counter()
        for _ in range(calls):
            run()
        finish()
        times.append((time.perf_counter() - start) / calls)
    return statistics.median(times)


class NaiveConv:
    """The peer: ``naive_conv.cl`` with its own weight buffers on the runtime's queue."""

    def __init__(self, rt, w, multiplier, shift):
        source = load_sources(("requant.cl",)) + (Path(__file__).parent / "naive_conv.cl"
                                                  ).read_text()
        self.rt = rt
        self.kernel = build_program(rt.context, source).naive_conv
        flags = cl.mem_flags.READ_ONLY | cl.mem_flags.COPY_HOST_PTR
        o = w.shape[0]
        self.out_channels = o
        self.buffers = [cl.Buffer(rt.context, flags, hostbuf=a) for a in (
            w, np.zeros(o, np.int32), np.full(o, multiplier, np.int32),
            np.full(o, shift, np.int32))]

    def __call__(self, x, y, zx, zy):
        n, c, h, w = x.shape
        self.kernel.set_args(x.buffer, *self.buffers, y.buffer,
                             *(np.int32(v) for v in (c, h, w, self.out_channels, KERNEL,
                                                     KERNEL, KERNEL // 2, zx, zy)))
        cl.enqueue_nd_range_kernel(self.rt.queue, self.kernel, (w, h, n * self.out_channels),
                                   None)


def conv_metrics(rt, rng):
    w = rng.integers(-128, 128, (CHANNELS, CHANNELS, KERNEL, KERNEL), dtype=np.int8)
    multiplier, shift, zx, zy = (1 << 30) + 12345, 21, -7, 3
    handle = rt.upload_conv_weights(w, None, multiplier, shift)
    naive = NaiveConv(rt, w, multiplier, shift)
    metrics = []
    for batch in BATCHES:
        x_host = rng.integers(-128, 128, (batch, CHANNELS, SIZE, SIZE), dtype=np.int8)
        x = rt.to_device(x_host)
        y_naive = rt.empty((batch, CHANNELS, SIZE, SIZE))
        golden = requant.requantize(conv.conv2d(x_host, w, x_zero_point=zx, padding=1),
                                    multiplier, shift, zy)

        def tiled(x=x):
            return rt.conv2d_requant(x, handle, x_zero_point=zx, y_zero_point=zy, padding=1)

        naive(x, y_naive, zx, zy)
        for name, result in (("tiled", tiled().get()), ("naive", y_naive.get())):
            if not np.array_equal(result, golden):
                raise AssertionError(f"{name} kernel is not bit-exact at batch {batch}")
        ops = 2 * batch * CHANNELS * CHANNELS * KERNEL * KERNEL * SIZE * SIZE
        calls = 20 if batch == 1 else 3
        t_tiled = median_time(tiled, calls, finish=rt.finish)
        t_naive = median_time(lambda x=x, y=y_naive: naive(x, y, zx, zy), calls,
                              finish=rt.finish)
        gops, naive_gops = ops / t_tiled / 1e9, ops / t_naive / 1e9
        label = f"conv3x3_{CHANNELS}to{CHANNELS}_{SIZE}x{SIZE}_batch{batch}"
        metrics.append(metric(f"{label}_gops", round(gops, 2), "GOP/s",
                              peer="naive one-work-item-per-output kernel (bench/naive_conv.cl)",
                              peer_value=round(naive_gops, 2), target=f">= {TARGET_RATIO}x peer"))
        metrics.append(metric(f"{label}_speedup", round(gops / naive_gops, 2), "x naive",
                              target=TARGET_RATIO))
    return metrics


def launch_metrics(rt, rng):
    """Seconds per small layer (a 256-element add) when pipelined and when waited on."""
    a = rt.to_device(rng.integers(-128, 128, 256, dtype=np.int8))

    def layer():
        return rt.add(a, 0.05, 0, a, 0.05, 0, 0.1, 0)

    calls = 500
    pipelined = median_time(layer, calls, finish=rt.finish)

    def waited():
        layer()
        rt.finish()

    each = median_time(waited, calls, finish=rt.finish)

    # The same kernel enqueued directly with its arguments set once: the driver's share,
    # without the runtime's argument checking and packing.
    y = layer()
    rt.finish()
    kernel = rt.program.add_requant
    kernel.set_args(a.buffer, a.buffer, y.buffer, np.int32(a.size), np.zeros(16, np.int32))

    def raw():
        cl.enqueue_nd_range_kernel(rt.queue, kernel, (256,), (64,))

    def raw_waited():
        raw()
        rt.finish()

    raw_pipelined = median_time(raw, calls, finish=rt.finish)
    raw_each = median_time(raw_waited, calls, finish=rt.finish)
    return [
        metric("launch_pipelined_us", round(pipelined * 1e6, 2), "us per layer",
               note="runtime.add on DeviceTensors, 500 enqueued back to back, one finish"),
        metric("launch_finish_each_us", round(each * 1e6, 2), "us per layer",
               peer="pipelined", peer_value=round(pipelined * 1e6, 2),
               note="same layer with queue.finish() after every launch"),
        metric("kernel_launch_pipelined_us", round(raw_pipelined * 1e6, 2), "us per launch",
               note="the add kernel enqueued directly (arguments set once), back to back"),
        metric("kernel_launch_finish_each_us", round(raw_each * 1e6, 2), "us per launch",
               peer="pipelined", peer_value=round(raw_pipelined * 1e6, 2),
               note="the add kernel enqueued directly, finish after each"),
    ]


def main():
    rng = np.random.default_rng(2024)
    rt = OpenCLRuntime(environment_option("opencl", "device"))
    metrics = conv_metrics(rt, rng) + launch_metrics(rt, rng)
    return write_results(
        "opencl", metrics, device=rt.device_name, platform=rt.device.platform.name.strip(),
        compute_units=rt.device.max_compute_units, repeats=REPEATS,
        openblas_num_threads=os.environ.get("OPENBLAS_NUM_THREADS"))


if __name__ == "__main__":
    main()
