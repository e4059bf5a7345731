"""The accelerator top: CSR port, host-to-device and device-to-host DMA streams, interrupt,
around the convolution engine (``hw/conv_engine.py``).

A layer pass is one ``start`` (opcode ``CONV``; depthwise and dense layers are lowered to it
by the driver, ``sw_driver.conv_lowering``). After the start, the host-to-device stream
carries, in this order and each padded to whole 32-bit words:

1. ``LOAD_PARAMS`` column-tile entries of bias / multiplier / shift (the engine's
   ``param_word_layout``, little-endian bit order),
2. the first column tile's weight words (C_in * kh * kw words of C int8),
3. ``LOAD_ACT`` int8 activations (HWC), four per 32-bit word, one word a cycle,
4. the other column tiles' weight words (``LOAD_WEIGHTS`` words in all); on a build with
   the depthwise mode, a pass with ``CONV_DEPTHWISE`` set sends all of them in 2 instead
   (its column tiles each read their own activations, which come one tile after another);

the engine starts as soon as the first tile's weights are in and computes while the rest
arrives (it reads a word only once it is written); the device-to-host stream returns one beat of
C int8 per output pixel and column tile (``ceil(C / 4)`` words each), ``last`` on the
final word. With ``POOL_ENABLE`` the engine's output goes through the 2x2 max pool first
(``POOL_WIDTH`` x ``POOL_HEIGHT`` = OW x OH, one frame per column tile).

``POOL`` streams ``STREAM_BEATS`` pixels of C int8 (row-major, ``POOL_FRAMES`` frames)
through the max pool alone; ``ADD`` streams ``STREAM_BEATS`` beats of C bytes of ``a`` then
C bytes of ``b`` through the residual add (``ADD_*`` registers), which the engine's
post-processing bank computes with the requantizer's rescalers (``hw/postprocess.py``).
Port names at the Verilog top (``csr__addr``, ``h2c__payload``, ...) map one-to-one onto an
AXI4-Lite / AXI4-Stream bridge such as XDMA in stream mode.
"""

from amaranth import Module
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from contract.config import ConvEngineConfig
from contract.descriptor import ADD_PARAM_FIELDS, DEPTHWISE_FIELDS, DESCRIPTOR_FIELDS
from contract.regmap import ID_VALUE, MAP_VERSION, by_name, implemented_registers, pack_config
from contract.streams import POOL_MAX_WIDTH

from .conv_engine import ConvEngine
from .csr import CsrBank, csr_bus_signature, port_name, word_layout
from .loader import HostLoader
from .maxpool import MaxPool2x2
from .perf_counters import PerfCounters
from .pipeline import skid_after, skid_between
from .result_writer import ResultWriter
from .sequencer import CommandSequencer, Phase, command_fields
from .soft_reset import SOFT_RESET_BIT, soft_reset_write, with_own_reset

__all__ = ["AcceleratorTop", "word_layout"]


class AcceleratorTop(wiring.Component):
    """The whole accelerator as the host sees it: components wired together.

    ```
    csr ─► CsrBank ─► CommandSequencer (m.FSM): phase, load_last, engine_start ─► all below
    h2c ─► HostLoader ─ params, weights, acts ─► ConvEngine ─┬──────────────┐
                      ├ pixels (POOL) ─► MaxPool2x2 ◄──────────┘ (pooling)  │
                      └ pairs (ADD) ──► ConvEngine.add_operands (its bank)  │
           engine / pool / add results ─► ResultWriter ─► c2h              │
           PerfCounters ◄─ busy, phase, the engine's issue and stall ◄──────┘ (optional)
    ```

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
        # A build without the residual add has no ADD_* registers, one without the
        # performance counters no PERF_* registers (they read zero).
        m.submodules.csr = csr = CsrBank(implemented_registers(**cfg.features()),
                                         readback=cfg.csr_readback)
        wiring.connect(m, wiring.flipped(self.csr), csr.bus)
        soft_reset = csr.ctrl[SOFT_RESET_BIT]
        # The engine and the pool reset on their own copies of the soft reset
        # (hw.soft_reset); the engine passes the write on to its blocks, which do the same.
        soft_reset_next = soft_reset_write(self.csr)

        m.submodules.sequencer = seq = CommandSequencer(residual_add=cfg.residual_add,
                                                        depthwise=cfg.depthwise)
        m.submodules.loader = loader = HostLoader(cols)
        m.submodules.engine = engine = with_own_reset(m, "engine", soft_reset_next,
                                                      ConvEngine(cfg), platform)
        m.d.comb += engine.soft_reset_next.eq(soft_reset_next)
        m.submodules.pool = pool = with_own_reset(
            m, "pool", soft_reset_next, MaxPool2x2(lanes=cols, max_width=POOL_MAX_WIDTH),
            platform)
        m.submodules.writer = writer = ResultWriter(cols)

        # --- registers: identity, configuration, layer parameters, status --------------
        m.d.comb += [
            csr.id.eq(ID_VALUE),
            csr.version.eq(MAP_VERSION),
            csr.config.eq(pack_config(rows=rows, cols=cols, acc_width=cfg.array.acc_width,
                                      add_lanes=cfg.add_lanes, **cfg.features())),
            csr.act_depth.eq(cfg.act_depth),
            csr.weight_depth.eq(cfg.weight_depth),
            csr.param_depth.eq(cfg.max_col_tiles),
            csr.pool_max_width.eq(POOL_MAX_WIDTH),
            pool.width.eq(csr.pool_width), pool.height.eq(csr.pool_height),
            self.irq.eq(((csr.status >> 1) & csr.irq_enable & 0b11).any()),
        ]
        for name, _, _, _ in DESCRIPTOR_FIELDS:
            if name in DEPTHWISE_FIELDS and not cfg.depthwise:
                continue  # no such register: the engine has no depthwise mode
            field = getattr(engine.descriptor, name)
            m.d.comb += field.eq(getattr(csr, f"conv_{name}")[:len(field)])
        for name, _, _, _ in ADD_PARAM_FIELDS if cfg.residual_add else ():
            field = getattr(engine.add_params, name)
            m.d.comb += field.eq(getattr(csr, f"add_{name}")[:len(field)])

        # --- the sequencer: reads the command, tells every other component its phase ---
        registers = by_name()
        for name, (_, register) in command_fields(depthwise=cfg.depthwise).items():
            source = (getattr(engine.descriptor, name) if register is None
                      else getattr(csr, port_name(registers[register])))
            m.d.comb += getattr(seq.command, name).eq(source)
        m.d.comb += [
            seq.start.eq(csr.ctrl[0]), seq.abort.eq(soft_reset),
            seq.force_error.eq(self.dbg_force_error),
            seq.entry_taken.eq(loader.entry_taken), seq.act_taken.eq(loader.act_taken),
            seq.finished.eq(writer.done),
            csr.status_live.eq(seq.busy),
            csr.error_code.eq(seq.error_code),
            csr.status_set.eq((seq.set_done << 1) | (seq.set_error << 2)),
        ]

        # --- host words into the engine's loads and the POOL / ADD operands ------------
        wiring.connect(m, wiring.flipped(self.h2c), loader.h2c)
        m.d.comb += [
            loader.phase.eq(seq.phase), loader.adding.eq(seq.adding),
            loader.load_last.eq(seq.load_last), loader.phase_last.eq(seq.phase_last),
            loader.weights_held.eq(seq.weights_held),
            # Idle, the loader holds nothing: a pass that ends early (a forced error) must
            # not leave a gathered entry offered to the engine or the pool.
            loader.clear.eq(soft_reset | ~seq.busy),
            engine.start.eq(seq.engine_start),
            engine.load_during_run.eq(1),
            engine.adding.eq(seq.adding),
        ]
        wiring.connect(m, loader.params, engine.param_in)
        wiring.connect(m, loader.weights, engine.weight_in)
        wiring.connect(m, loader.acts, engine.act_in)
        # The ADD operand pairs and the POOL pixels pass a skid buffer: the bank's and the
        # pool's ready follow the output writer and the host link, and the loader's
        # handshake, which the sequencer counts, must not wait on them (it was a board build's
        # critical path on ECP5).
        if cfg.residual_add:
            skid_between(m, "pair_skid", loader.pairs, engine.add_operands,
                         registered=cfg.pipelined)
        else:
            wiring.connect(m, loader.pairs, engine.add_operands)
        host_pixels = skid_after(m, "pixel_skid", loader.pixels, registered=cfg.pipelined)

        # --- the max pool takes the engine's output (CONV with pooling) or the host's
        # pixels (POOL) -------------------------------------------------------------------
        from_host = seq.pool_from_host
        m.d.comb += pool.active.eq(seq.busy & seq.pooling)
        with m.If(from_host):
            m.d.comb += [pool.pixels.payload.eq(host_pixels.payload),
                         pool.pixels.valid.eq(host_pixels.valid),
                         host_pixels.ready.eq(pool.pixels.ready)]
        with m.Else():
            m.d.comb += [pool.pixels.payload.eq(engine.output.payload),
                         pool.pixels.valid.eq(engine.output.valid & seq.pooling)]

        # --- results (the pool, the adder or the engine) to the output writer; a pooled
        # pass ends with the last frame's last beat ----------------------------------------
        results = writer.results
        with m.If(seq.pooling):
            m.d.comb += [results.payload.y.eq(pool.pooled.payload.x),
                         results.payload.last.eq(pool.pooled.payload.last & seq.last_frame),
                         results.valid.eq(pool.pooled.valid),
                         pool.pooled.ready.eq(results.ready),
                         seq.frame_taken.eq(pool.pooled.valid & results.ready
                                            & pool.pooled.payload.last)]
        with m.Elif(seq.adding):
            m.d.comb += [results.payload.y.eq(engine.add_results.payload.y),
                         results.payload.last.eq(engine.add_results.payload.last),
                         results.valid.eq(engine.add_results.valid),
                         engine.add_results.ready.eq(results.ready)]
        with m.Else():
            m.d.comb += [results.payload.y.eq(engine.output.payload.y),
                         results.payload.last.eq(engine.output.payload.last),
                         results.valid.eq(engine.output.valid),
                         engine.output.ready.eq(results.ready)]
        with m.If(seq.pooling & ~from_host):
            m.d.comb += engine.output.ready.eq(pool.pixels.ready)
        wiring.connect(m, writer.c2h, wiring.flipped(self.c2h))
        m.d.comb += [
            writer.hold_last.eq((seq.phase == Phase.ACTIVATIONS)
                                | (seq.phase == Phase.REST_WEIGHTS)),
            writer.clear.eq(soft_reset),
        ]

        # --- performance counters (left out, with their registers, on a build without) --
        if cfg.perf_counters:
            m.submodules.perf = perf = PerfCounters(rows * cols)
            m.d.comb += [
                perf.busy.eq(seq.busy), perf.computing.eq(seq.phase == Phase.DRAIN),
                perf.stalled.eq(engine.stalled), perf.issued.eq(engine.issued),
                csr.perf_cycles.eq(perf.cycles), csr.perf_busy.eq(perf.busy_cycles),
                csr.perf_macs_lo.eq(perf.macs[:32]), csr.perf_macs_hi.eq(perf.macs[32:]),
                csr.perf_stalls.eq(perf.stall_cycles),
                csr.perf_compute.eq(perf.compute_cycles),
            ]
        return m
