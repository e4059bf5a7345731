# amaranth: UnusedElaboratable=no
# (the parameter-check tests build components that raise before they can be used)
"""The host bridge (hw/host_bridge.py) alone in Amaranth's simulator, against a register
file and stream sinks: every request type, a repeated SEQ (not executed twice, response
resent), a corrupt frame (NAK), a DATA response kept until the next request, a refused
request, and a frame abandoned after a silent gap."""

import random

import pytest
from amaranth import Module
from amaranth.lib import wiring
from amaranth.lib.memory import Memory
from amaranth.sim import Simulator

from contract import link
from contract.link import FrameType, LinkError
from hw.csr import csr_bus_signature
from hw.host_bridge import HostBridge
from sim.streams import stream_get, stream_put


class FakeCore(wiring.Component):
    """A register file on the CSR bus; that is all the bridge sees of a core's CSRs."""

    csr: wiring.In(csr_bus_signature())

    def elaborate(self, platform):
        m = Module()
        m.submodules.regs = regs = Memory(shape=32, depth=256, init=[])
        write, read = regs.write_port(), regs.read_port()
        m.d.comb += [write.addr.eq(self.csr.addr[2:]), write.data.eq(self.csr.w_data),
                     write.en.eq(self.csr.w_en), read.addr.eq(self.csr.addr[2:]),
                     read.en.eq(self.csr.r_en), self.csr.r_data.eq(read.data)]
        return m


GAP, STALL = 200, 300  # the contract's limits are 2^16 and 2^20 cycles: too long here


def run_bridge(script, c2h_words=(), h2c_ready=1, cycles=100_000):
    """Run ``script(exchange)`` against a bridge; returns (h2c words seen, result).

    ``h2c_ready`` is 0 or 1 for the whole run, or a ``random.Random`` that draws it anew
    every cycle (backpressure from the core)."""
    m = Module()
    m.submodules.bridge = bridge = HostBridge(gap_cycles=GAP, stall_cycles=STALL)
    m.submodules.core = core = FakeCore()
    wiring.connect(m, bridge.csr, core.csr)
    h2c, result = [], {}

    def draw():
        return h2c_ready.random() < 0.5 if isinstance(h2c_ready, random.Random) else h2c_ready

    async def h2c_sink(ctx):
        ctx.set(bridge.h2c.ready, draw())
        async for _, _, valid, ready, payload in ctx.tick().sample(
                bridge.h2c.valid, bridge.h2c.ready, bridge.h2c.payload):
            if valid and ready:
                h2c.append((payload.data, payload.last))
            ctx.set(bridge.h2c.ready, draw())

    async def c2h_source(ctx):
        await ctx.tick().repeat(50)
        for word in c2h_words:
            await stream_put(ctx, bridge.c2h, {"data": word, "last": 0})

    async def host(ctx):
        async def send(data):
            for byte in data:
                await stream_put(ctx, bridge.rx, byte)

        async def exchange(kind, seq, payload=b"", *, corrupt=False):
            frame = bytearray(link.encode(kind, seq, payload))
            if corrupt:
                frame[-3] ^= 0x10
            await send(frame)
            decoder = link.Decoder()
            while True:
                frames = decoder.feed(bytes([await stream_get(ctx, bridge.tx)]))
                if frames:
                    return frames[0]

        async def stall(cycles):
            await ctx.tick().repeat(cycles)

        exchange.send, exchange.stall = send, stall
        result["value"] = await script(exchange)

    sim = Simulator(m)
    sim.add_clock(1e-8)
    sim.add_process(h2c_sink)
    sim.add_testbench(c2h_source)
    sim.add_testbench(host)
    sim.run_until(1e-8 * cycles)
    assert "value" in result, "the bridge stopped answering"
    return h2c, result["value"]


def test_requests_repeats_and_errors():
    async def script(exchange):
        out = [await exchange(FrameType.LINK_RESET, 0)]
        out.append(await exchange(FrameType.CSR_WRITE, 1, link.words([0x10, 0xDEADBEEF])))
        out.append(await exchange(FrameType.CSR_READ, 2, link.words([0x10])))
        out.append(await exchange(FrameType.CSR_WRITE, 3, link.words([0x10, 1])))
        # The same SEQ again (a retry whose first ACK was lost): not applied a second time.
        out.append(await exchange(FrameType.CSR_WRITE, 3, link.words([0x10, 2])))
        out.append(await exchange(FrameType.CSR_READ, 4, link.words([0x10])))
        out.append(await exchange(FrameType.CSR_WRITE, 5, link.words([0x10, 3]),
                                  corrupt=True))
        out.append(await exchange(FrameType.DMA_WRITE_LAST, 6, link.words([7, 8, 9])))
        out.append(await exchange(FrameType.DMA_READ, 7, link.words([3])))
        out.append(await exchange(FrameType.DMA_READ, 7, link.words([3])))  # resent whole
        out.append(await exchange(FrameType.DMA_READ, 8, link.words([10])))
        out.append(await exchange(FrameType.DMA_READ, 9, link.words([10])))
        out.append(await exchange(0x7F, 10))
        out.append(await exchange(FrameType.CSR_READ, 11, link.words([0x10, 0])))
        # Several writes in one frame, applied in order.
        out.append(await exchange(FrameType.CSR_WRITE, 12,
                                  link.words([0x20, 5, 0x24, 6, 0x20, 7])))
        out.append(await exchange(FrameType.CSR_READ, 13, link.words([0x20])))
        out.append(await exchange(FrameType.CSR_READ, 14, link.words([0x24])))
        return out

    h2c, replies = run_bridge(script, c2h_words=[100, 101, 102, 103, 104])
    assert replies == [
        (FrameType.ACK, 0, b""),
        (FrameType.ACK, 1, b""),
        (FrameType.CSR_VALUE, 2, link.words([0xDEADBEEF])),
        (FrameType.ACK, 3, b""),
        (FrameType.ACK, 3, b""),
        (FrameType.CSR_VALUE, 4, link.words([1])),
        (FrameType.NAK, 5, b""),
        (FrameType.ACK, 6, b""),
        (FrameType.DATA, 7, link.words([100, 101, 102])),
        (FrameType.DATA, 7, link.words([100, 101, 102])),
        (FrameType.DATA, 8, link.words([103, 104])),
        (FrameType.DATA, 9, b""),
        (FrameType.ERROR, 10, link.words([LinkError.BAD_TYPE])),
        (FrameType.ERROR, 11, link.words([LinkError.BAD_LENGTH])),
        (FrameType.ACK, 12, b""),
        (FrameType.CSR_VALUE, 13, link.words([7])),
        (FrameType.CSR_VALUE, 14, link.words([6])),
    ]
    assert h2c == [(7, 0), (8, 0), (9, 1)]


def test_full_frames_under_backpressure_and_a_read_buffer_that_wraps():
    """Both RAM read paths at their limits: a DMA write of the largest payload offered to a
    core that takes a word on a random half of the cycles, and DATA responses of 200 words
    at most from a read buffer that wraps (its words go out one word behind the RAM read),
    then a reset that drops the words still stored."""
    seed = 12
    print(f"seed {seed}")
    rng = random.Random(seed)
    sent = [rng.getrandbits(32) for _ in range(link.MAX_PAYLOAD_WORDS)]
    stored = [rng.getrandbits(32) for _ in range(link.READ_BUFFER_WORDS + 164)]

    async def script(exchange):
        return [await exchange(FrameType.LINK_RESET, 0),
                await exchange(FrameType.DMA_WRITE_LAST, 1, link.words(sent)),
                await exchange(FrameType.DMA_READ, 2, link.words([200])),
                await exchange(FrameType.DMA_READ, 2, link.words([200])),  # resent whole
                await exchange(FrameType.DMA_READ, 3, link.words([200])),
                await exchange(FrameType.DMA_READ, 4, link.words([100])),
                # The reset drops the 100 words sent and the 64 still stored.
                await exchange(FrameType.LINK_RESET, 0),
                await exchange(FrameType.DMA_READ, 1, link.words([200]))]

    h2c, replies = run_bridge(script, c2h_words=stored, h2c_ready=random.Random(seed),
                              cycles=40_000)
    assert len(h2c) == len(sent), f"seed {seed}: {len(h2c)} h2c words, not {len(sent)}"
    for i, (got, word) in enumerate(zip(h2c, sent, strict=True)):
        want = (word, int(i == len(sent) - 1))
        assert got == want, f"seed {seed}: h2c word {i} is {got}, not {want}"
    expected = [(FrameType.ACK, 0, b""), (FrameType.ACK, 1, b""),
                (FrameType.DATA, 2, link.words(stored[:200])),
                (FrameType.DATA, 2, link.words(stored[:200])),
                # Only the 56 words left of the full buffer: the 200 are freed by this
                # request, too late for it. The next words wrap round the buffer's end.
                (FrameType.DATA, 3, link.words(stored[200:256])),
                (FrameType.DATA, 4, link.words(stored[256:356])),
                (FrameType.ACK, 0, b""), (FrameType.DATA, 1, b"")]
    assert len(replies) == len(expected)
    for i, (got, want) in enumerate(zip(replies, expected, strict=True)):
        assert got == want, f"seed {seed}: reply {i} differs: {got[:2]} != {want[:2]}"


def test_a_frame_cut_short_is_abandoned_after_the_gap():
    async def script(exchange):
        frame = link.encode(FrameType.CSR_WRITE, 1, link.words([0x10, 5]))
        await exchange.send(frame[:7])   # the rest is lost on the wire
        await exchange.stall(GAP + 10)
        return [await exchange(FrameType.CSR_WRITE, 1, link.words([0x10, 6])),
                await exchange(FrameType.CSR_READ, 2, link.words([0x10]))]

    _, replies = run_bridge(script)
    assert replies == [(FrameType.ACK, 1, b""), (FrameType.CSR_VALUE, 2, link.words([6]))]


def test_a_write_nobody_takes_is_refused_not_hung():
    async def script(exchange):
        return [await exchange(FrameType.DMA_WRITE, 1, link.words([1, 2])),
                await exchange(FrameType.CSR_READ, 2, link.words([0x10]))]

    h2c, replies = run_bridge(script, h2c_ready=0)
    assert replies == [(FrameType.ERROR, 1, link.words([LinkError.H2C_STALL])),
                       (FrameType.CSR_VALUE, 2, link.words([0]))]
    assert h2c == []


def test_limits_are_checked():
    with pytest.raises(ValueError, match="gap_cycles must be a positive integer, not 0"):
        HostBridge(gap_cycles=0)


def test_frames_over_uart_pins():
    """The bridge behind the bit-level UART, as a board wires it (``hw/uart_top.py``): the
    host's own UART sends a register write and a read; the answers come back on the pin."""
    from hw.uart import UartRx, UartTx

    divisor = 4
    m = Module()
    m.submodules.bridge = bridge = HostBridge(gap_cycles=GAP, stall_cycles=STALL)
    m.submodules.core = core = FakeCore()
    m.submodules.dev_rx = dev_rx = UartRx(divisor=divisor)
    m.submodules.dev_tx = dev_tx = UartTx(divisor=divisor)
    m.submodules.host_tx = host_tx = UartTx(divisor=divisor)
    m.submodules.host_rx = host_rx = UartRx(divisor=divisor)
    wiring.connect(m, bridge.csr, core.csr)
    wiring.connect(m, dev_rx.data, bridge.rx)
    wiring.connect(m, bridge.tx, dev_tx.data)
    m.d.comb += [dev_rx.rx.eq(host_tx.tx), host_rx.rx.eq(dev_tx.tx)]
    replies = []

    async def host(ctx):
        decoder = link.Decoder()
        for kind, seq, payload in ((FrameType.CSR_WRITE, 1, link.words([0x30, 0xCAFE])),
                                   (FrameType.CSR_READ, 2, link.words([0x30]))):
            for byte in link.encode(kind, seq, payload):
                await stream_put(ctx, host_tx.data, byte)
            frames = []
            while not frames:
                frames = decoder.feed(bytes([await stream_get(ctx, host_rx.data)]))
            replies.extend(frames)

    sim = Simulator(m)
    sim.add_clock(1e-8)
    sim.add_testbench(host)
    sim.run_until(1e-8 * divisor * 10 * 80)
    assert replies == [(FrameType.ACK, 1, b""), (FrameType.CSR_VALUE, 2, link.words([0xCAFE]))]
