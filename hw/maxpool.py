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
captured at the pair's first pixel (``line_q``), and compared at its second. The one read
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
    return Mux(a > b, a, b)


def _max3(a, b, c):
    """``max(a, b, c)`` with its three comparisons side by side (one comparator deep, then
    a selection), rather than two maxima in a row."""
    a_b, a_c, b_c = a > b, a > c, b > c
    return Mux(a_b & a_c, a, Mux(~a_b & b_c, b, c))


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
        m.d.comb += [
            self.pixels.ready.eq(~self.pooled.valid | self.pooled.ready),
            take.eq(self.pixels.valid & self.pixels.ready),
        ]
        odd_x, odd_y = x[0], y[0]
        # A pixel pairs up only when its partner column exists (drops an odd last column).
        paired = odd_x | (x + 1 < self.width)
        last_row_pair = y + 1 == (self.height & ~1)
        # The frame's final input pixel, paired or not.
        frame_end = (x + 1 == self.width) & (y + 1 == self.height)
        pending = Signal()
        row_end = x + 1 == self.width
        # Prefetch: the first pair's word at the end of an even row, the next pair's word
        # at an odd row's odd pixel when that pair exists (x + 2 < width, so its index
        # (x + 1) / 2 is below width // 2, inside the buffer).
        first_fetch = take & ~odd_y & row_end
        next_fetch = take & odd_y & odd_x & (x + 2 < self.width)
        line_q = Signal(data.ArrayLayout(signed(8), lanes))  # this pair's line word
        bypass = Signal()  # the fetch met the write of its own word: `bypassed` holds it
        bypassed = Signal(data.ArrayLayout(signed(8), lanes))
        m.d.comb += [
            read.addr.eq(Mux(first_fetch, 0, (x >> 1) + 1)),
            read.en.eq(first_fetch | next_fetch),
            write.addr.eq(x >> 1),
            write.en.eq(take & ~odd_y & odd_x),
        ]
        with m.If(first_fetch | next_fetch):
            m.d.sync += [bypass.eq(write.en & (write.addr == 0) & first_fetch),
                         bypassed.eq(write.data)]
        for lane in range(lanes):
            m.d.comb += write.data[lane].eq(_max(pair_max[lane], pixel[lane]))
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
                m.d.sync += y.eq(Mux(y + 1 == self.height, 0, y + 1))
            with m.Else():
                m.d.sync += x.eq(x + 1)
            with m.If(odd_y & odd_x & paired):
                frame_last = last_row_pair & (x + 2 > self.width - 1)
                # The frame's last pooled beat waits, invisible, for an unpaired last
                # column or row to pass (`pending`); otherwise it is offered at once.
                m.d.sync += [
                    self.pooled.valid.eq(~frame_last | frame_end),
                    pending.eq(frame_last & ~frame_end),
                    self.pooled.payload.last.eq(frame_last),
                ]
                for lane in range(lanes):
                    m.d.sync += self.pooled.payload.x[lane].eq(
                        _max3(line_q[lane], pair_max[lane], pixel[lane]))
            with m.Elif(pending & frame_end):
                m.d.sync += [self.pooled.valid.eq(1), pending.eq(0)]
            with m.Elif(self.pooled.ready):
                m.d.sync += self.pooled.valid.eq(0)
        with m.Elif(self.pooled.ready):
            m.d.sync += self.pooled.valid.eq(0)
        return m
