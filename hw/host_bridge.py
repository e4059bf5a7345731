"""The serial host bridge: frames of ``contract/link.py`` in, CSR accesses and DMA words
out to the accelerator top, responses back as frames.

One byte stream in (``rx``), one out (``tx``): a UART (``hw/uart.py``) on a board, the
twin's byte port in simulation (``twin/serial.py``). The protocol is stop and wait, so
one FSM receives a frame, checks its CRC, executes it (or, for a repeated SEQ, skips
that) and sends the response; ``rx`` is only ready while a frame is being received.
Device-to-host words are gathered into a buffer at all times; a DATA response reads them
without removing them, and the next new request commits the removal, so a lost DATA frame
is sent again whole.

Both memories (256 x 32 bits each) have synchronous read ports, so they map onto block RAM
on the ECP5 and on the iCE40, which has no LUT RAM. Every word read from them lands in a
flip-flop before any logic sees it: an ECP5 DP16KD without its output register takes
5.6 ns from clock to data, so even one LUT level behind it cannot make 125 MHz (the
response CRC on the c2h RAM's read data was the 4x4 board build's longest path, 15.0 ns).
"""

from types import SimpleNamespace

from amaranth import Cat, Const, Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from contract.link import (
    CRC_INIT,
    CRC_POLY,
    H2C_STALL_CYCLES,
    MAX_PAYLOAD,
    MAX_PAYLOAD_WORDS,
    READ_BUFFER_WORDS,
    RX_GAP_CYCLES,
    SYNC,
    FrameType,
    LinkError,
)

from .csr import ADDR_WIDTH, csr_bus_signature, word_layout


class Crc16(wiring.Component):
    """The CRC-16/CCITT-FALSE register ``crc`` advanced by ``byte``, in one cycle.

    One shared instance: every bit step reads the previous one twice, so an inlined
    expression would be copied 2^8 times in the netlist."""

    crc: In(16)
    byte: In(8)
    next: Out(16)

    def elaborate(self, platform):
        m = Module()
        value = Signal(16)
        m.d.comb += value.eq(self.crc ^ Cat(Const(0, 8), self.byte))
        for step in range(8):
            shifted = Cat(Const(0, 1), value[:15])
            following = Signal(16, name=f"step{step}")
            m.d.comb += following.eq(Mux(value[15], shifted ^ CRC_POLY, shifted))
            value = following
        m.d.comb += self.next.eq(value)
        return m


def _read_port(m, memory, name):
    """A synchronous read of ``memory``: an asynchronous port and a flip-flop, which Yosys
    merges into one block RAM port (the same cycle of latency as ``read_port()``), reading
    the memory's ``no_rw_check`` on the way. Returns an object with ``addr`` and ``data``."""
    port = memory.read_port(domain="comb")
    data = Signal(memory.shape, name=f"{name}_data")
    m.d.sync += data.eq(port.data)
    return SimpleNamespace(addr=port.addr, data=data)


class HostBridge(wiring.Component):
    """Frames on ``rx``/``tx`` to the top's ``csr`` bus and ``h2c``/``c2h`` streams.

    Ports
    -----
    rx, tx : byte streams from and to the host
    csr : the accelerator's CSR bus (this bridge is its master)
    h2c, c2h : the accelerator's word streams (``hw.top.word_layout``)
    """

    rx: In(stream.Signature(8))
    tx: Out(stream.Signature(8))
    csr: Out(csr_bus_signature())
    h2c: Out(stream.Signature(word_layout()))
    c2h: In(stream.Signature(word_layout()))

    def __init__(self, *, gap_cycles=RX_GAP_CYCLES, stall_cycles=H2C_STALL_CYCLES):
        for name, value in (("gap_cycles", gap_cycles), ("stall_cycles", stall_cycles)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} must be a positive integer, not {value!r}")
        # Shorter limits than the contract's are for tests, which cannot wait 2^20 cycles.
        self.gap_cycles, self.stall_cycles = gap_cycles, stall_cycles
        super().__init__()

    def elaborate(self, platform):
        m = Module()
        depth = READ_BUFFER_WORDS
        # No word is ever read in the cycle it is written: the receive buffer is written
        # while a frame arrives and read after, and a c2h word is written at wr_ptr, outside
        # [head, head + stored) where every word read for a response lies. `no_rw_check`
        # tells Yosys so; without it Yosys keeps the read-old-data rule on a collision with
        # a delayed write, an address comparator and a multiplexer behind the RAM: logic
        # after the DP16KD's 5.6 ns again. Yosys reads the attribute only where it merges a
        # flip-flop into an asynchronous read port, so the ports are built that way
        # (`_read_port`); a synchronous port declares its collision rule itself.
        no_collision = {"no_rw_check": 1}
        m.submodules.rx_mem = rx_mem = Memory(shape=32, depth=MAX_PAYLOAD_WORDS, init=[],
                                              attrs=no_collision)
        m.submodules.c2h_mem = c2h_mem = Memory(shape=32, depth=depth, init=[],
                                                attrs=no_collision)
        rx_w = rx_mem.write_port()
        # Synchronous reads (block RAM on both boards; the iCE40 has no LUT RAM): each is
        # addressed with the *next* index, so the word for the current one is ready.
        rx_r = _read_port(m, rx_mem, "rx_r")
        rx_r2 = _read_port(m, rx_mem, "rx_r2")  # CSR writes take an (offset, value) pair
        c2h_w = c2h_mem.write_port()
        c2h_r = _read_port(m, c2h_mem, "c2h_r")

        # --- device-to-host words: always gathered while there is room ------------------
        wr_ptr = Signal(range(2 * depth))
        head = Signal(range(2 * depth))     # first word not yet committed as delivered
        pending = Signal(range(depth + 1))  # words of the last DATA response
        # wr_ptr - head, kept in a register of its own (updated with both) so that a DATA
        # response's length and c2h.ready start from flip-flops, not from a subtractor.
        stored = Signal(range(depth + 1))
        released = Signal(range(depth + 1))  # words head moves past at this cycle's edge
        m.d.sync += stored.eq(stored + c2h_w.en - released)
        m.d.comb += [
            self.c2h.ready.eq(stored < depth),
            c2h_w.addr.eq(wr_ptr[:-1]),
            c2h_w.data.eq(self.c2h.payload.data),
            c2h_w.en.eq(self.c2h.valid & self.c2h.ready),
        ]
        with m.If(c2h_w.en):
            m.d.sync += wr_ptr.eq(wr_ptr + 1)

        # --- frame fields ---------------------------------------------------------------
        crc = Signal(16, init=CRC_INIT)
        m.submodules.crc = crc_unit = Crc16()
        crc_byte = Signal(8)  # the byte each state feeds the CRC
        m.d.comb += [crc_unit.crc.eq(crc), crc_unit.byte.eq(crc_byte)]

        def crc16_byte(_, byte):
            m.d.comb += crc_byte.eq(byte)
            return crc_unit.next
        frame_type = Signal(8)
        seq = Signal(8)
        length = Signal(16)
        count = Signal(range(MAX_PAYLOAD + 2))   # payload bytes received / sent
        shift = Signal(32)                        # payload word being assembled
        word0 = Signal(32)                        # first two payload words, for CSR frames
        asked = Signal(range(depth + 1))          # word0 of a DMA_READ, at most the buffer
        # word0 is set two cycles at least before EXECUTE reads `asked` (CRC_HI, CRC_LO).
        m.d.sync += asked.eq(Mux(word0 < depth, word0, depth))
        crc_hi = Signal(8)
        last_seq = Signal(8)
        have_last = Signal()                      # last_seq/response are valid

        # The stored response (resent for a repeated SEQ).
        resp_type = Signal(8)
        resp_seq = Signal(8)
        resp_len = Signal(16)
        resp_value = Signal(32)
        index = Signal(range(MAX_PAYLOAD_WORDS + 1))  # h2c word / CSR pair being done
        index_next = Signal.like(index)
        # `index` is the frame's last word (PUSH) or register pair (CSR_WRITE): a flip-flop
        # set a cycle ahead, so no adder and comparator sit before the response registers'
        # enables (index -> +1 -> == -> resp_* was the bridge's longest path, 9.1 ns).
        final = Signal()
        stall = Signal(range(self.stall_cycles + 1))

        words_in = length[2:]
        rx_byte = self.rx.payload
        take = self.rx.valid & self.rx.ready

        # A NAK answers the frame just received without replacing the stored response.
        nak = Signal()
        tx_type, tx_seq, tx_len = Signal(8), Signal(8), Signal(16)
        m.d.comb += [tx_type.eq(Mux(nak, FrameType.NAK, resp_type)),
                     tx_seq.eq(Mux(nak, seq, resp_seq)), tx_len.eq(Mux(nak, 0, resp_len))]

        def respond(kind, value=0, nbytes=0, store=True):
            stmts = [resp_type.eq(kind), resp_seq.eq(seq), resp_value.eq(value),
                     resp_len.eq(nbytes), nak.eq(0)]
            if store:
                stmts += [last_seq.eq(seq), have_last.eq(1)]
            return stmts

        # Receiving a frame and no byte for gap_cycles: give it up and hunt for SYNC.
        gap = Signal(range(self.gap_cycles + 1))
        give_up = Signal()
        m.d.comb += give_up.eq(gap == self.gap_cycles)

        m.d.comb += index_next.eq(index)
        # The c2h word being sent, from a flip-flop. Reads run one word ahead: the header
        # states read the first word (count is 0 from TX_TYPE on), TX_PAYLOAD reads the
        # word after the one going out, and the last byte of a word loads the next one.
        tx_word = Signal(32)
        # The h2c word on offer, from a flip-flop for the same reason (it goes on to the
        # loader's gather mux and the engine's activation input).
        h2c_word = Signal(32)

        def listen():
            m.d.comb += self.rx.ready.eq(1)
            with m.If(give_up & ~self.rx.valid):
                m.next = "SYNC"

        # CSR writes leave through registers: the address then reaches the CSR decoder from
        # a flip-flop instead of from the receive RAM's read port (that path, RAM -> CSR
        # decode -> read mux, was the whole board build's longest). The write lands one
        # cycle after its frame word is read, long before the ACK has left.
        # The address itself is one register: the write's while one is in flight (it is
        # set beside `wr_en`), else `word0`'s, which a read uses (`word0` holds still for
        # cycles before EXECUTE). As a multiplexer on `wr_en` it put two LUTs and the
        # bridge's corner of the die before the CSR read multiplexer (the 16x8 pumped
        # build's engine-clock critical path at e79a1d6: 17.79 ns).
        csr_addr, wr_data, wr_en = Signal(ADDR_WIDTH), Signal(32), Signal()
        m.d.sync += [wr_en.eq(0), csr_addr.eq(word0[:ADDR_WIDTH])]
        m.d.comb += [self.csr.addr.eq(csr_addr),
                     self.csr.w_data.eq(wr_data), self.csr.w_en.eq(wr_en)]

        # The request decoded into flip-flops, so EXECUTE's choice (and the response
        # registers' enables behind it) starts from five bits, not from TYPE and LEN.
        # Both are set in the header, two cycles at least before EXECUTE (CRC_HI, CRC_LO).
        def check(kind, nbytes):
            return (frame_type == kind) & (length == nbytes)
        is_csr_write, is_csr_read, is_dma_read, is_push = (
            Signal(name=name) for name in ("is_csr_write", "is_csr_read", "is_dma_read",
                                           "is_push"))
        error_code = Signal(8)
        known = Const(0)
        for kind in FrameType:
            if kind < 0x80:  # a request: a response type is not one here
                known = known | (frame_type == kind)
        writing = ((frame_type == FrameType.DMA_WRITE)
                   | (frame_type == FrameType.DMA_WRITE_LAST))
        m.d.sync += [
            is_csr_write.eq((frame_type == FrameType.CSR_WRITE) & (length != 0)
                            & (length[:3] == 0)),
            is_csr_read.eq(check(FrameType.CSR_READ, 4)),
            is_dma_read.eq(check(FrameType.DMA_READ, 4)),
            is_push.eq(writing & (length != 0)),
            error_code.eq(Mux(known, LinkError.BAD_LENGTH, LinkError.BAD_TYPE)),
        ]

        with m.FSM(name="bridge") as fsm:

            with m.State("SYNC"):
                m.d.comb += self.rx.ready.eq(1)
                with m.If(take & (rx_byte == SYNC)):
                    m.d.sync += [crc.eq(CRC_INIT), count.eq(0)]
                    m.next = "TYPE"
            for state, field, following in (("TYPE", frame_type, "SEQ"),
                                            ("SEQ", seq, "LEN_LO"),
                                            ("LEN_LO", length[:8], "LEN_HI")):
                with m.State(state):
                    listen()
                    with m.If(take):
                        m.d.sync += [field.eq(rx_byte), crc.eq(crc16_byte(crc, rx_byte))]
                        m.next = following
            with m.State("LEN_HI"):
                listen()
                with m.If(take):
                    m.d.sync += [length[8:].eq(rx_byte), crc.eq(crc16_byte(crc, rx_byte))]
                    full = Cat(length[:8], rx_byte)
                    with m.If((full > MAX_PAYLOAD) | full[:2].any()):
                        # A corrupt header: the frame's end is unknown. NAK at once and
                        # hunt for the next SYNC in whatever follows.
                        m.d.sync += nak.eq(1)
                        m.next = "TX_SYNC"
                    with m.Elif(full == 0):
                        m.next = "CRC_HI"
                    with m.Else():
                        m.next = "PAYLOAD"
            with m.State("PAYLOAD"):
                listen()
                word = Cat(shift[8:], rx_byte)
                m.d.comb += [rx_w.addr.eq(count[2:]), rx_w.data.eq(word),
                             rx_w.en.eq(take & (count[:2] == 3))]
                with m.If(take):
                    m.d.sync += [shift.eq(word), count.eq(count + 1),
                                 crc.eq(crc16_byte(crc, rx_byte))]
                    with m.If(count == 3):
                        m.d.sync += word0.eq(word)
                    with m.If(count + 1 == length):
                        m.next = "CRC_HI"
            with m.State("CRC_HI"):
                listen()
                with m.If(take):
                    m.d.sync += crc_hi.eq(rx_byte)
                    m.next = "CRC_LO"
            with m.State("CRC_LO"):
                listen()
                with m.If(take):
                    with m.If(Cat(rx_byte, crc_hi) != crc):
                        m.d.sync += nak.eq(1)
                        m.next = "TX_SYNC"
                    with m.Elif(frame_type == FrameType.LINK_RESET):
                        m.next = "RESET"
                    with m.Elif(have_last & (seq == last_seq)):
                        m.d.sync += nak.eq(0)
                        m.next = "TX_SYNC"  # a repeat: send the stored response again
                    with m.Else():
                        m.next = "COMMIT"
            # Moving head (and `stored` with it) takes a state of its own, so the frame's
            # checks above do not reach the subtraction that updates `stored`.
            with m.State("RESET"):
                m.d.comb += released.eq(stored)
                m.d.sync += [head.eq(wr_ptr), pending.eq(0),
                             *respond(FrameType.ACK, store=False), have_last.eq(0)]
                m.next = "TX_SYNC"
            with m.State("COMMIT"):
                # A new request: the last DATA response was delivered.
                m.d.comb += released.eq(pending)
                m.d.sync += [head.eq(head + pending), pending.eq(0)]
                m.next = "EXECUTE"
            with m.State("EXECUTE"):
                with m.If(is_csr_write):
                    m.d.comb += index_next.eq(0)
                    m.d.sync += final.eq(words_in == 2)
                    m.next = "CSR_WRITE"
                with m.Elif(is_csr_read):
                    m.d.comb += self.csr.r_en.eq(1)  # at `word0` (no write in flight)
                    m.next = "CSR_READ"
                with m.Elif(is_dma_read):
                    limit = Mux(asked < stored, asked, stored)
                    m.d.sync += [pending.eq(limit), *respond(FrameType.DATA, 0, limit << 2)]
                    m.next = "TX_SYNC"
                with m.Elif(is_push):
                    m.d.comb += index_next.eq(0)  # rx_r reads word 0 for PUSH_LOAD
                    m.d.sync += stall.eq(0)
                    m.next = "PUSH_LOAD"
                with m.Else():
                    m.d.sync += respond(FrameType.ERROR, error_code, 4)
                    m.next = "TX_SYNC"
            with m.State("CSR_WRITE"):
                # One register a cycle, in the frame's order.
                m.d.sync += [csr_addr.eq(rx_r.data[:ADDR_WIDTH]), wr_data.eq(rx_r2.data),
                             wr_en.eq(1)]
                m.d.comb += index_next.eq(index + 1)
                m.d.sync += final.eq((index + 2) << 1 == words_in)
                with m.If(final):
                    m.d.sync += respond(FrameType.ACK)
                    m.next = "TX_SYNC"
            with m.State("CSR_READ"):
                m.d.sync += respond(FrameType.CSR_VALUE, self.csr.r_data, 4)
                m.next = "TX_SYNC"
            with m.State("PUSH_LOAD"):
                # Word `index` leaves the RAM; PUSH offers it from h2c_word. Two cycles a
                # word at most, against the 1,680 a word takes on the wire at 3 Mbaud.
                m.d.sync += [h2c_word.eq(rx_r.data), final.eq(index + 1 == words_in)]
                m.next = "PUSH"
            with m.State("PUSH"):
                m.d.comb += [self.h2c.valid.eq(1),
                             self.h2c.payload.data.eq(h2c_word),
                             self.h2c.payload.last.eq(
                                 final & (frame_type == FrameType.DMA_WRITE_LAST))]
                with m.If(self.h2c.ready):
                    m.d.comb += index_next.eq(index + 1)
                    m.d.sync += stall.eq(0)
                    with m.If(final):
                        m.d.sync += respond(FrameType.ACK)
                        m.next = "TX_SYNC"
                    with m.Else():
                        m.next = "PUSH_LOAD"
                with m.Elif(stall == self.stall_cycles):
                    m.d.sync += respond(FrameType.ERROR, LinkError.H2C_STALL, 4)
                    m.next = "TX_SYNC"
                with m.Else():
                    m.d.sync += stall.eq(stall + 1)

            # --- the response: the stored one, whether new or repeated ------------------
            def send(byte, following, update_crc=True):
                m.d.comb += [self.tx.valid.eq(1), self.tx.payload.eq(byte)]
                with m.If(self.tx.ready):
                    if update_crc:
                        m.d.sync += crc.eq(crc16_byte(crc, byte))
                    m.next = following

            with m.State("TX_SYNC"):
                m.d.sync += [crc.eq(CRC_INIT), count.eq(0)]
                send(SYNC, "TX_TYPE", update_crc=False)
            for state, byte, following in (("TX_TYPE", tx_type, "TX_SEQ"),
                                           ("TX_SEQ", tx_seq, "TX_LEN_LO"),
                                           ("TX_LEN_LO", tx_len[:8], "TX_LEN_HI"),
                                           ("TX_LEN_HI", tx_len[8:], "TX_PAYLOAD")):
                with m.State(state):
                    # The last of these cycles leaves the first word in tx_word: each
                    # state lasts a cycle at least, and two states before it read it.
                    m.d.sync += tx_word.eq(c2h_r.data)
                    send(byte, following)
            with m.State("TX_PAYLOAD"):
                with m.If(count == tx_len):
                    m.next = "TX_CRC_HI"
                with m.Else():
                    source = Mux(resp_type == FrameType.DATA, tx_word, resp_value)
                    byte = source.word_select(count[:2], 8)
                    m.d.comb += [self.tx.valid.eq(1), self.tx.payload.eq(byte)]
                    with m.If(self.tx.ready):
                        m.d.sync += [crc.eq(crc16_byte(crc, byte)), count.eq(count + 1)]
                        with m.If(count[:2] == 3):
                            # c2h_r has read the next word since this one's first byte.
                            m.d.sync += tx_word.eq(c2h_r.data)
            with m.State("TX_CRC_HI"):
                send(crc[8:], "TX_CRC_LO", update_crc=False)
            with m.State("TX_CRC_LO"):
                send(crc[:8], "SYNC", update_crc=False)
        m.d.comb += [
            # In PUSH the next word, from `index` alone: h2c.ready (the core's) does not
            # reach the RAM's address.
            rx_r.addr.eq(Mux(fsm.ongoing("CSR_WRITE"), index_next << 1,
                             Mux(fsm.ongoing("PUSH"), index + 1, index_next))),
            rx_r2.addr.eq((index_next << 1) | 1),
            # From registers only (tx.ready no longer reaches it): one word ahead of the
            # one going out while the payload is sent, the first word before.
            c2h_r.addr.eq((head + (count >> 2) + fsm.ongoing("TX_PAYLOAD"))
                          [:len(c2h_r.addr)]),
        ]
        m.d.sync += index.eq(index_next)
        receiving = Cat(fsm.ongoing(state) for state in (
            "TYPE", "SEQ", "LEN_LO", "LEN_HI", "PAYLOAD", "CRC_HI", "CRC_LO")).any()
        with m.If(receiving & ~self.rx.valid & ~give_up):
            m.d.sync += gap.eq(gap + 1)
        with m.Else():
            m.d.sync += gap.eq(0)
        return m
