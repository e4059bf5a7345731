"""The resident player's segment engines: a walker over a segment's word addresses
(``contract.resident``), a reader that streams them out of a memory and a writer that fills
them from a stream.

Both engines take their segments one after the other, each fetched from the program memory
by the player's fetcher (``hw/resident.py``) into a register of :data:`SEGMENT_LAYOUT`, or
given directly (the host's load and read-back: one plain run of words). Every address is
checked against the memory's depth before it is used; a bad one stops the engine with
``error`` set instead of wrapping onto another word.
"""

from amaranth import Cat, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.fifo import SyncFIFOBuffered
from amaranth.lib.wiring import In, Out

from contract.resident import HEADER_COUNT_MAX, HOST_BASE, SEGMENT_FIELDS, SEGMENT_WORDS
from contract.streams import WORD_BITS

from .csr import word_layout

#: One segment as the engines hold it: its program words in order, 32 bits each (strides
#: are added modulo 2**32, which is two's complement arithmetic without a sign).
SEGMENT_LAYOUT = data.StructLayout({name: 32 for name, _ in SEGMENT_FIELDS})
#: Words the reader's output FIFO holds beyond the reads in flight: one leaving, two to
#: spare, so that it takes a word a cycle whatever the read port's latency.
READ_FIFO_SPARE = 3


def _data(shape, **kwargs):
    """A register the engines load before they read it: no reset (see the walker)."""
    return Signal(shape, reset_less=True, **kwargs)


class SegmentWalker(wiring.Component):
    """The addresses of one segment, one item per ``step``: ``addr`` for a chunk word or
    ``gap`` for a gap word.

    ``start`` copies nothing: the walker reads ``segment`` throughout, so it must hold
    still until ``active`` falls. An empty segment (a count of 0) is never ``active``.
    """

    segment: In(SEGMENT_LAYOUT)
    start: In(1)
    step: In(1)
    active: Out(1)
    addr: Out(32)
    gap: Out(1)

    def elaborate(self, platform):
        m = Module()
        seg = self.segment
        # Down counters of what is left of the chunk, the gap, the row and the rows. Like
        # every data register of the engines, they are loaded before they are used and so
        # need no reset: the reset (the PLL's lock, the host's abort, the player's engine
        # reset, ORed) then reaches only the few control registers, not hundreds of
        # flip-flops across the die (the 85F resident build's critical path).
        chunk_left, gap_left = _data(32), _data(32)
        inner_left, outer_left = _data(32), _data(32)
        addr, chunk_base, row_base = _data(32), _data(32), _data(32)
        gap = chunk_left == 0
        unit_end = Mux(gap, gap_left == 1, (chunk_left == 1) & (gap_left == 0))
        m.d.comb += [self.addr.eq(addr), self.gap.eq(gap)]

        with m.If(self.start):
            empty = ((seg.outer_count == 0) | (seg.inner_count == 0)
                     | ((seg.chunk_words == 0) & (seg.gap_words == 0)))
            m.d.sync += [self.active.eq(~empty), chunk_left.eq(seg.chunk_words),
                         gap_left.eq(seg.gap_words), inner_left.eq(seg.inner_count),
                         outer_left.eq(seg.outer_count), addr.eq(seg.base),
                         chunk_base.eq(seg.base), row_base.eq(seg.base)]
        with m.Elif(self.step & self.active):
            with m.If(gap):
                m.d.sync += gap_left.eq(gap_left - 1)
            with m.Else():
                m.d.sync += [addr.eq(addr + 1), chunk_left.eq(chunk_left - 1)]
            with m.If(unit_end):
                m.d.sync += [chunk_left.eq(seg.chunk_words), gap_left.eq(seg.gap_words)]
                with m.If(inner_left == 1):
                    with m.If(outer_left == 1):
                        m.d.sync += self.active.eq(0)
                    with m.Else():
                        row = (row_base + seg.outer_stride)[:32]
                        m.d.sync += [outer_left.eq(outer_left - 1),
                                     inner_left.eq(seg.inner_count), row_base.eq(row),
                                     chunk_base.eq(row), addr.eq(row)]
                with m.Else():
                    chunk = (chunk_base + seg.inner_stride)[:32]
                    m.d.sync += [inner_left.eq(inner_left - 1), chunk_base.eq(chunk),
                                 addr.eq(chunk)]
        return m


def _engine_ports():
    """Ports the reader and the writer share: the command, the fetcher's side, status."""
    return {
        # A command: ``seg_count`` segments whose words start at program word ``seg_ptr``,
        # or with ``direct`` one run of ``direct_count`` words from ``direct_base``.
        "start": In(1),
        "direct": In(1),
        "direct_base": In(32),
        "direct_count": In(32),
        "seg_ptr": In(32),
        "seg_count": In(range(HEADER_COUNT_MAX + 1)),
        "busy": Out(1),
        "error": Out(1),
        # The fetcher: ``need_segment`` asks for the segment at ``segment_ptr`` (``starved``:
        # the engine waits for it, having none to walk); its words arrive one by one
        # (``seg_word_valid``/``_index``), then ``seg_loaded``.
        "need_segment": Out(1),
        "starved": Out(1),
        "segment_ptr": Out(32),
        "seg_word_valid": In(1),
        "seg_word_index": In(range(SEGMENT_WORDS)),
        "seg_word": In(32),
        "seg_loaded": In(1),
    }


def _engine_control(m, engine, walker, *, on_walk, drained, on_load=None):
    """The command FSM both engines share: take a command, walk its segments one after the
    other (``on_walk(m)`` inside the walking state), then wait for ``drained``. The next
    segment is fetched while the current one is walked, so that only the first fetch
    delays the stream. ``on_load(m, segment)`` runs in the cycle a segment's walk starts.
    Returns ``(segment, draining)``: the segment being walked, and whether every segment
    has been walked (what is issued is still on its way)."""
    segment, pending = _data(SEGMENT_LAYOUT), _data(SEGMENT_LAYOUT)
    pending_valid = Signal()
    segs_left = Signal(range(HEADER_COUNT_MAX + 1))  # to walk
    fetch_left = Signal(range(HEADER_COUNT_MAX + 1))  # to fetch
    ptr = _data(32)
    m.d.comb += [walker.segment.eq(segment), engine.segment_ptr.eq(ptr)]
    with m.If(engine.seg_word_valid):
        with m.Switch(engine.seg_word_index):
            for index in range(SEGMENT_WORDS):
                with m.Case(index):
                    m.d.sync += pending.as_value()[32 * index:32 * (index + 1)].eq(
                        engine.seg_word)
    with m.If(engine.seg_loaded):
        m.d.sync += [pending_valid.eq(1), fetch_left.eq(fetch_left - 1),
                     ptr.eq(ptr + SEGMENT_WORDS)]
    last_segment = segs_left == 1

    def take_pending():
        m.d.sync += [segment.eq(pending), pending_valid.eq(0)]
        m.next = "LOADED"

    # The command is copied every idle cycle and acted on a cycle after ``start``, from
    # the copy: the player's ``start`` is decoded from its state, and must not reach the
    # enables of the wide segment registers across the die (the 85F resident build's
    # critical path). ``busy`` covers that cycle.
    fields = ("direct", "direct_base", "direct_count", "seg_ptr", "seg_count")
    command = _data(data.StructLayout({name: len(getattr(engine, name)) for name in fields}))
    with m.FSM(name="engine") as fsm:
        with m.State("IDLE"):
            m.d.sync += [getattr(command, name).eq(getattr(engine, name)) for name in fields]
            with m.If(engine.start):
                m.next = "COMMAND"
        with m.State("COMMAND"):
            m.d.sync += pending_valid.eq(0)
            m.next = "IDLE"
            with m.If(command.direct):
                m.d.sync += [segment.as_value().eq(0), segment.base.eq(command.direct_base),
                             segment.outer_count.eq(1), segment.inner_count.eq(1),
                             segment.chunk_words.eq(command.direct_count),
                             segs_left.eq(1), fetch_left.eq(0)]
                m.next = "LOADED"
            with m.Elif(command.seg_count != 0):
                m.d.sync += [segs_left.eq(command.seg_count),
                             fetch_left.eq(command.seg_count), ptr.eq(command.seg_ptr)]
                m.next = "WAIT"
        with m.State("WAIT"):
            m.d.comb += engine.starved.eq(1)
            with m.If(pending_valid):
                take_pending()
        with m.State("LOADED"):
            m.d.comb += walker.start.eq(1)
            if on_load is not None:
                on_load(m, segment)
            m.next = "WALK"
        with m.State("WALK"):
            on_walk(m)
            with m.If(~walker.active):
                m.d.sync += segs_left.eq(segs_left - 1)
                with m.If(last_segment):
                    m.next = "DRAIN" if drained is not None else "IDLE"
                with m.Elif(pending_valid):
                    take_pending()
                with m.Else():
                    m.next = "WAIT"
        if drained is not None:
            with m.State("DRAIN"):
                with m.If(drained):
                    m.next = "IDLE"
        with m.State("ERROR"):
            m.d.comb += engine.error.eq(1)
    m.d.comb += engine.need_segment.eq((fsm.ongoing("WAIT") | fsm.ongoing("LOADED")
                                        | fsm.ongoing("WALK"))
                                       & (fetch_left != 0) & ~pending_valid)
    m.d.comb += engine.busy.eq(~fsm.ongoing("IDLE"))
    return segment, fsm.ongoing("DRAIN") if drained is not None else None


class SegmentReader(wiring.Component):
    """Streams segments of a memory out on ``output``, a word a cycle (the read port's
    latency hidden by a small FIFO), ``last`` on the command's final word when
    ``mark_last`` was set with ``start``. The final word is known only once every segment
    has been walked (the last ones may be empty), so each word waits in an output register
    until the next one is there or the command is over.

    With ``host_segments`` set at ``start``, a host segment (``base`` is
    ``contract.resident.HOST_BASE``) passes its words from ``host`` instead, a word a
    cycle, once the memory words read before it are in the FIFO (they keep their order);
    without it, such a segment is an address past the memory (``error``).

    Parameters
    ----------
    depth : int
        Words of the memory read; an address at or past it sets ``error``.
    latency : int
        Cycles from an address on ``rd_addr`` to its word on ``rd_data`` (the memory reads
        every cycle, so the reader needs no read enable).
    """

    def __init__(self, *, depth, latency=1):
        if not isinstance(latency, int) or latency < 1:
            raise ValueError(f"latency must be a positive integer, not {latency!r}")
        self.depth, self.latency = depth, latency
        super().__init__({
            **_engine_ports(),
            "mark_last": In(1),
            "host_segments": In(1),
            # Issue no read while set (the segments are still fetched): the player starts
            # the next pass's reader early, and holds it until the words it reads are in.
            "hold": In(1),
            "host": In(stream.Signature(word_layout())),
            "rd_addr": Out(32),
            "rd_data": In(WORD_BITS),
            "output": Out(stream.Signature(word_layout())),
        })

    def elaborate(self, platform):
        m = Module()
        m.submodules.walker = walker = SegmentWalker()
        fifo_depth = self.latency + READ_FIFO_SPARE
        m.submodules.fifo = fifo = SyncFIFOBuffered(width=WORD_BITS, depth=fifo_depth)
        mark_last, host_allowed = Signal(), Signal()
        with m.If(self.start & ~self.busy):
            m.d.sync += [mark_last.eq(self.mark_last), host_allowed.eq(self.host_segments)]
        # The segment walked is a host segment: decided as its walk starts, from a register.
        walking_host = Signal()
        host_word = Signal()  # a host word goes into the FIFO
        # The word read (or the gap's fill) arrives ``latency`` cycles after its issue:
        # each issue, whether a gap and its fill, travel down a pipeline that long.
        issue = Signal()
        flight = [Signal(name=f"in_flight_{k}") for k in range(self.latency)]
        gaps = [_data(1, name=f"gap_{k}") for k in range(self.latency)]
        fills = [_data(32, name=f"fill_{k}") for k in range(self.latency)]
        m.d.sync += [flight[0].eq(issue), gaps[0].eq(walker.gap)]
        for k in range(1, self.latency):
            m.d.sync += [flight[k].eq(flight[k - 1]), gaps[k].eq(gaps[k - 1]),
                         fills[k].eq(fills[k - 1])]
        in_flight = Cat(*flight).any()
        m.d.comb += [fifo.w_en.eq(flight[-1] | host_word),
                     fifo.w_data.eq(Mux(host_word, self.host.payload.data,
                                        Mux(gaps[-1], fills[-1], self.rd_data))),
                     self.rd_addr.eq(walker.addr)]
        # Issue only what the FIFO has room for, counting the words in flight.
        in_flight_count = sum(flight[1:], flight[0].as_unsigned())
        room = (fifo.level + in_flight_count) < fifo_depth

        def on_walk(m):
            bad = ~walker.gap & (walker.addr >= self.depth)
            with m.If(walker.active):
                with m.If(walking_host):
                    # After the words in flight, so that none lands after a host word.
                    with m.If(~in_flight & room & ~self.hold):
                        m.d.comb += self.host.ready.eq(1)
                        with m.If(self.host.valid):
                            m.d.comb += [host_word.eq(1), walker.step.eq(1)]
                with m.Elif(bad):
                    m.next = "ERROR"
                with m.Elif(room & ~self.hold):
                    m.d.comb += [issue.eq(1), walker.step.eq(1)]

        def on_load(m, segment):
            m.d.sync += walking_host.eq(host_allowed & (segment.base == HOST_BASE))

        held, held_valid = _data(WORD_BITS), Signal()
        draining = Signal()
        segment, draining_now = _engine_control(
            m, self, walker, on_walk=on_walk, on_load=on_load,
            drained=~in_flight & ~fifo.r_rdy & ~held_valid)
        m.d.comb += draining.eq(draining_now)
        m.d.sync += fills[0].eq(segment.fill)
        # The output register: its word is the command's last when nothing follows.
        over = draining & ~in_flight & ~fifo.r_rdy
        out = self.output
        m.d.comb += [out.valid.eq(held_valid & (fifo.r_rdy | over)),
                     out.payload.data.eq(held), out.payload.last.eq(over & mark_last)]
        taken = out.valid & out.ready
        m.d.comb += fifo.r_en.eq(~held_valid | taken)
        with m.If(fifo.r_rdy & fifo.r_en):
            m.d.sync += [held.eq(fifo.r_data), held_valid.eq(1)]
        with m.Elif(taken):
            m.d.sync += held_valid.eq(0)
        return m


class SegmentWriter(wiring.Component):
    """Takes words from ``input`` into segments of a memory (gap words are dropped); the
    write leaves registered (``w_addr``/``w_data``/``w_en``), a cycle after the word.

    Parameters
    ----------
    depths : tuple of int
        Words of each memory it may write, selected by ``target`` at ``start`` (the data
        memory, the program memory); an address at or past it sets ``error``.
    """

    def __init__(self, *, depths):
        self.depths = tuple(depths)
        super().__init__({
            **_engine_ports(),
            "target": In(range(len(self.depths))),
            "target_now": Out(range(len(self.depths))),
            "input": In(stream.Signature(word_layout())),
            "w_addr": Out(32),
            "w_data": Out(WORD_BITS),
            "w_en": Out(1),
            "w_fill": Out(32),  # the write's segment's ``fill`` (a PASS_ADD's operand offset)
        })

    def elaborate(self, platform):
        m = Module()
        m.submodules.walker = walker = SegmentWalker()
        target = self.target_now
        with m.If(self.start & ~self.busy):
            m.d.sync += target.eq(self.target)
        limit = Signal(32)
        m.d.comb += limit.eq(self.depths[0])
        for index, depth in enumerate(self.depths[1:], 1):
            with m.If(target == index):
                m.d.comb += limit.eq(depth)
        m.d.sync += self.w_en.eq(0)
        w_addr, w_data, w_fill = _data(32), _data(WORD_BITS), _data(32)
        m.d.comb += [self.w_addr.eq(w_addr), self.w_data.eq(w_data), self.w_fill.eq(w_fill)]

        def on_walk(m):
            bad = ~walker.gap & (walker.addr >= limit)
            with m.If(walker.active):
                with m.If(bad):
                    m.next = "ERROR"
                with m.Else():
                    m.d.comb += self.input.ready.eq(1)
                    with m.If(self.input.valid):
                        m.d.comb += walker.step.eq(1)
                        m.d.sync += [self.w_en.eq(~walker.gap), w_addr.eq(walker.addr),
                                     w_data.eq(self.input.payload.data)]

        # The last word's write leaves the cycle after it is taken: ``busy`` covers it.
        segment, _ = _engine_control(m, self, walker, on_walk=on_walk, drained=~self.w_en)
        with m.If(walker.step):
            m.d.sync += w_fill.eq(segment.fill)
        return m
