"""A UART (8 data bits, no parity, 1 stop bit) with a fixed clock divisor.

``divisor`` is clock cycles per bit: 50 MHz / 3 Mbaud is not whole (16.67), so a board
top picks a clock that divides evenly, or accepts the error (at most half a cycle per
bit, 3% over a 10-bit character for a divisor of 17). The receiver samples each bit in
the middle, found from the start bit's falling edge; a byte with a low stop bit is
dropped and counted as a framing error, and a byte that arrives while the previous one
was not yet taken is dropped and counted as an overrun: the link protocol
(``contract/link.py``) turns both into a NAK or a timeout and a retry.
"""

from amaranth import Cat, Module, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out


def _check_divisor(divisor):
    if not isinstance(divisor, int) or isinstance(divisor, bool) or divisor < 2:
        raise ValueError(f"divisor must be an integer >= 2 (clock cycles per bit), "
                         f"not {divisor!r}")
    return divisor


class UartTx(wiring.Component):
    """Bytes on ``data`` go out on ``tx``, least significant bit first."""

    data: In(stream.Signature(8))
    tx: Out(1, init=1)

    def __init__(self, *, divisor):
        self.divisor = _check_divisor(divisor)
        super().__init__()

    def elaborate(self, platform):
        m = Module()
        timer = Signal(range(self.divisor))
        bits = Signal(10)     # stop, data[7:0], start: shifted out from bit 0
        left = Signal(range(11))
        m.d.comb += self.data.ready.eq(left == 0)
        with m.If(self.data.valid & self.data.ready):
            m.d.sync += [bits.eq(Cat(0, self.data.payload, 1)), left.eq(10),
                         timer.eq(self.divisor - 1), self.tx.eq(0)]
        with m.Elif(left != 0):
            with m.If(timer == 0):
                m.d.sync += [timer.eq(self.divisor - 1), left.eq(left - 1),
                             bits.eq(bits >> 1)]
                # The next bit goes out now; after the stop bit the line idles high.
                m.d.sync += self.tx.eq(1)
                with m.If(left != 1):
                    m.d.sync += self.tx.eq(bits[1])
            with m.Else():
                m.d.sync += timer.eq(timer - 1)
        return m


class UartRx(wiring.Component):
    """Characters on ``rx`` come out as bytes on ``data``.

    ``framing_errors`` and ``overruns`` count dropped bytes (they wrap at 2^16).
    """

    rx: In(1, init=1)
    data: Out(stream.Signature(8))
    framing_errors: Out(16)
    overruns: Out(16)

    def __init__(self, *, divisor):
        self.divisor = _check_divisor(divisor)
        super().__init__()

    def elaborate(self, platform):
        m = Module()
        # Two flip-flops against metastability: rx comes from another clock domain.
        sync_1, line = Signal(init=1), Signal(init=1)
        m.d.sync += [sync_1.eq(self.rx), line.eq(sync_1)]
        timer = Signal(range(self.divisor + self.divisor // 2 + 1))
        shift = Signal(8)
        bit = Signal(range(9))
        with m.If(self.data.valid & self.data.ready):
            m.d.sync += self.data.valid.eq(0)

        with m.FSM(name="uart_rx"):
            with m.State("IDLE"):
                with m.If(~line):
                    # The middle of data bit 0 is one and a half bits after the edge.
                    m.d.sync += [timer.eq(self.divisor + self.divisor // 2 - 1), bit.eq(0)]
                    m.next = "DATA"
            with m.State("DATA"):
                with m.If(timer == 0):
                    m.d.sync += [shift.eq(Cat(shift[1:], line)), bit.eq(bit + 1),
                                 timer.eq(self.divisor - 1)]
                    with m.If(bit == 7):
                        m.next = "STOP"
                with m.Else():
                    m.d.sync += timer.eq(timer - 1)
            with m.State("STOP"):
                with m.If(timer == 0):
                    with m.If(~line):
                        m.d.sync += self.framing_errors.eq(self.framing_errors + 1)
                        m.next = "BREAK"
                    with m.Elif(self.data.valid & ~self.data.ready):
                        m.d.sync += self.overruns.eq(self.overruns + 1)
                        m.next = "IDLE"
                    with m.Else():
                        m.d.sync += [self.data.payload.eq(shift), self.data.valid.eq(1)]
                        m.next = "IDLE"
                with m.Else():
                    m.d.sync += timer.eq(timer - 1)
            with m.State("BREAK"):
                # After a framing error, wait for the line to idle before the next start.
                with m.If(line):
                    m.next = "IDLE"
        return m
