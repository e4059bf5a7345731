"""Streaming post-processing: bias, requantization and clamp, one result per cycle per lane.

Implements ``models.requant.requantize`` applied to ``acc + bias``::

    y = clamp(z + round_half_even((acc + bias) * M / 2**n), lo, hi)

with a 64-bit product and ``hw.fixedpoint.rounding_shift`` (nearest, ties to even).
``acc + bias`` wraps at 32 bits like the hardware accumulator it continues; the golden
models refuse layers where that could happen, so inside the contract there is no wrap.

The engine requantizes through ``hw.postprocess.PostProcessBank``, whose rescalers also
serve the residual add; this standalone block and its tests remain for the rounding
datapath and the layouts they share.
"""

from amaranth import Module, Signal, signed, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from contract.config import check_positive_int
from contract.postprocess import requant_units
from contract.requant import ACC_WIDTH, BIAS_WIDTH, MULTIPLIER_WIDTH, SHIFT_WIDTH

from .fixedpoint import clamp, rounding_shift
from .timeshare import TimeShare


def accumulator_layout(lanes, acc_width=ACC_WIDTH):
    return data.StructLayout({"acc": data.ArrayLayout(signed(acc_width), lanes), "last": 1})


def output_layout(lanes):
    return data.StructLayout({"y": data.ArrayLayout(signed(8), lanes), "last": 1})


#: Width the rescaled value is saturated to before the zero point and the int8 clamp
#: (any width from 9 bits is exact: 2**8 - 1 - 128 is still the top of int8).
NARROW_BITS = 10


class RequantParams(data.Struct):
    """Per-layer constants shared by all lanes."""
    zero_point: signed(8)
    lo: signed(8)
    hi: signed(8)


class Requantizer(wiring.Component):
    """``lanes`` int32 accumulators in, ``lanes`` int8 results out, through ``units``
    time-shared rescalers.

    Per-lane ``bias``, ``multiplier`` (M in [2^30, 2^31)) and ``shift`` (n in [1, 62]) are
    static inputs for the output channels the lanes currently hold (the layer's control
    logic sets them per column tile); ``params`` holds the output zero point and clamp.
    Each unit is one 32 x 31-bit product (four MULT18X18D on ECP5); a beat takes
    ``lanes // units`` cycles (``hw.timeshare``). The pipeline has ``LATENCY`` stages and
    stalls as a whole when ``results`` is not ready.

    Parameters
    ----------
    lanes : int
        Results per beat (the systolic array's columns).
    acc_width : int
        Width of the incoming accumulators.
    units : int or None
        Rescalers, a divisor of ``lanes``; by default ``contract.postprocess.requant_units(lanes)``.
    """

    #: Holding register, sum, product (four: DSP input and output registers, two sums),
    #: shift (two: by a multiple of 8, then the rest with the round and sticky bits),
    #: increment and saturation, zero point, clamp (the collector).
    LATENCY = 11

    def __init__(self, *, lanes, acc_width=ACC_WIDTH, units=None):
        self.lanes = check_positive_int("lanes", lanes, maximum=256)
        self.acc_width = check_positive_int("acc_width", acc_width, maximum=32)
        self.units = requant_units(lanes) if units is None else \
            check_positive_int("units", units, maximum=lanes)
        if lanes % self.units:
            raise ValueError(f"units must divide lanes ({lanes}), not {units!r}")
        super().__init__({
            "accumulators": In(stream.Signature(accumulator_layout(lanes, acc_width))),
            "results": Out(stream.Signature(output_layout(lanes))),
            "bias": In(data.ArrayLayout(signed(BIAS_WIDTH), lanes)),
            "multiplier": In(data.ArrayLayout(unsigned(MULTIPLIER_WIDTH), lanes)),
            "shift": In(data.ArrayLayout(unsigned(SHIFT_WIDTH), lanes)),
            "params": In(RequantParams),
        })

    @property
    def cycles_per_beat(self):
        return self.lanes // self.units

    def elaborate(self, platform):
        m = Module()
        share = TimeShare(m, self.accumulators, self.results, lanes=self.lanes,
                          units=self.units, latency=self.LATENCY - 2)
        advance = share.step
        accs = share.select(share.beat.acc, "acc")
        biases = share.select(self.bias, "bias")
        multipliers = share.select(self.multiplier, "multiplier")
        shifts = share.select(self.shift, "shift")
        results = []
        for unit in range(self.units):
            total = Signal(signed(ACC_WIDTH), name=f"total{unit}")
            multiplier = Signal(unsigned(MULTIPLIER_WIDTH), name=f"m{unit}")
            shift = Signal(unsigned(SHIFT_WIDTH), name=f"n{unit}")
            with m.If(advance):
                m.d.sync += [total.eq(accs[unit] + biases[unit]),
                             multiplier.eq(multipliers[unit]), shift.eq(shifts[unit])]
            # z + shifted is clamped to int8 next: a rescaled value past +-2**9 lands on
            # the same bound as its saturation does (|z| <= 128), so the shifter hands over
            # an 11-bit saturated value and the zero point and the clamp work on 11 bits.
            shifted = rounding_shift(m, total, multiplier, shift, en=advance,
                                     name=f"unit{unit}", stages=4, pipelined=True,
                                     narrow=NARROW_BITS, platform=platform)
            biased = Signal(signed(NARROW_BITS + 2), name=f"biased{unit}")
            with m.If(advance):
                m.d.sync += biased.eq(shifted + self.params.zero_point)
            results.append(clamp(biased, self.params.lo, self.params.hi))
        # The collector register is the last stage (the clamp's).
        share.collect(results, self.results.payload.y)
        return m

