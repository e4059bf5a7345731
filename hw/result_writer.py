"""The output writer: result beats of C int8 (from the engine, the pool or the adder) into
device-to-host words, ``output_words(C)`` a beat, the lowest byte first, ``last`` on the
pass's final word.

A beat is taken only once the previous one's words are all sent (one beat register, no
FIFO: the array produces at most one beat per pixel, and a beat takes ``ceil(C / 4)``
cycles to send). ``hold_last`` keeps the final word back while the host is still sending
(a stride that skips the last rows ends the computation before every activation word is
read), so no input is left on the stream when the pass reports done. ``done`` pulses as the
final word goes; ``clear`` (soft reset) drops a beat half sent.
"""

from amaranth import Module, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from contract.streams import WORD_BITS, output_words

from .host_words import word_layout
from .requant import output_layout


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
        m.d.comb += [
            self.results.ready.eq(words_left == 0),
            self.c2h.valid.eq((words_left != 0) & ~(last_word & self.hold_last)),
            self.c2h.payload.data.eq(beat[:WORD_BITS]),
            self.c2h.payload.last.eq(last_word),
            self.done.eq(self.c2h.valid & self.c2h.ready & last_word),
        ]
        with m.If(self.results.valid & self.results.ready):
            m.d.sync += [beat.eq(self.results.payload.y), words_left.eq(per_out),
                         final_beat.eq(self.results.payload.last)]
        with m.If(self.c2h.valid & self.c2h.ready):
            m.d.sync += [beat.eq(beat >> WORD_BITS), words_left.eq(words_left - 1)]
        with m.If(self.clear):
            m.d.sync += words_left.eq(0)
        return m
