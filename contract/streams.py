"""What the host link's streams carry, beat by beat (the order is in ``hw/top.py``).

Both DMA streams move 32-bit words; every item below is padded to whole words. The
hardware gathers words into these items (``hw.top``), the driver packs and unpacks them
(``sw_driver.accelerator``), and the cycle model counts them (``sw_driver.cycle_model``).
"""

from .requant import BIAS_WIDTH, MULTIPLIER_WIDTH, SHIFT_WIDTH

#: Bits per word on the host-to-device and device-to-host streams.
WORD_BITS = 32
#: int8 activations per host-to-device word (``LOAD_ACT``), lowest byte first.
ACTIVATIONS_PER_WORD = WORD_BITS // 8
#: Widest feature map the 2x2 max pool takes: its line buffer holds 64 words of C bytes.
#: Published in the ``POOL_MAX_WIDTH`` register, from which the driver reads it.
POOL_MAX_WIDTH = 128

#: One column tile's requantization constants, one lane per array column, fields in this
#: order from bit 0 (each field's C lanes packed contiguously): ``(name, width, signed)``.
PARAM_ENTRY_FIELDS = (
    ("bias", BIAS_WIDTH, True),
    ("multiplier", MULTIPLIER_WIDTH, False),
    ("shift", SHIFT_WIDTH, False),
)


def words_for(bits):
    """Stream words that hold ``bits`` bits."""
    return -(-bits // WORD_BITS)


def param_entry_offsets(cols):
    """``{field: (bit offset, width per lane)}`` of a parameter entry for ``cols`` lanes."""
    offsets, offset = {}, 0
    for name, width, _ in PARAM_ENTRY_FIELDS:
        offsets[name] = (offset, width)
        offset += width * cols
    return offsets


def param_entry_bits(cols):
    return sum(width for _, width, _ in PARAM_ENTRY_FIELDS) * cols


def param_words(cols):
    """Words per column-tile parameter entry on the host-to-device stream."""
    return words_for(param_entry_bits(cols))


def weight_words(cols):
    """Words per weight row: C int8 weights."""
    return words_for(8 * cols)


def output_words(cols):
    """Words per beat of C int8: an output beat, or one POOL input pixel."""
    return words_for(8 * cols)


def add_words(cols):
    """Words per ADD input beat: C bytes of ``a``, then C bytes of ``b``."""
    return words_for(16 * cols)


def pack_param_entry(lanes, cols):
    """Bytes of one parameter entry; ``lanes`` maps each field of
    :data:`PARAM_ENTRY_FIELDS` to its ``cols`` values (two's complement where signed)."""
    value = 0
    for name, (offset, width) in param_entry_offsets(cols).items():
        values = lanes[name]
        if len(values) != cols:
            raise ValueError(f"parameter entry field {name!r} needs {cols} lanes, "
                             f"not {len(values)}")
        for lane, item in enumerate(values):
            value |= (int(item) & ((1 << width) - 1)) << (offset + lane * width)
    return value.to_bytes(4 * param_words(cols), "little")
