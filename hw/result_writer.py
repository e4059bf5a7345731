"""The output writer: result beats of C int8 (from the engine, the pool or the adder) into
device-to-host words, ``output_words(C)`` a beat, the lowest byte first, ``last`` on the
pass's final word.

A beat goes straight into the sending register when that is empty or sends its last word
this cycle, and otherwise waits in a spare register, so beats leave back to back, one
every ``output_words(C)`` cycles (a 1x1 layer with 16 input channels yields one every 2
cycles on the 8x8 array); ``ready`` is the spare register's emptiness, a flip-flop.
``hold_last`` keeps the final word back while the host is still sending
(a stride that skips the last rows ends the computation before every activation word is
read), so no input is left on the stream when the pass reports done. ``done`` pulses as the
final word goes; ``clear`` (soft reset) drops a beat half sent.
"""

from amaranth import Module, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from contract.streams import WORD_BITS, output_words

from .csr import word_layout
from .postprocess import output_layout


class ResultWriter(wiring.Component):
    """C-byte result beats into host words.

    Parameters
    ----------
    cols : int
        Bytes per result beat.
    """

    def __init__(self, cols):
        self.cols = cols
        super().__init__({
            # The engine's output beat; the pool's and the adder's have the same bits.
            "results": In(stream.Signature(output_layout(cols))),
            "c2h": Out(stream.Signature(word_layout())),
            "hold_last": In(1),
            "clear": In(1),
            "done": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        per_out = output_words(self.cols)
        beat = Signal(WORD_BITS * per_out)
        words_left = Signal(range(per_out + 1))
        final_beat = Signal()
        last_word = final_beat & (words_left == 1)
        spare = Signal.like(self.results.payload, name="spare")
        spare_full = Signal()
        sent = Signal()
        # The sending register is free next cycle: empty, or its last word goes now.
        free = Signal()
        m.d.comb += [
            self.results.ready.eq(~spare_full),
            self.c2h.valid.eq((words_left != 0) & ~(last_word & self.hold_last)),
            self.c2h.payload.data.eq(beat[:WORD_BITS]),
            self.c2h.payload.last.eq(last_word),
            sent.eq(self.c2h.valid & self.c2h.ready),
            self.done.eq(sent & last_word),
            free.eq((words_left == 0) | ((words_left == 1) & sent)),
        ]
        with m.If(sent):
            m.d.sync += [beat.eq(beat >> WORD_BITS), words_left.eq(words_left - 1)]
        # (`ready` is low while the spare is full, so at most one of the two loads below.)
        with m.If(spare_full & free):
            m.d.sync += [beat.eq(spare.y), words_left.eq(per_out),
                         final_beat.eq(spare.last), spare_full.eq(0)]
        with m.If(self.results.valid & self.results.ready):
            with m.If(free):
                m.d.sync += [beat.eq(self.results.payload.y), words_left.eq(per_out),
                             final_beat.eq(self.results.payload.last)]
            with m.Else():
                m.d.sync += [spare.eq(self.results.payload), spare_full.eq(1)]
        with m.If(self.clear):
            m.d.sync += [words_left.eq(0), spare_full.eq(0)]
        return m
