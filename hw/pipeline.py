"""Stream pipeline helpers: a skid buffer that registers ``ready``, and the control of a
fixed-latency pipeline that stalls as a whole."""

from amaranth import Cat, Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out


class SkidBuffer(wiring.Component):
    """A two-entry register stage whose ``sink.ready`` is a flip-flop.

    ``source`` is a register (valid and payload). When ``source`` is held and a beat
    arrives, that beat waits in a second register (the skid) and ``sink.ready`` falls the
    cycle after; so no combinational path runs from ``source.ready`` back to ``sink``. The
    producer behind it then moves on its own registers instead of the consumer's stall
    logic, which on ECP5 was the board build's critical path. One beat per cycle
    in steady state; one cycle of latency.
    """

    def __init__(self, layout):
        super().__init__({"sink": In(stream.Signature(layout)),
                          "source": Out(stream.Signature(layout))})

    def elaborate(self, platform):
        m = Module()
        # The payload registers need no reset (read only with their valid): the reset then
        # reaches only the two valid flags.
        skid = Signal.like(self.sink.payload, reset_less=True)
        payload = Signal.like(self.sink.payload, reset_less=True)
        skid_full = Signal()
        m.d.comb += [self.sink.ready.eq(~skid_full), self.source.payload.eq(payload)]
        with m.If(~self.source.valid | self.source.ready):
            m.d.sync += [self.source.valid.eq(skid_full | self.sink.valid),
                         payload.eq(Mux(skid_full, skid, self.sink.payload)),
                         skid_full.eq(0)]
        with m.Elif(self.sink.valid & ~skid_full):
            m.d.sync += [skid.eq(self.sink.payload), skid_full.eq(1)]
        return m


def skid_between(m, name, producer, consumer, *, registered=True):
    """Connect the stream ``producer`` to ``consumer`` through a :class:`SkidBuffer`,
    added to ``m`` as submodule ``name``; directly when not ``registered`` (a build
    without the registers that only buy clock speed, ``ConvEngineConfig.pipelined``)."""
    wiring.connect(m, skid_after(m, name, producer, registered=registered), consumer)


def skid_after(m, name, producer, *, registered=True):
    """The stream ``producer`` after a :class:`SkidBuffer` added to ``m`` as submodule
    ``name``, or ``producer`` itself when not ``registered``."""
    if not registered:
        return producer
    m.submodules[name] = skid = SkidBuffer(producer.payload.shape())
    wiring.connect(m, producer, skid.sink)
    return skid.source


def lockstep_pipeline(m, sink, source, latency):
    """Carry ``valid`` and ``payload.last`` from ``sink`` to ``source`` through ``latency``
    register stages and return the enable that every data stage must use.

    The pipeline moves while its output register is empty or being read, so it delivers
    one beat per cycle under a ready consumer and never drops one under backpressure.
    ``sink.ready`` is ``advance``: it depends on ``source.ready`` but never on
    ``sink.valid``, as the stream rules require.
    """
    advance = Signal()
    m.d.comb += [advance.eq(~source.valid | source.ready), sink.ready.eq(advance)]
    valid, last = sink.valid, sink.payload.last
    valids = [valid]
    for stage in range(latency):
        next_valid = Signal(name=f"valid_s{stage + 1}")
        next_last = Signal(name=f"last_s{stage + 1}")
        with m.If(advance):
            m.d.sync += [next_valid.eq(valid), next_last.eq(last)]
        valid, last = next_valid, next_last
        valids.append(valid)
    m.d.comb += [source.valid.eq(valid), source.payload.last.eq(last)]
    # Data stages hold while the pipeline is empty: nothing they compute is used then, and
    # the Verilator twin skips their (wide, multiplier-heavy) logic when they do not step.
    step = Signal()
    m.d.comb += step.eq(advance & Cat(*valids[:-1]).any())
    return step
