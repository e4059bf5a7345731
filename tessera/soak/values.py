"""Random values for the soak's layers: zero points, scales, int8 data, windows, sizes.

Every function takes the case's ``numpy.random.Generator`` and nothing global, so a case
stays a pure function of its ``(seed, index)``.
"""

import numpy as np

from models.conv import conv_output_size

__all__ = ["POWER_OF_TWO_SHARE", "SIZE_CLASSES", "draw_activation", "draw_batch", "draw_int8",
           "draw_output_target", "draw_output_zero_point", "draw_pads", "draw_scale",
           "draw_scales", "draw_side", "draw_size_class", "draw_zero_point", "log_uniform",
           "nearest_power_of_two", "rms_spread"]

#: (share of cases, most channels, longest image side, most products per Conv output):
#: mostly small layers, some that need several column tiles or passes on the 8x8 engine.
SIZE_CLASSES = ((0.60, 24, 15, 1200), (0.30, 48, 28, 1600), (0.10, 80, 40, 1000))
#: Share of Conv and Dense cases whose scales are all powers of two: the requantization
#: multiplier is then exactly ``2**-k`` and a rounding tie is common, as in the pools.
POWER_OF_TWO_SHARE = 0.15


def draw_zero_point(rng, at_each_end=0.15):
    """int8 zero point, with extra weight on both ends of the range."""
    pick = rng.random()
    if pick < at_each_end:
        return -128
    if pick < 2 * at_each_end:
        return 127
    return int(rng.integers(-128, 128))


def draw_output_zero_point(rng, activation=None):
    """Like :func:`draw_zero_point`, less often at the ends: an output zero point of 127 clips
    every positive result, which tests the clamp but hides the rounding. After a ReLU it is
    usually -128 (what ``quantize_static`` writes) and never 127 (all outputs at 127)."""
    if activation is None:
        return draw_zero_point(rng, at_each_end=0.08)
    return -128 if rng.random() < 0.5 else int(rng.integers(-128, 100))


def log_uniform(rng, low, high, size=None):
    return np.exp(rng.uniform(np.log(low), np.log(high), size))


def draw_scale(rng, low, high):
    """A float32 scale (as a Python float, exact), log-uniform in ``[low, high]``."""
    return float(np.float32(log_uniform(rng, low, high)))


def nearest_power_of_two(value):
    """The power of two nearest to ``value`` (on a log scale)."""
    return float(2.0 ** np.round(np.log2(value)))


def draw_int8(rng, shape):
    """int8 data: usually the whole range, sometimes only the extremes or a narrow band."""
    pick = rng.random()
    if pick < 0.1:
        return rng.choice(np.array([-128, 127], np.int8), size=shape)
    if pick < 0.2:
        centre = int(rng.integers(-128, 128))
        return np.clip(rng.integers(centre - 3, centre + 4, size=shape), -128, 127) \
            .astype(np.int8)
    return rng.integers(-128, 128, size=shape, dtype=np.int8)


def draw_activation(rng):
    pick = rng.random()
    return None if pick < 0.5 else "relu" if pick < 0.8 else "relu6"


def draw_output_target(rng):
    """The output spread in LSB: mostly within range, sometimes far beyond (saturation)."""
    if rng.random() < 0.08:
        return float(log_uniform(rng, 300.0, 5000.0))
    return float(log_uniform(rng, 1.0, 200.0))


def draw_scales(rng, activation, unit, power_of_two=False):
    """(input scale, output scale, output zero point) for outputs spread over about
    :func:`draw_output_target` LSB, where the real output spread is ``unit * input scale``.

    For a ReLU6 the output scale comes first (``6 / s_y`` is 8 to 255 LSB, as calibration
    on real data gives) and the input scale follows, so that the clip at 6 lies among the
    outputs rather than far beyond or below them all. With ``power_of_two`` (not with a
    ReLU6) both scales are powers of two, so the requantization multiplier is one too and
    rounding ties are frequent.
    """
    target = draw_output_target(rng)
    if activation == "relu6":
        y_scale = 6.0 / float(log_uniform(rng, 8.0, 255.0))
        x_scale = target * y_scale / unit
    elif power_of_two:
        x_scale = nearest_power_of_two(log_uniform(rng, 1e-3, 0.5))
        y_scale = nearest_power_of_two(unit * x_scale / target)
    else:
        x_scale = draw_scale(rng, 1e-3, 0.5)
        y_scale = unit * x_scale / target
    return (float(np.float32(x_scale)), float(np.float32(y_scale)),
            draw_output_zero_point(rng, activation))


def rms_spread(x, zero_point):
    """Root mean square of ``x - zero_point`` (at least 1)."""
    return max(1.0, float(np.sqrt(np.mean((x.astype(np.float64) - zero_point) ** 2))))


def draw_pads(rng, span_h, span_w):
    """ONNX pads (top, left, bottom, right) for windows spanning ``span_h x span_w``."""
    pick = rng.random()
    if pick < 0.25:
        return (0, 0, 0, 0)
    if pick < 0.55:
        ph, pw = (span_h - 1) // 2, (span_w - 1) // 2
        return (ph, pw, span_h - 1 - ph, span_w - 1 - pw)  # "same" for stride 1
    return tuple(int(rng.integers(0, span)) for span in (span_h, span_w, span_h, span_w))


def draw_size_class(rng):
    """(most channels, longest side, most products per output) for this case."""
    shares = np.array([size[0] for size in SIZE_CLASSES])
    return SIZE_CLASSES[int(rng.choice(len(SIZE_CLASSES), p=shares / shares.sum()))][1:]


def draw_side(rng, span, pad_begin, pad_end, stride, longest):
    """A pixel count in 1..longest for which the window fits at least once."""
    least = max(1, span - pad_begin - pad_end)
    side = int(rng.integers(1, longest + 1))
    return max(side, least) if conv_output_size(side, span, stride, pad_begin, pad_end) < 1 \
        else side


def draw_batch(rng):
    return 1 if rng.random() < 0.8 else 2

