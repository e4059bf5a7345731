"""Global average pooling on the engine, exactly, as Dense passes over groups of channels.

The golden definition (:func:`models.pool.global_avg_pool`) is the engine's own arithmetic:
a sum ``s = sum (x - z_x)`` over the ``HW`` pixels of a channel, then the requantization
``clamp(z_y + round_half_even(s * M / 2**k), lo, hi)`` with ``(M, k)`` from
:func:`models.pool.avg_pool_multipliers`. A Dense pass forms ``bias' + sum x * w`` with the
zero point folded into the bias (``sw_driver.conv_lowering``), so with weights of 1 on a
channel's own pixels and 0 elsewhere its accumulator *is* ``s``, and its requantizer gives
the golden result bit for bit.

Each pass takes ``g`` channels: its input is the ``HW x g`` values of those channels in
pixel-major order (``k = p * g + c``; a pixel's ``g`` channels lie side by side in an HWC
tensor, which is what lets a resident program read them as whole words), its weights are
``w[o, k] = 1 if k % g == o``. ``g`` is the array's column count, or fewer when ``HW * g``
would overflow the weight or activation buffer; a map whose ``HW`` alone overflows them is
refused (the layer falls back to another provider).
"""

import numpy as np

from models.pool import avg_pool_multipliers
from models.requant import SHIFT_MAX, SHIFT_MIN

__all__ = ["dense_chunk", "gap_group", "gap_refusal", "gap_requantization", "gap_weights"]


def dense_chunk(k, config):
    """Most samples of a Dense layer with ``k`` inputs one engine pass takes: the batch is
    the pass's image width, and the K x N activations must fit the activation buffer."""
    return max(1, min(config.act_depth // k, 0xFFFF))


def gap_group(channels, hw, config):
    """Channels per Dense pass of a global average pool over ``hw`` pixels: the array's
    columns, fewer (a multiple of 4 where it can, so that a pass reads whole words of an
    HWC tensor) when ``hw * g`` values would not fit the weight or activation buffer;
    0 when not even one channel fits."""
    room = min(config.weight_depth, config.act_depth) // max(1, hw)
    group = min(config.cols, channels, room)
    if group >= 4:
        group -= group % 4
    return max(0, group)


def gap_weights(group, hw):
    """The ``(group, hw * group)`` int8 weights that sum each channel's pixels."""
    k = np.arange(hw * group)
    return (k[None, :] % group == np.arange(group)[:, None]).astype(np.int8)


def gap_requantization(x_scale, y_scale, hw, name="GlobalAveragePool"):
    """``(M, k)`` of the golden model, checked against the engine's shift range."""
    (multiplier,), (shift,) = avg_pool_multipliers(x_scale, y_scale, [hw])
    if not SHIFT_MIN <= int(shift) <= SHIFT_MAX:
        raise ValueError(f"layer {name!r}: the mean's requantization shift {int(shift)} is "
                         f"outside the engine's {SHIFT_MIN}..{SHIFT_MAX} (x_scale "
                         f"{x_scale!r}, y_scale {y_scale!r}, {hw} pixels)")
    return int(multiplier), int(shift)


def gap_refusal(layer, config, shape=None):
    """Why the engine cannot run GlobalAveragePool ``layer`` (on NCHW ``shape``), or None.
    Without a shape nothing can be said yet: the mean's multiplier depends on ``HW``."""
    if shape is None:
        return None
    if len(shape) != 4:
        return f"GlobalAveragePool takes an NCHW tensor, not shape {list(shape)}"
    hw = int(shape[2]) * int(shape[3])
    try:
        gap_requantization(layer.x_scale, layer.y_scale, hw, layer.name)
    except ValueError as exc:
        return str(exc)
    if gap_group(int(shape[1]), hw, config) < 1:
        return (f"at input shape {list(shape)}: {hw} pixels per channel exceed the "
                f"engine's weight buffer ({config.weight_depth} words) or activation "
                f"buffer ({config.act_depth} elements)")
    return None
