"""Streaming 2x2 / stride 2 max pool, fused after requantization.

Input: the pixels of one feature map (``lanes`` channels each) in row-major order; output:
the pooled pixels in row-major order. Even rows leave the max of each horizontal pair in a
line buffer (block RAM, ``max_width // 2`` words); odd rows finish the 2x2 maximum. An odd
last column or row has no partner and is dropped, as ONNX MaxPool with ``ceil_mode=0``
does. Exact: the result is ``models.pool.max_pool2d(x, 2, 2)``.

Dropped pixels are still consumed: a frame's last pooled beat (the one with ``last``) is
held back until the frame's final input pixel has been taken, so whoever ends a pass on
that ``last`` leaves nothing of the frame in the input stream. (Before, an odd last row or
column was left behind and read by the next pass.)

Timing: a block RAM's read data arrives late in the cycle (about 5.6 ns on ECP5), so it
only ever goes into a register. The line buffer word of a pair is read one pixel early (at
the previous pair's second pixel, or at the end of the even row for the first pair),
captured at the pair's first pixel (``line_q``), compared with that pixel in the pause
that follows (``upper``), and with the second pixel when it comes. The one read
that can meet a write of the same word (the end of an even row two pixels wide) has its
capture forced to -128 (the flip-flops' synchronous set/reset, no multiplexer behind the
RAM) and the written value folded into the pair's first pixel instead.
"""

from amaranth import Module, Mux, Signal, signed
from amaranth.lib import data, memory, stream, wiring
from amaranth.lib.wiring import In, Out

from contract.config import check_positive_int


def pixel_layout(lanes):
    return data.StructLayout({"x": data.ArrayLayout(signed(8), lanes), "last": 1})


def _max(a, b):
    # Signed order is unsigned order with the sign bit flipped; Yosys maps an unsigned
    # comparison to a bare carry chain, a signed one to a chain and a correcting LUT.
    return Mux((a.as_unsigned() ^ 0x80) > (b.as_unsigned() ^ 0x80), a, b)




class MaxPool2x2(wiring.Component):
    """2x2 max pooling with stride 2 over a row-major pixel stream.

    Parameters
    ----------
    lanes : int
        Channels per pixel beat.
    max_width : int
        Widest feature map the line buffer holds.
    """

    def __init__(self, *, lanes, max_width=64):
        self.lanes = check_positive_int("lanes", lanes, maximum=256)
        self.max_width = check_positive_int("max_width", max_width, maximum=4096)
        if max_width < 2:
            raise ValueError(f"max_width must be at least 2, not {max_width!r}")
        super().__init__({
            "pixels": In(stream.Signature(pixel_layout(lanes))),
            "pooled": Out(stream.Signature(pixel_layout(lanes))),
            "width": In(range(max_width + 1)),
            "height": In(range(1 << 16)),
            # High while a pass may send pixels; the lookahead registers below follow
            # `width` and `height` only then, so a layer that does not pool (whose
            # descriptor still sets them) leaves the pool's registers still.
            "active": In(1, init=1),
        })

    def elaborate(self, platform):
        m = Module()
        lanes = self.lanes
        m.submodules.line = line = memory.Memory(
            shape=data.ArrayLayout(signed(8), lanes), depth=self.max_width // 2, init=[])
        write = line.write_port()
        read = line.read_port(domain="sync")

        x = Signal(range(self.max_width + 1))
        y = Signal(16)
        pair_max = Signal(data.ArrayLayout(signed(8), lanes))  # max of the even-x pixel
        pixel = self.pixels.payload.x
        take = Signal()
        # The cycle after an odd row's first pixel of a pair takes no pixel, so the max of
        # the line word and that pixel (`upper`) is a register by the pair's second pixel
        # and the 2x2 maximum is one comparison. Pixels come from the time-shared
        # requantizer, at most one every lanes // units cycles, so the pause costs a
        # cycle only where a requantizer unit serves a single lane.
        settle = Signal()
        m.d.comb += [
            self.pixels.ready.eq((~self.pooled.valid | self.pooled.ready) & ~settle),
            take.eq(self.pixels.valid & self.pixels.ready),
        ]
        odd_x, odd_y = x[0], y[0]
        # A pixel pairs up only when its partner column exists (drops an odd last column).
        pending = Signal()
        # Prefetch: the first pair's word at the end of an even row, the next pair's word
        # at an odd row's odd pixel when that pair exists (x + 2 < width, so its index
        # (x + 1) / 2 is below width // 2, inside the buffer). What decides the fetch and
        # its address is held in registers for the x of the next take (x + 1 == width,
        # x + 2 < width, (x >> 1) + 1), so the RAM's address and enable are a gate away
        # from flip-flops; they are recomputed every cycle, so `width` must be steady
        # from the cycle before a frame's first pixel, with `active` high.
        row_end = Signal()      # x + 1 == width
        pair_ahead = Signal()   # x + 2 < width
        next_pair = Signal(range(self.max_width // 2 + 2), init=1)  # (x >> 1) + 1
        with m.If(take & ~row_end):
            m.d.sync += [row_end.eq(x + 2 == self.width), pair_ahead.eq(x + 3 < self.width)]
        with m.Elif(take):
            m.d.sync += [row_end.eq(self.width == 1), pair_ahead.eq(self.width > 2),
                         next_pair.eq(1)]
        with m.Elif(self.active):
            m.d.sync += [row_end.eq(x + 1 == self.width), pair_ahead.eq(x + 2 < self.width)]
        with m.If(take & ~row_end & odd_x):
            m.d.sync += next_pair.eq(next_pair + 1)
        # The same for y, which moves at the end of a row.
        last_row = Signal()       # y + 1 == height
        last_row_pair = Signal()  # y + 1 == height & ~1: the last row that pairs up
        with m.If(take & row_end & last_row):
            m.d.sync += [last_row.eq(self.height == 1), last_row_pair.eq(0)]
        with m.Elif(take & row_end):
            m.d.sync += [last_row.eq(y + 2 == self.height),
                         last_row_pair.eq(y + 2 == (self.height & ~1))]
        with m.Elif(self.active):
            m.d.sync += [last_row.eq(y + 1 == self.height),
                         last_row_pair.eq(y + 1 == (self.height & ~1))]
        # A pixel pairs up only when its partner column exists (drops an odd last column).
        paired = odd_x | ~row_end
        # The frame's final input pixel, paired or not.
        frame_end = row_end & last_row
        first_fetch = take & ~odd_y & row_end
        next_fetch = take & odd_y & odd_x & pair_ahead
        line_q = Signal(data.ArrayLayout(signed(8), lanes))  # this pair's line word
        bypass = Signal()  # the fetch met the write of its own word: `bypassed` holds it
        bypassed = Signal(data.ArrayLayout(signed(8), lanes))
        m.d.comb += [
            read.addr.eq(Mux(first_fetch, 0, next_pair)),
            read.en.eq(first_fetch | next_fetch),
            write.addr.eq(x >> 1),
            write.en.eq(take & ~odd_y & odd_x),
        ]
        with m.If(first_fetch | next_fetch):
            m.d.sync += [bypass.eq(write.en & (write.addr == 0) & first_fetch),
                         bypassed.eq(write.data)]
        upper = Signal(data.ArrayLayout(signed(8), lanes))  # max(line word, first pixel)
        m.d.sync += settle.eq(take & odd_y & ~odd_x)
        for lane in range(lanes):
            m.d.comb += write.data[lane].eq(_max(pair_max[lane], pixel[lane]))
            m.d.sync += upper[lane].eq(_max(line_q[lane], pair_max[lane]))
        with m.If(take):
            with m.If(~odd_x):
                with m.If(bypass & odd_y):
                    for lane in range(lanes):
                        m.d.sync += [line_q[lane].eq(-128),
                                     pair_max[lane].eq(_max(pixel[lane], bypassed[lane]))]
                with m.Else():
                    m.d.sync += [pair_max.eq(pixel), line_q.eq(read.data)]
            # End of a frame: restart the counters for the next one (next channel group).
            with m.If(row_end):
                m.d.sync += x.eq(0)
                m.d.sync += y.eq(Mux(last_row, 0, y + 1))
            with m.Else():
                m.d.sync += x.eq(x + 1)
            with m.If(odd_y & odd_x & paired):
                frame_last = last_row_pair & ~pair_ahead  # no pair after this one
                # The frame's last pooled beat waits, invisible, for an unpaired last
                # column or row to pass (`pending`); otherwise it is offered at once.
                m.d.sync += [
                    self.pooled.valid.eq(~frame_last | frame_end),
                    pending.eq(frame_last & ~frame_end),
                    self.pooled.payload.last.eq(frame_last),
                ]
                for lane in range(lanes):
                    m.d.sync += self.pooled.payload.x[lane].eq(
                        _max(upper[lane], pixel[lane]))
            with m.Elif(pending & frame_end):
                m.d.sync += [self.pooled.valid.eq(1), pending.eq(0)]
            with m.Elif(self.pooled.ready):
                m.d.sync += self.pooled.valid.eq(0)
        with m.Elif(self.pooled.ready):
            m.d.sync += self.pooled.valid.eq(0)
        return m
