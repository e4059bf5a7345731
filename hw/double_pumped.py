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
two-tick multiplier: its registers move at the end of a tick (``step``), and its stall and
drain are decided once a tick. The DSP block of physical PE (p, j) takes logical row 2p's
pair in phase 0 and row 2p+1's in phase 1; its pipeline advances on both cycles of a tick
that advances, so the products come back two ticks later in the same order, each into its
own row's accumulator (docs/architecture.md, "The array's own clock").
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

from .multiplier import mult18x18d
from .pipeline import SkidBuffer
from .systolic import (
    delayed,
    next_advance,
    operand_layout,
    or_all,
    result_layout,
    stall_terms,
)

#: The clock domain the processing elements run in.
ARRAY_DOMAIN = "array"
#: Cycles of ``ARRAY_DOMAIN`` per tick: the logical rows one DSP block serves.
PUMP = 2
#: Rows whose results the drain ORs in its first step (a LUT level of AND-OR pairs).
DRAIN_GROUP = 4
#: Engine cycles the crossings and the core are held in reset after a reset of ``sync``.
FLUSH_CYCLES = 4
#: Columns of dual processing elements that share one copy of `advance` and `step` (a DSP
#: slice's four multipliers on ECP5). One each (c37bd97) left router2 unconverged on the
#: 85F's 16x8; with four it routes, though the placer may spread a copy's PEs apart.
COPY_COLUMNS = 4
#: Depth of each crossing FIFO: enough to cover the pointer synchronizers' round trip at
#: one beat per engine cycle.
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


class DualProcessingElement(wiring.Component):
    """Two processing elements of one array column, logical rows 2p (index 0) and 2p+1
    (index 1), on one multiplier.

    ``advance`` is high for both cycles of a tick in which the logical array advances;
    ``step`` is high in the second of them (the logical registers move at its end). The
    ports are ``hw.pe.ProcessingElement``'s, one per row; ``b`` passes through both rows.
    """

    def __init__(self, *, acc_width=32):
        self.acc_width = acc_width
        pair = data.ArrayLayout(signed(8), 2)
        super().__init__({
            "advance": In(1),
            "step": In(1),
            "a_in": In(pair),
            "b_in": In(signed(8)),
            "valid_in": In(2),
            "last_in": In(2),
            "a_out": Out(pair),
            "b_out": Out(signed(8)),
            "valid_out": Out(2),
            "last_out": Out(2),
            "capture": Out(2),
            "capture_next": Out(2),
            "hold": Out(data.ArrayLayout(signed(acc_width), 2)),
        })

    def elaborate(self, platform):
        m = Module()
        step, advance = self.step, self.advance
        # Row 1's b is row 0's, a tick later (it moves down one row a tick).
        # Operands and sums have no reset (PumpedMultiplier says why); flags do.
        b_mid = Signal(signed(8), reset_less=True)
        a_out = Signal(data.ArrayLayout(signed(8), 2), reset_less=True)
        b_out = Signal(signed(8), reset_less=True)
        m.d.comb += [self.a_out.eq(a_out), self.b_out.eq(b_out)]
        valid_d1, valid_d2, last_d1, last_d2 = (Signal(2, name=n) for n in
                                                ("valid_d1", "valid_d2", "last_d1", "last_d2"))
        with m.If(step):
            m.d.sync += [
                a_out.eq(self.a_in), b_mid.eq(self.b_in), b_out.eq(b_mid),
                self.valid_out.eq(self.valid_in), self.last_out.eq(self.last_in),
                valid_d1.eq(self.valid_in), valid_d2.eq(valid_d1),
                last_d1.eq(self.last_in), last_d2.eq(last_d1),
                # As ProcessingElement's with a two-tick multiplier: `capture` is high in
                # the tick whose end writes `hold`, `capture_next` a tick before.
                self.capture.eq(valid_d1 & last_d1),
                self.capture_next.eq(self.valid_in & self.last_in),
            ]

        # Row 0's pair goes in on the first cycle of the tick, row 1's on the second; the
        # select is this PE's own copy of the tick's phase (a toggle from reset, in step
        # with the array's), so no select net spans the array. Stalled, the multiplier
        # holds (en low) and the select does not matter.
        phase = Signal()
        m.d.sync += phase.eq(~phase)
        m.submodules.mul = mul = PumpedMultiplier()
        m.d.comb += [mul.a.eq(Mux(phase, self.a_in[1], self.a_in[0])),
                     mul.b.eq(Mux(phase, b_mid, self.b_in)), mul.en.eq(advance)]

        # The products come back two ticks later in the same phases: row 0's at the end of
        # the first cycle, row 1's at the end of the second.
        acc = [Signal(signed(self.acc_width), name=f"acc{r}", reset_less=True)
               for r in range(2)]
        fresh = [Signal(init=1, name=f"fresh{r}") for r in range(2)]
        total = [Signal(signed(self.acc_width), name=f"total{r}") for r in range(2)]
        for r in range(2):
            m.d.comb += total[r].eq(Mux(fresh[r], 0, acc[r]) + mul.p)
        with m.If(advance & ~phase & valid_d2[0]):
            m.d.sync += [acc[0].eq(total[0]), fresh[0].eq(last_d2[0])]
        with m.If(step & valid_d2[1]):
            m.d.sync += [acc[1].eq(total[1]), fresh[1].eq(last_d2[1])]
        # `hold` is written at the tick's end, as the logical array's is: row 0's finished
        # sum has been in its accumulator since the first cycle. Two registers, not two
        # halves of one: with the board build's `keep` on PE registers (hw/bitstream/tops.py),
        # Yosys split a register whose halves had their own enables into two cells that
        # both drove it, which nextpnr refused ("multiply driven").
        hold = [Signal(signed(self.acc_width), name=f"hold{r}", reset_less=True)
                for r in range(2)]
        with m.If(step & self.capture[0]):
            m.d.sync += hold[0].eq(acc[0])
        with m.If(step & self.capture[1]):
            m.d.sync += hold[1].eq(total[1])
        m.d.comb += [self.hold[r].eq(hold[r]) for r in range(2)]
        return m


class PumpedCore(wiring.Component):
    """The logical R x C array on R/2 x C ``DualProcessingElement``s, in one clock domain
    (``sync`` here; ``DoublePumpedArray`` renames it). Its streams move at the end of a
    tick only (``operands.ready`` and ``results.valid`` are low in phase 0)."""

    def __init__(self, config):
        if config.rows % PUMP:
            raise ValueError(f"a double-pumped array needs an even number of rows, "
                             f"not rows={config.rows}")
        self.config = config
        super().__init__({
            "operands": In(stream.Signature(operand_layout(config.rows, config.cols))),
            "results": Out(stream.Signature(result_layout(config.cols, config.acc_width))),
        })

    def elaborate(self, platform):
        m = Module()
        rows, cols, width = self.config.rows, self.config.cols, self.config.acc_width

        # 0, 1: the cycle of the tick. Copies for the wide registers that load at a tick's
        # end (the input beat, the result row), so that no one toggle drives them all.
        # (And one for the result stream's valid, which reaches the crossing's skid buffer:
        # from the shared toggle it was the 16x8 build's array-clock critical path, 8.3 ns
        # of routing.)
        phase = Signal()
        phase_in, phase_out = Signal(name="phase_in_copy"), Signal(name="phase_out_copy")
        phase_valid = Signal(name="phase_valid_copy")
        m.d.sync += [toggle.eq(~toggle) for toggle in (phase, phase_in, phase_out, phase_valid)]
        # Whether the logical array advances this tick; decided at the end of the last one.
        # (Named `*_copy*`, as the copies below: the board build keeps it apart from
        # them, hw/bitstream/tops.py; merged into a row's copy, it had to reach the input
        # stage from that row's corner of the die.)
        advance = Signal(init=1, name="advance_in_copy")
        pairs = rows // PUMP
        # Each group of COPY_COLUMNS dual PEs of a row (one DSP slice on ECP5) has its own
        # copies of `advance` and of `step` (advance, in the tick's second cycle), set
        # from the same next-state logic: one register enables a few hundred flip-flops
        # next to it, not a row's spread over the die.
        groups = range(-(-cols // COPY_COLUMNS))
        advance_copies = {(p, g): Signal(init=1, name=f"advance_copy{p}_{g}")
                          for p in range(pairs) for g in groups}
        step_copies = {(p, g): Signal(name=f"step_copy{p}_{g}")
                       for p in range(pairs) for g in groups}
        # Each with its own toggle of the phase beside it, so no one toggle reaches them all.
        phase_copies = {key: Signal(name=f"phase_copy{key[0]}_{key[1]}") for key in step_copies}
        m.d.sync += [toggle.eq(~toggle) for toggle in phase_copies.values()]
        m.d.sync += [step_copies[key].eq(~phase_copies[key] & advance_copies[key])
                     for key in step_copies]
        # The input stage's own: the first row's delay lines and the tile-gap count.
        step = Signal(name="step_in_copy")
        m.d.sync += step.eq(~phase_in & advance)

        # Input stage: the beat the array takes this tick, held for both cycles.
        beat = Signal(operand_layout(rows, cols), reset_less=True)  # `beat_full` says
        beat_full = Signal()
        gap = max(rows, cols)       # hw.systolic: two tile ends enter >= gap ticks apart
        since_last = Signal(range(gap + 1), init=gap)
        take = advance & ~(beat.last & (since_last < gap))
        entering = Signal()
        load = ~beat_full | take
        m.d.comb += [entering.eq(beat_full & take), self.operands.ready.eq(load & phase_in)]
        with m.If(phase_in & load):
            m.d.sync += [beat.eq(self.operands.payload), beat_full.eq(self.operands.valid)]
        with m.If(step):
            with m.If(entering & beat.last):
                m.d.sync += since_last.eq(1)
            with m.Elif(since_last < gap):
                m.d.sync += since_last.eq(since_last + 1)

        pes = [[DualProcessingElement(acc_width=width) for _ in range(cols)]
               for _ in range(pairs)]
        for p in range(pairs):
            for j in range(cols):
                pe = pes[p][j]
                m.submodules[f"pe_{p}_{j}"] = pe
                copy = (p, j // COPY_COLUMNS)
                m.d.comb += [pe.advance.eq(advance_copies[copy]),
                             pe.step.eq(step_copies[copy])]
                if j == 0:
                    for r in range(2):
                        i, row_step = 2 * p + r, step_copies[p, 0]
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
                    m.d.comb += pe.b_in.eq(delayed(m, beat.b[j], j, step, f"b{j}",
                                                   reset_less=True))
                else:
                    m.d.comb += pe.b_in.eq(pes[p - 1][j].b_out)

        def row_pe(i, j):
            return pes[i // PUMP][j], i % PUMP

        # Row bookkeeping and drain: hw.systolic's, once a tick (at the end of phase 1).
        # Everything they read from the PEs (capture flags, hold registers) and the row
        # state itself changes only at a tick's end, so the terms that span the array are
        # registered at the end of phase 0 and used at the end of phase 1: each path that
        # crosses the array has a cycle of its own (routing, not logic, is what limits it).
        cap_first, cap_last = Signal(rows), Signal(rows)
        pending, pending_next, full = Signal(rows), Signal(rows), Signal(rows)
        row = Signal(rows, init=1)
        out_valid = Signal()
        out_free = Signal()
        reading = Signal()
        for i in range(rows):
            first, r = row_pe(i, 0)
            last_pe, r_last = row_pe(i, cols - 1)
            m.d.comb += [cap_first[i].eq(first.capture[r]),
                         cap_last[i].eq(last_pe.capture[r_last])]
        cap_next = Cat(row_pe(i, 0)[0].capture_next[row_pe(i, 0)[1]] for i in range(rows))
        cap_first_copy, cap_last_copy = Signal(rows), Signal(rows)
        m.d.sync += [cap_first_copy.eq(cap_first), cap_last_copy.eq(cap_last)]
        readable = Signal(rows)
        m.d.comb += readable.eq(full & row)
        stall_if = {}
        for key, term in stall_terms(cap_first, cap_next, pending, readable).items():
            stall_if[key] = Signal(name=f"stall_if_adv{key[0]}_free{key[1]}")
            m.d.sync += stall_if[key].eq(term)
        m.d.comb += [
            out_free.eq(~out_valid | self.results.ready),
            reading.eq(readable.any() & out_free),
            self.results.valid.eq(out_valid & phase_valid),
        ]
        advance_next = Signal()
        m.d.comb += advance_next.eq(next_advance(advance, out_free, stall_if))
        with m.If(phase):
            m.d.sync += [pending.eq(pending_next), advance.eq(advance_next),
                         *(copy.eq(advance_next) for copy in advance_copies.values())]
            with m.If(reading):
                m.d.sync += [out_valid.eq(1), row.eq(Cat(row[rows - 1], row[:rows - 1]))]
            with m.Elif(self.results.ready):
                m.d.sync += out_valid.eq(0)
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
                    picked.append(pe.hold[r] & row[i].replicate(width))
                m.d.sync += partial[g][j].eq(or_all(picked))
        payload = Signal.like(self.results.payload, reset_less=True)  # `out_valid` says
        m.d.comb += self.results.payload.eq(payload)
        with m.If(phase_out & out_free):
            m.d.sync += payload.last.eq(row[rows - 1])
            for j in range(cols):
                m.d.sync += payload.c[j].eq(
                    or_all([partial[g][j] for g in range(len(groups))]))
        with m.If(phase):
            for i in range(rows):
                read_now = full[i] & row[i] & out_free
                with m.If(cap_last_copy[i] & advance):
                    m.d.sync += full[i].eq(1)
                with m.Elif(read_now):
                    m.d.sync += full[i].eq(0)
        for i in range(rows):
            read_now = full[i] & row[i] & out_free
            m.d.comb += pending_next[i].eq(Mux(cap_first_copy[i] & advance, 1,
                                               Mux(read_now, 0, pending[i])))
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
        m.submodules.far_reset = ResetSynchronizer(ResetSignal(ARRAY_DOMAIN) | ~alive,
                                                   domain="far")
        m.submodules.core = DomainRenamer("far")(self.core)
        m.submodules.operand_crossing = into = AsyncFIFO(
            width=Shape.cast(operand_layout(cfg.rows, cfg.cols)).width, depth=CROSSING_DEPTH,
            w_domain="near", r_domain="far")
        # The crossing's read side moves on the skid buffer's registered ready, not on the
        # core's tick logic (that path, advance -> FIFO read -> its pointers, was the 8x8
        # pumped build's array-clock critical path: 12.44 ns).
        skid = SkidBuffer(operand_layout(cfg.rows, cfg.cols))
        m.submodules.operand_skid = DomainRenamer("far")(skid)
        wiring.connect(m, skid.source, self.core.operands)
        # And the results enter theirs through one: the core's `out_free`, which enables
        # its result register, is then a register's, not the crossing's full flag (the
        # 8x8 pumped build's array critical path at c8bfbdb: 13.85 ns).
        result_skid = SkidBuffer(result_layout(cfg.cols, cfg.acc_width))
        m.submodules.result_skid = DomainRenamer("far")(result_skid)
        wiring.connect(m, self.core.results, result_skid.sink)
        m.submodules.result_crossing = out = AsyncFIFO(
            width=Shape.cast(result_layout(cfg.cols, cfg.acc_width)).width,
            depth=CROSSING_DEPTH, w_domain="far", r_domain="near")
        m.d.comb += [
            # No transfer in the cycle the crossings are reset.
            into.w_data.eq(self.operands.payload), into.w_en.eq(self.operands.valid & alive),
            self.operands.ready.eq(into.w_rdy & alive),
            skid.sink.payload.eq(into.r_data), skid.sink.valid.eq(into.r_rdy),
            into.r_en.eq(skid.sink.ready),
            out.w_data.eq(result_skid.source.payload), out.w_en.eq(result_skid.source.valid),
            result_skid.source.ready.eq(out.w_rdy),
            self.results.payload.eq(out.r_data), self.results.valid.eq(out.r_rdy & alive),
            out.r_en.eq(self.results.ready & alive),
        ]
        return m
