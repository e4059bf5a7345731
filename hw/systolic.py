"""R x C output-stationary systolic GEMM array with stream interfaces.

Dataflow (documented in docs/architecture.md): each ``operands`` beat carries one column
of an A tile (R int8 values, one per output row) and one row of a B tile (C int8 values,
one per output column) for the same k; ``last`` marks k = K-1. Rows of A enter skewed by
their row index, columns of B by their column index, so PE(i, j) sees the pair for k at
tick k + i + j. Each tile of R x C int32 results leaves on ``results`` as R beats of C
values, row 0 first, ``last`` on row R-1. Tiling of larger M x N problems and zero padding
of edge tiles are the feeder's job (``sw_driver.gemm_tiling``).

Throughput: one beat (R*C MACs) per cycle while ``results`` keeps up; a tile with
K < max(R, C) costs max(R, C) cycles (the drain and the wavefront bound the rate).

Depthwise mode (built with ``depthwise=True``, selected by the ``depthwise_mode`` input,
which holds still for a whole pass): a beat carries a 32-bit word per row (``a`` its byte 0,
``a_rest`` bytes 1..3) and PE(i, j) multiplies byte ``j % 4`` of row i's word instead of
the ``a`` passed from its left. The word travels right beside ``a`` through its own
registers, with the same row and column skew, so PE(i, j) still sees the pair for k at tick
k + i + j. Column 0 takes byte 0, which is ``a`` itself: no multiplexer there. A beat also
says which of a pixel's words it carries (``word``); the ``b`` row holds every column's
weight for the tap, and column j takes 0 instead where its channel is in another word
(``j // 4 != word``), so a tap's weights are one row however many words a pixel has.
"""

from amaranth import Cat, Module, Mux, Signal, signed, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from contract.config import ArrayConfig
from contract.descriptor import depthwise_word_bits, depthwise_words

from .pe import ProcessingElement
from .pipeline import skid_after

#: Bytes of the activation word a row carries in the depthwise mode (column j takes byte
#: ``j % DEPTHWISE_WORD``): the engine's 32-bit activation buffer word.
DEPTHWISE_WORD = 4


def operand_layout(rows, cols, *, depthwise=False):
    """Payload of one ``operands`` beat: A column, B row, end-of-tile flag; with
    ``depthwise``, also bytes 1..3 of each row's activation word (``a`` is its byte 0) and
    which of a pixel's words it is (``word``)."""
    fields = {
        "a": data.ArrayLayout(signed(8), rows),
        "b": data.ArrayLayout(signed(8), cols),
        "last": 1,
    }
    if depthwise:
        fields["a_rest"] = data.ArrayLayout(
            data.ArrayLayout(signed(8), DEPTHWISE_WORD - 1), rows)
        fields["word"] = unsigned(depthwise_word_bits(cols))
    return data.StructLayout(fields)


def result_layout(cols, acc_width):
    """Payload of one ``results`` beat: one row of the output tile."""
    return data.StructLayout({
        "c": data.ArrayLayout(signed(acc_width), cols),
        "last": 1,
    })


def or_all(values):
    """Bitwise OR of ``values`` as a balanced tree."""
    while len(values) > 1:
        values = [values[n] | values[n + 1] if n + 1 < len(values) else values[n]
                  for n in range(0, len(values), 2)]
    return values[0]


def stall_terms(cap_first, cap_next, pending, readable):
    """Whether the array must stall next step, ``{(advance, out_free): Value}`` for each
    value of this step's ``advance`` and ``out_free``, which the caller picks last
    (:func:`next_advance`). ``cap_first``/``cap_next``: column 0 captures now and after the
    next enabled edge, one bit per row; ``pending``: rows captured and not yet read out;
    ``readable``: the row the drain reads if the output register is free."""
    terms = {}
    for adv in (0, 1):
        for free in (0, 1):
            still_pending = pending & ~readable if free else pending
            if adv:
                stall = (cap_first | still_pending) & cap_next
            else:
                stall = still_pending & cap_first
            terms[adv, free] = stall.any()
    return terms


def next_advance(advance, out_free, stall_if):
    """``advance`` of the next step from the :func:`stall_terms` (as signals), picked by
    this step's ``advance`` and ``out_free``."""
    return ~Mux(advance, Mux(out_free, stall_if[1, 1], stall_if[1, 0]),
                Mux(out_free, stall_if[0, 1], stall_if[0, 0]))


def delayed(m, signal, ticks, en, name, *, reset_less=False):
    """``signal`` through ``ticks`` registers that advance while ``en`` (without a reset
    where ``reset_less``: data whose flags travel beside it)."""
    for t in range(ticks):
        reg = Signal.like(signal, name=f"{name}_d{t + 1}", reset_less=reset_less)
        with m.If(en):
            m.d.sync += reg.eq(signal)
        signal = reg
    return signal


class SystolicArray(wiring.Component):
    """int32 ``C = A @ B`` tiles from int8 operands, R*C MACs per cycle in steady state.

    Parameters
    ----------
    config : ArrayConfig
        Rows, columns and accumulator width.
    """

    def __init__(self, config=None, *, rows=None, cols=None, acc_width=None,
                 input_skid=True, depthwise=False):
        if config is None:
            kwargs = {k: v for k, v in
                      (("rows", rows), ("cols", cols), ("acc_width", acc_width))
                      if v is not None}
            config = ArrayConfig(**kwargs)
        elif not isinstance(config, ArrayConfig):
            raise TypeError(f"config must be an ArrayConfig, not {config!r}")
        self.config = config
        self.input_skid = bool(input_skid)
        self.depthwise = bool(depthwise)
        ports = {
            "operands": In(stream.Signature(operand_layout(config.rows, config.cols,
                                                           depthwise=self.depthwise))),
            "results": Out(stream.Signature(result_layout(config.cols, config.acc_width))),
        }
        if self.depthwise:
            # High for a depthwise pass; changes only while the array is empty.
            ports["depthwise_mode"] = In(1)
        super().__init__(ports)

    def elaborate(self, platform):
        m = Module()
        rows, cols = self.config.rows, self.config.cols

        # The whole array moves in lockstep; it only stops when a finished tile would
        # overwrite results that have not left yet. `advance` enables every register of
        # the array, so it is itself a register, computed a cycle ahead from next-state
        # values (below): as a combinational OR of row flags, the routing of its fanout
        # held an 8x8 array on ECP5 near 100 MHz.
        advance = Signal(init=1)

        # Input stage: a skid buffer, so ``operands.ready`` is a flip-flop and the feeder's
        # stall logic (the engine's read stage and address generator) does not wait on
        # this array's handshake (it did: the 8x8 ECP5 board build's critical path).
        # (Left out, ``input_skid=False``, for a slow clock: ``ConvEngineConfig.pipelined``.)
        source = skid_after(m, "input", wiring.flipped(self.operands),
                            registered=self.input_skid)
        beat, beat_full = source.payload, source.valid
        # Two tile ends enter at least `gap` ticks apart (short-K tiles get bubbles).
        # gap >= cols: row i is complete before its column 0 ends the next tile.
        # 2 * gap >= rows + cols - 1: a tile is complete before column 0 of row 0 ends
        # the tile after next, so the stall below never waits on a row that needs the
        # array to advance (with rows > cols + 1 and gap = cols, it deadlocked).
        gap = max(rows, cols)
        since_last = Signal(range(gap + 1), init=gap)
        may_enter = ~(beat.last & (since_last < gap))
        take = advance & may_enter
        entering = Signal()
        m.d.comb += [entering.eq(beat_full & take), source.ready.eq(take)]
        with m.If(advance):
            with m.If(entering & beat.last):
                m.d.sync += since_last.eq(1)
            with m.Elif(since_last < gap):
                m.d.sync += since_last.eq(since_last + 1)

        pes = [[ProcessingElement(acc_width=self.config.acc_width) for _ in range(cols)]
               for _ in range(rows)]
        # Depthwise: row i's whole word (``a`` and ``a_rest``), lined up with the ``a`` of
        # column j (``word[i][j]``): the row's skew, then a register per column, as ``a``
        # moves. A chain of its own: a PE passes on the operand it took, so past the
        # first multiplexer the ``a`` chain no longer carries byte 0.
        word = [[None] * cols for _ in range(rows)]
        if self.depthwise:
            word_layout = data.ArrayLayout(signed(8), DEPTHWISE_WORD)
            for i in range(rows):
                skewed = Signal(word_layout, name=f"a_word{i}")
                m.d.comb += skewed.eq(Cat(beat.a[i], beat.a_rest[i]))
                for t in range(i):
                    reg = Signal(word_layout, name=f"a_word{i}_d{t + 1}")
                    with m.If(advance):
                        m.d.sync += reg.eq(skewed)
                    skewed = reg
                word[i][0] = skewed
                for j in range(1, cols):
                    reg = Signal(word_layout, name=f"a_word{i}_c{j}")
                    with m.If(advance):
                        m.d.sync += reg.eq(word[i][j - 1])
                    word[i][j] = reg
        for i in range(rows):
            for j in range(cols):
                pe = pes[i][j]
                m.submodules[f"pe_{i}_{j}"] = pe
                m.d.comb += pe.en.eq(advance)
                if j == 0:
                    m.d.comb += [
                        pe.a_in.eq(delayed(m, beat.a[i], i, advance, f"a{i}")),
                        pe.valid_in.eq(delayed(m, entering, i, advance, f"valid{i}")),
                        pe.last_in.eq(delayed(m, beat.last, i, advance, f"last{i}")),
                    ]
                else:
                    left = pes[i][j - 1]
                    a_left = left.a_out
                    if self.depthwise:
                        a_left = Mux(self.depthwise_mode, word[i][j][j % DEPTHWISE_WORD],
                                     a_left)
                    m.d.comb += [pe.a_in.eq(a_left), pe.valid_in.eq(left.valid_out),
                                 pe.last_in.eq(left.last_out)]
                if i == 0:
                    b_entry = delayed(m, beat.b[j], j, advance, f"b{j}")
                    if self.depthwise and depthwise_words(cols) > 1:
                        # The tap's weight row holds every column's weight; a column
                        # whose channel is in another word than this beat's takes 0.
                        word_j = delayed(m, beat.word, j, advance, f"word{j}")
                        b_entry = Mux(self.depthwise_mode
                                      & (word_j != j // DEPTHWISE_WORD), 0, b_entry)
                    m.d.comb += pe.b_in.eq(b_entry)
                else:
                    m.d.comb += pe.b_in.eq(pes[i - 1][j].b_out)

        # Row bookkeeping: `pending` from the first capture of a row (column 0) until it
        # is read out, `full` once its last column has captured too.
        cap_first = Signal(rows)
        cap_first_next = Signal(rows)
        cap_last = Signal(rows)
        pending = Signal(rows)
        pending_next = Signal(rows)
        full = Signal(rows)
        row = Signal(rows, init=1)  # one-hot: the next row to read out
        reading = Signal()          # a row moves into the output register
        out_free = Signal()         # the output register can take a row
        for i in range(rows):
            m.d.comb += [cap_first[i].eq(pes[i][0].capture),
                         cap_first_next[i].eq(Mux(advance, pes[i][0].capture_next,
                                                  pes[i][0].capture)),
                         cap_last[i].eq(pes[i][cols - 1].capture)]
        # advance(t + 1) = ~any(pending(t + 1) & cap_first(t + 1)), from this cycle's state.
        # Written out for each value of `advance` and `out_free`, which are picked last:
        # `out_free` follows `results.ready` (an input), and as one flat expression this
        # mapped six LUTs deep, the critical path of the 8x8 array (~140 MHz on ECP5).
        cap_next = Cat(pes[i][0].capture_next for i in range(rows))
        readable = Signal(rows)
        stall_if = {}
        for key, term in stall_terms(cap_first, cap_next, pending, readable).items():
            stall_if[key] = Signal(name=f"stall_if_adv{key[0]}_free{key[1]}")
            m.d.comb += stall_if[key].eq(term)
        m.d.comb += readable.eq(full & row)
        m.d.sync += [pending.eq(pending_next),
                     advance.eq(next_advance(advance, out_free, stall_if))]

        # Drain: one row per cycle, in row order, into the registered output beat. The row
        # being read is one-hot, so picking it is an AND-OR over the hold registers (two
        # LUT levels) rather than a binary-select multiplexer tree: this path spans the
        # whole array.
        m.d.comb += [
            out_free.eq(~self.results.valid | self.results.ready),
            reading.eq((full & row).any() & out_free),
        ]
        with m.If(reading):
            m.d.sync += [
                self.results.valid.eq(1),
                row.eq(Cat(row[rows - 1], row[:rows - 1])),
            ]
        with m.Elif(self.results.ready):
            m.d.sync += self.results.valid.eq(0)
        # The payload loads whenever the output register is free, not only when a row is
        # read: with valid low its value does not matter, and `out_free` (one LUT) makes a
        # much shorter clock enable for these cols * acc_width flip-flops than `reading`.
        with m.If(out_free):
            m.d.sync += self.results.payload.last.eq(row[rows - 1])
            for j in range(cols):
                picked = [pes[i][j].hold & row[i].replicate(self.config.acc_width)
                          for i in range(rows)]
                m.d.sync += self.results.payload.c[j].eq(or_all(picked))

        for i in range(rows):
            read_now = full[i] & row[i] & out_free
            m.d.comb += pending_next[i].eq(Mux(cap_first[i] & advance, 1,
                                               Mux(read_now, 0, pending[i])))
            with m.If(cap_last[i] & advance):
                m.d.sync += full[i].eq(1)
            with m.Elif(read_now):
                m.d.sync += full[i].eq(0)
        return m
