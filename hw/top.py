"""The accelerator top: CSR port, host-to-device and device-to-host DMA streams, interrupt.

For now the engine is the systolic GEMM array: the host sends operand beats over the
host-to-device stream (each beat packed as R bytes of A then C bytes of B, padded to whole
32-bit words), the array computes ``GEMM_TILES`` tiles of ``GEMM_K`` beats, and each tile's
R rows of C int32 results come back on the device-to-host stream, ``last`` on the final
word of the layer. Port names at the Verilog top (``csr__addr``, ``h2c__payload``, ...)
map one-to-one onto an AXI4-Lite / AXI4-Stream bridge such as XDMA in stream mode.
"""

from amaranth import Module, ResetInserter, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from .config import ArrayConfig
from .csr import CsrBank, csr_bus_signature
from .regmap import ID_VALUE, MAP_VERSION, OPCODES
from .systolic import SystolicArray

ERROR_BAD_OPCODE = 1
ERROR_BAD_DESCRIPTOR = 2


def word_layout():
    return data.StructLayout({"data": 32, "last": 1})


def words_per_beat(config):
    """32-bit words carrying one operand beat (R + C bytes, padded)."""
    return -(-(config.rows + config.cols) // 4)


class AcceleratorTop(wiring.Component):
    """The whole accelerator as the host sees it.

    Parameters
    ----------
    config : ArrayConfig
        The compute array's build parameters (published in the ``CONFIG`` register).
    """

    def __init__(self, config=None):
        self.config = config or ArrayConfig()
        if not isinstance(self.config, ArrayConfig):
            raise TypeError(f"config must be an ArrayConfig, not {config!r}")
        if self.config.acc_width != 32:
            raise ValueError(f"the accelerator top returns 32-bit results; acc_width must "
                             f"be 32, not {self.config.acc_width!r}")
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
        m.submodules.array = array = ResetInserter(soft_reset)(SystolicArray(cfg))

        busy = Signal()
        beats_left_in_tile = Signal(32)
        rows_left = Signal(32)  # result rows still to send in this layer

        # Constant and live registers.
        m.d.comb += [
            csr.id.eq(ID_VALUE),
            csr.version.eq(MAP_VERSION),
            csr.config.eq(rows | (cols << 8) | (cfg.acc_width << 16)),
            csr.act_depth.eq(0),
            csr.weight_depth.eq(0),
            csr.status_live.eq(busy),
            self.irq.eq(((csr.status >> 1) & csr.irq_enable & 0b11).any()),
        ]

        # Start: check the descriptor, then run until the last result word has left.
        start = csr.ctrl[0] & ~busy
        error_code = Signal(32)
        m.d.comb += csr.error_code.eq(error_code)
        set_done, set_error = Signal(), Signal()
        m.d.comb += csr.status_set.eq((set_done << 1) | (set_error << 2))
        with m.If(soft_reset):
            m.d.sync += busy.eq(0)
        with m.Elif(self.dbg_force_error):
            m.d.sync += [busy.eq(0), error_code.eq(0xEE)]
            m.d.comb += set_error.eq(1)
        with m.Elif(start):
            with m.If(csr.opcode != OPCODES["GEMM"]):
                m.d.sync += error_code.eq(ERROR_BAD_OPCODE)
                m.d.comb += set_error.eq(1)
            with m.Elif((csr.gemm_k == 0) | (csr.gemm_tiles == 0)):
                m.d.sync += error_code.eq(ERROR_BAD_DESCRIPTOR)
                m.d.comb += set_error.eq(1)
            with m.Else():
                m.d.sync += [busy.eq(1), error_code.eq(0),
                             beats_left_in_tile.eq(csr.gemm_k),
                             rows_left.eq(csr.gemm_tiles * rows)]

        # Host-to-device words -> operand beats.
        per_beat = words_per_beat(cfg)
        gathered = Signal(per_beat * 32)
        count = Signal(range(per_beat + 1))
        beat_ready = count == per_beat
        m.d.comb += self.h2c.ready.eq(busy & ~beat_ready)
        with m.If(self.h2c.valid & self.h2c.ready):
            m.d.sync += [gathered.eq((gathered >> 32) | (self.h2c.payload.data
                                                         << (32 * (per_beat - 1)))),
                         count.eq(count + 1)]
        beat_bytes = gathered[:8 * (rows + cols)]
        m.d.comb += [
            array.operands.valid.eq(beat_ready),
            array.operands.payload.a.eq(beat_bytes[:8 * rows]),
            array.operands.payload.b.eq(beat_bytes[8 * rows:]),
            array.operands.payload.last.eq(beats_left_in_tile == 1),
        ]
        with m.If(array.operands.valid & array.operands.ready):
            m.d.sync += [count.eq(0),
                         beats_left_in_tile.eq(beats_left_in_tile - 1)]
            with m.If(beats_left_in_tile == 1):
                m.d.sync += beats_left_in_tile.eq(csr.gemm_k)
        with m.If(soft_reset):
            m.d.sync += count.eq(0)

        # Result rows -> device-to-host words, C per row.
        row = Signal(data.ArrayLayout(32, cols))
        word = Signal(range(cols + 1))
        final_row = Signal()
        m.d.comb += [
            array.results.ready.eq(word == 0),
            self.c2h.valid.eq(word != 0),
            self.c2h.payload.data.eq(row[0]),
            self.c2h.payload.last.eq(final_row & (word == 1)),
        ]
        with m.If(array.results.valid & array.results.ready):
            m.d.sync += [row.eq(array.results.payload.c), word.eq(cols),
                         final_row.eq(rows_left == 1), rows_left.eq(rows_left - 1)]
        with m.If(self.c2h.valid & self.c2h.ready):
            m.d.sync += [row.eq(row.as_value() >> 32), word.eq(word - 1)]
            with m.If(self.c2h.payload.last):
                m.d.sync += busy.eq(0)
                m.d.comb += set_done.eq(1)
        with m.If(soft_reset):
            m.d.sync += word.eq(0)

        # Performance counters.
        cycles, busy_cycles, stalls = Signal(32), Signal(32), Signal(32)
        macs = Signal(64)
        m.d.sync += cycles.eq(cycles + 1)
        with m.If(busy):
            m.d.sync += busy_cycles.eq(busy_cycles + 1)
            with m.If(array.operands.valid & ~array.operands.ready):
                m.d.sync += stalls.eq(stalls + 1)
        with m.If(array.operands.valid & array.operands.ready):
            m.d.sync += macs.eq(macs + rows * cols)
        m.d.comb += [
            csr.perf_cycles.eq(cycles), csr.perf_busy.eq(busy_cycles),
            csr.perf_macs_lo.eq(macs[:32]), csr.perf_macs_hi.eq(macs[32:]),
            csr.perf_stalls.eq(stalls),
        ]
        return m
