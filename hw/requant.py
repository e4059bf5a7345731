"""Beat layouts and constants of the requantization side of the post-processing bank.

Requantization is ``models.requant.requantize`` applied to ``acc + bias``::

    y = clamp(z + round_half_even((acc + bias) * M / 2**n), lo, hi)

computed by ``hw.postprocess.PostProcessBank`` (whose rescalers also serve the residual
add). The engine, the output writer and the testbenches share these layouts.
"""

from amaranth import signed
from amaranth.lib import data

from contract.requant import ACC_WIDTH

__all__ = ["NARROW_BITS", "RequantParams", "accumulator_layout", "output_layout"]


def accumulator_layout(lanes, acc_width=ACC_WIDTH):
    """A beat of ``lanes`` accumulators into the bank."""
    return data.StructLayout({"acc": data.ArrayLayout(signed(acc_width), lanes), "last": 1})


def output_layout(lanes):
    """A beat of ``lanes`` int8 results out of the bank (and of the engine)."""
    return data.StructLayout({"y": data.ArrayLayout(signed(8), lanes), "last": 1})


#: Width the rescaled value is saturated to before the zero point and the int8 clamp
#: (any width from 9 bits is exact: 2**8 - 1 - 128 is still the top of int8).
NARROW_BITS = 10


class RequantParams(data.Struct):
    """Per-layer constants shared by all lanes."""
    zero_point: signed(8)
    lo: signed(8)
    hi: signed(8)
