"""Resident execution: a data memory, a program memory and a player in front of the
accelerator, so that one start runs a whole model (``contract/resident.py`` defines the
program; ``docs/resident.md`` the host's protocol).

The player replays, for each engine pass, what the host does in layer-at-a-time mode: the
pass's register writes on the accelerator's CSR bus (the player is its bus master while it
runs), then the host-to-device stream read from the data memory by segments while the
device-to-host stream is written back into it. The accelerator core (``hw/top.py``) is the
one the layer-at-a-time mode uses, unchanged: :func:`accelerator_top` returns it alone on a
build without resident memories, so those netlists stay what they were.

```
host csr ─┬─ 0x200.. ─► CsrBank (RES_*) ─► ResidentPlayer (m.FSM) ─ fetch ◄─ program memory
          └─ else ────────────────────────► AcceleratorTop.csr ◄── the player while busy
host h2c ──► AcceleratorTop.h2c  (idle)      │ SegmentReader ◄── data memory (read port)
         ├─► SegmentWriter (load, RECV)      │ SegmentWriter ──► data memory (write port)
         └─► SegmentReader (PASS host segment: the input straight into its pass)
host c2h ◄── AcceleratorTop.c2h  (idle)      │ reader ──► AcceleratorTop.h2c (PASS)
         ◄── SegmentReader (read-back, SEND) │ AcceleratorTop.c2h ──► writer (PASS)
```
"""

from amaranth import Module, Mux, ResetInserter, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out
from amaranth.utils import ceil_log2

from contract.config import ConvEngineConfig
from contract.descriptor import ADD_PARAM_FIELDS
from contract.regmap import ERROR_CODES, by_name, resident_registers
from contract.resident import HEADER_FIELDS, OPS, SEGMENT_WORDS, BootImage
from contract.streams import WORD_BITS

from .csr import CsrBank, csr_bus_signature, word_layout
from .pipeline import SkidBuffer
from .postprocess import add_params_layout
from .resident_add import ResidentAdder
from .resident_segments import SegmentReader, SegmentWriter
from .soft_reset import soft_reset_write
from .top import AcceleratorTop

__all__ = ["DataMemory", "ProgramMemory", "ResidentPlayer", "ResidentTop", "accelerator_top"]

_REG = by_name()
_CSR_STATUS, _CSR_ERROR_CODE = (_REG[name].offset for name in ("STATUS", "ERROR_CODE"))
_STATUS_DONE, _STATUS_ERROR = (1 << {f.name: f for f in _REG["STATUS"].fields}[name].lsb
                               for name in ("done", "error"))
_RES_CTRL = {f.name: f.lsb for f in _REG["RES_CTRL"].fields}
#: Cycles from the player's read strobe on the accelerator's bus to the answer it samples.
_POLL_PERIOD = 3
#: Cycles from an address on the program memory's read port to its word at the player: the
#: block RAM, then a register (:class:`ProgramMemory`).
PROGRAM_READ_LATENCY = 2


def accelerator_top(config, image=None):
    """The accelerator as a host link's top instantiates it: ``AcceleratorTop`` alone, or
    behind the resident block when ``config`` has resident memories (holding ``image``, a
    :class:`contract.resident.BootImage`, from power-up when given)."""
    if config.resident:
        return ResidentTop(config, image=image)
    if image is not None:
        raise ValueError(f"a boot image needs a configuration with resident memories "
                         f"(resident_words > 0), not {config.name}")
    return AcceleratorTop(config)


#: Words in one bank of the data memory (:class:`DataMemory`): 8 DP16KD of 4096 x 4.
DATA_BANK_WORDS = 4096


def data_bank_registers(words, bank_words=DATA_BANK_WORDS):
    """Flip-flops of the banks of a :class:`DataMemory` of ``words``: each bank's copy of
    the read address, its registered write (address, data and enable) and its registered
    word. The resource model (``tessera.explore.resource_model``) counts them, since they
    grow with the memory while the player's own logic does not."""
    registers = 0
    for base in range(0, words, bank_words):
        address_bits = max(1, ceil_log2(min(bank_words, words - base)))
        registers += 2 * address_bits + 2 * WORD_BITS + 1
    return registers


class DataMemory(wiring.Component):
    """The data memory: 32-bit words in banks of ``bank_words``, each bank a memory of its
    own behind registers, so that no path crosses the die from one register to a block RAM
    and on to another (the 85F's data memory is 72 DP16KD, placed wherever they are).

    A bank copies the read address when it falls in that bank (so that the copies are not
    merged into one register that drives every block), reads every cycle, and its word is
    registered (zero unless it is the bank read); the word read is the OR of those
    registers: on ``rd_data`` :attr:`READ_LATENCY` cycles after its address was on
    ``rd_addr``. A write is registered in its bank too and lands the cycle after the
    write port's.

    Parameters
    ----------
    depth : int
        Words in all.
    bank_words : int
        Words in a bank, a power of 2 (the last bank holds the rest).
    init : sequence of int
        The first words' initial contents (the rest zero).
    """

    #: Cycles from an address on ``rd_addr`` to its word on ``rd_data``: the bank's copy of
    #: the address, the block RAM's read, the bank's output register.
    READ_LATENCY = 3

    def __init__(self, *, depth, bank_words=DATA_BANK_WORDS, init=()):
        self._MustUse__silence = True  # until the parameters are accepted
        if not isinstance(depth, int) or depth < 1:
            raise ValueError(f"depth must be a positive integer, not {depth!r}")
        if not isinstance(bank_words, int) or bank_words < 1 or bank_words & (bank_words - 1):
            raise ValueError(f"bank_words must be a power of 2, not {bank_words!r}")
        self.depth, self.bank_words, self.init = depth, bank_words, list(init)
        if len(self.init) > depth:
            raise ValueError(f"init has {len(self.init)} words, more than the {depth} "
                             f"of the memory")
        self._MustUse__silence = False
        bits = max(1, ceil_log2(depth))
        super().__init__({"rd_addr": In(bits), "rd_data": Out(WORD_BITS),
                          "w_addr": In(bits), "w_data": In(WORD_BITS), "w_en": In(1)})

    def elaborate(self, platform):
        m = Module()
        bank_bits = ceil_log2(self.bank_words)
        banks = -(-self.depth // self.bank_words)
        rd_bank, w_bank = self.rd_addr[bank_bits:], self.w_addr[bank_bits:]
        # The bank whose block RAMs read the address now, and the one whose word is out
        # (at least a bit wide: a zero-width register trips Yosys's ABC9 pass).
        at_ram, at_out = Signal(max(1, len(rd_bank))), Signal(max(1, len(rd_bank)))
        m.d.sync += [at_ram.eq(rd_bank), at_out.eq(at_ram)]
        words = []
        for index in range(banks):
            base = index * self.bank_words
            depth = min(self.bank_words, self.depth - base)
            memory = Memory(shape=WORD_BITS, depth=depth,
                            init=self.init[base:base + depth])
            m.submodules[f"bank{index}"] = memory
            read, write = memory.read_port(), memory.write_port()
            here = rd_bank == index if banks > 1 else 1
            rd_addr = Signal(len(read.addr), name=f"bank{index}_rd_addr")
            with m.If(here):
                m.d.sync += rd_addr.eq(self.rd_addr[:len(read.addr)])
            w_here = self.w_en & (w_bank == index if banks > 1 else 1)
            w_addr = Signal(len(write.addr), name=f"bank{index}_w_addr")
            w_data = Signal(WORD_BITS, name=f"bank{index}_w_data")
            w_en = Signal(name=f"bank{index}_w_en")
            m.d.sync += w_en.eq(w_here)
            with m.If(w_here):
                m.d.sync += [w_addr.eq(self.w_addr[:len(write.addr)]), w_data.eq(self.w_data)]
            word = Signal(WORD_BITS, name=f"bank{index}_word")
            m.d.sync += word.eq(Mux(at_out == index, read.data, 0))
            m.d.comb += [read.addr.eq(rd_addr), write.addr.eq(w_addr),
                         write.data.eq(w_data), write.en.eq(w_en)]
            words.append(word)
        result = words[0]
        for word in words[1:]:
            result = result | word
        m.d.comb += self.rd_data.eq(result)
        return m


class ProgramMemory(wiring.Component):
    """The program memory: 32-bit words, read every cycle, its word registered after the
    block RAM (on ``rd_data`` :data:`PROGRAM_READ_LATENCY` cycles after its address), so
    that the player's logic never starts from a block RAM's slow output.

    Parameters
    ----------
    depth : int
        Words.
    init : sequence of int
        The first words' initial contents (the rest zero).
    """

    def __init__(self, *, depth, init=()):
        self.depth, self.init = depth, list(init)
        bits = max(1, ceil_log2(depth))
        super().__init__({"rd_addr": In(bits), "rd_data": Out(WORD_BITS),
                          "w_addr": In(bits), "w_data": In(WORD_BITS), "w_en": In(1)})

    def elaborate(self, platform):
        m = Module()
        m.submodules.memory = memory = Memory(shape=WORD_BITS, depth=self.depth,
                                              init=self.init)
        read, write = memory.read_port(), memory.write_port()
        m.d.comb += [read.addr.eq(self.rd_addr), write.addr.eq(self.w_addr),
                     write.data.eq(self.w_data), write.en.eq(self.w_en)]
        m.d.sync += self.rd_data.eq(read.data)
        return m


class ResidentPlayer(wiring.Component):
    """Runs the program of the program memory, loads the memories from the host's stream
    and reads the data memory back to it (``contract.resident``).

    Commands (one-cycle strobes, taken only when idle): ``run``, ``load_data``,
    ``load_program``, ``read_data``. ``busy`` lasts until the command is over; then
    ``set_done`` or ``set_error`` pulses, with ``error_code`` and ``pc`` saying why and
    where. ``loading`` marks the writes of a load (the checksum's words).

    Parameters
    ----------
    data_words, program_words : int
        Depths of the data memory and of the program memory (32-bit words).
    data_read_latency : int
        Cycles from ``data_rd_addr`` to its word on ``data_rd_data`` (the data memory reads
        every cycle: :class:`DataMemory`).
    """

    def __init__(self, *, data_words, program_words, data_read_latency=1, resident_add=False):
        self.data_words, self.program_words = data_words, program_words
        self.data_read_latency = data_read_latency
        self.resident_add = resident_add
        word = stream.Signature(word_layout())
        super().__init__({
            "run": In(1), "load_data": In(1), "load_program": In(1), "read_data": In(1),
            "addr": In(32), "count": In(32), "loops": In(32),
            "busy": Out(1), "set_done": Out(1), "set_error": Out(1),
            "pc": Out(32), "error_code": Out(32), "loading": Out(1),
            # Master of the accelerator's registers while busy.
            "accel_csr": Out(csr_bus_signature()),
            "to_accel": Out(word), "from_accel": In(word),
            "to_host": Out(word), "from_host": In(word),
            "data_rd_addr": Out(32), "data_rd_data": In(WORD_BITS),
            # The program memory's word comes PROGRAM_READ_LATENCY cycles after its address.
            "prog_rd_addr": Out(32), "prog_rd_data": In(WORD_BITS),
            # The writer's registered write, to the data memory (target 0) or the
            # program memory (target 1).
            "w_addr": Out(32), "w_data": Out(WORD_BITS), "w_en": Out(1), "w_target": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        engine_reset = Signal()
        m.submodules.reader = reader = ResetInserter(engine_reset)(
            SegmentReader(depth=self.data_words, latency=self.data_read_latency))
        m.submodules.writer = writer = ResetInserter(engine_reset)(
            SegmentWriter(depths=(self.data_words, self.program_words)))
        m.d.comb += [reader.rd_data.eq(self.data_rd_data), self.w_target.eq(writer.target_now)]
        # A PASS_ADD's results pass the residual add before they are stored; its operand
        # reads take the data memory's read port from the reader for their cycle.
        adding_pass = Signal()
        add_busy, add_read = Signal(), Signal()
        add_params = Signal(add_params_layout())
        if self.resident_add:
            m.submodules.adder = adder = ResetInserter(engine_reset)(
                ResidentAdder(read_latency=self.data_read_latency))
            m.d.comb += [
                adder.valid.eq(writer.w_en & adding_pass), adder.addr.eq(writer.w_addr),
                adder.a.eq(writer.w_data), adder.offset.eq(writer.w_fill),
                adder.params.eq(add_params), adder.rd_data.eq(self.data_rd_data),
                add_busy.eq(adder.busy), add_read.eq(adder.read),
                self.data_rd_addr.eq(Mux(adder.read, adder.rd_addr, reader.rd_addr)),
                self.w_addr.eq(Mux(adding_pass, adder.w_addr, writer.w_addr)),
                self.w_data.eq(Mux(adding_pass, adder.w_data, writer.w_data)),
                self.w_en.eq(Mux(adding_pass, adder.w_en, writer.w_en)),
            ]
        else:
            m.d.comb += [self.data_rd_addr.eq(reader.rd_addr),
                         self.w_addr.eq(writer.w_addr), self.w_data.eq(writer.w_data),
                         self.w_en.eq(writer.w_en)]

        # --- streams: the reader feeds the accelerator or the host, the writer takes
        # from either; the choice is made when the engine starts. The accelerator's
        # streams pass skid buffers, so that no combinational path runs from the player's
        # engines into the core's stream logic and back (a cycle of latency each way) ----
        sink_host, source_host = Signal(), Signal()
        m.submodules.to_accel_skid = to_accel = ResetInserter(engine_reset)(
            SkidBuffer(word_layout()))
        m.submodules.from_accel_skid = from_accel = ResetInserter(engine_reset)(
            SkidBuffer(word_layout()))
        wiring.connect(m, to_accel.source, wiring.flipped(self.to_accel))
        wiring.connect(m, wiring.flipped(self.from_accel), from_accel.sink)
        # The host's stream too: the top hands it to the player by the player's busy, and
        # without the buffer that decision reached the engines' walkers (a word taken steps
        # them) across the die (the 85F resident build's critical path). It holds at most
        # two words, which only a command of the player takes.
        m.submodules.from_host_skid = host_in = ResetInserter(engine_reset)(
            SkidBuffer(word_layout()))
        wiring.connect(m, wiring.flipped(self.from_host), host_in.sink)
        from_host = host_in.source
        out = reader.output
        m.d.comb += [
            self.to_host.payload.eq(out.payload), to_accel.sink.payload.eq(out.payload),
            self.to_host.valid.eq(out.valid & sink_host),
            to_accel.sink.valid.eq(out.valid & ~sink_host),
            out.ready.eq(Mux(sink_host, self.to_host.ready, to_accel.sink.ready)),
            writer.input.payload.eq(Mux(source_host, from_host.payload,
                                        from_accel.source.payload)),
            writer.input.valid.eq(Mux(source_host, from_host.valid,
                                      from_accel.source.valid)),
            # In a PASS (the writer takes the accelerator's words) the host's words go to
            # the reader's host segments: the model's input, straight into its pass.
            reader.host.payload.eq(from_host.payload),
            reader.host.valid.eq(from_host.valid & ~source_host),
            from_host.ready.eq(Mux(source_host, writer.input.ready, reader.host.ready)),
            from_accel.source.ready.eq(writer.input.ready & ~source_host),
        ]

        # --- the fetcher: a segment's words from the program memory into the engine that
        # asked, one word a cycle: an engine with nothing to walk first, then the reader ---
        fetching, for_writer = Signal(), Signal()
        fetch_addr, fetch_index = Signal(32), Signal(range(SEGMENT_WORDS + 1))
        # A word read arrives PROGRAM_READ_LATENCY (2) cycles after its address.
        asked, asked_index = Signal(), Signal(range(SEGMENT_WORDS))
        arrived, arrived_index = Signal(), Signal(range(SEGMENT_WORDS))
        m.d.sync += [asked.eq(fetching & (fetch_index < SEGMENT_WORDS)),
                     asked_index.eq(fetch_index),
                     arrived.eq(asked), arrived_index.eq(asked_index)]
        with m.If(~fetching):
            writer_first = writer.starved & ~reader.starved | ~reader.need_segment
            with m.If(reader.need_segment | writer.need_segment):
                m.d.sync += [fetching.eq(1), for_writer.eq(writer_first),
                             fetch_index.eq(0),
                             fetch_addr.eq(Mux(writer_first, writer.segment_ptr,
                                               reader.segment_ptr))]
        with m.Elif(fetch_index < SEGMENT_WORDS):
            m.d.sync += [fetch_addr.eq(fetch_addr + 1), fetch_index.eq(fetch_index + 1)]
        done_fetch = fetching & (fetch_index == SEGMENT_WORDS) & ~asked & ~arrived
        with m.If(done_fetch):
            m.d.sync += fetching.eq(0)
        for engine, mine in ((reader, ~for_writer), (writer, for_writer)):
            m.d.comb += [engine.seg_word_valid.eq(arrived & mine),
                         engine.seg_word_index.eq(arrived_index),
                         engine.seg_word.eq(self.prog_rd_data),
                         engine.seg_loaded.eq(done_fetch & mine)]

        # --- the program's state ---------------------------------------------------------
        pc, cursor, record_end = self.pc, Signal(32), Signal(32)
        op = Signal(8)
        counts = {name: Signal(8, name=f"count_{name}") for name, _ in HEADER_FIELDS}
        loops_left = Signal(32)
        offset = Signal(32)
        accel_done = Signal()
        poll = Signal(range(_POLL_PERIOD + 1))
        bus = self.accel_csr
        m.d.sync += [bus.w_en.eq(0), bus.r_en.eq(0), self.set_done.eq(0),
                     self.set_error.eq(0), engine_reset.eq(0)]
        if self.resident_add:
            # The ADD_* values as the player writes them to the accelerator's registers (it
            # is their only writer while it runs; a program writes them before its first
            # PASS_ADD uses them).
            with m.If(bus.w_en):
                for name, width, _, _ in ADD_PARAM_FIELDS:
                    with m.If(bus.addr == _REG[f"ADD_{name.upper()}"].offset):
                        m.d.sync += getattr(add_params, name).eq(bus.w_data[:width])
        is_pass = op == OPS["PASS"]
        if self.resident_add:
            is_pass = is_pass | (op == OPS["PASS_ADD"])
        main_addr = Signal(32)
        m.d.comb += self.prog_rd_addr.eq(Mux(fetching, fetch_addr, main_addr))
        # Look-ahead: once a PASS's reader is through, the player reads the next record's
        # header and, for a PASS, starts that pass's reader already, so its first segment
        # is fetched and its first words wait at the accelerator's door while this pass
        # computes (the core takes no host word between passes). ``ahead``: the reader
        # runs the next PASS's reads; it issues none until this pass's writer is through,
        # since they may read what this pass writes.
        ahead, peeked = Signal(), Signal()
        peek_fits = Signal()  # the next record's header is inside the program memory
        peek_step = Signal(range(4))
        peek_op, peek_reads = Signal(8), Signal(8)
        peek_ptr, peek_end = Signal(32), Signal(32)
        m.d.comb += reader.hold.eq((ahead & (writer.busy | add_busy)) | add_read)

        def fail(code):
            m.d.sync += self.error_code.eq(code)
            m.next = "FAIL"

        def start_reader(**options):
            m.d.comb += reader.start.eq(1)
            m.d.sync += sink_host.eq(options.pop("host"))
            for name, value in options.items():
                m.d.comb += getattr(reader, name).eq(value)

        def start_writer(**options):
            m.d.comb += writer.start.eq(1)
            m.d.sync += source_host.eq(options.pop("host"))
            for name, value in options.items():
                m.d.comb += getattr(writer, name).eq(value)

        bad_address, bad_record = ERROR_CODES["BAD_ADDRESS"][0], ERROR_CODES["BAD_RECORD"][0]
        with m.FSM(name="player") as fsm:
            with m.State("IDLE"):
                with m.If(self.run):
                    m.d.sync += [pc.eq(0), self.error_code.eq(0), ahead.eq(0),
                                 loops_left.eq(Mux(self.loops == 0, 1, self.loops))]
                    m.next = "FETCH"
                with m.Elif(self.load_data | self.load_program):
                    start_writer(host=1, direct=1, direct_base=self.addr,
                                 direct_count=self.count, target=self.load_program)
                    m.d.sync += [self.loading.eq(1), self.error_code.eq(0)]
                    m.next = "LOAD"
                with m.Elif(self.read_data):
                    start_reader(host=1, direct=1, direct_base=self.addr,
                                 direct_count=self.count, mark_last=1)
                    m.d.sync += self.error_code.eq(0)
                    m.next = "READ"
            with m.State("LOAD"):
                with m.If(writer.error):
                    fail(bad_address)
                with m.Elif(~writer.busy):
                    m.next = "SETTLE"
            with m.State("SETTLE"):  # the checksum takes the last word two cycles later
                m.d.sync += self.loading.eq(0)
                m.next = "OK"
            with m.State("READ"):
                with m.If(reader.error):
                    fail(bad_address)
                with m.Elif(~reader.busy):
                    m.next = "OK"

            # --- records ---------------------------------------------------------------
            with m.State("FETCH"):
                m.d.comb += main_addr.eq(pc)
                with m.If(pc >= self.program_words):
                    fail(bad_address)
                with m.Else():
                    m.next = "FETCH_WAIT"
            with m.State("FETCH_WAIT"):  # the program memory's second cycle of latency
                m.next = "HEADER"
            with m.State("HEADER"):
                # The record's end from the header word, which comes from the program
                # memory's output register (a block RAM's own output would leave no time
                # for these adders).
                word = self.prog_rd_data
                fields = {name: word[lsb:lsb + 8] for name, lsb in HEADER_FIELDS}
                m.d.sync += [op.eq(word[:8]), cursor.eq(pc + 1),
                             record_end.eq(pc + 1 + (fields["csr"] << 1)
                                           + ((fields["reads"] + fields["writes"])
                                              * SEGMENT_WORDS))]
                m.d.sync += [counts[name].eq(value) for name, value in fields.items()]
                m.next = "DISPATCH"
            with m.State("DISPATCH"):
                m.d.sync += peek_fits.eq(record_end < self.program_words)
                with m.If(record_end > self.program_words):
                    fail(bad_address)
                with m.Elif(op == OPS["END"]):
                    with m.If(loops_left == 1):
                        m.next = "OK"
                    with m.Else():
                        m.d.sync += [loops_left.eq(loops_left - 1), pc.eq(0)]
                        m.next = "FETCH"
                with m.Elif(is_pass):
                    m.d.sync += adding_pass.eq(op != OPS["PASS"])
                    m.next = "CSR_OFFSET"
                    with m.If(counts["csr"] == 0):
                        m.next = "STREAM_START"
                with m.Elif(op == OPS["RECV"]):
                    start_writer(host=1, direct=0, seg_ptr=cursor, seg_count=counts["writes"],
                                 target=0)
                    m.next = "WAIT_WRITER"
                with m.Elif(op == OPS["SEND"]):
                    start_reader(host=1, direct=0, seg_ptr=cursor, seg_count=counts["reads"],
                                 mark_last=1)
                    m.next = "WAIT_READER"
                with m.Else():
                    fail(bad_record)

            # --- PASS: register writes, 2 cycles each once under way (the read port
            # gives a word a cycle, 2 cycles after its address: the offset, then the
            # value, while the next pair is asked for) -----------------------------------
            with m.State("CSR_OFFSET"):
                m.d.comb += main_addr.eq(cursor)
                m.next = "CSR_PRIME"
            with m.State("CSR_PRIME"):
                m.d.comb += main_addr.eq(cursor + 1)
                m.next = "CSR_VALUE"
            with m.State("CSR_VALUE"):
                m.d.comb += main_addr.eq(cursor + 2)
                m.d.sync += offset.eq(self.prog_rd_data)
                m.next = "CSR_WRITE"
            with m.State("CSR_WRITE"):
                m.d.comb += main_addr.eq(cursor + 3)
                m.d.sync += [bus.addr.eq(offset), bus.w_data.eq(self.prog_rd_data),
                             bus.w_en.eq(1), cursor.eq(cursor + 2),
                             counts["csr"].eq(counts["csr"] - 1)]
                m.next = "CSR_VALUE"
                with m.If(counts["csr"] == 1):
                    m.next = "STREAM_START"
            with m.State("STREAM_START"):
                with m.If(~ahead):  # else started by the look-ahead, on these segments
                    start_reader(host=0, direct=0, seg_ptr=cursor, seg_count=counts["reads"],
                                 mark_last=1, host_segments=1)
                start_writer(host=0, direct=0, seg_count=counts["writes"], target=0,
                             seg_ptr=cursor + counts["reads"] * SEGMENT_WORDS)
                m.d.sync += [accel_done.eq(0), poll.eq(0), ahead.eq(0), peeked.eq(0),
                             peek_step.eq(0)]
                m.next = "STREAM"
            with m.State("STREAM"):
                # The look-ahead (above): the next record's header, read while the fetcher
                # is idle (its word comes PROGRAM_READ_LATENCY cycles later whatever the
                # fetcher asks next); a PASS that fits the program memory starts the reader.
                # The address is the next record's throughout (no decision in front of the
                # block RAM's address: the board clock's path).
                m.d.comb += main_addr.eq(record_end)
                with m.Switch(peek_step):
                    with m.Case(0):
                        with m.If(~peeked & ~reader.busy & ~fetching & peek_fits):
                            m.d.sync += [peek_step.eq(1), peeked.eq(1)]
                    with m.Case(1):
                        m.d.sync += peek_step.eq(2)
                    with m.Case(2):
                        word = self.prog_rd_data
                        fields = {name: word[lsb:lsb + 8] for name, lsb in HEADER_FIELDS}
                        m.d.sync += [peek_op.eq(word[:8]), peek_reads.eq(fields["reads"]),
                                     peek_ptr.eq(record_end + 1 + (fields["csr"] << 1)),
                                     peek_end.eq(record_end + 1 + (fields["csr"] << 1)
                                                 + ((fields["reads"] + fields["writes"])
                                                    * SEGMENT_WORDS)),
                                     peek_step.eq(3)]
                    with m.Case(3):
                        peek_pass = peek_op == OPS["PASS"]
                        if self.resident_add:
                            peek_pass = peek_pass | (peek_op == OPS["PASS_ADD"])
                        with m.If(peek_pass & (peek_reads != 0)
                                  & (peek_end <= self.program_words)):
                            start_reader(host=0, direct=0, seg_ptr=peek_ptr,
                                         seg_count=peek_reads, mark_last=1, host_segments=1)
                            m.d.sync += ahead.eq(1)
                        m.d.sync += peek_step.eq(0)
                # The accelerator's STATUS, read every few cycles over its bus: done ends
                # the pass once both engines are through, error stops the program.
                m.d.sync += poll.eq(Mux(poll == _POLL_PERIOD - 1, 0, poll + 1))
                with m.If(poll == 0):
                    m.d.sync += [bus.addr.eq(_CSR_STATUS), bus.r_en.eq(1)]
                status = bus.r_data
                with m.If(reader.error | writer.error):
                    with m.If(reader.error & ahead):  # the next record's segment
                        m.d.sync += pc.eq(record_end)
                    fail(bad_address)
                with m.Elif((poll == _POLL_PERIOD - 1) & (status & _STATUS_ERROR).any()):
                    m.d.sync += poll.eq(0)
                    m.next = "ERROR_CODE"
                with m.Else():
                    with m.If((poll == _POLL_PERIOD - 1) & (status & _STATUS_DONE).any()):
                        m.d.sync += accel_done.eq(1)
                    with m.If(accel_done & (~reader.busy | ahead) & ~writer.busy & ~add_busy
                              & (peek_step == 0)):
                        # The adder's last sums are in: the writer's words go straight to
                        # the memories again (a RECV, a load after the run).
                        m.d.sync += [pc.eq(record_end), adding_pass.eq(0)]
                        m.next = "FETCH"
            with m.State("ERROR_CODE"):
                m.d.sync += poll.eq(poll + 1)
                with m.If(poll == 0):
                    m.d.sync += [bus.addr.eq(_CSR_ERROR_CODE), bus.r_en.eq(1)]
                with m.If(poll == _POLL_PERIOD - 1):
                    fail(bus.r_data)

            # --- RECV, SEND ------------------------------------------------------------
            with m.State("WAIT_WRITER"):
                with m.If(writer.error):
                    fail(bad_address)
                with m.Elif(~writer.busy):
                    m.d.sync += pc.eq(record_end)
                    m.next = "FETCH"
            with m.State("WAIT_READER"):
                with m.If(reader.error):
                    fail(bad_address)
                with m.Elif(~reader.busy):
                    m.d.sync += pc.eq(record_end)
                    m.next = "FETCH"

            with m.State("OK"):
                m.d.sync += self.set_done.eq(1)
                m.next = "IDLE"
            with m.State("FAIL"):
                m.d.sync += [self.set_error.eq(1), engine_reset.eq(1), self.loading.eq(0),
                             ahead.eq(0), adding_pass.eq(0)]
                m.next = "IDLE"
        # Busy until set_done / set_error is visible, so a host that sees busy clear also
        # sees why.
        m.d.comb += self.busy.eq(~fsm.ongoing("IDLE") | self.set_done | self.set_error)
        return m


class ResidentTop(wiring.Component):
    """``AcceleratorTop`` behind the resident block, with its ports (``csr``, ``h2c``,
    ``c2h``, ``irq``, ``dbg_force_error``): what a host link's top instantiates for a
    configuration with resident memories (:func:`accelerator_top`).

    While the player is busy it owns the accelerator's registers and streams: the host's
    accesses below ``0x200`` are dropped (reads answer 0), except a ``CTRL.soft_reset``
    write, which resets the accelerator and aborts the player as well; the host's
    ``h2c`` goes to the player's writer (loads, ``RECV``), its ``c2h`` comes from the
    player's reader (read-back, ``SEND``). The accelerator's interrupt is masked meanwhile
    (each pass would raise it).
    """

    def __init__(self, config, *, image=None):
        if not isinstance(config, ConvEngineConfig) or not config.resident:
            self._MustUse__silence = True  # refused: nothing to elaborate
            raise ValueError(f"ResidentTop needs a configuration with resident memories "
                             f"(resident_words > 0), not {config!r}")
        if image is not None:
            self._MustUse__silence = True  # until the image is accepted
            if not isinstance(image, BootImage):
                raise TypeError(f"image must be a contract.resident.BootImage, not {image!r}")
            image.check_fits(config.resident_words, config.program_words)
            self._MustUse__silence = False
        self.config, self.image = config, image
        self.core = AcceleratorTop(config)
        super().__init__(dict(self.core.signature.members))

    def elaborate(self, platform):
        m = Module()
        cfg = self.config
        m.submodules.core = core = self.core
        m.submodules.bank = bank = CsrBank(resident_registers(), readback=cfg.csr_readback)
        # A boot image is the memories' initial contents (block RAM initialised with the
        # bitstream), the rest of each memory zero as without one.
        image = self.image
        data_memory = DataMemory(depth=cfg.resident_words, init=image.data if image else [])
        program_memory = ProgramMemory(depth=cfg.program_words,
                                       init=image.program if image else [])
        m.submodules.data_memory, m.submodules.program_memory = data_memory, program_memory

        # The host's soft reset aborts the player too (a cycle later, as the core's).
        host = self.csr
        resident_side = host.addr >= _REG["RES_DATA_WORDS"].offset
        soft_reset = soft_reset_write(host)
        abort = Signal()
        m.d.sync += abort.eq(soft_reset)
        m.submodules.player = player = ResetInserter(abort)(ResidentPlayer(
            data_words=cfg.resident_words, program_words=cfg.program_words,
            data_read_latency=DataMemory.READ_LATENCY, resident_add=cfg.resident_add))

        # --- memories --------------------------------------------------------------------
        data_bits, program_bits = len(data_memory.rd_addr), len(program_memory.rd_addr)
        m.d.comb += [
            data_memory.rd_addr.eq(player.data_rd_addr[:data_bits]),
            player.data_rd_data.eq(data_memory.rd_data),
            data_memory.w_addr.eq(player.w_addr[:data_bits]),
            data_memory.w_data.eq(player.w_data),
            data_memory.w_en.eq(player.w_en & (player.w_target == 0)),
            program_memory.rd_addr.eq(player.prog_rd_addr[:program_bits]),
            player.prog_rd_data.eq(program_memory.rd_data),
            program_memory.w_addr.eq(player.w_addr[:program_bits]),
            program_memory.w_data.eq(player.w_data),
            program_memory.w_en.eq(player.w_en & (player.w_target == 1)),
        ]

        # --- registers: the resident bank, the commands, the checksum -------------------
        ctrl = bank.res_ctrl
        commanded = ctrl[:4].any()
        m.d.comb += [
            bank.res_data_words.eq(cfg.resident_words),
            bank.res_program_words.eq(cfg.program_words),
            player.run.eq(ctrl[_RES_CTRL["run"]]),
            player.load_data.eq(ctrl[_RES_CTRL["load_data"]]),
            player.load_program.eq(ctrl[_RES_CTRL["load_program"]]),
            player.read_data.eq(ctrl[_RES_CTRL["read_data"]]),
            player.addr.eq(bank.res_addr), player.count.eq(bank.res_count),
            player.loops.eq(bank.res_loops),
            # Busy from the command's strobe on, so that a read right after it says so.
            bank.res_status_live.eq(player.busy | commanded),
            bank.res_status_set.eq((player.set_done << 1) | (player.set_error << 2)),
            bank.res_pc.eq(player.pc), bank.res_error.eq(player.error_code),
        ]
        # Fletcher's sums over the loaded words (contract.resident.checksum_step), in two
        # steps so that no cycle chains two 32-bit adders: A takes the word, then B the new A.
        # They start at the boot image's checksum (0 without one) and, like the memories'
        # contents, keep their value through a reset: a reset that cleared them would
        # leave a loaded image unrecognised, and one that restored the boot image's
        # checksum would claim the boot image over a loaded one.
        start_a, start_b = image.checksum if image else (0, 0)
        sum_a = Signal(WORD_BITS, init=start_a, reset_less=True)
        sum_b = Signal(WORD_BITS, init=start_b, reset_less=True)
        added = Signal()
        m.d.comb += [bank.res_checksum_a.eq(sum_a), bank.res_checksum_b.eq(sum_b)]
        word_in = player.w_en & player.loading
        m.d.sync += added.eq(word_in)
        with m.If(ctrl[_RES_CTRL["clear_checksum"]]):
            m.d.sync += [sum_a.eq(0), sum_b.eq(0), added.eq(0)]
        with m.Else():
            with m.If(word_in):
                m.d.sync += sum_a.eq(sum_a + player.w_data)
            with m.If(added):
                m.d.sync += sum_b.eq(sum_b + sum_a)

        # --- the CSR port: the resident bank above 0x200, the core below (the player's
        # while it is busy) ----------------------------------------------------------------
        owned = player.busy
        to_core = ~owned | soft_reset
        m.d.comb += [bank.bus.addr.eq(host.addr), bank.bus.w_data.eq(host.w_data),
                     bank.bus.w_en.eq(host.w_en & resident_side),
                     bank.bus.r_en.eq(host.r_en & resident_side),
                     player.accel_csr.r_data.eq(core.csr.r_data)]
        with m.If(to_core):
            m.d.comb += [core.csr.addr.eq(host.addr), core.csr.w_data.eq(host.w_data),
                         core.csr.w_en.eq(host.w_en & ~resident_side),
                         core.csr.r_en.eq(host.r_en & ~resident_side)]
        with m.Else():
            m.d.comb += [core.csr.addr.eq(player.accel_csr.addr),
                         core.csr.w_data.eq(player.accel_csr.w_data),
                         core.csr.w_en.eq(player.accel_csr.w_en),
                         core.csr.r_en.eq(player.accel_csr.r_en)]
        from_bank, from_core = Signal(), Signal()
        with m.If(host.r_en):
            m.d.sync += [from_bank.eq(resident_side), from_core.eq(~resident_side & ~owned)]
        m.d.comb += host.r_data.eq(Mux(from_bank, bank.bus.r_data,
                                       Mux(from_core, core.csr.r_data, 0)))

        # --- streams ---------------------------------------------------------------------
        with m.If(owned):
            m.d.comb += [core.h2c.payload.eq(player.to_accel.payload),
                         core.h2c.valid.eq(player.to_accel.valid),
                         player.to_accel.ready.eq(core.h2c.ready),
                         player.from_accel.payload.eq(core.c2h.payload),
                         player.from_accel.valid.eq(core.c2h.valid),
                         core.c2h.ready.eq(player.from_accel.ready),
                         self.c2h.payload.eq(player.to_host.payload),
                         self.c2h.valid.eq(player.to_host.valid),
                         player.to_host.ready.eq(self.c2h.ready),
                         player.from_host.payload.eq(self.h2c.payload),
                         player.from_host.valid.eq(self.h2c.valid),
                         self.h2c.ready.eq(player.from_host.ready)]
        with m.Else():
            m.d.comb += [core.h2c.payload.eq(self.h2c.payload),
                         core.h2c.valid.eq(self.h2c.valid), self.h2c.ready.eq(core.h2c.ready),
                         self.c2h.payload.eq(core.c2h.payload),
                         self.c2h.valid.eq(core.c2h.valid), core.c2h.ready.eq(self.c2h.ready)]

        # The interrupt says "a layer ended": not while the player runs layers, nor in the
        # cycle its command is on its way (a host waiting on the line would stop early).
        m.d.comb += [core.dbg_force_error.eq(self.dbg_force_error),
                     self.irq.eq(core.irq & ~owned & ~commanded)]
        return m
