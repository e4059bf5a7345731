"""The systolic array with its multipliers at twice the engine's clock: the engine's R x C
array (R even) on R/2 x C DSP blocks, each block doing the work of two processing elements.

Why: on the ECP5-85F the bare 8x8 array closes at 170 MHz, the control around it near
62.5 to 80 MHz (docs/boards.md). Here only the processing elements run fast, so a DSP
block does two MACs per engine cycle and the engine, its buffers and its address generator
stay at the clock they close at (the feeder is the R-row engine's, unchanged).

Clocks: the ``operands`` and ``results`` streams are in ``sync``, the engine's clock; the
processing elements run in ``ARRAY_DOMAIN``, at least ``PUMP`` times as fast for the full
rate (on a board, exactly that, from the same PLL). Both streams cross through Amaranth's
``AsyncFIFO``, so the two clocks need no phase relation, in hardware or in simulation.

Inside ``ARRAY_DOMAIN`` a *tick* is ``PUMP`` cycles, ``phase`` 0 then 1. The logical
array is ``hw.systolic``'s dataflow (PE(i, j) sees the pair for k at tick k + i + j) with a
two-tick multiplier: its registers move at the end of every tick, and its drain reads a row
a tick. The DSP block of physical PE (p, j) takes logical row 2p's pair in phase 0 and row
2p+1's in phase 1; its pipeline advances on every cycle, so the products come back two
ticks later in the same order, each into its own row's accumulator.

Unlike the one-clock array it never stalls, so no enable spans it: each PE moves on its
own toggle of the phase. The result crossing keeps room for the rows of every tile whose
end has entered, and a tile ends only against that room (docs/architecture.md, "The
array's own clock").
"""

from amaranth import (
    Cat,
    ClockDomain,
    ClockSignal,
    Module,
    Mux,
    ResetSignal,
    Shape,
    Signal,
    signed,
)
from amaranth.hdl import DomainRenamer
from amaranth.lib import data, stream, wiring
from amaranth.lib.cdc import ResetSynchronizer
from amaranth.lib.fifo import AsyncFIFO
from amaranth.lib.wiring import In, Out

from contract.config import ArrayConfig

from .global_net import global_net
from .multiplier import mult18x18d
from .pipeline import SkidBuffer
from .systolic import delayed, operand_layout, or_all, result_layout

#: The clock domain the processing elements run in.
ARRAY_DOMAIN = "array"
#: Cycles of ``ARRAY_DOMAIN`` per tick: the logical rows one DSP block serves.
PUMP = 2
#: Rows whose results the drain ORs in its first step (a LUT level of AND-OR pairs).
DRAIN_GROUP = 4
#: Engine cycles the crossings and the core are held in reset after a reset of ``sync``.
FLUSH_CYCLES = 4
#: Depth of the operand crossing: enough to cover the pointer synchronizers' round trip at
#: one beat per engine cycle. (The result crossing's is ``result_depth``.)
CROSSING_DEPTH = 8


class PumpedMultiplier(wiring.Component):
    """``p`` is ``a * b`` from ``latency`` enabled cycles earlier: two ticks of the
    logical array, so one pair in each phase comes back in the phase it went in.

    On ECP5 one MULT18X18D with its input and output registers plus two fabric registers;
    elsewhere behavioural with the same latency.
    """

    a: In(signed(8))
    b: In(signed(8))
    en: In(1)
    p: Out(signed(16))

    latency = 2 * PUMP

    def elaborate(self, platform):
        m = Module()
        # Data registers have no reset (nor do the DSP block's): only control flags do, so
        # the array's reset net reaches few flip-flops (it was the 16x8 board build's
        # critical path at 125 MHz: 13.4 ns of routing into a hold register's reset).
        stage, p = Signal(signed(16), reset_less=True), Signal(signed(16), reset_less=True)
        m.d.comb += self.p.eq(p)
        if getattr(platform, "family", None) == "ecp5":
            dsp_p = Signal(36)
            m.submodules.dsp = mult18x18d(Cat(self.a, self.a[7].replicate(10)),
                                          Cat(self.b, self.b[7].replicate(10)),
                                          dsp_p, en=self.en)
            product = dsp_p[:16]
        else:
            a_reg = Signal(signed(8), reset_less=True)
            b_reg = Signal(signed(8), reset_less=True)
            product = Signal(signed(16), reset_less=True)
            with m.If(self.en):
                m.d.sync += [a_reg.eq(self.a), b_reg.eq(self.b), product.eq(a_reg * b_reg)]
        with m.If(self.en):
            m.d.sync += [stage.eq(product), p.eq(stage)]
        return m


def phase_toggle(m, name):
    """A register ``name`` that toggles every cycle from reset: the tick's phase, 0 in its
    first cycle and 1 in its second. Every copy leaves reset with the others, so they
    agree."""
    phase = Signal(name=name)
    m.d.sync += phase.eq(~phase)
    return phase


class DualProcessingElement(wiring.Component):
    """Two processing elements of one array column, logical rows 2p (index 0) and 2p+1
    (index 1), on one multiplier.

    Nothing enables it from outside: it moves every tick, on its own toggle of the tick's
    phase (0 in a tick's first cycle, 1 in its second, whose end moves the logical
    registers). Bubbles travel through it as beats with ``valid`` low. The ports are
    ``hw.pe.ProcessingElement``'s, one per row; ``b`` passes through both rows.

    Nor does the drain select it: a finished sum is read ``read_delay`` ticks after this PE
    captured it (the columns' count less this PE's column, the tick after its row's last
    column captured), so ``read`` is this PE's capture flag that many ticks later, and
    ``drained`` is ``hold`` in that tick and zero otherwise, ready for the drain's OR.
    """

    def __init__(self, *, acc_width=32, read_delay=1):
        self.acc_width = acc_width
        self.read_delay = read_delay
        pair = data.ArrayLayout(signed(8), 2)
        super().__init__({
            "a_in": In(pair),
            "b_in": In(signed(8)),
            "valid_in": In(2),
            "last_in": In(2),
            "a_out": Out(pair),
            "b_out": Out(signed(8)),
            "valid_out": Out(2),
            "last_out": Out(2),
            "read": Out(2),
            "drained": Out(data.ArrayLayout(signed(acc_width), 2)),
        })

    def elaborate(self, platform):
        m = Module()
        # This PE's own copies of the phase: toggles from reset, in step with every other
        # one of the array, so no enable or select net spans the array. One for each
        # group of registers the placer may put apart (the operand registers, the DSP
        # block's input select, each row's sums): with one for the whole PE, it reached
        # a row's sum across the die (12.7 ns of one net at e79a1d6).
        step, phase = phase_toggle(m, "phase_operands"), phase_toggle(m, "phase_select")
        phase_sums = [phase_toggle(m, f"phase_row{r}") for r in range(2)]
        # Row 1's b is row 0's, a tick later (it moves down one row a tick).
        # Operands and sums have no reset (PumpedMultiplier says why); flags do.
        b_mid = Signal(signed(8), reset_less=True)
        a_out = Signal(data.ArrayLayout(signed(8), 2), reset_less=True)
        b_out = Signal(signed(8), reset_less=True)
        m.d.comb += [self.a_out.eq(a_out), self.b_out.eq(b_out)]
        valid_d1, valid_d2, last_d1, last_d2, capture = (
            Signal(2, name=n) for n in ("valid_d1", "valid_d2", "last_d1", "last_d2", "capture"))
        with m.If(step):
            m.d.sync += [
                a_out.eq(self.a_in), b_mid.eq(self.b_in), b_out.eq(b_mid),
                self.valid_out.eq(self.valid_in), self.last_out.eq(self.last_in),
                valid_d1.eq(self.valid_in), valid_d2.eq(valid_d1),
                last_d1.eq(self.last_in), last_d2.eq(last_d1),
                # As ProcessingElement's with a two-tick multiplier: `capture` is high in
                # the tick whose end writes `hold`.
                capture.eq(valid_d1 & last_d1),
            ]
        m.d.comb += self.read.eq(delayed(m, capture, self.read_delay, step, "read"))

        # Row 0's pair goes in on the first cycle of the tick, row 1's on the second.
        m.submodules.mul = mul = PumpedMultiplier()
        m.d.comb += [mul.a.eq(Mux(phase, self.a_in[1], self.a_in[0])),
                     mul.b.eq(Mux(phase, b_mid, self.b_in)), mul.en.eq(1)]

        # The products come back two ticks later in the same phases: row 0's at the end of
        # the first cycle, row 1's at the end of the second.
        acc = [Signal(signed(self.acc_width), name=f"acc{r}", reset_less=True)
               for r in range(2)]
        fresh = [Signal(init=1, name=f"fresh{r}") for r in range(2)]
        total = [Signal(signed(self.acc_width), name=f"total{r}") for r in range(2)]
        for r in range(2):
            m.d.comb += total[r].eq(Mux(fresh[r], 0, acc[r]) + mul.p)
        with m.If(~phase_sums[0] & valid_d2[0]):
            m.d.sync += [acc[0].eq(total[0]), fresh[0].eq(last_d2[0])]
        with m.If(phase_sums[1] & valid_d2[1]):
            m.d.sync += [acc[1].eq(total[1]), fresh[1].eq(last_d2[1])]
        # `hold` is written at the tick's end, as the logical array's is: row 0's finished
        # sum has been in its accumulator since the first cycle. Two registers, not two
        # halves of one: with the board build's `keep` on PE registers (hw/bitstream/tops.py),
        # Yosys split a register whose halves had their own enables into two cells that
        # both drove it, which nextpnr refused ("multiply driven").
        hold = [Signal(signed(self.acc_width), name=f"hold{r}", reset_less=True)
                for r in range(2)]
        with m.If(phase_sums[0] & capture[0]):
            m.d.sync += hold[0].eq(acc[0])
        with m.If(phase_sums[1] & capture[1]):
            m.d.sync += hold[1].eq(total[1])
        m.d.comb += [self.drained[r].eq(hold[r] & self.read[r].replicate(self.acc_width))
                     for r in range(2)]
        return m


def result_depth(rows, cols):
    """Rows the result crossing holds: a power of two (an ``AsyncFIFO``'s depth) of at
    least ``2 * rows + cols``, so that a tile may end while the one before it drains
    (its rows are promised from its end until the engine has read them and the read
    pointer is back across the synchronizers, some ``rows + cols`` ticks)."""
    return 1 << (2 * rows + cols - 1).bit_length()


class PumpedCore(wiring.Component):
    """The logical R x C array on R/2 x C ``DualProcessingElement``s, in one clock domain
    (``sync`` here; ``DoublePumpedArray`` renames it).

    It never stalls: every register moves every tick, and a tile's R result rows leave at
    one a tick, a fixed number of ticks after its last beat entered. So whoever takes
    ``results`` (always ready) must have room for them: a tile's last beat enters only
    while ``admit`` is high (room for ``rows`` more rows than those already promised),
    and ``tile_ended`` pulses when it did. The streams move at the end of a tick only
    (``operands.ready`` and ``results.valid`` are low in a tick's first cycle)."""

    def __init__(self, config):
        if config.rows % PUMP:
            raise ValueError(f"a double-pumped array needs an even number of rows, "
                             f"not rows={config.rows}")
        self.config = config
        super().__init__({
            "operands": In(stream.Signature(operand_layout(config.rows, config.cols))),
            "results": Out(stream.Signature(result_layout(config.cols, config.acc_width),
                                            always_ready=True)),
            "admit": In(1),
            "tile_ended": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        rows, cols, width = self.config.rows, self.config.cols, self.config.acc_width
        pairs = rows // PUMP

        # 0, 1: the cycle of the tick; every group of registers has its own toggle (named
        # `*_copy*`: the board build keeps such flip-flops apart, hw/bitstream/tops.py),
        # all reset together, so they agree without a net that spans the array.
        def toggle(name):
            return phase_toggle(m, f"phase_{name}_copy")

        phase_in, phase_drain, phase_out = toggle("in"), toggle("drain"), toggle("out")
        phase_valid = toggle("valid")   # the result stream's valid, into the crossing
        phase_rows = [toggle(f"row{p}") for p in range(pairs)]      # row p's delay lines
        phase_cols = [toggle(f"col{j}") for j in range(cols)]       # column j's delay line

        # Input stage: the beat the array takes this tick, held for both cycles. A bubble
        # (no beat) enters as a beat with valid low; a tile's last beat waits (bubbles go
        # in instead) until `gap` ticks after the last tile end and until `admit`.
        beat = Signal(operand_layout(rows, cols), reset_less=True)  # `beat_full` says
        beat_full = Signal()
        gap = max(rows, cols)       # hw.systolic: two tile ends enter >= gap ticks apart
        since_last = Signal(range(gap + 1), init=gap)
        # Whether the beat enters and the register loads are decided in the tick's first
        # cycle and used at its end: what they read changes only at a tick's end (and
        # `admit` only grows until this core ends a tile), and the second skid buffer's
        # registers then move on two flip-flops (the decision itself, after a tile's last
        # beat, was the array clock's critical path at 7b916c7: 13.46 ns).
        take, load = Signal(name="take"), Signal(name="load")
        take_now = ~beat.last | ((since_last == gap) & self.admit)
        m.d.sync += [take.eq(take_now), load.eq(~beat_full | take_now)]
        entering = Signal()
        m.d.comb += [entering.eq(beat_full & take),
                     self.operands.ready.eq(load & phase_in),
                     self.tile_ended.eq(phase_in & entering & beat.last)]
        with m.If(phase_in):
            with m.If(load):
                m.d.sync += [beat.eq(self.operands.payload),
                             beat_full.eq(self.operands.valid)]
            with m.If(entering & beat.last):
                m.d.sync += since_last.eq(1)
            with m.Elif(since_last < gap):
                m.d.sync += since_last.eq(since_last + 1)

        pes = [[DualProcessingElement(acc_width=width, read_delay=cols - j)
                for j in range(cols)]
               for _ in range(pairs)]
        for p in range(pairs):
            for j in range(cols):
                pe = pes[p][j]
                m.submodules[f"pe_{p}_{j}"] = pe
                if j == 0:
                    for r in range(2):
                        i, row_step = 2 * p + r, phase_rows[p]
                        m.d.comb += [
                            pe.a_in[r].eq(delayed(m, beat.a[i], i, row_step, f"a{i}",
                                                  reset_less=True)),
                            pe.valid_in[r].eq(delayed(m, entering, i, row_step,
                                                      f"valid{i}")),
                            pe.last_in[r].eq(delayed(m, beat.last, i, row_step, f"last{i}")),
                        ]
                else:
                    left = pes[p][j - 1]
                    m.d.comb += [pe.a_in.eq(left.a_out), pe.valid_in.eq(left.valid_out),
                                 pe.last_in.eq(left.last_out)]
                if p == 0:
                    m.d.comb += pe.b_in.eq(delayed(m, beat.b[j], j, phase_cols[j], f"b{j}",
                                                   reset_less=True))
                else:
                    m.d.comb += pe.b_in.eq(pes[p - 1][j].b_out)

        def row_pe(i, j):
            return pes[i // PUMP][j], i % PUMP

        # Drain: row i is read the tick after its last column captured, which is when
        # each of its PEs raises `read` (rows complete one a tick, in order, and tile ends
        # are `gap >= max(rows, cols)` ticks apart, so no two rows are read in one tick and
        # a row is read before the next tile's capture reaches it): no row pointer, and no
        # select net that spans the array. The flags of the last column say when a row
        # leaves; they and the PEs' sums change only at a tick's end, so the terms that
        # span the array are registered at the end of the tick's first cycle and used at
        # the end of its second: each path that crosses the array has a cycle of its own.
        reads, reads_copy = Signal(rows), Signal(rows)
        for i in range(rows):
            last_pe, r_last = row_pe(i, cols - 1)
            m.d.comb += reads[i].eq(last_pe.read[r_last])
        m.d.sync += reads_copy.eq(reads)
        out_valid = Signal()
        m.d.comb += self.results.valid.eq(out_valid & phase_valid)
        with m.If(phase_drain):
            m.d.sync += out_valid.eq(reads_copy.any())
        # The row read out, in two steps: the OR of each group of DRAIN_GROUP rows into a
        # register, then the OR of the groups into the result register.
        groups = [range(g, min(g + DRAIN_GROUP, rows)) for g in range(0, rows, DRAIN_GROUP)]
        partial = [[Signal(signed(width), name=f"drain_g{g}_c{j}", reset_less=True)
                    for j in range(cols)]
                   for g in range(len(groups))]
        for g, group in enumerate(groups):
            for j in range(cols):
                picked = []
                for i in group:
                    pe, r = row_pe(i, j)
                    picked.append(pe.drained[r])
                m.d.sync += partial[g][j].eq(or_all(picked))
        payload = Signal.like(self.results.payload, reset_less=True)  # `out_valid` says
        m.d.comb += self.results.payload.eq(payload)
        with m.If(phase_out):
            m.d.sync += payload.last.eq(reads_copy[rows - 1])
            for j in range(cols):
                m.d.sync += payload.c[j].eq(
                    or_all([partial[g][j] for g in range(len(groups))]))
        return m


class DoublePumpedArray(wiring.Component):
    """``hw.systolic.SystolicArray``'s streams and results (rows even, no depthwise mode),
    its processing elements in ``ARRAY_DOMAIN`` on half as many DSP blocks.

    The streams are in ``sync``; the domain ``ARRAY_DOMAIN`` (with its reset) is the
    caller's to provide. A reset of ``sync`` alone, such as the engine's soft reset (a
    ``ResetInserter`` on ``sync``), also empties the crossings and resets the processing
    elements: the array notices it by a register of its own and resets its local domains.
    """

    def __init__(self, config=None):
        if config is None:
            config = ArrayConfig()
        if not isinstance(config, ArrayConfig):
            raise TypeError(f"config must be an ArrayConfig, not {config!r}")
        self.config = config
        self.core = PumpedCore(config)  # checks the rows
        super().__init__({
            "operands": In(stream.Signature(operand_layout(config.rows, config.cols))),
            "results": Out(stream.Signature(result_layout(config.cols, config.acc_width))),
        })

    def elaborate(self, platform):
        m = Module()
        cfg = self.config
        # A reset inserted on `sync` (the soft reset) reaches only `sync`'s statements, not
        # the array's domain nor the reset the crossings read. `alive` is 0 for
        # FLUSH_CYCLES cycles after any reset of `sync`, inserted or not; the crossings and
        # the core run in local domains on the same clocks whose resets include that pulse
        # (brought into the array's clock by a reset synchronizer). The pulse is long
        # enough for each crossing's pointers to pass its synchronizers while its read
        # side is held in reset (one cycle was not: the read side came out of reset with
        # the old write pointer and read stale entries).
        flush = Signal(FLUSH_CYCLES, init=(1 << FLUSH_CYCLES) - 1)
        m.d.sync += flush.eq(flush >> 1)
        alive = Signal()
        m.d.comb += alive.eq(~flush[0])
        m.domains.near = near = ClockDomain(local=True)    # sync's clock
        m.domains.far = far = ClockDomain(local=True)      # the array's clock
        m.d.comb += [near.clk.eq(ClockSignal("sync")),
                     near.rst.eq(ResetSignal("sync") | ~alive),
                     far.clk.eq(ClockSignal(ARRAY_DOMAIN))]
        # The array's reset reaches a flag register in every PE across the die: on ECP5 it
        # leaves its synchronizer through a global buffer (DCCA), on one of the clock
        # networks (in general routing, 18.5 ns of one net into a PE's phase toggle at
        # 58f9919: the array clock's critical path once nothing else spanned the array).
        m.domains.far_raw = far_raw = ClockDomain(local=True)
        m.d.comb += far_raw.clk.eq(ClockSignal(ARRAY_DOMAIN))
        m.submodules.far_reset = ResetSynchronizer(ResetSignal(ARRAY_DOMAIN) | ~alive,
                                                   domain="far_raw")
        m.d.comb += far.rst.eq(global_net(m, platform, ResetSignal("far_raw"), "far_reset"))
        m.submodules.core = DomainRenamer("far")(self.core)
        m.submodules.operand_crossing = into = AsyncFIFO(
            width=Shape.cast(operand_layout(cfg.rows, cfg.cols)).width, depth=CROSSING_DEPTH,
            w_domain="near", r_domain="far")
        # The crossing's read side moves on the skid buffer's registered ready, not on the
        # core's tick logic (that path, advance -> FIFO read -> its pointers, was the 8x8
        # pumped build's array-clock critical path: 12.44 ns).
        skid = SkidBuffer(operand_layout(cfg.rows, cfg.cols))
        m.submodules.operand_skid = DomainRenamer("far")(skid)
        # And a second one, so that the core's input stage (its ready: whether a tile may
        # end) steers registers half way to the crossing rather than the crossing's own
        # skid (since_last -> that skid's valid, 13.6 ns of routing, was the stall-free
        # 16x8's array-clock critical path at a9c52a9).
        near_core = SkidBuffer(operand_layout(cfg.rows, cfg.cols))
        m.submodules.operand_skid_core = DomainRenamer("far")(near_core)
        wiring.connect(m, skid.source, near_core.sink)
        wiring.connect(m, near_core.source, self.core.operands)
        # The results cross without a handshake into the core: the crossing keeps room
        # for every row a tile whose end has entered will bring. `promised` counts rows
        # promised and not yet written; the crossing's `w_level` counts a write two
        # cycles later, so a written row leaves `promised` a cycle after it is written.
        depth = result_depth(cfg.rows, cfg.cols)
        m.submodules.result_crossing = out = AsyncFIFO(
            width=Shape.cast(result_layout(cfg.cols, cfg.acc_width)).width,
            depth=depth, w_domain="far", r_domain="near")
        promised = Signal(range(depth + 1))
        written = Signal()
        ending = Mux(self.core.tile_ended, cfg.rows, 0)
        m.d.far += [
            written.eq(out.w_en),
            promised.eq(promised + ending - written),
            # Decided a cycle ahead, from this cycle's counts and the end that enters now
            # (tile ends are ticks apart, so no second end can come in between).
            self.core.admit.eq(out.w_level + promised + ending + cfg.rows <= depth),
        ]
        m.d.comb += [
            # No transfer in the cycle the crossings are reset.
            into.w_data.eq(self.operands.payload), into.w_en.eq(self.operands.valid & alive),
            self.operands.ready.eq(into.w_rdy & alive),
            skid.sink.payload.eq(into.r_data), skid.sink.valid.eq(into.r_rdy),
            into.r_en.eq(skid.sink.ready),
            out.w_data.eq(self.core.results.payload), out.w_en.eq(self.core.results.valid),
            self.results.payload.eq(out.r_data), self.results.valid.eq(out.r_rdy & alive),
            out.r_en.eq(self.results.ready & alive),
        ]
        return m
