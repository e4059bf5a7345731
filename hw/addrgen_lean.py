"""The address generator for a slow clock and a small FPGA (``pipelined = false``).

It gives the same beats, in the same order, as :class:`hw.addrgen.AddressGenerator` (the
same ports; ``tests/test_conv_engine.py`` runs both against one direct formula), with
about half the flip-flops and a third of the logic: what that one registers to make a beat
one adder deep at 125 MHz on ECP5 is computed here in the cycle it is used.

- No per-layer derived registers: steps, wrap thresholds and loop limits are read from the
  descriptor, which the engine holds stable for the whole layer.
- No per-lane ``iy``/``ix`` counters: a lane's window position is its origin plus ``u``
  and ``v``, added where the inside test needs it.
- No per-lane stepping logic and no "home" copies: one stepper moves the lanes' origins.
  At a group's end the lanes rotate through it, one a cycle (R cycles with no beat); at a
  column tile's end they are walked again from pixel 0 (R - 1 cycles), as at ``start``.
- ``written`` is compared in the cycle the beat waits, not a cycle ahead.

So a layer takes R cycles more per pixel group than with the pipelined generator; where
this one is built (the iCEBreaker at 18 MHz, whose UART moves a byte in 60 cycles) the
host link, not the engine, sets the pace.
"""

from amaranth import Cat, Module, Mux, Signal

from contract.streams import ACTIVATIONS_PER_WORD

from .addrgen import COORD, AddressGenerator


def _is_last(value, limit):
    """``value`` is at ``limit - 1`` (a limit of 0 counts 2**width, as in ``hw.addrgen``)."""
    return value == (limit - 1)[:len(value)]


class LeanAddressGenerator(AddressGenerator):
    """Address beats of one convolution layer (the ports, checks and beats of
    ``AddressGenerator``, whose constructor it shares; only the logic differs).

    ``start`` (one cycle, while not ``busy``) begins a layer described by ``descriptor``,
    which must stay stable until ``busy`` falls.
    """

    def elaborate(self, platform):
        m = Module()
        rows, abits, d, out = self.config.rows, self.abits, self.descriptor, self.beats

        # Lane r holds the window origin (y, x) and base address of output pixel
        # group * R + r; lane R - 1 is where the stepper writes.
        lane_y = [Signal(COORD, name=f"lane{r}_y") for r in range(rows)]
        lane_x = [Signal(COORD, name=f"lane{r}_x") for r in range(rows)]
        lane_a = [Signal(abits, name=f"lane{r}_a") for r in range(rows)]
        c, v, u = Signal(16), Signal(3), Signal(3)
        group, tile = Signal(16), Signal(16)
        offset = Signal(abits)
        w_addr, w_tile = Signal(self.wbits), Signal(self.wbits)
        moves = Signal(range(rows + 1))  # lane moves left in this walk or rotation
        full = Signal()

        # The one stepper: a lane's origin moved by the pixel step (walking from pixel 0)
        # or the group step (rotating), wrapping once to the next output row when x
        # reaches x_end (every step is less than one output row).
        walking = Signal()
        src_y = Mux(walking, lane_y[-1], lane_y[0])
        src_x = Mux(walking, lane_x[-1], lane_x[0])
        src_a = Mux(walking, lane_a[-1], lane_a[0])
        dx = Mux(walking, d.stride, d.group_dx)
        dy = Mux(walking, 0, d.group_dy)
        da = Mux(walking, d.pixel_daddr, d.group_daddr)[:abits]
        moved_x = src_x + dx
        wrap = moved_x >= d.x_end
        step_x = Mux(wrap, moved_x - d.x_wrap, moved_x)
        step_y = src_y + dy + Mux(wrap, d.stride, 0)
        step_a = (src_a + da + Mux(wrap, d.wrap_daddr[:abits], 0))[:abits]

        def shift_in(y, x, a):
            """Every lane takes the next one's origin; the last takes (y, x, a)."""
            stmts = []
            for r in range(rows - 1):
                stmts += [lane_y[r].eq(lane_y[r + 1]), lane_x[r].eq(lane_x[r + 1]),
                          lane_a[r].eq(lane_a[r + 1])]
            return stmts + [lane_y[-1].eq(y), lane_x[-1].eq(x), lane_a[-1].eq(a)]

        def walk_from_pixel_zero(origin):
            # Lane R - 1 takes pixel 0; R - 1 walking moves bring it down to lane 0.
            return [*shift_in(-d.pad_top, -d.pad_left, origin), moves.eq(rows - 1)]

        # A depthwise pass's column tiles each read their own activations, the next
        # tile's ``dw_tile_daddr`` words on: pixel 0 of tile t is at ``tile_origin``.
        if self.config.depthwise:
            tile_origin = Signal(abits)
            next_origin = (tile_origin + Mux(d.depthwise, d.dw_tile_daddr, 0))[:abits]
            set_origin = [tile_origin.eq(d.origin_addr[:abits])]
        else:
            next_origin, set_origin = d.origin_addr[:abits], []

        # Output register: the beat of the lanes' current position.
        c_last, v_last = _is_last(c, d.in_channels), _is_last(v, d.kernel_w)
        u_last = _is_last(u, d.kernel_h)
        word_shift = ACTIVATIONS_PER_WORD.bit_length() - 1

        def word_of(addr):
            # A depthwise pass's addresses count words (the descriptor holds still).
            if not self.config.depthwise:
                return addr >> word_shift
            return Mux(d.depthwise, addr, addr >> word_shift)

        acts_written = Cat(~out.payload.inside[r]
                           | (word_of(out.payload.addr[r]) < self.act_words_written)
                           for r in range(rows)).all()
        written = ((self.act_all | acts_written)
                   & (self.weights_all | (out.payload.w_addr < self.weight_rows_written)))
        m.d.comb += out.valid.eq(full & written)
        take = ~full | out.ready & written

        with m.FSM():
            with m.State("IDLE"):
                with m.If(self.start & ~full):
                    m.d.sync += [*walk_from_pixel_zero(d.origin_addr[:abits]), *set_origin,
                                 c.eq(0), v.eq(0), u.eq(0),
                                 group.eq(0), tile.eq(0), offset.eq(0), w_addr.eq(0),
                                 w_tile.eq(0)]
                    m.next = "WALK"
                with m.Else():
                    m.d.comb += self.busy.eq(full)
                    with m.If(take):
                        m.d.sync += full.eq(0)
            with m.State("WALK"):
                m.d.comb += [self.busy.eq(1), walking.eq(1)]
                with m.If(take):
                    m.d.sync += full.eq(0)
                with m.If(moves == 0):
                    m.next = "RUN"
                with m.Else():
                    m.d.sync += [*shift_in(step_y, step_x, step_a), moves.eq(moves - 1)]
            with m.State("ROTATE"):
                m.d.comb += self.busy.eq(1)
                with m.If(take):
                    m.d.sync += full.eq(0)
                m.d.sync += [*shift_in(step_y, step_x, step_a), moves.eq(moves - 1)]
                with m.If(moves == 1):
                    m.next = "RUN"
            with m.State("RUN"):
                m.d.comb += self.busy.eq(1)
                with m.If(take):
                    m.d.sync += full.eq(1)
                    for r in range(rows):
                        iy, ix = lane_y[r] + u, lane_x[r] + v
                        m.d.sync += [
                            out.payload.addr[r].eq((lane_a[r] + offset)[:abits]),
                            out.payload.inside[r].eq((iy >= 0) & (ix >= 0)
                                                     & (iy < d.in_height)
                                                     & (ix < d.in_width)),
                        ]
                    m.d.sync += [out.payload.w_addr.eq(w_addr),
                                 out.payload.last.eq(c_last & v_last & u_last)]
                    # A depthwise pass: the words of a tap share its weight row.
                    next_row = w_addr + 1
                    if self.config.depthwise:
                        m.d.sync += out.payload.word.eq(c)
                        next_row = Mux(d.depthwise, w_addr, w_addr + 1)
                    with m.If(~c_last):
                        m.d.sync += [c.eq(c + 1), offset.eq(offset + 1), w_addr.eq(next_row)]
                    with m.Elif(~v_last):
                        m.d.sync += [c.eq(0), v.eq(v + 1), offset.eq(offset + 1),
                                     w_addr.eq(w_addr + 1)]
                    with m.Elif(~u_last):
                        m.d.sync += [c.eq(0), v.eq(0), u.eq(u + 1),
                                     offset.eq(offset + d.row_skip[:abits]),
                                     w_addr.eq(w_addr + 1)]
                    with m.Else():
                        # End of a group (one R x C output tile).
                        m.d.sync += [c.eq(0), v.eq(0), u.eq(0), offset.eq(0)]
                        with m.If(~_is_last(group, d.pixel_groups)):
                            m.d.sync += [group.eq(group + 1), w_addr.eq(w_tile),
                                         moves.eq(rows)]
                            m.next = "ROTATE"
                        with m.Else():
                            # Next column tile: its weights follow this tile's.
                            m.d.sync += [group.eq(0), w_addr.eq(w_addr + 1),
                                         w_tile.eq(w_addr + 1), tile.eq(tile + 1)]
                            with m.If(_is_last(tile, d.col_tiles)):
                                m.next = "IDLE"
                            with m.Else():
                                m.d.sync += walk_from_pixel_zero(next_origin)
                                if self.config.depthwise:
                                    m.d.sync += tile_origin.eq(next_origin)
                                m.next = "WALK"
        return m
