"""Random convolution layers for the engine's testbenches, the largest one they can draw, and
the layer the twin benchmark times.

Plain NumPy (no cocotb), so tests/test_budgets.py can reason about the same draws the
cocotb testbench (``sim/tb_conv.py``) makes. It lives with the benchmarks, below the
testbenches, because ``bench/bench_twin.py`` and ``sim/tb_twin_bench.py`` must draw the same
layer and a benchmark may not import a testbench.
"""

import numpy as np

from models.conv import conv2d
from models.requant import requantize

#: What ``draw_random_layer`` picks from (the output channels also take ``out_channels``).
KERNELS = (1, 3, 5, 7)
STRIDES = (1, 2)
IN_CHANNELS = (1, 2, 3, 5)
HEIGHTS = (3, 5, 6, 7, 9)
WIDTHS = (1, 3, 4, 5, 7)
BATCHES = (1, 2)
#: A realistic layer's shift lies this far either side of its centre (``make_layer``).
SHIFT_SPREAD = 2


def out_channels(cols):
    """Output channel counts a random layer takes on an array of ``cols`` columns: 1, a few,
    and just past one and two column tiles."""
    return (1, 3, cols + 1, 2 * cols - 1)


def centre_shift(k):
    """The shift that puts a K-term accumulator's spread on the int8 range: about
    log2(K * 2^14) bits above it."""
    return int(np.log2(k * 2**14)) + 31 - 7


def make_layer(rng, *, kernel, stride, c_in, c_out, size, depthwise=False, zx=None,
               batch=1, extreme=False, pads=None):
    """Random layer: padding 0..k/2 per side (or ``pads``), random zero points, realistic or
    extreme requantization constants."""
    if pads is None:
        pads = tuple(int(rng.integers(0, kernel // 2 + 1)) for _ in range(4))
    h = max(size[0], kernel - pads[0] - pads[2])
    w = max(size[1], kernel - pads[1] - pads[3])
    if depthwise:
        c_out = c_in
    x = rng.integers(-128, 128, (batch, c_in, h, w), dtype=np.int8)
    wt = rng.integers(-128, 128, (c_out, 1 if depthwise else c_in, kernel, kernel),
                      dtype=np.int8)
    k = (1 if depthwise else c_in) * kernel * kernel
    if extreme:
        # Accumulators far past what the int8 output holds (saturation both ways),
        # multipliers at both ends of [2^30, 2^31), shifts from 1 to 62.
        bias = rng.integers(-2**28, 2**28, c_out).astype(np.int32)
        multiplier = rng.choice(np.array([2**30, 2**31 - 1, 2**31 - 2, 2**30 + 1]), c_out)
        shift = rng.choice(np.array([1, 2, 31, 40, 45, 62]), c_out)
    else:
        bias = rng.integers(-2**16, 2**16, c_out).astype(np.int32)
        multiplier = rng.integers(2**30, 2**31, c_out)
        shift = np.full(c_out, centre_shift(k)) + rng.integers(-SHIFT_SPREAD,
                                                                SHIFT_SPREAD + 1, c_out)
    lo, hi = (-128, 127) if rng.random() < 0.7 else (int(rng.integers(-128, 0)),
                                                     int(rng.integers(0, 128)))
    return {"x": x, "w": wt, "bias": bias, "multiplier": multiplier, "shift": shift,
            "stride": stride, "padding": pads, "groups": c_in if depthwise else 1,
            "zx": int(rng.integers(-128, 128)) if zx is None else zx,
            "zy": int(rng.integers(-128, 128)), "lo": lo, "hi": hi}


def draw_random_layer(rng, index, cols):
    """The ``index``-th layer of a random sweep: kernels 1, 3, 5, 7 in turn, strides 1 and
    2, odd sizes, channel counts not multiples of R or C (and 1), every fifth depthwise,
    every sixth a batch of 2."""
    return make_layer(
        rng, kernel=KERNELS[index % len(KERNELS)], stride=int(rng.choice(STRIDES)),
        c_in=int(rng.choice(IN_CHANNELS)), c_out=int(rng.choice(out_channels(cols))),
        size=(int(rng.choice(HEIGHTS)), int(rng.choice(WIDTHS))),
        depthwise=index % 5 == 4, batch=BATCHES[1] if index % 6 == 5 else BATCHES[0])


def worst_random_layer(rng, cols):
    """The layer of the draws above (any index) that takes the most cycles: the largest
    kernel with full padding (the most outputs, each with the longest reduction), stride 1,
    the most channels in and out, the largest image and batch, and every channel at the
    largest shift a realistic layer draws (the serial requantizer's slowest)."""
    kernel = max(KERNELS)
    layer = make_layer(rng, kernel=kernel, stride=min(STRIDES), c_in=max(IN_CHANNELS),
                       c_out=max(out_channels(cols)), size=(max(HEIGHTS), max(WIDTHS)),
                       batch=max(BATCHES), pads=(kernel // 2,) * 4)
    k = max(IN_CHANNELS) * kernel * kernel
    layer["shift"][:] = centre_shift(k) + SHIFT_SPREAD
    return layer


#: The layer bench/bench_twin.py times on the twin and under cocotb (sim/tb_twin_bench.py):
#: one definition, so both sides simulate the identical layer.
BENCH_LAYER = {"kernel": 3, "stride": 1, "c_in": 32, "c_out": 32, "size": (16, 16)}


def bench_layer(seed):
    """The bench layer's tensors and parameters (:func:`make_layer`)."""
    layer = make_layer(np.random.default_rng(seed), **BENCH_LAYER)
    layer["padding"] = (BENCH_LAYER["kernel"] // 2,) * 4
    return layer


def golden(layer):
    """The golden model's output for :func:`bench_layer`'s ``layer``."""
    acc = conv2d(layer["x"], layer["w"], layer["bias"], x_zero_point=layer["zx"],
                 stride=layer["stride"], padding=layer["padding"])
    return requantize(acc, layer["multiplier"], layer["shift"], layer["zy"], layer["lo"],
                      layer["hi"])
