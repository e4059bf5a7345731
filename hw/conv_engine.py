"""The convolution engine: buffers, implicit-im2col address generator, systolic array and
requantizer, running one int8 convolution layer per ``start``.

```
 act_in ──► R copies of the activation buffer (HWC) ─┐  a[R]: x, or x_zero_point outside
 weight_in ─► weight buffer (C int8 per word) ───────┼─► operands ─► SystolicArray
 param_in ──► per-column-tile bias/M/n table         │                    │ results
 descriptor, start ─► AddressGenerator ──────────────┘      drop rows past the last pixel
                                                             ▼
                          PostProcessBank, requantizing (bias', M, n of the column tile)
                                                             ▼
                                                  output {y[C] int8, last}
 add_operands {a[C], b[C]} ─► PostProcessBank, adding (ADD passes) ─► add_results
```

The host folds the activation zero point into the bias (``bias' = bias - z_x * sum(w)``,
``sw_driver.conv_lowering``), so the array multiplies raw int8 activations and padding
positions are fed ``z_x``. Loop order: column tiles outer, pixel groups, then
``k = (u, v, c)``; output beats come in the same order, one per output pixel (C channels of
the current column tile), the rows of the last group past the last pixel dropped.

Loading: each of ``act_in``, ``weight_in``, ``param_in`` writes its buffer from address 0
upwards; a beat with ``last`` rewinds its pointer (so does ``start``). ``weight_in`` and
``param_in`` are ready only while the engine is not ``busy``. ``act_in`` carries
``ACTIVATIONS_PER_WORD`` bytes a beat (one host word a cycle into all R copies). With
``load_during_run`` high at ``start``, ``act_in`` and the weights past those already loaded
are taken *during* the run: the array reads a beat only once every activation word and
weight row it needs is written, so loading the activations overlaps computing the first
column tile, and loading the next tiles' weights overlaps computing the current one
(docs/conv-engine.md, "Dataflow"). ``done`` rises with the last output
beat and stays high until the next ``start``. The descriptor is latched at ``start``.

Depthwise passes (a build with ``ConvEngineConfig.depthwise``, the descriptor's
``depthwise`` set): each row lane reads a whole 32-bit word a beat (word addresses) and
column j of the array multiplies byte ``j % 4`` of it, so each column computes its own
channel (docs/conv-engine.md, "Depthwise convolution").

Post-processing: the requantizer's rescalers also serve the residual add of ADD passes
(``hw.postprocess.PostProcessBank``), so the engine carries the add's streams
(``add_operands`` in, ``add_results`` out, ``add_params``) beside its own; ``adding``
picks the mode and may change only between passes (docs/conv-engine.md, "Post-processing").
"""

from amaranth import Module, Mux, Signal, signed, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from contract.config import ConvEngineConfig
from contract.postprocess import serial_requantizer
from contract.streams import ACTIVATIONS_PER_WORD, PARAM_ENTRY_FIELDS

from .addrgen import AddressGenerator, address_width, descriptor_layout
from .addrgen_lean import LeanAddressGenerator
from .double_pumped import DoublePumpedArray
from .pipeline import skid_after, skid_between
from .postprocess import (
    PostProcessBank,
    add_params_layout,
    operand_pair_layout,
    output_layout,
    sum_layout,
)
from .postprocess_lean import SerialRequantizer
from .soft_reset import with_own_reset
from .systolic import SystolicArray


def activation_load_layout():
    """A beat of ``ACTIVATIONS_PER_WORD`` int8 activations (one host word, HWC order, the
    lowest byte first); the bytes past a layer's last activation are don't-cares."""
    return data.StructLayout({"x": data.ArrayLayout(signed(8), ACTIVATIONS_PER_WORD),
                              "last": 1})


def act_words(act_depth):
    """Words of ``ACTIVATIONS_PER_WORD`` bytes in each copy of the activation buffer."""
    return -(-act_depth // ACTIVATIONS_PER_WORD)


def weight_load_layout(cols):
    return data.StructLayout({"w": data.ArrayLayout(signed(8), cols), "last": 1})


def param_word_layout(cols):
    """One column tile's requantization constants (one entry of the parameter table), laid
    out as the host link carries them (``contract.streams.PARAM_ENTRY_FIELDS``)."""
    return data.StructLayout({
        name: data.ArrayLayout(signed(width) if is_signed else unsigned(width), cols)
        for name, width, is_signed in PARAM_ENTRY_FIELDS})


def param_load_layout(cols):
    return data.StructLayout({"word": param_word_layout(cols), "last": 1})


class ConvEngine(wiring.Component):
    """One int8 convolution layer (bit-exact with ``models.conv`` + ``models.requant``), and
    the residual add of ADD passes through its post-processing bank.

    Parameters
    ----------
    config : ConvEngineConfig
        Array size and buffer depths.
    """

    def __init__(self, config=None):
        if config is None:
            config = ConvEngineConfig()
        if not isinstance(config, ConvEngineConfig):
            raise TypeError(f"config must be a ConvEngineConfig, not {config!r}")
        self.config = config
        cols = config.cols
        super().__init__({
            "descriptor": In(descriptor_layout(depthwise=config.depthwise)),
            "start": In(1),
            # High at ``start``: this layer's activations, and the weights past those
            # loaded before ``start``, stream in while it runs (the array only waits for
            # the words it is about to read). Low: everything was loaded before ``start``.
            "load_during_run": In(1),
            "busy": Out(1),
            "done": Out(1),
            "act_in": In(stream.Signature(activation_load_layout())),
            "weight_in": In(stream.Signature(weight_load_layout(cols))),
            "param_in": In(stream.Signature(param_load_layout(cols))),
            "output": Out(stream.Signature(output_layout(cols))),
            # For the performance counters: an operand beat (R*C MACs) entered the array,
            # or one waited for the array.
            "issued": Out(1),
            "stalled": Out(1),
            # ADD passes through the same post-processing bank (the engine is idle then).
            "adding": In(1),
            "add_operands": In(stream.Signature(operand_pair_layout(cols))),
            "add_results": Out(stream.Signature(sum_layout(cols))),
            "add_params": In(add_params_layout()),
            # The soft reset a cycle early (the register write that raises it): each block
            # of the engine registers its own copy and resets on it, so that no one net
            # from the LUT that ORs the soft reset with the domain's reset reaches all
            # their flip-flops across the die (the 16x8 board build's critical path). The
            # top still wraps the engine in a ResetInserter for its own registers; tied
            # low, as in the block tests, only that reset remains.
            "soft_reset_next": In(1),
        })

    def elaborate(self, platform):
        m = Module()
        cfg = self.config
        rows, cols = cfg.rows, cfg.cols

        busy = Signal()
        launch = Signal()  # one cycle after start: the latched descriptor is valid
        m.d.sync += launch.eq(0)
        with m.If(self.start & ~busy):
            m.d.sync += [busy.eq(1), self.done.eq(0), launch.eq(1)]
        if cfg.pipelined:
            # A copy beside the engine's blocks, away from the CSR bank (fan-out).
            desc = Signal(descriptor_layout(depthwise=cfg.depthwise))
            with m.If(self.start & ~busy):
                m.d.sync += desc.eq(self.descriptor)
        else:
            # The registers themselves: they hold still while a pass runs (the
            # sequencer reads them throughout too, docs/register-map.md).
            desc = self.descriptor
        m.d.comb += self.busy.eq(busy)

        # --- Buffers -----------------------------------------------------------------
        # R identical copies of the activation buffer, written together, so that each
        # array row has its own read port (R different pixels per cycle, any stride and
        # padding, no bank conflicts). Costs R times the block RAM of one copy.
        # Each copy is ACTIVATIONS_PER_WORD bytes wide, so a host word is written in one
        # cycle; a row lane reads the word holding its byte and picks the byte.
        act_depth_words = act_words(cfg.act_depth)
        act_ptr = Signal(range(act_depth_words + 1))
        act_complete = Signal()  # every activation of the layer is in the buffer
        act_mems = []
        for r in range(rows):
            mem = Memory(shape=data.ArrayLayout(signed(8), ACTIVATIONS_PER_WORD),
                         depth=act_depth_words, init=[])
            m.submodules[f"act_buffer{r}"] = mem
            wr = mem.write_port()
            m.d.comb += [wr.addr.eq(act_ptr), wr.data.eq(self.act_in.payload.x),
                         wr.en.eq(self.act_in.valid & self.act_in.ready)]
            act_mems.append(mem)
        m.submodules.weight_buffer = weight_mem = Memory(
            shape=data.ArrayLayout(signed(8), cols), depth=cfg.weight_depth, init=[])
        m.submodules.param_table = param_mem = Memory(
            shape=param_word_layout(cols), depth=cfg.max_col_tiles, init=[])
        weight_ptr = Signal(address_width(cfg.weight_depth))
        param_ptr = Signal(address_width(cfg.max_col_tiles))
        weight_wr = weight_mem.write_port()
        param_wr = param_mem.write_port()
        m.d.comb += [
            weight_wr.addr.eq(weight_ptr), weight_wr.data.eq(self.weight_in.payload.w),
            weight_wr.en.eq(self.weight_in.valid & self.weight_in.ready),
            param_wr.addr.eq(param_ptr), param_wr.data.eq(self.param_in.payload.word),
            param_wr.en.eq(self.param_in.valid & self.param_in.ready),
        ]
        m.d.comb += self.param_in.ready.eq(~busy)
        with m.If(self.param_in.valid & self.param_in.ready):
            m.d.sync += param_ptr.eq(Mux(self.param_in.payload.last, 0, param_ptr + 1))
        with m.If(self.start & ~busy):
            m.d.sync += param_ptr.eq(0)
        # Weights: the first column tile's before ``start``; with ``load_during_run`` the
        # rest may follow during the run (the pointer keeps counting the rows written, and
        # a beat reads only rows below it), so the next tiles load while one computes.
        streaming = Signal()
        weights_complete = Signal()  # the last weight row (``last``) is written
        m.d.comb += self.weight_in.ready.eq(~busy | (streaming & ~weights_complete))
        with m.If(self.weight_in.valid & self.weight_in.ready):
            m.d.sync += [weight_ptr.eq(Mux(self.weight_in.payload.last, 0, weight_ptr + 1)),
                         weights_complete.eq(self.weight_in.payload.last)]
        with m.If(self.start & ~busy & ~self.load_during_run):
            m.d.sync += [weight_ptr.eq(0), weights_complete.eq(1)]
        # Activations: before ``start`` (the pointer rewinds after ``last``), or, with
        # ``act_follows``, during the run, where the pointer doubles as the count of words
        # the array may read.
        m.d.comb += self.act_in.ready.eq(~busy | (streaming & ~act_complete))
        with m.If(self.act_in.valid & self.act_in.ready):
            m.d.sync += act_ptr.eq(act_ptr + 1)
            with m.If(self.act_in.payload.last):
                m.d.sync += act_complete.eq(1)
                with m.If(~busy):
                    m.d.sync += act_ptr.eq(0)
        with m.If(self.start & ~busy):
            m.d.sync += streaming.eq(self.load_during_run)
            with m.If(self.load_during_run):
                m.d.sync += [act_ptr.eq(0), act_complete.eq(0)]
            with m.Else():
                m.d.sync += act_complete.eq(1)

        # --- Address generator -> buffer reads -> array operands ------------------------
        # Without the timing registers, the generator that shares its logic over cycles.
        generator = AddressGenerator if cfg.pipelined else LeanAddressGenerator
        # Each block resets on its own copy of the soft reset (hw.soft_reset).
        reset_next = self.soft_reset_next
        addrgen = generator(cfg)
        m.submodules.addrgen = with_own_reset(m, "addrgen", reset_next, addrgen, platform)
        if cfg.array.pump == 1:
            array = SystolicArray(cfg.array, input_skid=cfg.pipelined, depthwise=cfg.depthwise)
        else:
            # Its processing elements in their own clock domain (hw.double_pumped), which
            # the top provides; the same streams and results.
            array = DoublePumpedArray(cfg.array)
        m.submodules.array = with_own_reset(m, "array", reset_next, array, platform)
        # A depthwise pass (docs/conv-engine.md, "Depthwise convolution"): each beat reads
        # the whole word at a lane's (word) address, and column j of the array takes byte
        # j % 4 of it. The descriptor holds still for the pass, so these are static selects.
        depthwise = desc.depthwise if cfg.depthwise else 0
        if cfg.depthwise:
            m.d.comb += array.depthwise_mode.eq(depthwise)
        m.d.comb += [addrgen.descriptor.eq(desc), addrgen.start.eq(launch)]

        # Read stage: the memories' own output registers hold the beat while the array
        # stalls (read enable low). Operand stage: a block RAM's read data comes late in
        # the cycle (~5.6 ns on ECP5), so it is registered as it is before the byte select
        # and the zero-point multiplexer, which then work on the copy; both stages move
        # together (`advance`).
        read_valid, read_inside, read_last = Signal(), Signal(rows), Signal()
        op_valid, op_inside, op_last = Signal(), Signal(rows), Signal()
        # The operands and the byte selects are data (`read_valid`, `op_valid` say when they
        # count): no reset, so the reset ORed with the soft reset does not reach them across
        # the die (the 16x8 pumped build's engine-clock critical path, into op_word8).
        op_words = [Signal(8 * ACTIVATIONS_PER_WORD, name=f"op_word{r}", reset_less=True)
                    for r in range(rows)]
        op_weights = Signal(data.ArrayLayout(signed(8), cols), reset_less=True)
        byte_shift = ACTIVATIONS_PER_WORD.bit_length() - 1
        read_byte = [Signal(byte_shift, name=f"read_byte{r}", reset_less=True)
                     for r in range(rows)]
        op_byte = [Signal(byte_shift, name=f"op_byte{r}", reset_less=True) for r in range(rows)]
        # A beat waits while activations still stream in and one of the words it reads
        # (inside the image) is not written yet; addresses rise through the first column
        # tile, so this holds the array only where loading is ahead of computing. The
        # generator decides it a cycle ahead from these counts (a registered flag in its
        # ``beats.valid``), so no pointer comparison sits in front of its ``ready``.
        # Between the generator and the read stage, a skid buffer: the generator's lanes
        # (hundreds of flip-flops) move on its registered ready, not on the array's stall
        # handshake through the read stage (the 8x8 ECP5 board build's critical path).
        # It costs one cycle per pass (cycle_model.PASS_LATENCY_CYCLES).
        beats = skid_after(m, "beat_skid", addrgen.beats, registered=cfg.pipelined)
        beat = beats.payload
        m.d.comb += [addrgen.act_words_written.eq(act_ptr), addrgen.act_all.eq(act_complete),
                     addrgen.weight_rows_written.eq(weight_ptr),
                     addrgen.weights_all.eq(weights_complete)]
        advance = ~op_valid | array.operands.ready
        m.d.comb += beats.ready.eq(advance)
        with m.If(advance):
            m.d.sync += [read_valid.eq(beats.valid),
                         read_inside.eq(beat.inside),
                         read_last.eq(beat.last),
                         op_valid.eq(read_valid), op_inside.eq(read_inside),
                         op_last.eq(read_last)]
            m.d.sync += [read_byte[r].eq(Mux(depthwise, 0, beat.addr[r][:byte_shift])
                                         if cfg.depthwise else beat.addr[r][:byte_shift])
                         for r in range(rows)]
            m.d.sync += [op_byte[r].eq(read_byte[r]) for r in range(rows)]
        if cfg.depthwise:
            # Which of a pixel's words the beat reads: the array zeroes the weights of the
            # columns whose channel is in another word.
            read_word, op_word = Signal.like(beat.word), Signal.like(beat.word)
            with m.If(advance):
                m.d.sync += [read_word.eq(beat.word), op_word.eq(read_word)]
            m.d.comb += array.operands.payload.word.eq(op_word)
        for r, mem in enumerate(act_mems):
            rd = mem.read_port()
            word_addr = beat.addr[r] >> byte_shift
            if cfg.depthwise:
                word_addr = Mux(depthwise, beat.addr[r], word_addr)
                for b in range(ACTIVATIONS_PER_WORD - 1):
                    m.d.comb += array.operands.payload.a_rest[r][b].eq(
                        Mux(op_inside[r], op_words[r].word_select(b + 1, 8).as_signed(),
                            desc.x_zero_point))
            m.d.comb += [rd.addr.eq(word_addr), rd.en.eq(advance),
                         array.operands.payload.a[r].eq(
                             Mux(op_inside[r], op_words[r].word_select(op_byte[r], 8).as_signed(),
                                 desc.x_zero_point))]
            with m.If(advance):
                m.d.sync += op_words[r].eq(rd.data)
        weight_rd = weight_mem.read_port()
        with m.If(advance):
            m.d.sync += op_weights.eq(weight_rd.data)
        m.d.comb += [
            weight_rd.addr.eq(beat.w_addr), weight_rd.en.eq(advance),
            array.operands.payload.b.eq(op_weights),
            array.operands.payload.last.eq(op_last),
            array.operands.valid.eq(op_valid),
            self.issued.eq(op_valid & array.operands.ready),
            self.stalled.eq(op_valid & ~array.operands.ready),
        ]

        # --- Array results -> requantizer -> output; the add's operands -> the same bank --
        if serial_requantizer(residual_add=cfg.residual_add, pipelined=cfg.pipelined):
            post = SerialRequantizer(lanes=cols)
        else:
            post = PostProcessBank(lanes=cols, residual_add=cfg.residual_add,
                                   add_lanes=cfg.add_lanes)
        m.submodules.postprocess = with_own_reset(m, "postprocess", reset_next, post, platform)
        # The mode fans out to every multiplexer of the bank: it leaves a register (a pass's
        # first beat comes cycles after the opcode is latched, and the bank's streams stay
        # not ready until its mode matches).
        m.d.sync += post.adding.eq(self.adding)
        m.d.comb += post.add_params.eq(self.add_params)
        wiring.connect(m, wiring.flipped(self.add_operands), post.operands)
        # Both of the bank's outputs leave through a skid buffer: their consumers (the
        # pool, the output writer) are chosen by the sequencer's phase, and the bank's
        # pipeline, and the array's result handshake behind it, must not wait on that
        # choice (the 8x8 ECP5 board build's critical path). One cycle a pass.
        # (The output's is connected below, after the row filter.)
        if cfg.residual_add:
            skid_between(m, "sum_skid", post.sums, wiring.flipped(self.add_results),
                         registered=cfg.pipelined)
        else:
            wiring.connect(m, post.sums, wiring.flipped(self.add_results))
        row = Signal(range(rows))
        group, tile = Signal(16), Signal(16)
        # `group == pixel_groups - 1` and `tile == col_tiles - 1` as flags decided one
        # increment ahead against limits registered at `start` (they gate the array's
        # result handshake, which must not wait on a subtractor and a comparator).
        last_group, last_tile = Signal(), Signal()
        groups_penultimate, tiles_penultimate = Signal(16), Signal(16)
        one_group = Signal()
        last_row = Signal(8)  # last_rows - 1
        row_valid = ~last_group | (row < desc.last_rows)
        layer_last = last_tile & last_group & (row == last_row)

        # The requantizer's per-lane constants are static inputs: they change between
        # column tiles only once the previous tile's rows have left its pipeline.
        need_params = Signal()
        param_wait = Signal()  # the table read for `tile` is one cycle old only after this
        in_flight = Signal(range(PostProcessBank.REQUANT_LATENCY + 2))
        param_rd = param_mem.read_port()
        m.d.comb += param_rd.addr.eq(tile)
        m.d.sync += param_wait.eq(0)
        entered = post.accumulators.valid & post.accumulators.ready
        left = post.results.valid & post.results.ready
        m.d.sync += in_flight.eq(in_flight + entered - left)
        fetch = need_params & ~param_wait & (in_flight == 0)
        if cfg.pipelined:
            params = Signal(param_word_layout(cols))
            with m.If(fetch):
                m.d.sync += [params.eq(param_rd.data), need_params.eq(0)]
        else:
            # The table's read register holds the tile's entry (read enabled only here):
            # no copy in flip-flops. The read lands a cycle after `fetch`.
            params = param_rd.data
            fetched = Signal()
            m.d.comb += param_rd.en.eq(fetch & ~fetched)
            m.d.sync += fetched.eq(fetch & ~fetched)
            with m.If(fetched):
                m.d.sync += need_params.eq(0)

        m.d.comb += [
            post.accumulators.payload.acc.eq(array.results.payload.c),
            post.accumulators.payload.last.eq(layer_last),
            post.accumulators.valid.eq(array.results.valid & row_valid & ~need_params),
            array.results.ready.eq(~need_params & (~row_valid | post.accumulators.ready)),
            post.bias.eq(params.bias),
            post.multiplier.eq(params.multiplier),
            post.shift.eq(params.shift),
            post.params.zero_point.eq(desc.y_zero_point),
            post.params.lo.eq(desc.lo),
            post.params.hi.eq(desc.hi),
        ]
        with m.If(array.results.valid & array.results.ready):
            m.d.sync += row.eq(row + 1)
            with m.If(row == rows - 1):
                m.d.sync += row.eq(0)
                with m.If(~last_group):
                    m.d.sync += [group.eq(group + 1),
                                 last_group.eq(group == groups_penultimate)]
                with m.Else():
                    m.d.sync += [group.eq(0), tile.eq(tile + 1), last_group.eq(one_group),
                                 last_tile.eq(tile == tiles_penultimate),
                                 need_params.eq(1), param_wait.eq(1)]
        with m.If(self.start & ~busy):
            d = self.descriptor
            m.d.sync += [row.eq(0), group.eq(0), tile.eq(0),
                         need_params.eq(1), param_wait.eq(1),
                         last_group.eq(d.pixel_groups == 1), one_group.eq(d.pixel_groups == 1),
                         groups_penultimate.eq(d.pixel_groups - 2),
                         last_tile.eq(d.col_tiles == 1), tiles_penultimate.eq(d.col_tiles - 2),
                         last_row.eq(d.last_rows - 1)]

        skid_between(m, "output_skid", post.results, wiring.flipped(self.output),
                     registered=cfg.pipelined)
        with m.If(self.output.valid & self.output.ready & self.output.payload.last):
            m.d.sync += [busy.eq(0), self.done.eq(1)]
        return m
