"""Host-side preparation of a convolution layer for the convolution engine.

The engine (``hw.conv_engine``) runs one layer per ``start`` from its on-chip buffers; this
module turns an integer layer (the contract of ``models.conv.conv2d`` followed by
``models.requant.requantize``) into one or more *passes*, each with the buffer contents and
the descriptor the engine needs, and puts the output beats back into an NCHW tensor.

Zero point folding (gemmlowp / TensorFlow Lite): the engine multiplies raw int8 activations
and feeds ``z_x`` at padding positions, so every window position contributes ``x * w``;
the host subtracts the zero point's share once per output channel::

    acc[o] = bias[o] + sum (x - z_x) * w[o] = (bias[o] - z_x * sum_k w[o, k]) + sum x * w[o]

``bias'[o] = bias[o] - z_x * sum_k w[o, k]`` is stored modulo 2**32 (int32 wrap-around).
The array also sums ``x * w`` modulo 2**32, so the engine's ``bias' + sum x * w`` equals
``acc`` modulo 2**32; the contract keeps ``acc`` inside int32 (``models.conv`` raises
otherwise), so it is exactly ``acc``.

Depthwise layers are cut into ``ceil(C / cols)`` groups of ``cols`` channels. On an engine
with the depthwise mode (``ConvEngineConfig.depthwise``, the device's ``CONFIG.depthwise``
bit) the groups are the column tiles of depthwise passes (:func:`_lower_depthwise_pass`),
as many a pass as the buffers hold: column j computes channel j of its tile's group, each
pixel's channels are whole 32-bit words (:func:`depthwise_words`) and K runs over the
kernel taps and those words. Without it, each group is a pass of a regular convolution
with block-diagonal weights (zero off the diagonal): the same hardware, at 1/cols of its
MAC rate. A batch of N images is N passes.
"""

from dataclasses import dataclass

import numpy as np

from contract.config import ConvEngineConfig
from contract.descriptor import DESCRIPTOR_FIELDS, KERNEL_MAX, STRIDES, depthwise_words
from contract.streams import ACTIVATIONS_PER_WORD
from models.conv import _padding, _positive_pair, conv_output_size
from models.requant import (
    INT8_MAX,
    INT8_MIN,
    MULTIPLIER_MAX,
    MULTIPLIER_MIN,
    SHIFT_MAX,
    SHIFT_MIN,
)

__all__ = [
    "EnginePass",
    "assemble_output",
    "depthwise_words",
    "first_weight_rows",
    "engine_reference",
    "fold_zero_point",
    "lower_conv2d",
    "make_descriptor",
]


def _wrap_int32(values):
    values = np.asarray(values, dtype=np.int64)
    return ((values + 2**31) % 2**32 - 2**31).astype(np.int32)


def fold_zero_point(w, bias, x_zero_point):
    """``bias - x_zero_point * sum_k w[o, k]`` per output channel, wrapped to int32.

    Parameters
    ----------
    w : numpy.ndarray of int8, shape (O, ...)
    bias : numpy.ndarray of int32, shape (O,), or None
    x_zero_point : int

    Returns
    -------
    numpy.ndarray of int32, shape (O,)
    """
    sums = w.reshape(w.shape[0], -1).astype(np.int64).sum(axis=1)
    base = np.zeros(w.shape[0], np.int64) if bias is None else bias.astype(np.int64)
    return _wrap_int32(base - int(x_zero_point) * sums)


@dataclass
class EnginePass:
    """Everything the engine needs for one run, and where its outputs go.

    Attributes
    ----------
    name : str
        Layer name and pass index, for messages.
    descriptor : dict
        Field name -> int, for every field of ``contract.descriptor.DESCRIPTOR_FIELDS``.
    activations : numpy.ndarray of int8, shape (H * W * C_in,)
        The ``act_in`` stream in order (HWC).
    weights : numpy.ndarray of int8, shape (col_tiles * K, cols)
        The ``weight_in`` stream: word ``t * K + (u * kw + v) * C_in + c`` holds the weights
        of output channels ``t*cols .. t*cols+cols-1`` at ``(c, u, v)``, zero past C_out.
    bias, multiplier, shift : numpy.ndarray, shape (col_tiles, cols)
        The ``param_in`` stream, one word per column tile (bias already folded).
    image : int
        Batch index this pass reads and writes.
    channels : numpy.ndarray of int, shape (col_tiles * cols,)
        Output channel of each lane of each column tile, -1 for unused lanes.
    out_size : (int, int)
        (OH, OW) of this pass.
    row0 : int
        First output row this pass computes (a band of a layer too tall for the buffer).
    """

    name: str
    descriptor: dict
    activations: np.ndarray
    weights: np.ndarray
    bias: np.ndarray
    multiplier: np.ndarray
    shift: np.ndarray
    image: int
    channels: np.ndarray
    out_size: tuple
    row0: int = 0

    @property
    def output_beats(self):
        """Beats on the engine's ``output`` stream: one per pixel per column tile."""
        oh, ow = self.out_size
        return self.descriptor["col_tiles"] * oh * ow

    @property
    def first_weight_rows(self):
        """Weight rows the host sends before the activations (:func:`first_weight_rows`)."""
        return first_weight_rows(self.descriptor, self.weights.shape[0])

    @property
    def beats(self):
        """Operand beats into the array (col_tiles * pixel_groups * K)."""
        d = self.descriptor
        return d["col_tiles"] * d["pixel_groups"] * d["in_channels"] * d["kernel_h"] \
            * d["kernel_w"]


def first_weight_rows(descriptor, rows):
    """Of a pass's ``rows`` weight rows, those the host stream carries before the
    activations (``hw/sequencer.py``): the first column tile's, the others following the
    activations while the engine computes; all of them for a depthwise pass, whose tiles
    each read their own activations (sent one tile after another)."""
    return rows if descriptor.get("depthwise") else rows // descriptor["col_tiles"]


def make_descriptor(*, config, in_channels, in_size, kernel, stride, pad_top, pad_left,
                    out_size, col_tiles, x_zero_point, y_zero_point, lo, hi,
                    depthwise=False, dw_tile_daddr=0):
    """The engine's descriptor: the layer's fields plus the address steps derived from
    them (see ``DESCRIPTOR_FIELDS``), checked against the field widths. With
    ``depthwise`` (a depthwise pass), ``in_channels`` counts words and so do the
    addresses, and column tile t reads the activations ``t * dw_tile_daddr`` words on."""
    rows = config.rows
    (h, w), (kh, kw), (oh, ow) = in_size, kernel, out_size
    pixels = oh * ow
    groups = -(-pixels // rows)
    group_dx = (rows % ow) * stride
    group_dy = (rows // ow) * stride
    desc = {
        "in_channels": in_channels, "in_height": h, "in_width": w,
        "kernel_h": kh, "kernel_w": kw, "stride": stride,
        "pad_top": pad_top, "pad_left": pad_left,
        "col_tiles": col_tiles, "pixel_groups": groups,
        "last_rows": pixels - (groups - 1) * rows,
        "x_zero_point": x_zero_point, "y_zero_point": y_zero_point, "lo": lo, "hi": hi,
        "origin_addr": (-pad_top * w - pad_left) * in_channels,
        "row_skip": (w - kw) * in_channels + 1,
        "pixel_daddr": stride * in_channels,
        "group_dx": group_dx, "group_dy": group_dy,
        "group_daddr": (group_dy * w + group_dx) * in_channels,
        "x_end": ow * stride - pad_left, "x_wrap": ow * stride,
        "wrap_daddr": (stride * w - ow * stride) * in_channels,
        "depthwise": int(depthwise), "dw_tile_daddr": dw_tile_daddr,
    }
    for name, width, is_signed, _ in DESCRIPTOR_FIELDS:
        low, high = (-(1 << (width - 1)), (1 << (width - 1)) - 1) if is_signed \
            else (0, (1 << width) - 1)
        if not low <= desc[name] <= high:
            raise ValueError(f"descriptor field {name} = {desc[name]} does not fit its "
                             f"{width}-bit {'signed' if is_signed else 'unsigned'} field")
    return desc


def _per_channel(name, value, channels, low, high, layer):
    array = np.broadcast_to(np.asarray(value, dtype=np.int64), (channels,)).copy()
    if array.min() < low or array.max() > high:
        raise ValueError(f"layer {layer!r}: {name} must lie in [{low}, {high}], "
                         f"got values in [{array.min()}, {array.max()}]")
    return array


def lower_conv2d(x, w, bias, multiplier, shift, *, x_zero_point, y_zero_point,
                 lo=INT8_MIN, hi=INT8_MAX, stride=1, padding=0, dilation=1, groups=1,
                 config, name="conv", row_multiple=1):
    """Passes that run ``requantize(conv2d(x, w, bias), multiplier, shift, ...)`` on the engine.

    Parameters
    ----------
    x : numpy.ndarray of int8, shape (N, C, H, W)
    w : numpy.ndarray of int8, shape (O, C / groups, kh, kw)
    bias : numpy.ndarray of int32, shape (O,), or None
    multiplier, shift : int or array_like of int, per output channel
        Requantization ``M`` in [2^30, 2^31) and ``n`` in [1, 62].
    x_zero_point, y_zero_point, lo, hi : int
        As for ``models.conv.conv2d`` and ``models.requant.requantize``.
    stride, padding, dilation, groups
        As for ``models.conv.conv2d``; the engine needs ``dilation = 1``, equal strides of
        1 or 2, each pad at most half the kernel, and ``groups`` 1 or depthwise.
    config : ConvEngineConfig
    name : str
        Layer name for error messages.

    Returns
    -------
    list of EnginePass

    Raises
    ------
    ValueError
        The layer is outside what the engine runs (the message names the layer and the
        limit); a larger layer must be split by the caller (see docs/conv-engine.md).
    """
    if not isinstance(config, ConvEngineConfig):
        raise TypeError(f"config must be a ConvEngineConfig, not {config!r}")
    if not (isinstance(x, np.ndarray) and x.dtype == np.int8 and x.ndim == 4):
        raise ValueError(f"layer {name!r}: x must be an int8 array (N, C, H, W)")
    if not (isinstance(w, np.ndarray) and w.dtype == np.int8 and w.ndim == 4):
        raise ValueError(f"layer {name!r}: w must be an int8 array (O, C/groups, kh, kw)")
    n_img, c_in, h, wd = x.shape
    o, cg, kh, kw = w.shape
    sh, sw = _positive_pair("stride", stride)
    dh, dw = _positive_pair("dilation", dilation)
    top, left, bottom, right = _padding(padding)
    if (dh, dw) != (1, 1):
        raise ValueError(f"layer {name!r}: dilation {(dh, dw)} is not supported by the "
                         f"conv engine (dilation must be 1)")
    if kh > KERNEL_MAX or kw > KERNEL_MAX:
        raise ValueError(f"layer {name!r}: kernel {kh}x{kw} exceeds the conv engine's "
                         f"maximum of {KERNEL_MAX}x{KERNEL_MAX}")
    if sh != sw or sh not in STRIDES:
        raise ValueError(f"layer {name!r}: stride {(sh, sw)} is not supported by the conv "
                         f"engine (equal strides of 1 or 2)")
    if top > kh // 2 or bottom > kh // 2 or left > kw // 2 or right > kw // 2:
        raise ValueError(f"layer {name!r}: padding {(top, left, bottom, right)} exceeds the "
                         f"conv engine's limit of half the kernel ({kh // 2}, {kw // 2})")
    depthwise = groups == c_in and o == c_in and cg == 1 and groups > 1
    if groups != 1 and not depthwise:
        raise ValueError(f"layer {name!r}: groups={groups} is not supported by the conv "
                         f"engine (1, or depthwise with groups = C_in = C_out)")
    if cg * groups != c_in:
        raise ValueError(f"layer {name!r}: w {w.shape} does not match x {x.shape} with "
                         f"groups={groups}")
    oh = conv_output_size(h, kh, sh, top, bottom)
    ow = conv_output_size(wd, kw, sw, left, right)
    if oh < 1 or ow < 1:
        raise ValueError(f"layer {name!r}: kernel {kh}x{kw} does not fit input {h}x{wd}")
    for what, value in (("x_zero_point", x_zero_point), ("y_zero_point", y_zero_point),
                        ("lo", lo), ("hi", hi)):
        if not INT8_MIN <= int(value) <= INT8_MAX:
            raise ValueError(f"layer {name!r}: {what} must lie in [-128, 127], not {value}")
    if lo > hi:
        raise ValueError(f"layer {name!r}: lo={lo} is above hi={hi}")
    multiplier = _per_channel("multiplier", multiplier, o, MULTIPLIER_MIN, MULTIPLIER_MAX,
                              name)
    shift = _per_channel("shift", shift, o, SHIFT_MIN, SHIFT_MAX, name)
    folded = fold_zero_point(w, bias, x_zero_point)

    cols = config.cols
    on_array = depthwise and config.depthwise
    if on_array:
        # Depthwise passes (_lower_depthwise_pass) of as many column tiles of `cols`
        # channels as the buffers hold with the whole image (else one tile, in row bands).
        # The input rows the whole output needs (padding rows counted, as _row_bands
        # counts them), of 4 * words bytes a pixel per tile.
        words = depthwise_words(cols)
        rows_needed = max(h, (oh - 1) * sh + kh)
        tiles = max(1, min(config.max_col_tiles, config.weight_depth // (kh * kw),
                           config.act_depth // (rows_needed * wd * ACTIVATIONS_PER_WORD
                                                * words)))
        step = tiles * cols
        chunks = [(chans, chans, w[chans]) for chans in
                  (np.arange(first, min(first + step, c_in)) for first in range(0, c_in, step))]
    elif depthwise:
        # One pass per group of `cols` channels, as a dense conv with block-diagonal weights.
        chunks = []
        for first in range(0, c_in, cols):
            chans = np.arange(first, min(first + cols, c_in))
            wd_block = np.zeros((len(chans), len(chans), kh, kw), np.int8)
            wd_block[np.arange(len(chans)), np.arange(len(chans))] = w[chans, 0]
            chunks.append((chans, chans, wd_block))
    else:
        # Output channels beyond what the weight buffer and the parameter table hold go to
        # further passes over the same activations.
        k = c_in * kh * kw
        tiles_per_pass = max(1, min(config.max_col_tiles, config.weight_depth // k))
        step = tiles_per_pass * cols
        chunks = [(np.arange(c_in), np.arange(first, min(first + step, o)),
                   w[first:first + step]) for first in range(0, o, step)]

    passes = []
    for image in range(n_img):
        for in_chans, out_chans, weights in chunks:
            label = f"{name}[image {image}" + (f", channels {in_chans[0]}.."
                                              f"{in_chans[-1]}]" if depthwise else "]")
            if len(chunks) > 1 and not depthwise:
                label = label[:-1] + f", outputs {out_chans[0]}..{out_chans[-1]}]"
            # A depthwise pass holds each pixel's channels as whole words.
            per_pixel = (ACTIVATIONS_PER_WORD * depthwise_words(cols)
                         * -(-len(in_chans) // cols) if on_array else len(in_chans))
            for row0, rows in _row_bands(config, per_pixel, wd, oh, kh, sh, row_multiple,
                                         height=h):
                # Input rows of this band of output rows; rows outside the image are the
                # band's own padding (the engine feeds z_x there).
                first = row0 * sh - top
                last = min(h, (row0 + rows - 1) * sh - top + kh)
                band = f"{label[:-1]}, rows {row0}..{row0 + rows - 1}]" \
                    if rows < oh else label
                lower = _lower_depthwise_pass if on_array else _lower_pass
                passes.append(lower(
                    band, config, x[image, in_chans, max(0, first):last], weights,
                    folded[out_chans], multiplier[out_chans], shift[out_chans], out_chans,
                    image, stride=sh, pads=(max(0, -first), left), out_size=(rows, ow),
                    zero_points=(int(x_zero_point), int(y_zero_point)),
                    clamp=(int(lo), int(hi)), row0=row0))
    return passes


def _row_bands(config, channels, width, out_height, kernel_h, stride, row_multiple, *,
               height=None):
    """``(first output row, rows)`` of each band whose input rows fit the activation buffer
    (one band when the whole image of ``height`` rows fits). Band heights are multiples of
    ``row_multiple`` (2 when a fused 2x2 pool follows) except possibly the last."""
    input_rows = config.act_depth // max(1, width * channels)
    if height is not None and height <= input_rows:
        # The padding rows are the engine's own (it feeds z_x there), not the buffer's: a
        # 3x3 layer whose image just fits runs in one pass, not in a band of H - 2 rows and
        # a second pass that loads its weights again for the last two.
        return [(0, out_height)]
    rows = (input_rows - kernel_h) // stride + 1
    rows -= rows % row_multiple
    if rows >= out_height:
        return [(0, out_height)]
    # Too small even for one band (two rows under a fused pool): _lower_pass refuses with
    # the sizes, so the caller runs the conv and its pool apart.
    rows = max(rows, row_multiple)
    # A fused pool drops an odd last row: no band of that row alone (it would pool to none).
    out_height -= out_height % row_multiple
    return [(row0, min(rows, out_height - row0)) for row0 in range(0, out_height, rows)]


def _lane_tables(tiles, cols, out_chans, bias, multiplier, shift):
    """A pass's per-lane tables over ``tiles`` column tiles: the output channel of each lane
    (-1 past the last) and its bias, multiplier and shift (lanes past the last get values
    the requantizer takes, their results dropped)."""
    count = len(out_chans)

    def table(values, fill):
        padded = np.full(tiles * cols, fill, np.int64)
        padded[:count] = values
        return padded

    return {"channels": table(out_chans, -1), "bias": table(bias, 0).reshape(tiles, cols),
            "multiplier": table(multiplier, MULTIPLIER_MIN).reshape(tiles, cols),
            "shift": table(shift, SHIFT_MIN).reshape(tiles, cols)}


def _lower_pass(label, config, x, w, bias, multiplier, shift, out_chans, image, *, stride,
                pads, out_size, zero_points, clamp, row0=0):
    cols = config.cols
    c_in, h, wd = x.shape
    o, _, kh, kw = w.shape
    k = c_in * kh * kw
    tiles = -(-o // cols)
    if c_in * h * wd > config.act_depth:
        raise ValueError(f"layer {label}: activations {c_in}x{h}x{wd} = {c_in * h * wd} "
                         f"exceed the activation buffer of {config.act_depth} elements; "
                         f"split the layer (docs/conv-engine.md)")
    _check_tiles(label, config, tiles, k, f"{o} output channels",
                 hint="; split the output channels")
    desc = make_descriptor(config=config, in_channels=c_in, in_size=(h, wd), kernel=(kh, kw),
                           stride=stride, pad_top=pads[0], pad_left=pads[1],
                           out_size=out_size, col_tiles=tiles, x_zero_point=zero_points[0],
                           y_zero_point=zero_points[1], lo=clamp[0], hi=clamp[1])
    lanes = tiles * cols
    w_pad = np.zeros((lanes, c_in, kh, kw), np.int8)
    w_pad[:o] = w
    # word (t, u, v, c) -> lanes of tile t: the address generator's k order (c innermost).
    words = w_pad.reshape(tiles, cols, c_in, kh, kw).transpose(0, 3, 4, 2, 1)
    return EnginePass(
        name=label, descriptor=desc,
        activations=np.ascontiguousarray(x.transpose(1, 2, 0)).reshape(-1),
        weights=np.ascontiguousarray(words).reshape(tiles * k, cols), image=image,
        out_size=out_size, row0=row0,
        **_lane_tables(tiles, cols, out_chans, bias, multiplier, shift))


def _check_tiles(label, config, tiles, k, channels, *, hint=""):
    """Refuse a pass whose ``tiles`` column tiles of ``k`` weight rows do not fit the
    weight buffer, or that needs more column tiles than the engine counts."""
    if tiles * k > config.weight_depth:
        raise ValueError(f"layer {label}: weights need {tiles} column tiles x K={k} = "
                         f"{tiles * k} words, more than the weight buffer's "
                         f"{config.weight_depth}{hint}")
    if tiles > config.max_col_tiles:
        raise ValueError(f"layer {label}: {channels} need {tiles} column tiles, more than "
                         f"the engine's {config.max_col_tiles}")


def _lower_depthwise_pass(label, config, x, w, bias, multiplier, shift, out_chans, image, *,
                          stride, pads, out_size, zero_points, clamp, row0=0):
    """One depthwise pass on an engine with the mode: ``x`` (c, H, W) and ``w`` (c, 1, kh,
    kw), column j of column tile t computing channel ``t * cols + j``.

    Activations: for each column tile in turn (``dw_tile_daddr = H * W * E`` words apart),
    HWC of its channels with each pixel padded to ``E = depthwise_words(cols)`` words (the
    padding bytes meet zero weights). Weights: per tile, one row a tap, row ``u * kw + v``
    holding ``w[j, u, v]`` in lane j; the engine reads it for each of the tap's E beats
    (K = kh * kw * E beats) and gives a lane 0 in the beats of the words its channel is not
    in (``hw/systolic.py``)."""
    cols = config.cols
    c, h, wd = x.shape
    _, _, kh, kw = w.shape
    words = depthwise_words(cols)
    tiles = -(-c // cols)
    act_words = -(-config.act_depth // ACTIVATIONS_PER_WORD)
    if tiles * h * wd * words > act_words:
        raise ValueError(f"layer {label}: a depthwise pass's activations, {tiles} tiles of "
                         f"{h}x{wd} pixels of {words} words = {tiles * h * wd * words} words, "
                         f"exceed the activation buffer of {act_words} words; split the layer "
                         f"(docs/conv-engine.md)")
    k = kh * kw  # weight rows a tile: one a tap (the array masks the other words' lanes)
    _check_tiles(label, config, tiles, k, f"{c} channels")
    desc = make_descriptor(config=config, in_channels=words, in_size=(h, wd),
                           kernel=(kh, kw), stride=stride, pad_top=pads[0],
                           pad_left=pads[1], out_size=out_size, col_tiles=tiles,
                           x_zero_point=zero_points[0], y_zero_point=zero_points[1],
                           lo=clamp[0], hi=clamp[1], depthwise=True,
                           dw_tile_daddr=h * wd * words)
    lanes = tiles * cols
    padded = np.zeros((lanes, h, wd), np.int8)
    padded[:c] = x
    acts = np.zeros((tiles, h, wd, words * ACTIVATIONS_PER_WORD), np.int8)
    acts[..., :cols] = padded.reshape(tiles, cols, h, wd).transpose(0, 2, 3, 1)
    kernels = np.zeros((lanes, kh, kw), np.int8)
    kernels[:c] = w[:, 0]
    weights = kernels.reshape(tiles, cols, kh, kw).transpose(0, 2, 3, 1)  # (t, u, v, j)
    return EnginePass(
        name=label, descriptor=desc, activations=acts.reshape(-1),
        weights=weights.reshape(tiles * k, cols), image=image, out_size=out_size, row0=row0,
        **_lane_tables(tiles, cols, out_chans, bias, multiplier, shift))


def engine_reference(p):
    """The engine's output beats for pass ``p``, computed the way the hardware does.

    Implicit im2col over the raw HWC activations with ``z_x`` at padding positions, the
    beat order of the address generator, int32 wrap-around of ``bias' + sum x * w``, then
    requantization. An executable specification of the engine, used to check the lowering
    against the golden model without RTL.

    Returns
    -------
    numpy.ndarray of int8, shape (output_beats, cols)
    """
    from models.requant import requantize

    d = p.descriptor
    c_in, h, wd = d["in_channels"], d["in_height"], d["in_width"]
    kh, kw, s = d["kernel_h"], d["kernel_w"], d["stride"]
    oh, ow = p.out_size
    if d.get("depthwise"):
        return _depthwise_reference(p)
    x = p.activations.reshape(h, wd, c_in).astype(np.int64)
    xp = np.full((h + 2 * KERNEL_MAX, wd + 2 * KERNEL_MAX, c_in), d["x_zero_point"], np.int64)
    xp[KERNEL_MAX:KERNEL_MAX + h, KERNEL_MAX:KERNEL_MAX + wd] = x
    k = c_in * kh * kw
    cols = p.weights.shape[1]
    beats = []
    for t in range(d["col_tiles"]):
        wt = p.weights[t * k:(t + 1) * k].astype(np.int64)  # (K, cols)
        for pixel in range(oh * ow):
            i, j = divmod(pixel, ow)
            y0 = KERNEL_MAX + i * s - d["pad_top"]
            x0 = KERNEL_MAX + j * s - d["pad_left"]
            window = xp[y0:y0 + kh, x0:x0 + kw].reshape(k)  # (u, v, c) order
            acc = _wrap_int32(window @ wt + p.bias[t])
            y = requantize(acc.reshape(1, cols), p.multiplier[t], p.shift[t],
                           d["y_zero_point"], d["lo"], d["hi"], axis=1)
            beats.append(y[0])
    return np.array(beats, dtype=np.int8).reshape(-1, cols)


def _depthwise_reference(p):
    """:func:`engine_reference` of a depthwise pass: per column tile t and beat ``(u, v,
    e)``, lane j of row lane r multiplies byte ``j % 4`` of word e of its pixel's window
    position in tile t's activations (``z_x`` in every byte outside the image) by lane j
    of the tap's weight row where ``j // 4 == e``, by 0 in the other beats."""
    from models.requant import requantize

    d = p.descriptor
    words, h, wd = d["in_channels"], d["in_height"], d["in_width"]
    kh, kw, s, tiles = d["kernel_h"], d["kernel_w"], d["stride"], d["col_tiles"]
    oh, ow = p.out_size
    cols = p.weights.shape[1]
    per_word = ACTIVATIONS_PER_WORD
    x = p.activations.reshape(tiles, h, wd, words, per_word).astype(np.int64)
    xp = np.full((tiles, h + 2 * KERNEL_MAX, wd + 2 * KERNEL_MAX, words, per_word),
                 d["x_zero_point"], np.int64)
    xp[:, KERNEL_MAX:KERNEL_MAX + h, KERNEL_MAX:KERNEL_MAX + wd] = x
    wt = p.weights.astype(np.int64).reshape(tiles, kh, kw, cols)
    lanes = np.arange(cols)
    beats = []
    for t in range(tiles):
        for pixel in range(oh * ow):
            i, j = divmod(pixel, ow)
            y0 = KERNEL_MAX + i * s - d["pad_top"]
            x0 = KERNEL_MAX + j * s - d["pad_left"]
            # Lane j's own byte: word j // 4 (the other words' beats give it weight 0).
            window = xp[t, y0:y0 + kh, x0:x0 + kw][:, :, lanes // per_word, lanes % per_word]
            acc = _wrap_int32((window * wt[t]).sum(axis=(0, 1)) + p.bias[t])
            y = requantize(acc.reshape(1, cols), p.multiplier[t], p.shift[t],
                           d["y_zero_point"], d["lo"], d["hi"], axis=1)
            beats.append(y[0])
    return np.array(beats, dtype=np.int8).reshape(-1, cols)


def assemble_output(passes, beats, out_channels):
    """Scatter each pass's output beats into an int8 NCHW tensor.

    Parameters
    ----------
    passes : list of EnginePass
    beats : list of array_like, shape (output_beats, cols), one per pass
    out_channels : int
        C_out of the layer.
    """
    n_img = max(p.image for p in passes) + 1
    oh = max(p.row0 + p.out_size[0] for p in passes)
    ow = passes[0].out_size[1]
    out = np.zeros((n_img, out_channels, oh, ow), np.int8)
    for p, got in zip(passes, beats, strict=True):
        got = np.asarray(got, dtype=np.int8)
        if got.shape != (p.output_beats, p.weights.shape[1]):
            raise ValueError(f"pass {p.name}: expected {p.output_beats} beats of "
                             f"{p.weights.shape[1]}, got an array of shape {got.shape}")
        cols = got.shape[1]
        rows = p.out_size[0]
        per_tile = got.reshape(p.descriptor["col_tiles"], rows * ow, cols)
        for t in range(per_tile.shape[0]):
            for j in range(cols):
                channel = p.channels[t * cols + j]
                if channel >= 0:
                    out[p.image, channel, p.row0:p.row0 + rows] = \
                        per_tile[t, :, j].reshape(rows, ow)
    return out
