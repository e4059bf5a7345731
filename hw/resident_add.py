"""The resident player's residual add (a build with ``resident_add``): a ``PASS_ADD``
record's result words, each added lane by lane to its skip operand's word before it is
stored (``contract/resident.py``).

```
writer's write (x, a) ─► read b at x + offset ─(data memory latency)─► 4 lanes:
   a1 = rnd((a - z_a) << 20, M_a, n_a), b1 = rnd((b - z_b) << 20, M_b, n_b)
   y  = clamp(z_y + rnd(a1 + b1, M_y, n_y), lo, hi)         ─► write (x, y)
```

``models.eltwise.add``'s arithmetic on the four int8 lanes of a word (a lane of padding
gives a byte of padding). A fixed-latency pipeline that takes a word every cycle: a pass's
results come in bursts of a pixel group's words, and its reads borrow the data memory's
read port from the player's reader for that cycle (``read``), so it never waits.
"""

from amaranth import Cat, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from contract.streams import ACTIVATIONS_PER_WORD, WORD_BITS
from models.eltwise import ADD_LEFT_SHIFT

from .fixedpoint import rounding_shift
from .postprocess import add_params_layout

__all__ = ["ResidentAdder"]

#: Register stages after the operand's word arrives: the input rescales (2), the sum's
#: rescale (2), the zero point and clamp (1).
COMPUTE_STAGES = 5
#: ``|a1|, |b1| < 2**27`` (``models.eltwise``): their sum fits 29 signed bits.
_OPERAND_BITS = 28


class ResidentAdder(wiring.Component):
    """Adds the skip operand to result words on their way into the data memory.

    Ports: ``valid``/``addr``/``a``/``offset`` (a result word to store at ``addr``, its
    operand ``offset`` words on); ``rd_addr``/``read`` (the operand's read, in the same
    cycle) and ``rd_data`` (its word, ``read_latency`` cycles later); ``params`` (the
    ``ADD_*`` values); ``w_en``/``w_addr``/``w_data`` (the sum's registered write, a fixed
    :attr:`latency` after ``valid``); ``busy`` while a word is on its way.

    Parameters
    ----------
    read_latency : int
        Cycles from an address on the data memory's read port to its word.
    """

    valid: In(1)
    addr: In(32)
    a: In(WORD_BITS)
    offset: In(32)
    params: In(add_params_layout())
    rd_addr: Out(32)
    read: Out(1)
    rd_data: In(WORD_BITS)
    w_en: Out(1)
    w_addr: Out(32)
    w_data: Out(WORD_BITS)
    busy: Out(1)

    def __init__(self, *, read_latency):
        if not isinstance(read_latency, int) or read_latency < 1:
            raise ValueError(f"read_latency must be a positive integer, not {read_latency!r}")
        self.read_latency = read_latency
        #: Cycles from ``valid`` to the write's ``w_en``.
        self.latency = read_latency + COMPUTE_STAGES
        super().__init__()

    def elaborate(self, platform):
        m = Module()
        p = self.params
        m.d.comb += [self.rd_addr.eq(self.addr + self.offset), self.read.eq(self.valid)]
        # The word's address and its a operand travel beside the read, then the lanes.
        valid, addr, a = self.valid, self.addr, self.a
        in_flight = []
        for stage in range(self.latency):
            next_valid = Signal(name=f"valid_{stage + 1}")
            next_addr = Signal(32, name=f"addr_{stage + 1}")
            m.d.sync += [next_valid.eq(valid), next_addr.eq(addr)]
            if stage < self.read_latency:
                next_a = Signal(WORD_BITS, name=f"a_{stage + 1}")
                m.d.sync += next_a.eq(a)
                a = next_a
            valid, addr = next_valid, next_addr
            in_flight.append(valid)
        a_word, b_word = a, self.rd_data  # at read_latency
        lanes = []
        for lane in range(ACTIVATIONS_PER_WORD):
            a_lane = a_word.word_select(lane, 8).as_signed()
            b_lane = b_word.word_select(lane, 8).as_signed()
            a1 = rounding_shift(m, (a_lane - p.a_zero_point) << ADD_LEFT_SHIFT,
                                p.a_multiplier, p.a_shift, en=1, name=f"lane{lane}_a")
            b1 = rounding_shift(m, (b_lane - p.b_zero_point) << ADD_LEFT_SHIFT,
                                p.b_multiplier, p.b_shift, en=1, name=f"lane{lane}_b")
            total = a1[:_OPERAND_BITS].as_signed() + b1[:_OPERAND_BITS].as_signed()
            y = rounding_shift(m, total, p.y_multiplier, p.y_shift, en=1,
                               name=f"lane{lane}_y")
            shifted = Signal.like(y, name=f"lane{lane}_shifted")
            m.d.comb += shifted.eq(y + p.y_zero_point)
            out = Signal(8, name=f"lane{lane}_out")
            m.d.sync += out.eq(Mux(shifted < p.lo, p.lo, Mux(shifted > p.hi, p.hi, shifted)))
            lanes.append(out)
        m.d.comb += [self.w_en.eq(valid), self.w_addr.eq(addr), self.w_data.eq(Cat(*lanes)),
                     self.busy.eq(Cat(*in_flight).any())]
        return m
