"""One processing element of the output-stationary systolic array."""

from amaranth import Module, Mux, Signal, signed
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from contract.config import check_positive_int

from .multiplier import Int8Multiplier


class ProcessingElement(wiring.Component):
    """Multiply-accumulate one int8 pair per enabled cycle into a local accumulator.

    Operands and the beat's control bits (``valid``, ``last``) pass through registers to
    the neighbours (``a`` and the control bits to the right, ``b`` downwards). The product
    reaches the accumulator ``Int8Multiplier.latency`` cycles later, together with a
    delayed copy of the control bits. A beat with ``last`` ends a tile: the finished sum
    moves to ``hold``, where it stays until the next tile ends, while the accumulator
    starts the next tile from zero with no idle cycle.

    Parameters
    ----------
    acc_width : int
        Accumulator and result width in bits; sums wrap in two's complement.
    """

    def __init__(self, *, acc_width=32):
        self.acc_width = check_positive_int("acc_width", acc_width, maximum=64)
        super().__init__({
            "en": In(1),
            "a_in": In(signed(8)),
            "b_in": In(signed(8)),
            "valid_in": In(1),
            "last_in": In(1),
            "a_out": Out(signed(8)),
            "b_out": Out(signed(8)),
            "valid_out": Out(1),
            "last_out": Out(1),
            # High when the next enabled edge writes `hold` (the tile ends here).
            "capture": Out(1),
            # What `capture` becomes after the next enabled edge: lets the array compute
            # its stall one cycle ahead, into a register (see SystolicArray).
            "capture_next": Out(1),
            "hold": Out(signed(acc_width)),
        })

    def elaborate(self, platform):
        m = Module()
        m.submodules.mul = mul = Int8Multiplier()
        m.d.comb += [mul.a.eq(self.a_in), mul.b.eq(self.b_in), mul.en.eq(self.en)]

        # Control bits delayed to line up with the product.
        valids, lasts = [self.valid_in], [self.last_in]
        for stage in range(mul.latency):
            valid = Signal(name=f"valid_d{stage + 1}")
            last = Signal(name=f"last_d{stage + 1}")
            with m.If(self.en):
                m.d.sync += [valid.eq(valids[-1]), last.eq(lasts[-1])]
            valids.append(valid)
            lasts.append(last)
        valid_d, last_d = valids[-1], lasts[-1]
        # `capture` and `capture_next` come straight from flip-flops (the AND one stage
        # earlier): they feed the array's stall logic, its critical path.
        capture = Signal()
        capture_next = Signal()
        with m.If(self.en):
            m.d.sync += capture.eq(valids[-2] & lasts[-2])
            if mul.latency >= 2:
                m.d.sync += capture_next.eq(valids[-3] & lasts[-3])
        if mul.latency < 2:
            capture_next = valids[-2] & lasts[-2]
        m.d.comb += [self.capture.eq(capture), self.capture_next.eq(capture_next)]

        acc = Signal(signed(self.acc_width))
        fresh = Signal(init=1)  # the next valid product starts a new tile
        total = Signal(signed(self.acc_width))
        m.d.comb += total.eq(Mux(fresh, 0, acc) + mul.p)
        with m.If(self.en):
            m.d.sync += [
                self.a_out.eq(self.a_in),
                self.b_out.eq(self.b_in),
                self.valid_out.eq(self.valid_in),
                self.last_out.eq(self.last_in),
            ]
            with m.If(valid_d):
                m.d.sync += [acc.eq(total), fresh.eq(last_d)]
                with m.If(last_d):
                    m.d.sync += self.hold.eq(total)
        return m
