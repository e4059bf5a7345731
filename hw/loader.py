"""The loader: the host-to-device word stream, turned into the beats of whatever the
sequencer's phase says is arriving.

```
              ┌─ PARAMS ───────────► params  (one column tile's bias/M/n, param_words(C))
h2c words ──► gather ─ *_WEIGHTS ──► weights (C int8, weight_words(C))
   │          └─ STREAM ─ ADD ─────► pairs   (C bytes of a, C of b, add_words(C))
   │                     POOL ─────► pixels  (C int8, output_words(C))
   └─ ACTIVATIONS (one word a beat, straight through) ─► acts
```

Words are gathered into an entry of as many words as the phase's beat needs; the entry goes
out when full, and the next entry's first word is taken in the cycle the full one goes out
(its word slot is written at the clock edge, after the consumer has read the entry), so an
entry of n words takes n cycles, not n + 1. Not after the phase's last entry (``load_last``
while one waits): the word after it belongs to the next phase, which the sequencer starts
a cycle later. Each output's ``valid`` is a flip-flop,
set by the word that completes an entry (the phase is stable while one gathers), so the
handshake the sequencer counts (``entry_taken``) starts from registers rather than from the
sequencer's own state through this decode (the ECP5 board build's critical path).
``load_last`` from the sequencer becomes each
beat's ``last``; ``weights_held`` stops weights until the sequencer knows the first tile's
size. ``clear`` drops a partly gathered or waiting entry (the top holds it while the
sequencer is idle, and on a soft reset).
"""

from amaranth import Cat, Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from contract.streams import WORD_BITS, add_words, output_words, param_words, weight_words

from .conv_engine import activation_load_layout, param_load_layout, weight_load_layout
from .csr import word_layout
from .maxpool import pixel_layout
from .postprocess import operand_pair_layout
from .sequencer import Phase


class HostLoader(wiring.Component):
    """Host words into parameter, weight, activation, operand-pair and pixel beats.

    Parameters
    ----------
    cols : int
        Lanes (output channels) of the array, which size every beat but activations.
    """

    def __init__(self, cols):
        self.cols = cols
        super().__init__({
            "h2c": In(stream.Signature(word_layout())),
            "phase": In(Phase),
            "adding": In(1),        # STREAM carries ADD operand pairs, else POOL pixels
            "load_last": In(1),
            "phase_last": In(1),    # the entry out (or being gathered) ends the phase
            "weights_held": In(1),
            "clear": In(1),
            "params": Out(stream.Signature(param_load_layout(cols))),
            "weights": Out(stream.Signature(weight_load_layout(cols))),
            "acts": Out(stream.Signature(activation_load_layout())),
            "pairs": Out(stream.Signature(operand_pair_layout(cols))),
            "pixels": Out(stream.Signature(pixel_layout(cols))),
            "entry_taken": Out(1),  # a gathered entry went out
            "act_taken": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        cols, phase = self.cols, self.phase
        per_param, per_weight = param_words(cols), weight_words(cols)
        per_pixel, per_pair = output_words(cols), add_words(cols)
        widest = max(per_param, per_weight, per_pair, per_pixel)
        gathered = Signal(WORD_BITS * widest)
        count = Signal(range(widest + 1))
        needed = Signal.like(count)
        is_weights = (phase == Phase.FIRST_WEIGHTS) | (phase == Phase.REST_WEIGHTS)
        with m.If(phase == Phase.PARAMS):
            m.d.comb += needed.eq(per_param)
        with m.Elif(is_weights):
            m.d.comb += needed.eq(per_weight)
        with m.Else():
            m.d.comb += needed.eq(Mux(self.adding, per_pair, per_pixel))
        outputs = (self.params, self.weights, self.pairs, self.pixels)
        full = Cat(out.valid for out in outputs).any()  # a gathered entry waits
        streaming = phase == Phase.STREAM
        destined = ((phase == Phase.PARAMS), is_weights, streaming & self.adding,
                    streaming & ~self.adding)

        gathering = (phase == Phase.PARAMS) | (phase == Phase.REST_WEIGHTS) \
            | streaming | ((phase == Phase.FIRST_WEIGHTS) & ~self.weights_held)
        taken = Signal()
        m.d.comb += taken.eq(Cat(out.valid & out.ready for out in outputs).any())
        with m.If(gathering):
            m.d.comb += self.h2c.ready.eq(~full | (taken & ~self.phase_last))
        with m.Elif(phase == Phase.ACTIVATIONS):
            m.d.comb += self.h2c.ready.eq(self.acts.ready)
        # A word taken while the full entry goes out starts the next entry.
        slot = Mux(taken, 0, count)
        with m.If(self.h2c.valid & self.h2c.ready & gathering):
            m.d.sync += [gathered.word_select(slot, WORD_BITS).eq(self.h2c.payload.data),
                         count.eq(slot + 1)]
            with m.If(slot + 1 == needed):
                m.d.sync += [out.valid.eq(is_for)
                             for out, is_for in zip(outputs, destined, strict=True)]
            with m.Elif(taken):
                m.d.sync += [out.valid.eq(0) for out in outputs]
        with m.Elif(taken):
            m.d.sync += [count.eq(0), *(out.valid.eq(0) for out in outputs)]
        with m.If(self.clear):
            m.d.sync += [count.eq(0), *(out.valid.eq(0) for out in outputs)]

        m.d.comb += [
            self.params.payload.word.eq(gathered),
            self.params.payload.last.eq(self.load_last),
            self.weights.payload.w.eq(gathered),
            self.weights.payload.last.eq(self.load_last),
            self.pairs.payload.a.eq(gathered[:8 * cols]),
            self.pairs.payload.b.eq(gathered[8 * cols:16 * cols]),
            self.pairs.payload.last.eq(self.load_last),
            self.pixels.payload.x.eq(gathered[:8 * cols]),
            self.pixels.payload.last.eq(self.load_last),
            # Activations: a whole word (four bytes) a cycle, straight into the engine,
            # which is already running and reads each word as soon as it is written.
            self.acts.payload.x.eq(self.h2c.payload.data),
            self.acts.payload.last.eq(self.load_last),
            self.acts.valid.eq((phase == Phase.ACTIVATIONS) & self.h2c.valid),
            self.act_taken.eq(self.acts.valid & self.acts.ready),
        ]
        m.d.comb += self.entry_taken.eq(taken)
        return m
