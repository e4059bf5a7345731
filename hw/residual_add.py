"""Beat layouts and constants of the residual-add side of the post-processing bank.

The residual add is ``models.eltwise.add`` (TFLite's quantized ADD), per lane::

    a1 = rnd((a - z_a) * 2**20, M_a, n_a)
    b1 = rnd((b - z_b) * 2**20, M_b, n_b)
    y  = clamp(z_y + rnd(a1 + b1, M_y, n_y), lo, hi)

where ``rnd(v, M, n)`` is ``hw.fixedpoint.rounding_shift`` (``v * M / 2**n`` rounded half
to even) with the six multiplier/shift constants from ``models.eltwise.add_multipliers``.
``hw.postprocess.PostProcessBank`` computes it with the requantizer's rescalers; the
engine, the loader and the testbenches share these layouts.
"""

from amaranth import signed, unsigned
from amaranth.lib import data

from contract.descriptor import ADD_PARAM_FIELDS

__all__ = ["add_params_layout", "operand_pair_layout", "sum_layout"]


def operand_pair_layout(lanes):
    """A beat of ``lanes`` operand pairs into the bank."""
    return data.StructLayout({
        "a": data.ArrayLayout(signed(8), lanes),
        "b": data.ArrayLayout(signed(8), lanes),
        "last": 1,
    })


def sum_layout(lanes):
    """A beat of ``lanes`` int8 sums out of the bank."""
    return data.StructLayout({"y": data.ArrayLayout(signed(8), lanes), "last": 1})


def add_params_layout():
    """Per-layer constants (``models.eltwise.add_multipliers`` and the zero points), from
    ``contract.descriptor.ADD_PARAM_FIELDS``."""
    return data.StructLayout({name: signed(width) if is_signed else unsigned(width)
                              for name, width, is_signed, _ in ADD_PARAM_FIELDS})
