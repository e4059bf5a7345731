"""Control of a fixed-latency streaming pipeline that stalls as a whole."""

from amaranth import Cat, Signal


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
