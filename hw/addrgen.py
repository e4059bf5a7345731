"""Implicit im2col: the address generator that feeds the convolution engine's buffers.

For each column tile ``t`` (outer loop), each group ``g`` of R output pixels, and each
``k = (u, v, c)`` of the kernel window (``c`` innermost, then ``v``, then ``u``), one beat
carries R activation addresses (one per array row, i.e. per output pixel of the group),
R "inside the image" flags (a position outside reads as the zero point) and the address of
the weight word (C weights of tile ``t`` for this ``k``). ``last`` marks the last ``k`` of
a group: the end of one R x C output tile.

Activations are stored HWC (``addr = (iy*W + ix)*C_in + c``), so within one kernel row the
addresses of consecutive ``(v, c)`` are consecutive: the shared offset is one counter that
adds 1, or ``row_skip`` at the end of a kernel row. Each row lane keeps its own window base
(``iy0, ix0, addr0``) and moves it by the descriptor's group step when a group ends; the
driver precomputes the steps (``contract.descriptor.DESCRIPTOR_FIELDS``), so there is no
multiplier or divider here. The lanes' first positions (pixels 0..R-1) are walked once per
layer in R cycles and kept as "home" positions to restart every column tile with no bubble.

Steady state: one beat per cycle, including across kernel rows, groups and column tiles.

Output: two slots, filled and emptied in turn. The lanes and loop counters move on ``go``,
a register decided a cycle ahead (a slot will be free for the beat, taken or not), so
their hundreds of flip-flops wait on no handshake: the consumer's ``ready`` and the
``written`` flags below reach only the slots' bookkeeping, and a single register fans out
to the lanes (on the 85F with the resident block, ``written`` -> ``ready`` -> the lanes and
counters across the die was the critical path). The generator runs at most one beat ahead
of the slot offered; which beat is offered in which cycle is what one output register
gave, so the cycle counts are unchanged.

Timing (ECP5 at 125 MHz): no per-cycle path reads a descriptor field. Everything derived
from it (loop limits, the steps pre-added for both outcomes of a row wrap, the wrap
thresholds) is registered in the two cycles after ``start``; loop ``last`` flags and each
lane's "this step wraps" flag are registers decided one step ahead; the inside test
reads per-lane window positions that count with ``u`` and ``v``. A beat is then one
adder or comparator deep (``bench/ooc_fmax.py addrgen`` times it alone).

Loading during a run: the beat offered on ``beats`` only reads what is already written.
The engine reports how many activation words and weight rows are in its buffers
(``act_words_written``, ``weight_rows_written``, or ``act_all``/``weights_all``), and
``beats.valid`` is the offered slot's valid AND its registered ``written`` flag, decided
in the cycle before against the counts of that cycle: for the beat entering the slot
(from the lanes' next addresses) or for the beat waiting in it. The counts only grow
during a run, so a flag one cycle old is safe (at worst a beat waits one cycle more than
it must), and no comparison of a pointer feeds what moves the lanes.
The ports default to "all written", for a generator used on its own.

Depthwise passes (a build with ``ConvEngineConfig.depthwise``, the descriptor's
``depthwise`` set): the same beats, but ``C_in`` counts the 32-bit words of a pixel and
every address is a word address (the driver derives the steps so); the "written" test
reads the address as one; a beat says which of a pixel's words it reads (``word``), and
the words of one tap share its weight row; and each column tile starts ``dw_tile_daddr``
words past the one before (its own channels' activations), so the lanes' homes move on by
it.
"""

from amaranth import Cat, Module, Mux, Signal, signed, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import ceil_log2

from contract.config import ConvEngineConfig
from contract.descriptor import DEPTHWISE_FIELDS, DESCRIPTOR_FIELDS, depthwise_word_bits
from contract.streams import ACTIVATIONS_PER_WORD

#: Coordinates of window origins: |iy0|, |ix0| stay well inside 2^17 for 16-bit sizes.
COORD = signed(18)


def descriptor_layout(*, depthwise=True):
    """The layer descriptor as a ``data.StructLayout`` (fields: ``DESCRIPTOR_FIELDS``;
    without ``depthwise``, all but that flag: a build without the mode has no bit for it)."""
    return data.StructLayout({
        name: (signed(width) if is_signed else unsigned(width))
        for name, width, is_signed, _ in DESCRIPTOR_FIELDS
        if depthwise or name not in DEPTHWISE_FIELDS
    })


def address_width(depth):
    """Address bits of a buffer of ``depth`` words (at least 1)."""
    return max(1, ceil_log2(depth))


def beat_layout(rows, act_depth, weight_depth, *, word_bits=0):
    """Payload of one address beat; with ``word_bits`` (a build with the depthwise mode),
    also ``word``: which of a pixel's words a depthwise beat reads."""
    fields = {
        "addr": data.ArrayLayout(unsigned(address_width(act_depth)), rows),
        "inside": rows,
        "w_addr": unsigned(address_width(weight_depth)),
        "last": 1,
    }
    if word_bits:
        fields["word"] = unsigned(word_bits)
    return data.StructLayout(fields)


#: Wrap thresholds: x_end less up to two steps and plus x_wrap, past COORD's range.
THRESHOLD = signed(COORD.width + 2)


def _step_layout(abits):
    """A window-origin step, pre-added for both outcomes of the row wrap, and the
    thresholds that decide the wrap of the step after it."""
    return data.StructLayout({
        "threshold": THRESHOLD,    # x at or past it wraps: x_end - dx
        "after_plain": THRESHOLD,  # the same test one plain step later: threshold - dx
        "after_wrap": THRESHOLD,   # ... one wrapping step later: threshold - dx_wrap
        "dx": COORD, "dy": COORD,
        "dx_wrap": COORD,          # dx - x_wrap
        "dy_wrap": COORD,          # dy + stride
        "da": unsigned(abits),
        "da_wrap": unsigned(abits),  # da + wrap_daddr (addresses wrap at 2**abits)
    })


#: Lanes that share one copy of the flags that move them (``go``, the loop flags).
LANES_PER_COPY = 4


class _LoopCounter:
    """A loop counter and its registered ``last`` flag (the counter is at ``limit - 1``).

    The flag is decided one step ahead, when the counter equals ``limit - 2`` (held in a
    register from ``start``), so ``last`` is a flip-flop rather than a comparator on a
    descriptor field. ``limit`` 0 behaves as 2**width, as ``value == limit - 1`` did.
    """

    def __init__(self, name, width, limit, copies=0):
        self.value = Signal(width, name=name)
        self.last = Signal(name=f"{name}_last")
        # Copies of ``last``, set with it, for groups of lanes (fan-out: one flag steered
        # every lane's registers, the 16-row build's critical path).
        self.last_copies = [Signal(name=f"{name}_last_copy{k}") for k in range(copies)]
        self.single = Signal(name=f"{name}_single")  # limit == 1: every value is last
        self.penultimate = Signal(width, name=f"{name}_penultimate")
        self.limit = limit

    def _last(self, value):
        return [flag.eq(value) for flag in (self.last, *self.last_copies)]

    def load(self):
        """At ``start``: value 0, the limit taken from the descriptor."""
        return [self.value.eq(0), *self._last(self.limit == 1),
                self.single.eq(self.limit == 1), self.penultimate.eq(self.limit - 2)]

    def restart(self):
        return [self.value.eq(0), *self._last(self.single)]

    def increment(self):
        return [self.value.eq(self.value + 1), *self._last(self.value == self.penultimate)]


class AddressGenerator(wiring.Component):
    """Address beats of one convolution layer, one per cycle while ``beats`` is ready.

    ``start`` (one cycle, while not ``busy``) begins a layer described by ``descriptor``,
    which must stay stable until ``busy`` falls (the engine holds a latched copy). The
    first beat leaves R + 2 cycles after ``start`` (a cycle deriving the per-layer
    constants, then the lanes' home positions are walked); after that, every cycle with
    ``beats.ready`` moves one beat.

    Parameters
    ----------
    config : ConvEngineConfig
        Array size (R lanes) and buffer depths (address widths).
    """

    def __init__(self, config):
        if not isinstance(config, ConvEngineConfig):
            raise TypeError(f"config must be a ConvEngineConfig, not {config!r}")
        self.config = config
        self.abits = address_width(config.act_depth)
        self.wbits = address_width(config.weight_depth)
        act_words = -(-config.act_depth // ACTIVATIONS_PER_WORD)
        super().__init__({
            "descriptor": In(descriptor_layout(depthwise=config.depthwise)),
            "start": In(1),
            "busy": Out(1),
            # What the buffers hold: activation words [0, act_words_written) and weight
            # rows [0, weight_rows_written), or all of them; a count may only grow while a
            # beat waits (module docstring, "Loading during a run").
            "act_words_written": In(unsigned(act_words.bit_length())),
            "act_all": In(1, init=1),
            "weight_rows_written": In(unsigned(self.wbits)),
            "weights_all": In(1, init=1),
            "beats": Out(stream.Signature(
                beat_layout(config.rows, config.act_depth, config.weight_depth,
                            word_bits=(depthwise_word_bits(config.cols)
                                       if config.depthwise else 0)))),
        })

    def elaborate(self, platform):
        m = Module()
        rows = self.config.rows
        d = self.descriptor
        abits = self.abits
        out = self.beats

        # Everything the per-cycle logic needs from the descriptor is derived into
        # registers at ``start`` (the descriptor is static for the whole layer and the R
        # cycles of lane set-up come before the first beat), so no path runs from a
        # descriptor field through arithmetic into the lanes.
        def derive(step, dx, dy, da):
            return [step.threshold.eq(d.x_end - dx), step.dx.eq(dx), step.dy.eq(dy),
                    step.dx_wrap.eq(dx - d.x_wrap), step.dy_wrap.eq(dy + d.stride),
                    step.da.eq(da[:abits]), step.da_wrap.eq((da + d.wrap_daddr)[:abits])]

        def derive_thresholds(step):
            # The cycle after ``start``: from the registers ``derive`` wrote.
            return [step.after_plain.eq(step.threshold - step.dx),
                    step.after_wrap.eq(step.threshold - step.dx_wrap)]

        def stepped(y, x, a, wrap, step):
            """Window origin moved by ``step``, wrapping once to the next output row:
            enough because every step is less than one output row. ``wrap`` (x is at or
            past the threshold) is a register, decided when x was written, so a step is
            an adder and a multiplexer; the next ``wrap`` compares the old x with the
            thresholds of both outcomes at the same time."""
            return (Mux(wrap, y + step.dy_wrap, y + step.dy),
                    Mux(wrap, x + step.dx_wrap, x + step.dx),
                    Mux(wrap, a + step.da_wrap, a + step.da)[:abits],
                    Mux(wrap, x >= step.after_wrap, x >= step.after_plain))

        pixel_step = Signal(_step_layout(abits))
        group_step = Signal(_step_layout(abits))
        row_skip = Signal(abits)

        running = Signal()
        prepare = Signal()  # the cycle after start: second-level derived registers
        init = Signal()
        index = Signal(range(rows))  # lane being initialised
        walker_y, walker_x = Signal(COORD), Signal(COORD)
        walker_a = Signal(abits)
        walker_wrap = Signal()
        lane_wrap = [Signal(name=f"lane{r}_wrap") for r in range(rows)]
        home_wrap = [Signal(name=f"home{r}_wrap") for r in range(rows)]
        lane_y = [Signal(COORD, name=f"lane{r}_y") for r in range(rows)]
        lane_x = [Signal(COORD, name=f"lane{r}_x") for r in range(rows)]
        lane_a = [Signal(abits, name=f"lane{r}_a") for r in range(rows)]
        home_y = [Signal(COORD, name=f"home{r}_y") for r in range(rows)]
        home_x = [Signal(COORD, name=f"home{r}_x") for r in range(rows)]
        home_a = [Signal(abits, name=f"home{r}_a") for r in range(rows)]

        offset = Signal(abits)
        w_addr, w_tile = Signal(self.wbits), Signal(self.wbits)
        # A depthwise pass's column tiles each read their own activations, the next
        # tile's ``dw_tile_daddr`` words on: the lanes' homes move on by it.
        tile_step = Signal(abits)
        if self.config.depthwise:
            with m.If(self.start & ~self.busy):
                m.d.sync += tile_step.eq(Mux(d.depthwise, d.dw_tile_daddr[:abits], 0))

        # The loop counters c, v, u, group, tile. Each carries a registered ``last`` flag
        # decided one step ahead (the counter equals its limit - 2 now, so it will equal
        # limit - 1 after this increment), against limits registered at ``start``.
        # The lanes move in groups of LANES_PER_COPY, each on its own copies of the flags
        # that steer them (`go` and the loop flags).
        copies = -(-rows // LANES_PER_COPY)
        c = _LoopCounter("c", 16, d.in_channels, copies)
        v = _LoopCounter("v", 3, d.kernel_w, copies)
        u = _LoopCounter("u", 3, d.kernel_h, copies)
        group = _LoopCounter("group", 16, d.pixel_groups, copies)
        tile = _LoopCounter("tile", 16, d.col_tiles)

        # The inside test iy = y + u in [0, H), ix = x + v in [0, W) on per-lane registers
        # that hold iy and ix themselves: they count up with u and v and are reloaded from
        # the lane origin when u or v restart, so a lane's test is two sign bits and two
        # comparisons with registers, side by side, with no adder in front.
        lane_iy = [Signal(COORD, name=f"lane{r}_iy") for r in range(rows)]
        lane_ix = [Signal(COORD, name=f"lane{r}_ix") for r in range(rows)]
        height, width = Signal(16), Signal(16)

        # Output stage: two slots, filled and emptied in turn. The lanes and loop counters
        # move on ``go``, a register decided a cycle ahead (there will be a free slot even if
        # nothing is taken), so the hundreds of flip-flops they hold wait on no handshake
        # and no ``written`` flag in the same cycle; only the slots' few bits do.
        beat_shape = out.payload.shape()
        slots = [Signal(beat_shape, name=f"slot{s}") for s in range(2)]
        held = [Signal(name=f"slot{s}_held") for s in range(2)]
        # ... and every word the slot's beat reads was written a cycle ago
        written = [Signal(name=f"slot{s}_written") for s in range(2)]
        wr, rd = Signal(), Signal()  # the slot filled next, the slot offered
        go = Signal()                # the lanes move this cycle (implies ``running``)
        go_copies = [Signal(name=f"go_copy{k}") for k in range(copies)]
        m.d.comb += [self.busy.eq(prepare | init | running | held[0] | held[1]),
                     out.payload.eq(Mux(rd, slots[1], slots[0])),
                     out.valid.eq(Mux(rd, held[1] & written[1], held[0] & written[0]))]

        with m.If(self.start & ~self.busy):
            m.d.sync += [
                prepare.eq(1), index.eq(0),
                walker_y.eq(-d.pad_top), walker_x.eq(-d.pad_left),
                walker_a.eq(d.origin_addr[:abits]),
                offset.eq(0), w_addr.eq(0), w_tile.eq(0),
                row_skip.eq(d.row_skip[:abits]),
                height.eq(d.in_height), width.eq(d.in_width),
                *derive(pixel_step, d.stride, 0, d.pixel_daddr),
                *derive(group_step, d.group_dx, d.group_dy, d.group_daddr),
                *c.load(), *v.load(), *u.load(), *group.load(), *tile.load(),
            ]

        with m.If(prepare):
            m.d.sync += [prepare.eq(0), init.eq(1),
                         walker_wrap.eq(walker_x >= pixel_step.threshold),
                         *derive_thresholds(pixel_step), *derive_thresholds(group_step)]

        with m.If(init):
            ny, nx, na, nwrap = stepped(walker_y, walker_x, walker_a, walker_wrap, pixel_step)
            m.d.sync += [walker_y.eq(ny), walker_x.eq(nx), walker_a.eq(na),
                         walker_wrap.eq(nwrap), index.eq(index + 1)]
            # The walker's own flag is for its pixel step; the lanes take group steps.
            group_wrap = walker_x >= group_step.threshold
            for r in range(rows):
                with m.If(index == r):
                    m.d.sync += [lane_y[r].eq(walker_y), lane_x[r].eq(walker_x),
                                 lane_iy[r].eq(walker_y), lane_ix[r].eq(walker_x),
                                 lane_a[r].eq(walker_a), lane_wrap[r].eq(group_wrap),
                                 home_y[r].eq(walker_y), home_x[r].eq(walker_x),
                                 home_a[r].eq(walker_a), home_wrap[r].eq(group_wrap)]
            with m.If(index == rows - 1):
                m.d.sync += [init.eq(0), running.eq(1)]

        next_addr = [(lane_a[r] + offset)[:abits] for r in range(rows)]
        next_inside = [~lane_iy[r][-1] & ~lane_ix[r][-1]
                       & (lane_iy[r] < height) & (lane_ix[r] < width) for r in range(rows)]
        word_shift = ACTIVATIONS_PER_WORD.bit_length() - 1

        # A depthwise pass's addresses count words (``contract.descriptor``), a build
        # with the mode latches which at ``start``.
        word_addressed = Signal()
        if self.config.depthwise:
            with m.If(self.start & ~self.busy):
                m.d.sync += word_addressed.eq(d.depthwise)

        def word_of(addr):
            if not self.config.depthwise:
                return addr >> word_shift
            return Mux(word_addressed, addr, addr >> word_shift)

        def all_written(addrs, inside, w):
            acts = Cat(~inside[r] | (word_of(addrs[r]) < self.act_words_written)
                       for r in range(rows))
            return ((self.act_all | acts.all())
                    & (self.weights_all | (w < self.weight_rows_written)))

        # Each slot's flag is decided in the cycle before, against the counts of that cycle:
        # for the beat entering it (from the lanes' next addresses) or for the beat it holds.
        for s in range(2):
            with m.If(go & (wr == s)):
                m.d.sync += written[s].eq(all_written(next_addr, next_inside, w_addr))
            with m.Else():
                m.d.sync += written[s].eq(all_written(slots[s].addr, slots[s].inside,
                                                      slots[s].w_addr))
        take = out.valid & out.ready
        held_next = [(go & (wr == s)) | (held[s] & ~(take & (rd == s))) for s in range(2)]
        m.d.sync += [held[s].eq(held_next[s]) for s in range(2)]
        with m.If(take):
            m.d.sync += rd.eq(~rd)
        layer_end = c.last & v.last & u.last & group.last & tile.last
        # Moving next cycle must leave the slot it fills free, taken or not: at most one
        # slot is held after this cycle. (Both ends of the layer: ``running`` falls with
        # its last beat; the last cycle of ``init`` starts it, with both slots empty.)
        go_next = running & ~(go & layer_end) & ~(held_next[0] & held_next[1])
        m.d.sync += [flag.eq(go_next) for flag in (go, *go_copies)]
        with m.If(init & (index == rows - 1)):
            m.d.sync += [flag.eq(1) for flag in (go, *go_copies)]
        beat = Signal(beat_shape)  # the lanes' beat, entering slot ``wr`` on ``go``
        for r in range(rows):
            m.d.comb += [beat.addr[r].eq(next_addr[r]), beat.inside[r].eq(next_inside[r])]
        m.d.comb += [beat.w_addr.eq(w_addr), beat.last.eq(c.last & v.last & u.last)]
        if self.config.depthwise:
            # A depthwise pass: ``c`` counts a pixel's words, which share the tap's weight
            # row (the array gives each column the weights of its own word only).
            m.d.comb += beat.word.eq(c.value)
        with m.If(go):
            m.d.sync += wr.eq(~wr)
            with m.If(wr):
                m.d.sync += slots[1].eq(beat)
            with m.Else():
                m.d.sync += slots[0].eq(beat)
            next_row = w_addr + 1
            if self.config.depthwise:
                next_row = Mux(word_addressed, w_addr, w_addr + 1)

            with m.If(~c.last):
                m.d.sync += [*c.increment(), offset.eq(offset + 1), w_addr.eq(next_row)]
            with m.Elif(~v.last):
                m.d.sync += [*c.restart(), *v.increment(), offset.eq(offset + 1),
                             w_addr.eq(w_addr + 1)]
            with m.Elif(~u.last):
                m.d.sync += [*c.restart(), *v.restart(), *u.increment(),
                             offset.eq(offset + row_skip), w_addr.eq(w_addr + 1)]
            with m.Else():
                # End of a group (one R x C output tile).
                m.d.sync += [*c.restart(), *v.restart(), *u.restart(), offset.eq(0)]
                with m.If(~group.last):
                    m.d.sync += [*group.increment(), w_addr.eq(w_tile)]
                with m.Else():
                    # Next column tile: its weights follow this tile's in the buffer.
                    m.d.sync += [*group.restart(), w_addr.eq(w_addr + 1),
                                 w_tile.eq(w_addr + 1)]
                    with m.If(tile.last):
                        m.d.sync += running.eq(0)
                    with m.Else():
                        m.d.sync += tile.increment()
        # The lanes, each group on its own copies of `go` and the loop flags (the same
        # values as the originals above).
        for r in range(rows):
            k = r // LANES_PER_COPY
            with m.If(go_copies[k] & c.last_copies[k]):
                with m.If(~v.last_copies[k]):
                    m.d.sync += lane_ix[r].eq(lane_ix[r] + 1)
                with m.Elif(~u.last_copies[k]):
                    m.d.sync += [lane_iy[r].eq(lane_iy[r] + 1), lane_ix[r].eq(lane_x[r])]
                with m.Elif(~group.last_copies[k]):
                    ny, nx, na, nwrap = stepped(lane_y[r], lane_x[r], lane_a[r],
                                                lane_wrap[r], group_step)
                    m.d.sync += [lane_y[r].eq(ny), lane_x[r].eq(nx), lane_a[r].eq(na),
                                 lane_iy[r].eq(ny), lane_ix[r].eq(nx),
                                 lane_wrap[r].eq(nwrap)]
                with m.Else():
                    home = home_a[r]
                    if self.config.depthwise:
                        home = (home_a[r] + tile_step)[:abits]
                        m.d.sync += home_a[r].eq(home)
                    m.d.sync += [lane_y[r].eq(home_y[r]), lane_x[r].eq(home_x[r]),
                                 lane_iy[r].eq(home_y[r]), lane_ix[r].eq(home_x[r]),
                                 lane_a[r].eq(home), lane_wrap[r].eq(home_wrap[r])]
        return m
