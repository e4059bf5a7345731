"""The requantizer for a slow clock and a small FPGA (``pipelined = false``, no residual add).

It computes what :class:`hw.postprocess.PostProcessBank` computes without the add
(``models.requant.requantize`` of ``acc + bias``: the same ports, the same results), with
one small datapath that takes a lane at a time over many cycles instead of a pipelined
32 x 31-bit rescaler a lane a cycle:

1. a shift-and-add multiply, one multiplier bit a cycle (31 cycles): a 64-bit register
   holds the partial product's upper half over the multiplier's bits not yet used, so
   one 33-bit adder and a one-bit shift make the exact 63-bit product, with no DSP block;
2. the rounding shift by ``n``: ``n - 1`` right shifts of the same register (8 bits a
   cycle, then 1), ORing what falls out into a sticky bit; the last bit left below the
   quotient is the round bit, and ties go to even as in ``hw.fixedpoint``;
3. saturation to ``NARROW_BITS`` and the rounding increment, then (a cycle later) the
   zero point and the clamp, into the output beat.

The accumulator beat is read where it waits on ``accumulators`` (a stream's payload holds
until taken) and taken after its last lane, so it is not copied.

A lane takes ``contract.postprocess.serial_lane_cycles(n)``, 34 + (n - 1) // 8 +
(n - 1) % 8 cycles (about 43 at a typical n of 38); where it is built (the iCEBreaker at
18 MHz) the UART link, not this, sets the pace.
"""

from amaranth import Cat, Module, Mux, Signal, signed
from amaranth.lib import data, wiring

from contract.config import check_positive_int
from contract.postprocess import SERIAL_BEAT_CYCLES, SERIAL_MAX_LANE_CYCLES
from contract.requant import ACC_WIDTH, MULTIPLIER_WIDTH, SHIFT_MIN

from .fixedpoint import saturate
from .postprocess import NARROW_BITS, bank_ports

__all__ = ["SerialRequantizer"]

#: The product register: the upper half (the partial sum, one bit wider than a value) over
#: the multiplier's unused bits, which leave at the bottom as the product's bits come in.
_HIGH = ACC_WIDTH + 1
_PRODUCT = _HIGH + MULTIPLIER_WIDTH
#: Cycles a lane takes at most, with its share of the beat's (``contract.postprocess``).
MAX_CYCLES_PER_LANE = SERIAL_MAX_LANE_CYCLES + SERIAL_BEAT_CYCLES


class SerialRequantizer(wiring.Component):
    """Requantization a lane at a time; the ports of ``PostProcessBank`` without the add
    (``operands`` is never ready, ``sums`` never valid, ``adding`` is ignored).

    Parameters
    ----------
    lanes : int
        Results per beat (the systolic array's columns).
    """

    MAX_CYCLES_PER_LANE = MAX_CYCLES_PER_LANE

    def __init__(self, *, lanes):
        self.lanes = check_positive_int("lanes", lanes, maximum=256)
        self.residual_add = False
        super().__init__(bank_ports(lanes))

    def elaborate(self, platform):
        m = Module()
        lanes = self.lanes
        # The beat is read where it waits: a stream's payload holds until it is taken,
        # and it is taken once its last lane is done.
        acc_beat = self.accumulators.payload
        beat_last = Signal()
        lane = Signal(range(lanes))
        product = Signal(_PRODUCT)  # bit patterns; read as signed where it is a number
        left = Signal(range(max(MULTIPLIER_WIDTH, 64) + 1))  # multiply steps or shift bits
        sticky = Signal()
        beat_y = Signal(data.ArrayLayout(signed(8), lanes))

        value = Signal(signed(ACC_WIDTH))  # acc + bias, wrapping like the golden model
        m.d.comb += value.eq(acc_beat.acc[lane] + self.bias[lane])
        amount = self.shift[lane]
        amount = Mux(amount < SHIFT_MIN, SHIFT_MIN, amount)

        high = product[MULTIPLIER_WIDTH:].as_signed()
        # One multiply step: add the value when the multiplier's next bit is set, then
        # shift the whole register right by one (the sum's low bit joins the product's).
        total = Signal(signed(_HIGH + 1))
        m.d.comb += total.eq(high + Mux(product[0], value, 0))
        multiplied = Cat(product[1:MULTIPLIER_WIDTH], total)
        # The product as a number, and the register shifted right (arithmetically). Once
        # n - 1 bits have left, the one-bit shift is the quotient and bit 0 the round bit.
        whole = product.as_signed()
        quotient, by_eight = whole >> 1, whole >> 8

        # Saturated before the rounding increment (as ``hw.fixedpoint``'s ``narrow``):
        # no 64-bit adder, and a value past the narrow range stays past the clamp.
        round_up = product[0] & (sticky | quotient[0])
        narrowed = Signal(signed(NARROW_BITS + 1))
        biased = narrowed + self.params.zero_point
        clamped = Mux(biased < self.params.lo, self.params.lo,
                      Mux(biased > self.params.hi, self.params.hi, biased))

        m.d.comb += [self.operands.ready.eq(0), self.sums.valid.eq(0),
                     self.results.payload.y.eq(beat_y)]
        with m.FSM():
            with m.State("WAIT"):
                with m.If(self.accumulators.valid):
                    m.d.sync += lane.eq(0)
                    m.next = "LOAD"
            with m.State("LOAD"):
                # The multiplier in the low bits, an empty partial sum above it.
                m.d.sync += [product.eq(self.multiplier[lane]), left.eq(MULTIPLIER_WIDTH),
                             sticky.eq(0)]
                m.next = "MULTIPLY"
            with m.State("MULTIPLY"):
                m.d.sync += [product.eq(multiplied), left.eq(left - 1)]
                with m.If(left == 1):
                    m.d.sync += left.eq(amount - 1)
                    m.next = "SHIFT"
            with m.State("SHIFT"):
                # n - 1 bits leave, into the sticky bit; the round bit is then bit 0.
                with m.If(left >= 8):
                    m.d.sync += [product.eq(by_eight), left.eq(left - 8),
                                 sticky.eq(sticky | product[:8].any())]
                with m.Elif(left != 0):
                    m.d.sync += [product.eq(quotient), left.eq(left - 1),
                                 sticky.eq(sticky | product[0])]
                with m.Else():
                    m.d.sync += narrowed.eq(saturate(quotient, NARROW_BITS) + round_up)
                    m.next = "WRITE"
            with m.State("WRITE"):
                # The zero point and the clamp, a cycle after the rounding.
                m.d.sync += beat_y[lane].eq(clamped[:8])
                with m.If(lane == lanes - 1):
                    m.d.comb += self.accumulators.ready.eq(1)
                    m.d.sync += beat_last.eq(acc_beat.last)
                    m.next = "OFFER"
                with m.Else():
                    m.d.sync += lane.eq(lane + 1)
                    m.next = "LOAD"
            with m.State("OFFER"):
                m.d.comb += [self.results.valid.eq(1),
                             self.results.payload.last.eq(beat_last)]
                with m.If(self.results.ready):
                    m.next = "WAIT"
        return m
