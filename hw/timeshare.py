"""Time-sharing a few arithmetic units between the lanes of a wide stream.

The post-processing blocks take one beat of ``lanes`` values per transfer but own only
``units`` copies of their multiplier datapath (``units`` divides ``lanes``). A beat is cut
into ``lanes // units`` groups that enter a fixed-latency pipeline one per cycle, lowest
lanes first; the results are written into the output beat group by group, and the beat is
offered once its last group is in. The array produces at most R*C results every K cycles,
so a rescaler a few lanes wide keeps up with it at a fraction of the multipliers
(docs/conv-engine.md, "Post-processing").

A beat is taken into a holding register (:attr:`TimeShare.beat`) as soon as the previous
one has sent its last group, so the producer can prepare the next beat while this one is
cut up (the top's host-word gatherer would otherwise wait out every beat). The sink's
``ready`` depends on the downstream ``ready`` alone, never on ``valid``.
"""

from amaranth import Signal
from amaranth.lib import data, stream

from .pipeline import lockstep_pipeline

__all__ = ["TimeShare"]


class TimeShare:
    """Control of a ``units``-wide pipeline serving a ``lanes``-wide stream.

    Build it inside ``elaborate``; then compute the datapath from :meth:`select` of
    :attr:`beat`'s lanes (the group now entering) with ``step`` as the enable of every
    register stage, and give :meth:`collect` each unit's result as it leaves stage
    ``latency``; with the holding and the collector registers the block's latency is
    ``latency + 2`` cycles.

    Attributes
    ----------
    groups : int
        Cycles per beat (``lanes // units``).
    beat : View
        The beat being cut up (the sink's payload, registered).
    phase : Signal
        Index of the group entering the pipeline.
    step : Signal
        Enable of the data stages.
    """

    def __init__(self, m, sink, source, *, lanes, units, latency):
        if lanes % units:
            raise ValueError(f"units ({units}) must divide lanes ({lanes})")
        self.m, self.sink, self.source = m, sink, source
        self.lanes, self.units, self.groups = lanes, units, lanes // units
        flag = stream.Signature(data.StructLayout({"last": 1}))
        items_in, self._items_out = flag.create(), flag.create()
        self.beat = Signal.like(sink.payload, name="beat")
        held = Signal(name="beat_held")
        self.phase = Signal(range(self.groups), name="phase_in")
        self._count = Signal(range(self.groups), name="phase_out")
        final_in = self.phase == self.groups - 1
        m.d.comb += [
            items_in.valid.eq(held),
            items_in.payload.last.eq(self.beat.last & final_in),
            sink.ready.eq(~held | (items_in.ready & final_in)),
        ]
        with m.If(items_in.valid & items_in.ready):
            m.d.sync += self.phase.eq(0 if self.groups == 1 else
                                      (self.phase + 1) % self.groups)
            with m.If(final_in):
                m.d.sync += held.eq(0)
        with m.If(sink.valid & sink.ready):
            m.d.sync += [self.beat.eq(sink.payload), held.eq(1)]
        self.step = lockstep_pipeline(m, items_in, self._items_out, latency)

        # The collector: group results go into the output beat's register in place.
        out = self._items_out
        self._take = Signal(name="collect")
        m.d.comb += [out.ready.eq(~source.valid | source.ready),
                     self._take.eq(out.valid & out.ready)]
        with m.If(self._take):
            with m.If(self._count == self.groups - 1):
                m.d.sync += [source.valid.eq(1), source.payload.last.eq(out.payload.last),
                             self._count.eq(0)]
            with m.Else():
                m.d.sync += self._count.eq(self._count + 1)
                with m.If(source.ready):
                    m.d.sync += source.valid.eq(0)
        with m.Elif(source.ready):
            m.d.sync += source.valid.eq(0)

    def select(self, lanes, name):
        """Per unit, the element of the ``lanes`` array (a list of values or a view) that
        enters the pipeline this cycle, as a signal of the elements' shape."""
        picked = []
        for unit in range(self.units):
            value = Signal.like(lanes[unit], name=f"{name}{unit}")
            with self.m.Switch(self.phase):
                for group in range(self.groups):
                    with self.m.Case(group):
                        self.m.d.comb += value.eq(lanes[group * self.units + unit])
            picked.append(value)
        return picked

    def collect(self, results, target):
        """Write each unit's result (stage ``latency``) into its lane of ``target``, the
        source payload's array of ``lanes`` elements."""
        with self.m.If(self._take):
            with self.m.Switch(self._count):
                for group in range(self.groups):
                    with self.m.Case(group):
                        for unit, value in enumerate(results):
                            self.m.d.sync += target[group * self.units + unit].eq(value)
