"""Streaming residual add of two int8 tensors with different scales.

The hardware twin of ``models.eltwise.add`` (TFLite's quantized ADD), per lane::

    a1 = rnd((a - z_a) * 2**20, M_a, n_a)
    b1 = rnd((b - z_b) * 2**20, M_b, n_b)
    y  = clamp(z_y + rnd(a1 + b1, M_y, n_y), lo, hi)

where ``rnd(v, M, n)`` is ``hw.fixedpoint.rounding_shift``: ``v * M / 2**n`` rounded half
to even,
with the six multiplier/shift constants from ``models.eltwise.add_multipliers``.

The top computes ADD passes with the requantizer's rescalers instead
(``hw.postprocess.PostProcessBank``); this standalone block remains with its tests, and its
layouts are the bank's.
"""

from amaranth import Module, Signal, signed, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from contract.config import check_positive_int
from contract.descriptor import ADD_PARAM_FIELDS
from contract.postprocess import add_units
from models.eltwise import ADD_LEFT_SHIFT

from .fixedpoint import clamp, rounding_shift
from .requant import NARROW_BITS
from .timeshare import TimeShare


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
    """``lanes`` pairs of int8 in, ``lanes`` int8 sums out, through ``units`` time-shared
    datapaths (a beat takes ``lanes // units`` cycles, ``hw.timeshare``).

    The input rescale is narrowed: ``(x - z) << 20`` has 20 zero low bits, so
    ``rnd((x - z) << 20, M, n) == rnd(x - z, M, n - 20)`` exactly for every ``n > 20``
    (``add_multipliers`` gives ``n >= 32``: its multipliers are at most 1/2 with
    ``M >= 2**30``; docs/conv-engine.md has the proof). The product is then 9 x 31 bits,
    two MULT18X18D instead of four; the output rescale (29 x 31 bits) takes four. A shift
    of 20 or less is outside the contract.

    Parameters
    ----------
    lanes : int
        Elements per beat.
    units : int or None
        Datapaths, a divisor of ``lanes``; by default ``contract.postprocess.add_units(lanes)``.
    """

    # holding register, zero points, 2 x rescale (7 each, side by side), sum, output
    # rescale (7), clamp. The rescales are ``rounding_shift``'s pipelined form (products
    # in DSP registers, a two-step shift), as in the requantizer, for the board clock.
    LATENCY = 18

    def __init__(self, *, lanes, units=None):
        self.lanes = check_positive_int("lanes", lanes, maximum=256)
        self.units = add_units(lanes) if units is None else \
            check_positive_int("units", units, maximum=lanes)
        if lanes % self.units:
            raise ValueError(f"units must divide lanes ({lanes}), not {units!r}")
        super().__init__({
            "operands": In(stream.Signature(operand_pair_layout(lanes))),
            "results": Out(stream.Signature(sum_layout(lanes))),
            "params": In(add_params_layout()),
        })

    @property
    def cycles_per_beat(self):
        return self.lanes // self.units

    def elaborate(self, platform):
        m = Module()
        p = self.params
        share = TimeShare(m, self.operands, self.results, lanes=self.lanes,
                          units=self.units, latency=self.LATENCY - 2)
        advance = share.step
        a_in = share.select(share.beat.a, "a_in")
        b_in = share.select(share.beat.b, "b_in")
        pipelined = dict(stages=4, pipelined=True, platform=platform)
        results = []
        for unit in range(self.units):
            a = Signal(signed(9), name=f"a{unit}")
            b = Signal(signed(9), name=f"b{unit}")
            with m.If(advance):
                m.d.sync += [a.eq(a_in[unit] - p.a_zero_point),
                             b.eq(b_in[unit] - p.b_zero_point)]
            a1 = rounding_shift(m, a, p.a_multiplier, p.a_shift - ADD_LEFT_SHIFT,
                                en=advance, name=f"a{unit}", **pipelined)
            b1 = rounding_shift(m, b, p.b_multiplier, p.b_shift - ADD_LEFT_SHIFT,
                                en=advance, name=f"b{unit}", **pipelined)
            total = Signal(signed(29), name=f"sum{unit}")  # |a1|, |b1| < 2**27
            with m.If(advance):
                m.d.sync += total.eq(a1 + b1)
            # Saturated to NARROW_BITS before the zero point and the int8 clamp, exactly
            # as in the requantizer (any width from 9 bits gives the same clamped value).
            y = rounding_shift(m, total, p.y_multiplier, p.y_shift, en=advance,
                               name=f"y{unit}", narrow=NARROW_BITS, **pipelined)
            biased = Signal(signed(NARROW_BITS + 2), name=f"biased{unit}")
            m.d.comb += biased.eq(y + p.y_zero_point)
            results.append(clamp(biased, p.lo, p.hi))
        share.collect(results, self.results.payload.y)
        return m

