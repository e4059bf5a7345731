"""The accelerator top: CSR port, host-to-device and device-to-host DMA streams, interrupt,
around the convolution engine (``hw/conv_engine.py``).

A layer pass is one ``start`` (opcode ``CONV``; depthwise and dense layers are lowered to it
by the driver, ``sw_driver.conv_lowering``). After the start, the host-to-device stream
carries, in this order and each padded to whole 32-bit words:

1. ``LOAD_PARAMS`` column-tile entries of bias / multiplier / shift (the engine's
   ``param_word_layout``, little-endian bit order),
2. the first column tile's weight words (C_in * kh * kw words of C int8),
3. ``LOAD_ACT`` int8 activations (HWC), four per 32-bit word, one word a cycle,
4. the other column tiles' weight words (``LOAD_WEIGHTS`` words in all);

the engine starts as soon as the first tile's weights are in and computes while the rest
arrives (it reads a word only once it is written); the device-to-host stream returns one beat of
C int8 per output pixel and column tile (``ceil(C / 4)`` words each), ``last`` on the
final word. With ``POOL_ENABLE`` the engine's output goes through the 2x2 max pool first
(``POOL_WIDTH`` x ``POOL_HEIGHT`` = OW x OH, one frame per column tile).

``POOL`` streams ``STREAM_BEATS`` pixels of C int8 (row-major, ``POOL_FRAMES`` frames)
through the max pool alone; ``ADD`` streams ``STREAM_BEATS`` beats of C bytes of ``a`` then
C bytes of ``b`` through the residual-add unit (``ADD_*`` registers).
Port names at the Verilog top (``csr__addr``, ``h2c__payload``, ...) map one-to-one onto an
AXI4-Lite / AXI4-Stream bridge such as XDMA in stream mode.
"""

from amaranth import Module, Mux, ResetInserter, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from contract.config import ConvEngineConfig
from contract.descriptor import ADD_PARAM_FIELDS, DESCRIPTOR_FIELDS
from contract.regmap import (
    ERROR_CODES,
    ID_VALUE,
    MAP_VERSION,
    OPCODE_WIDTH,
    OPCODES,
    pack_config,
)
from contract.streams import (
    ACTIVATIONS_PER_WORD,
    POOL_MAX_WIDTH,
    WORD_BITS,
    add_words,
    output_words,
    param_words,
    weight_words,
)

from .conv_engine import ConvEngine
from .csr import CsrBank, csr_bus_signature
from .maxpool import MaxPool2x2
from .residual_add import ResidualAdd

ERROR_BAD_OPCODE = ERROR_CODES["BAD_OPCODE"][0]
ERROR_BAD_DESCRIPTOR = ERROR_CODES["BAD_DESCRIPTOR"][0]
ERROR_FORCED = ERROR_CODES["FORCED"][0]


def word_layout():
    return data.StructLayout({"data": WORD_BITS, "last": 1})


class AcceleratorTop(wiring.Component):
    """The whole accelerator as the host sees it.

    Parameters
    ----------
    config : ConvEngineConfig
        Array size and buffer depths (published in the ``CONFIG`` and ``*_DEPTH`` registers).
    """

    def __init__(self, config=None):
        self.config = config or ConvEngineConfig()
        if not isinstance(self.config, ConvEngineConfig):
            raise TypeError(f"config must be a ConvEngineConfig, not {config!r}")
        super().__init__({
            "csr": In(csr_bus_signature()),
            "h2c": In(stream.Signature(word_layout())),
            "c2h": Out(stream.Signature(word_layout())),
            "irq": Out(1),
            # Fault injection for the twin's tests; tied low on boards.
            "dbg_force_error": In(1),
        })

    def elaborate(self, platform):
        m = Module()
        cfg = self.config
        rows, cols = cfg.rows, cfg.cols
        m.submodules.csr = csr = CsrBank()
        wiring.connect(m, wiring.flipped(self.csr), csr.bus)
        soft_reset = csr.ctrl[1]
        m.submodules.engine = engine = ResetInserter(soft_reset)(ConvEngine(cfg))
        m.submodules.pool = pool = ResetInserter(soft_reset)(
            MaxPool2x2(lanes=cols, max_width=POOL_MAX_WIDTH))
        m.submodules.add = add = ResetInserter(soft_reset)(ResidualAdd(lanes=cols))
        m.d.comb += [pool.width.eq(csr.pool_width), pool.height.eq(csr.pool_height)]
        for name, _, _, _ in ADD_PARAM_FIELDS:
            field = getattr(add.params, name)
            m.d.comb += field.eq(getattr(csr, f"add_{name}")[:len(field)])

        m.d.comb += [
            csr.id.eq(ID_VALUE),
            csr.version.eq(MAP_VERSION),
            csr.config.eq(pack_config(rows=rows, cols=cols, acc_width=cfg.array.acc_width)),
            csr.act_depth.eq(cfg.act_depth),
            csr.weight_depth.eq(cfg.weight_depth),
            csr.param_depth.eq(cfg.max_col_tiles),
            csr.pool_max_width.eq(POOL_MAX_WIDTH),
            self.irq.eq(((csr.status >> 1) & csr.irq_enable & 0b11).any()),
        ]
        for name, _, _, _ in DESCRIPTOR_FIELDS:
            field = getattr(engine.descriptor, name)
            m.d.comb += field.eq(getattr(csr, f"conv_{name}")[:len(field)])

        # --- Sequencer: check, load the three buffers, run, send results ---------------
        busy = Signal()
        # CONV: 0 params, 1 the first column tile's weights, 2 activations (the engine
        # runs), 5 the other tiles' weights, 3 running with everything in.
        # POOL, ADD: 4 streaming.
        phase = Signal(range(6))
        opcode = Signal(OPCODE_WIDTH)  # latched at start
        pooling = Signal()  # CONV with the fused max pool
        frames_left = Signal(32)
        left = Signal(32)         # entries / words / elements left in this load phase
        error_code = Signal(32)
        set_done, set_error = Signal(), Signal()
        m.d.comb += [
            csr.status_live.eq(busy),
            csr.error_code.eq(error_code),
            csr.status_set.eq((set_done << 1) | (set_error << 2)),
        ]
        start = csr.ctrl[0] & ~busy
        with m.If(soft_reset):
            m.d.sync += busy.eq(0)
        with m.Elif(self.dbg_force_error):
            m.d.sync += [busy.eq(0), error_code.eq(ERROR_FORCED)]
            m.d.comb += set_error.eq(1)
        with m.Elif(start):
            bad_pool = (csr.pool_width < 2) | (csr.pool_width > POOL_MAX_WIDTH) \
                | (csr.pool_height < 2) | (csr.pool_frames == 0)
            with m.Switch(csr.opcode):
                with m.Case(OPCODES["CONV"]):
                    with m.If((csr.load_params == 0) | (csr.load_weights == 0)
                              | (csr.load_act == 0) | (csr.conv_col_tiles == 0)
                              | (csr.conv_pixel_groups == 0)
                              | (csr.pool_enable[0] & bad_pool)):
                        m.d.sync += error_code.eq(ERROR_BAD_DESCRIPTOR)
                        m.d.comb += set_error.eq(1)
                    with m.Else():
                        m.d.sync += [busy.eq(1), error_code.eq(0), phase.eq(0),
                                     left.eq(csr.load_params), opcode.eq(OPCODES["CONV"]),
                                     pooling.eq(csr.pool_enable[0]),
                                     frames_left.eq(csr.pool_frames)]
                with m.Case(OPCODES["POOL"], OPCODES["ADD"]):
                    with m.If((csr.stream_beats == 0)
                              | ((csr.opcode == OPCODES["POOL"]) & bad_pool)):
                        m.d.sync += error_code.eq(ERROR_BAD_DESCRIPTOR)
                        m.d.comb += set_error.eq(1)
                    with m.Else():
                        m.d.sync += [busy.eq(1), error_code.eq(0), phase.eq(4),
                                     left.eq(csr.stream_beats), opcode.eq(csr.opcode),
                                     pooling.eq(csr.opcode == OPCODES["POOL"]),
                                     frames_left.eq(csr.pool_frames)]
                with m.Default():
                    m.d.sync += error_code.eq(ERROR_BAD_OPCODE)
                    m.d.comb += set_error.eq(1)

        # Host-to-device words gathered into parameter entries and weight words.
        per_param, per_weight = param_words(cols), weight_words(cols)
        per_pixel, per_pair = output_words(cols), add_words(cols)
        widest = max(per_param, per_weight, per_pair)
        gathered = Signal(32 * widest)
        count = Signal(range(widest + 1))
        needed = Signal.like(count)
        with m.Switch(phase):
            with m.Case(0):
                m.d.comb += needed.eq(per_param)
            with m.Case(1, 5):
                m.d.comb += needed.eq(per_weight)
            with m.Default():
                m.d.comb += needed.eq(Mux(opcode == OPCODES["ADD"], per_pair, per_pixel))
        loading_wide = busy & ((phase < 2) | (phase >= 4))
        act_load_words = Signal(32)
        m.d.comb += act_load_words.eq((csr.load_act + ACTIVATIONS_PER_WORD - 1)
                                      // ACTIVATIONS_PER_WORD)
        wide_full = count == needed
        final = left == 1
        m.d.comb += [
            engine.param_in.payload.word.eq(gathered),
            engine.param_in.payload.last.eq(final),
            engine.param_in.valid.eq(loading_wide & (phase == 0) & wide_full),
            engine.weight_in.payload.w.eq(gathered),
            engine.weight_in.payload.last.eq(final),
            engine.weight_in.valid.eq(loading_wide & ((phase == 1) | (phase == 5)) & wide_full),
        ]
        # POOL / ADD input beats from the same gatherer.
        streaming = loading_wide & (phase == 4) & wide_full
        m.d.comb += [
            add.operands.payload.a.eq(gathered[:8 * cols]),
            add.operands.payload.b.eq(gathered[8 * cols:16 * cols]),
            add.operands.payload.last.eq(final),
            add.operands.valid.eq(streaming & (opcode == OPCODES["ADD"])),
        ]
        # Activations: a whole word (four bytes) per cycle, straight into the engine, which
        # is already running (started when the weights were in) and reads each word as
        # soon as it is written.
        m.d.comb += [
            engine.act_in.payload.x.eq(self.h2c.payload.data),
            engine.act_in.payload.last.eq(final),
            engine.act_in.valid.eq(busy & (phase == 2) & self.h2c.valid),
            engine.load_during_run.eq(1),
        ]
        # Rows of the first column tile's weights, C_in * kh * kw, summed one C_in a cycle
        # while the parameters load (no multiplier: every MULT18X18D is the array's).
        tile_rows, rows_loaded = Signal(32), Signal(32)
        sum_u, sum_v, tile_rows_known = Signal(3), Signal(3), Signal()
        kernel = engine.descriptor
        with m.If(busy & ~tile_rows_known):
            m.d.sync += [tile_rows.eq(tile_rows + kernel.in_channels), sum_v.eq(sum_v + 1)]
            with m.If(sum_v == kernel.kernel_w - 1):
                m.d.sync += [sum_v.eq(0), sum_u.eq(sum_u + 1)]
                with m.If(sum_u == kernel.kernel_h - 1):
                    m.d.sync += tile_rows_known.eq(1)
        with m.If(start):
            # A zero-sized kernel (a bad descriptor) sends every weight in phase 1.
            m.d.sync += [tile_rows.eq(0), rows_loaded.eq(0), sum_u.eq(0), sum_v.eq(0),
                         tile_rows_known.eq((csr.opcode != OPCODES["CONV"])
                                            | (kernel.kernel_w == 0) | (kernel.kernel_h == 0))]
        weights_left = Signal(32)  # rows after the first tile's, sent after the activations
        with m.Switch(phase):
            with m.Case(0, 4, 5):
                m.d.comb += self.h2c.ready.eq(busy & ~wide_full)
            with m.Case(1):
                m.d.comb += self.h2c.ready.eq(busy & ~wide_full & tile_rows_known)
            with m.Case(2):
                m.d.comb += self.h2c.ready.eq(busy & engine.act_in.ready)
        with m.If(self.h2c.valid & self.h2c.ready & ((phase < 2) | (phase >= 4))):
            m.d.sync += [gathered.word_select(count, 32).eq(self.h2c.payload.data),
                         count.eq(count + 1)]

        loaded = ((engine.param_in.valid & engine.param_in.ready)
                  | (engine.weight_in.valid & engine.weight_in.ready)
                  | (pool.pixels.valid & pool.pixels.ready & (phase == 4))
                  | (add.operands.valid & add.operands.ready))
        with m.If(loaded):
            m.d.sync += [count.eq(0), left.eq(left - 1)]
            with m.If(final):
                with m.If(phase == 0):
                    m.d.sync += [phase.eq(1), left.eq(csr.load_weights)]
                with m.Elif(phase == 5):
                    m.d.sync += phase.eq(3)
        # The engine starts once the parameters and the first tile's weights are in;
        # activation words are offered from the next cycle, once it is busy.
        with m.If(engine.weight_in.valid & engine.weight_in.ready & (phase == 1)):
            m.d.sync += rows_loaded.eq(rows_loaded + 1)
            with m.If(final | (rows_loaded == tile_rows - 1)):
                m.d.sync += [phase.eq(2), left.eq(act_load_words),
                             weights_left.eq(left - 1)]
                m.d.comb += engine.start.eq(1)
        with m.If(engine.act_in.valid & engine.act_in.ready):
            m.d.sync += left.eq(left - 1)
            with m.If(final):
                m.d.sync += [phase.eq(Mux(weights_left == 0, 3, 5)), left.eq(weights_left)]
        with m.If(soft_reset | start):
            m.d.sync += count.eq(0)

        # The max pool takes the engine's output (CONV with pooling) or the gathered
        # pixels (POOL).
        with m.If(phase == 4):
            m.d.comb += [
                pool.pixels.payload.x.eq(gathered[:8 * cols]),
                pool.pixels.payload.last.eq(final),
                pool.pixels.valid.eq(streaming & (opcode == OPCODES["POOL"])),
            ]
        with m.Else():
            m.d.comb += [
                pool.pixels.payload.eq(engine.output.payload),
                pool.pixels.valid.eq(engine.output.valid & pooling),
            ]

        # Result beats (C int8) -> device-to-host words. The source: the engine, the pool
        # or the adder; the layer ends with the source's `last` (for the pool, the last
        # frame's).
        result = Signal(data.ArrayLayout(8, cols))
        result_valid, result_last, take_result = Signal(), Signal(), Signal()
        with m.If(pooling):
            m.d.comb += [result.eq(pool.pooled.payload.x), result_valid.eq(pool.pooled.valid),
                         result_last.eq(pool.pooled.payload.last & (frames_left == 1)),
                         pool.pooled.ready.eq(take_result)]
            with m.If(pool.pooled.valid & take_result & pool.pooled.payload.last):
                m.d.sync += frames_left.eq(frames_left - 1)
        with m.Elif(opcode == OPCODES["ADD"]):
            m.d.comb += [result.eq(add.results.payload.y), result_valid.eq(add.results.valid),
                         result_last.eq(add.results.payload.last),
                         add.results.ready.eq(take_result)]
        with m.Else():
            m.d.comb += [result.eq(engine.output.payload.y),
                         result_valid.eq(engine.output.valid),
                         result_last.eq(engine.output.payload.last),
                         engine.output.ready.eq(take_result)]
        with m.If(pooling & (phase != 4)):
            m.d.comb += engine.output.ready.eq(pool.pixels.ready)

        per_out = output_words(cols)
        beat = Signal(32 * per_out)
        words_left = Signal(range(per_out + 1))
        final_beat = Signal()
        m.d.comb += [
            take_result.eq(words_left == 0),
            # A layer whose last activation words are not read (a stride that skips the
            # last rows) ends only once they are taken, so none is left on the stream.
            self.c2h.valid.eq((words_left != 0)
                              & ~(final_beat & (words_left == 1)
                                  & ((phase == 2) | (phase == 5)))),
            self.c2h.payload.data.eq(beat[:32]),
            self.c2h.payload.last.eq(final_beat & (words_left == 1)),
        ]
        with m.If(result_valid & take_result):
            m.d.sync += [beat.eq(result), words_left.eq(per_out), final_beat.eq(result_last)]
        with m.If(self.c2h.valid & self.c2h.ready):
            m.d.sync += [beat.eq(beat >> 32), words_left.eq(words_left - 1)]
            with m.If(self.c2h.payload.last):
                m.d.sync += busy.eq(0)
                m.d.comb += set_done.eq(1)
        with m.If(soft_reset):
            m.d.sync += words_left.eq(0)

        # Performance counters.
        cycles, busy_cycles, stalls, compute = Signal(32), Signal(32), Signal(32), Signal(32)
        macs = Signal(64)
        m.d.sync += cycles.eq(cycles + 1)
        with m.If(busy):
            m.d.sync += busy_cycles.eq(busy_cycles + 1)
            with m.If(phase == 3):
                m.d.sync += compute.eq(compute + 1)
        with m.If(engine.stalled):
            m.d.sync += stalls.eq(stalls + 1)
        with m.If(engine.issued):
            m.d.sync += macs.eq(macs + rows * cols)
        m.d.comb += [
            csr.perf_cycles.eq(cycles), csr.perf_busy.eq(busy_cycles),
            csr.perf_macs_lo.eq(macs[:32]), csr.perf_macs_hi.eq(macs[32:]),
            csr.perf_stalls.eq(stalls), csr.perf_compute.eq(compute),
        ]
        return m
