"""Widths of the requantization constants as the hardware carries them.

The ranges are the golden model's (``models.requant``); the widths are the narrowest
unsigned fields that hold them, checked here so that a change of range cannot silently
outgrow a register, a stream beat or an RTL port.
"""

from models.requant import MULTIPLIER_MAX, MULTIPLIER_MIN, SHIFT_MAX, SHIFT_MIN

__all__ = ["ACC_WIDTH", "BIAS_WIDTH", "MULTIPLIER_MAX", "MULTIPLIER_MIN",
           "MULTIPLIER_WIDTH", "SHIFT_MAX", "SHIFT_MIN", "SHIFT_WIDTH"]

#: Accumulator bits the requantizer takes (two's complement, wrapping like the model).
ACC_WIDTH = 32
#: Bits of a per-channel bias (signed, as wide as the accumulator it is added to).
BIAS_WIDTH = ACC_WIDTH
#: Bits of a multiplier M in [MULTIPLIER_MIN, MULTIPLIER_MAX] (unsigned).
MULTIPLIER_WIDTH = MULTIPLIER_MAX.bit_length()
#: Bits of a right shift n in [SHIFT_MIN, SHIFT_MAX] (unsigned).
SHIFT_WIDTH = SHIFT_MAX.bit_length()

assert MULTIPLIER_WIDTH == 31 and SHIFT_WIDTH == 6, "stream and register layouts assume these"
