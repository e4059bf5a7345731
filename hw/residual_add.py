"""Streaming residual add of two int8 tensors with different scales.

The hardware twin of ``models.eltwise.add`` (TFLite's quantized ADD), per lane::

    a1 = rnd((a - z_a) * 2**20, M_a, n_a)
    b1 = rnd((b - z_b) * 2**20, M_b, n_b)
    y  = clamp(z_y + rnd(a1 + b1, M_y, n_y), lo, hi)

where ``rnd(v, M, n)`` is ``hw.fixedpoint.rounding_shift``: ``v * M / 2**n`` rounded half
to even,
with the six multiplier/shift constants from ``models.eltwise.add_multipliers``.
"""

from amaranth import Module, Signal, signed, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from contract.config import check_positive_int
from contract.descriptor import ADD_PARAM_FIELDS
from models.eltwise import ADD_LEFT_SHIFT

from .fixedpoint import clamp, rounding_shift
from .pipeline import lockstep_pipeline


def operand_pair_layout(lanes):
    return data.StructLayout({
        "a": data.ArrayLayout(signed(8), lanes),
        "b": data.ArrayLayout(signed(8), lanes),
        "last": 1,
    })


def sum_layout(lanes):
    return data.StructLayout({"y": data.ArrayLayout(signed(8), lanes), "last": 1})


def add_params_layout():
    """Per-layer constants (``models.eltwise.add_multipliers`` and the zero points), from
    ``contract.descriptor.ADD_PARAM_FIELDS``."""
    return data.StructLayout({name: signed(width) if is_signed else unsigned(width)
                              for name, width, is_signed, _ in ADD_PARAM_FIELDS})


class ResidualAdd(wiring.Component):
    """``lanes`` pairs of int8 in, ``lanes`` int8 sums out, one beat per cycle.

    Parameters
    ----------
    lanes : int
        Elements per beat.
    """

    LATENCY = 7  # zero points, 2 x rescale (2 each), sum, output rescale (2), clamp

    def __init__(self, *, lanes):
        self.lanes = check_positive_int("lanes", lanes, maximum=256)
        super().__init__({
            "operands": In(stream.Signature(operand_pair_layout(lanes))),
            "results": Out(stream.Signature(sum_layout(lanes))),
            "params": In(add_params_layout()),
        })

    def elaborate(self, platform):
        m = Module()
        p = self.params
        advance = lockstep_pipeline(m, self.operands, self.results, self.LATENCY)
        for lane in range(self.lanes):
            a = Signal(signed(9 + ADD_LEFT_SHIFT), name=f"a{lane}")
            b = Signal(signed(9 + ADD_LEFT_SHIFT), name=f"b{lane}")
            with m.If(advance):
                m.d.sync += [
                    a.eq((self.operands.payload.a[lane] - p.a_zero_point) << ADD_LEFT_SHIFT),
                    b.eq((self.operands.payload.b[lane] - p.b_zero_point) << ADD_LEFT_SHIFT),
                ]
            a1 = rounding_shift(m, a, p.a_multiplier, p.a_shift, en=advance, name=f"a{lane}")
            b1 = rounding_shift(m, b, p.b_multiplier, p.b_shift, en=advance, name=f"b{lane}")
            total = Signal(signed(29), name=f"sum{lane}")  # |a1|, |b1| < 2**27
            with m.If(advance):
                m.d.sync += total.eq(a1 + b1)
            y = rounding_shift(m, total, p.y_multiplier, p.y_shift, en=advance, name=f"y{lane}")
            biased = Signal(signed(65), name=f"biased{lane}")
            result = Signal(signed(8), name=f"result{lane}")
            m.d.comb += biased.eq(y + p.y_zero_point)
            with m.If(advance):
                m.d.sync += result.eq(clamp(biased, p.lo, p.hi))
            m.d.comb += self.results.payload.y[lane].eq(result)
        return m
