"""Streaming post-processing: bias, requantization and clamp, one result per cycle per lane.

Implements ``models.requant.requantize`` applied to ``acc + bias``::

    y = clamp(z + round_half_even((acc + bias) * M / 2**n), lo, hi)

with a 64-bit product and ``hw.fixedpoint.rounding_shift`` (nearest, ties to even).
``acc + bias`` wraps at 32 bits like the hardware accumulator it continues; the golden
models refuse layers where that could happen, so inside the contract there is no wrap.
"""

from amaranth import Module, Signal, signed, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from contract.config import check_positive_int
from contract.requant import ACC_WIDTH, BIAS_WIDTH, MULTIPLIER_WIDTH, SHIFT_WIDTH

from .fixedpoint import clamp, rounding_shift
from .pipeline import lockstep_pipeline


def accumulator_layout(lanes, acc_width=ACC_WIDTH):
    return data.StructLayout({"acc": data.ArrayLayout(signed(acc_width), lanes), "last": 1})


def output_layout(lanes):
    return data.StructLayout({"y": data.ArrayLayout(signed(8), lanes), "last": 1})


class RequantParams(data.Struct):
    """Per-layer constants shared by all lanes."""
    zero_point: signed(8)
    lo: signed(8)
    hi: signed(8)


class Requantizer(wiring.Component):
    """``lanes`` int32 accumulators in, ``lanes`` int8 results out, fully pipelined.

    Per-lane ``bias``, ``multiplier`` (M in [2^30, 2^31)) and ``shift`` (n in [1, 62]) are
    static inputs for the output channels the lanes currently hold (the layer's control
    logic sets them per column tile); ``params`` holds the output zero point and clamp.
    The pipeline has ``LATENCY`` stages and stalls as a whole when ``results`` is not ready.

    Parameters
    ----------
    lanes : int
        Results per beat (the systolic array's columns).
    acc_width : int
        Width of the incoming accumulators.
    """

    LATENCY = 4

    def __init__(self, *, lanes, acc_width=ACC_WIDTH):
        self.lanes = check_positive_int("lanes", lanes, maximum=256)
        self.acc_width = check_positive_int("acc_width", acc_width, maximum=32)
        super().__init__({
            "accumulators": In(stream.Signature(accumulator_layout(lanes, acc_width))),
            "results": Out(stream.Signature(output_layout(lanes))),
            "bias": In(data.ArrayLayout(signed(BIAS_WIDTH), lanes)),
            "multiplier": In(data.ArrayLayout(unsigned(MULTIPLIER_WIDTH), lanes)),
            "shift": In(data.ArrayLayout(unsigned(SHIFT_WIDTH), lanes)),
            "params": In(RequantParams),
        })

    def elaborate(self, platform):
        m = Module()
        advance = lockstep_pipeline(m, self.accumulators, self.results, self.LATENCY)
        for lane in range(self.lanes):
            total = Signal(signed(ACC_WIDTH), name=f"total{lane}")
            with m.If(advance):
                m.d.sync += total.eq(self.accumulators.payload.acc[lane] + self.bias[lane])
            shifted = rounding_shift(m, total, self.multiplier[lane], self.shift[lane],
                                     en=advance, name=f"lane{lane}")
            # 65 bits: z + shifted can exceed int8 by far before the clamp.
            biased = Signal(signed(65), name=f"biased{lane}")
            result = Signal(signed(8), name=f"y{lane}")
            m.d.comb += biased.eq(shifted + self.params.zero_point)
            with m.If(advance):
                m.d.sync += result.eq(clamp(biased, self.params.lo, self.params.hi))
            m.d.comb += self.results.payload.y[lane].eq(result)
        return m
