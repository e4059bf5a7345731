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
"""

from amaranth import Module, Mux, Signal, signed, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import ceil_log2

from contract.config import ConvEngineConfig
from contract.descriptor import DESCRIPTOR_FIELDS

#: Coordinates of window origins: |iy0|, |ix0| stay well inside 2^17 for 16-bit sizes.
COORD = signed(18)


def descriptor_layout():
    """The layer descriptor as a ``data.StructLayout`` (fields: ``DESCRIPTOR_FIELDS``)."""
    return data.StructLayout({
        name: (signed(width) if is_signed else unsigned(width))
        for name, width, is_signed, _ in DESCRIPTOR_FIELDS
    })


def address_width(depth):
    """Address bits of a buffer of ``depth`` words (at least 1)."""
    return max(1, ceil_log2(depth))


def beat_layout(rows, act_depth, weight_depth):
    """Payload of one address beat."""
    return data.StructLayout({
        "addr": data.ArrayLayout(unsigned(address_width(act_depth)), rows),
        "inside": rows,
        "w_addr": unsigned(address_width(weight_depth)),
        "last": 1,
    })


class AddressGenerator(wiring.Component):
    """Address beats of one convolution layer, one per cycle while ``beats`` is ready.

    ``start`` (one cycle, while not ``busy``) begins a layer described by ``descriptor``,
    which must stay stable until ``busy`` falls (the engine holds a latched copy). The
    first beat leaves R + 1 cycles after ``start`` (the lanes' home positions are walked
    first); after that, every cycle with ``beats.ready`` moves one beat.

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
        super().__init__({
            "descriptor": In(descriptor_layout()),
            "start": In(1),
            "busy": Out(1),
            "beats": Out(stream.Signature(
                beat_layout(config.rows, config.act_depth, config.weight_depth))),
        })

    def elaborate(self, platform):
        m = Module()
        rows = self.config.rows
        d = self.descriptor
        abits = self.abits
        out = self.beats

        def stepped(y, x, a, dx, dy, da):
            """Window origin moved by (dx, dy) pixels-in-input-units, wrapping once to the
            next output row: enough because every step is less than one output row."""
            nx = Signal(COORD)
            m.d.comb += nx.eq(x + dx)
            wrap = nx >= d.x_end
            return (Mux(wrap, y + dy + d.stride, y + dy),
                    Mux(wrap, nx - d.x_wrap, nx),
                    Mux(wrap, a + da + d.wrap_daddr, a + da)[:abits])

        running = Signal()
        init = Signal()
        index = Signal(range(rows))  # lane being initialised
        walker_y, walker_x = Signal(COORD), Signal(COORD)
        walker_a = Signal(abits)
        lane_y = [Signal(COORD, name=f"lane{r}_y") for r in range(rows)]
        lane_x = [Signal(COORD, name=f"lane{r}_x") for r in range(rows)]
        lane_a = [Signal(abits, name=f"lane{r}_a") for r in range(rows)]
        home_y = [Signal(COORD, name=f"home{r}_y") for r in range(rows)]
        home_x = [Signal(COORD, name=f"home{r}_x") for r in range(rows)]
        home_a = [Signal(abits, name=f"home{r}_a") for r in range(rows)]

        u, v = Signal(3), Signal(3)
        c = Signal(16)
        offset = Signal(abits)
        w_addr, w_tile = Signal(self.wbits), Signal(self.wbits)
        group, tile = Signal(16), Signal(16)

        m.d.comb += self.busy.eq(init | running | out.valid)

        with m.If(self.start & ~self.busy):
            m.d.sync += [
                init.eq(1), index.eq(0),
                walker_y.eq(-d.pad_top), walker_x.eq(-d.pad_left),
                walker_a.eq(d.origin_addr[:abits]),
                u.eq(0), v.eq(0), c.eq(0), offset.eq(0),
                w_addr.eq(0), w_tile.eq(0), group.eq(0), tile.eq(0),
            ]

        with m.If(init):
            ny, nx, na = stepped(walker_y, walker_x, walker_a, d.stride, 0, d.pixel_daddr)
            m.d.sync += [walker_y.eq(ny), walker_x.eq(nx), walker_a.eq(na),
                         index.eq(index + 1)]
            for r in range(rows):
                with m.If(index == r):
                    m.d.sync += [lane_y[r].eq(walker_y), lane_x[r].eq(walker_x),
                                 lane_a[r].eq(walker_a), home_y[r].eq(walker_y),
                                 home_x[r].eq(walker_x), home_a[r].eq(walker_a)]
            with m.If(index == rows - 1):
                m.d.sync += [init.eq(0), running.eq(1)]

        # Output register (stage B): moves when empty or taken.
        advance = ~out.valid | out.ready
        with m.If(advance):
            m.d.sync += out.valid.eq(running)
        c_last = c == d.in_channels - 1
        v_last = v == d.kernel_w - 1
        u_last = u == d.kernel_h - 1
        with m.If(advance & running):
            for r in range(rows):
                iy = lane_y[r] + u
                ix = lane_x[r] + v
                m.d.sync += [
                    out.payload.addr[r].eq(lane_a[r] + offset),
                    out.payload.inside[r].eq((iy >= 0) & (iy < d.in_height)
                                             & (ix >= 0) & (ix < d.in_width)),
                ]
            m.d.sync += [out.payload.w_addr.eq(w_addr),
                         out.payload.last.eq(c_last & v_last & u_last)]

            with m.If(~c_last):
                m.d.sync += [c.eq(c + 1), offset.eq(offset + 1), w_addr.eq(w_addr + 1)]
            with m.Elif(~v_last):
                m.d.sync += [c.eq(0), v.eq(v + 1), offset.eq(offset + 1),
                             w_addr.eq(w_addr + 1)]
            with m.Elif(~u_last):
                m.d.sync += [c.eq(0), v.eq(0), u.eq(u + 1),
                             offset.eq(offset + d.row_skip[:abits]), w_addr.eq(w_addr + 1)]
            with m.Else():
                # End of a group (one R x C output tile).
                m.d.sync += [c.eq(0), v.eq(0), u.eq(0), offset.eq(0)]
                with m.If(group != d.pixel_groups - 1):
                    m.d.sync += [group.eq(group + 1), w_addr.eq(w_tile)]
                    for r in range(rows):
                        ny, nx, na = stepped(lane_y[r], lane_x[r], lane_a[r],
                                             d.group_dx, d.group_dy, d.group_daddr)
                        m.d.sync += [lane_y[r].eq(ny), lane_x[r].eq(nx), lane_a[r].eq(na)]
                with m.Else():
                    # Next column tile: its weights follow this tile's in the buffer.
                    m.d.sync += [group.eq(0), w_addr.eq(w_addr + 1), w_tile.eq(w_addr + 1)]
                    for r in range(rows):
                        m.d.sync += [lane_y[r].eq(home_y[r]), lane_x[r].eq(home_x[r]),
                                     lane_a[r].eq(home_a[r])]
                    with m.If(tile == d.col_tiles - 1):
                        m.d.sync += running.eq(0)
                    with m.Else():
                        m.d.sync += tile.eq(tile + 1)
        return m
