"""The layer descriptors the host writes into registers: fields, widths and meanings.

One source for the hardware structs (``hw.addrgen``, ``hw.postprocess``), the register map
(``contract.regmap``) and the driver (``sw_driver.conv_lowering``,
``sw_driver.accelerator``).
Each field is ``(name, width, signed, meaning)``.
"""

from .requant import MULTIPLIER_WIDTH, SHIFT_MAX, SHIFT_MIN, SHIFT_WIDTH

#: Largest kernel side the address generator supports (kernel_h/kernel_w fields: 3 bits).
KERNEL_MAX = 7
#: Largest padding on any side: k // 2 for the largest kernel.
PAD_MAX = KERNEL_MAX // 2
#: Strides the engine runs.
STRIDES = (1, 2)

#: The convolution descriptor. The first group is the layer itself; the second group is
#: address arithmetic the driver derives from it (``conv_lowering.make_descriptor``) so
#: that the hardware only ever adds and compares, with no multiplier or divider.
DESCRIPTOR_FIELDS = (
    ("in_channels", 16, False, "C_in"),
    ("in_height", 16, False, "H"),
    ("in_width", 16, False, "W"),
    ("kernel_h", 3, False, "kh, 1..7"),
    ("kernel_w", 3, False, "kw, 1..7"),
    ("stride", 2, False, "1 or 2 (both axes)"),
    ("pad_top", 2, False, "0..3 (bottom padding follows from the output size)"),
    ("pad_left", 2, False, "0..3 (right padding follows from the output size)"),
    ("col_tiles", 16, False, "ceil(C_out / C): column tiles, the outer loop"),
    ("pixel_groups", 16, False, "ceil(OH*OW / R): groups of R output pixels"),
    ("last_rows", 8, False, "output pixels in the last group, 1..R"),
    ("x_zero_point", 8, True, "fed at padding positions"),
    ("y_zero_point", 8, True, "output zero point"),
    ("lo", 8, True, "clamp low (fused activation)"),
    ("hi", 8, True, "clamp high"),
    # Derived: activation addresses are HWC, addr = (iy*W + ix)*C_in + c.
    ("origin_addr", 32, True, "(-pad_top*W - pad_left)*C_in: window base of pixel 0"),
    ("row_skip", 32, True, "(W - kw)*C_in + 1: address step from the end of a kernel row"),
    ("pixel_daddr", 32, True, "stride*C_in: window base step to the next pixel"),
    ("group_dx", 16, True, "(R mod OW)*stride: ix step to the next pixel group"),
    ("group_dy", 16, True, "(R div OW)*stride: iy step to the next pixel group"),
    ("group_daddr", 32, True, "(group_dy*W + group_dx)*C_in"),
    ("x_end", 16, True, "OW*stride - pad_left: an ix0 at or past it wraps to the next row"),
    ("x_wrap", 16, True, "OW*stride: subtracted from ix0 on a wrap"),
    ("wrap_daddr", 32, True, "(stride*W - OW*stride)*C_in: address step of a wrap"),
    # Last, and only on a build with the depthwise mode (``ConvEngineConfig.depthwise``):
    # with it set, addresses count 32-bit words and C_in is the words of one pixel.
    ("depthwise", 1, False, "1: column c computes channel t*C+c; K runs over the kernel "
     "taps and the words of a pixel (C_in = ceil(C/4)), addresses count 32-bit words"),
    ("dw_tile_daddr", 32, True, "depthwise: word address step from one column tile's "
     "activations to the next's (H*W*C_in)"),
)

def depthwise_words(cols):
    """32-bit words of one pixel's ``cols`` channels in a depthwise pass: the C_in of its
    descriptor and the beats of one kernel tap (column j reads byte ``j % 4`` of word
    ``j // 4``)."""
    return -(-cols // 4)


def depthwise_word_bits(cols):
    """Bits of a depthwise beat's word index (0 .. ``depthwise_words(cols) - 1``), at
    least 1."""
    return max(1, (depthwise_words(cols) - 1).bit_length())


#: The descriptor fields only a build with the depthwise mode has (its ``CONV_*`` registers
#: and its engine's descriptor; the driver writes them only to such a device).
DEPTHWISE_FIELDS = ("depthwise", "dw_tile_daddr")

#: The residual-add unit's parameters, as ``models.eltwise`` defines them
#: (``add_multipliers`` gives the multipliers and shifts).
ADD_PARAM_FIELDS = (
    ("a_zero_point", 8, True, "zero point of input a"),
    ("b_zero_point", 8, True, "zero point of input b"),
    ("y_zero_point", 8, True, "zero point of the output"),
    ("lo", 8, True, "clamp low (fused ReLU)"),
    ("hi", 8, True, "clamp high"),
    ("a_multiplier", MULTIPLIER_WIDTH, False, "M_a in [2^30, 2^31)"),
    ("a_shift", SHIFT_WIDTH, False, f"n_a in [{SHIFT_MIN}, {SHIFT_MAX}]"),
    ("b_multiplier", MULTIPLIER_WIDTH, False, "M_b"),
    ("b_shift", SHIFT_WIDTH, False, "n_b"),
    ("y_multiplier", MULTIPLIER_WIDTH, False, "M_y"),
    ("y_shift", SHIFT_WIDTH, False, "n_y"),
)
