"""The command sequencer: checks a ``start``, then walks a layer pass through its named
phases (``m.FSM``) and tells the loader, the engine and the output writer what to do.

```
IDLE ─start CONV─► PARAMS ─last entry─► FIRST_WEIGHTS ─first tile in─► STARTING ─► ACTIVATIONS
  ▲                                          (engine_start, a register) ─┘             │ last
  │                                                            weights left? ──┬───────┴──┐
  │                                                                          yes         no
  │                                                            REST_WEIGHTS ─last─► DRAIN
  └──────────── the output writer's last word (any phase), soft reset, forced error ───┘
IDLE ─start POOL/ADD─► STREAM
```

The host stream's order is ``contract.streams``' (``hw/top.py`` lists it): parameter
entries, the first column tile's weights, the activations (while the engine runs), the
other tiles' weights; a depthwise pass (on a build with the mode) sends all its weights
first. The sequencer counts what is ``left`` of each load from the events the
loader reports (``entry_taken``, ``act_taken``), so ``load_last`` (the next beat is the load's
last) is ready before the beat goes out. The first tile's weight rows, ``C_in * kh * kw``,
are summed one ``C_in`` a cycle while the parameters load (no multiplier: every MULT18X18D
is the array's); until the sum is known the loader holds the weights back. ``STARTING`` is
the one cycle in which the engine sees ``engine_start`` (a register, so the start does not
hang off the loader's handshake); the phase still reads ``FIRST_WEIGHTS``, with the host
stream held.

A start with a zero-sized load, a bad pool shape or an unknown opcode (``ADD`` too, on a
build without the residual add) is refused with the error code and leaves the sequencer
idle; ``ERROR_CODE`` keeps the last failure until the next start (a soft reset does not
clear it, so the driver can read it after aborting).
"""

from amaranth import Module, Mux, Signal
from amaranth.lib import data, enum, wiring
from amaranth.lib.wiring import In, Out

from contract.config import check_bool
from contract.regmap import ERROR_CODES, OPCODES
from contract.streams import ACTIVATIONS_PER_WORD, POOL_MAX_WIDTH

ERROR_BAD_OPCODE = ERROR_CODES["BAD_OPCODE"][0]
ERROR_BAD_DESCRIPTOR = ERROR_CODES["BAD_DESCRIPTOR"][0]
ERROR_FORCED = ERROR_CODES["FORCED"][0]


class Phase(enum.Enum, shape=3):
    """What the host stream carries now (``IDLE``: nothing)."""
    IDLE = 0
    PARAMS = 1
    FIRST_WEIGHTS = 2
    ACTIVATIONS = 3
    REST_WEIGHTS = 4
    DRAIN = 5       # everything is in; the engine finishes and the results drain
    STREAM = 6      # POOL or ADD: operand beats in, result beats out


#: The fields a start reads, in the top's wiring order: name -> (bits, source), where the
#: source is the ``contract.regmap`` register the top connects, or None for the kernel's
#: size, which the top takes from the engine's descriptor (those ``CONV_*`` registers at
#: their ``contract.descriptor.DESCRIPTOR_FIELDS`` widths).
COMMAND_FIELDS = {
    "opcode": (32, "OPCODE"),
    "load_params": (32, "LOAD_PARAMS"),
    "load_weights": (32, "LOAD_WEIGHTS"),
    "load_act": (32, "LOAD_ACT"),
    "col_tiles": (32, "CONV_COL_TILES"),
    "pixel_groups": (32, "CONV_PIXEL_GROUPS"),
    "pool_enable": (1, "POOL_ENABLE"),
    "pool_width": (32, "POOL_WIDTH"),
    "pool_height": (32, "POOL_HEIGHT"),
    "pool_frames": (32, "POOL_FRAMES"),
    "stream_beats": (32, "STREAM_BEATS"),
    "in_channels": (32, None),
    "kernel_w": (32, None),
    "kernel_h": (32, None),
}


#: On a build with the depthwise mode, also the descriptor's ``depthwise`` flag: a
#: depthwise pass's weights all come before its activations (each column tile reads its
#: own activations, which follow one another, so a tile's weights sent after all of them
#: would hold it back).
DEPTHWISE_COMMAND_FIELDS = {"depthwise": (1, None)}


def command_fields(*, depthwise=False):
    """The fields a start reads: :data:`COMMAND_FIELDS`, and with ``depthwise``
    :data:`DEPTHWISE_COMMAND_FIELDS`."""
    return {**COMMAND_FIELDS, **(DEPTHWISE_COMMAND_FIELDS if depthwise else {})}


def command_layout(*, depthwise=False):
    """The fields a start reads (:func:`command_fields`)."""
    return data.StructLayout({name: bits for name, (bits, _)
                              in command_fields(depthwise=depthwise).items()})


class CommandSequencer(wiring.Component):
    """Phases of one layer pass. Ports:

    - ``command`` (in): the CSR fields; ``start`` (in): the host asked to start (ignored
      while busy); ``abort`` (in): soft reset; ``force_error`` (in): the twin's fault.
    - events (in): ``entry_taken`` (a gathered parameter/weight/operand entry went out),
      ``act_taken`` (an activation word went out), ``frame_taken`` (the pool's last beat of
      a frame went out), ``finished`` (the output writer sent the pass's last word).
    - ``phase`` (out) and what follows from it: ``busy``, ``load_last`` (the next beat ends the
      load), ``weights_held`` (the first tile's size is not known yet, or the engine is
      starting), ``engine_start`` (a one-cycle pulse from a register, the cycle after the
      first tile's last weight row),
      ``opcode``, ``adding`` (the opcode is ``ADD``: a flip-flop for the loader's and the
      result path's multiplexers, not a 32-bit comparison), ``pooling`` and
      ``pool_from_host`` (the pool's input is the host's pixels; both latched at start),
      ``last_frame``, ``phase_last`` (the entry the loader holds is its phase's last: the
      load's, or the first column tile's last weight row).
    - status (out): ``error_code``, ``set_done``, ``set_error`` (one-cycle pulses).

    Parameters
    ----------
    residual_add : bool
        Whether the engine has the residual add; without it an ``ADD`` start is refused
        as an unknown opcode (``BAD_OPCODE``), like any operation the build lacks.
    depthwise : bool
        Whether the engine has the depthwise mode; with it a depthwise pass's weights all
        load before its activations (:data:`DEPTHWISE_COMMAND_FIELDS`).
    """

    def __init__(self, *, residual_add=True, depthwise=False):
        self.residual_add = check_bool("residual_add", residual_add)
        self.depthwise = check_bool("depthwise", depthwise)
        super().__init__({
            "command": In(command_layout(depthwise=self.depthwise)),
            "start": In(1),
            "abort": In(1),
            "force_error": In(1),
            "entry_taken": In(1),
            "act_taken": In(1),
            "frame_taken": In(1),
            "finished": In(1),
            "phase": Out(Phase),
            "busy": Out(1),
            "load_last": Out(1),
            "phase_last": Out(1),
            "weights_held": Out(1),
            "engine_start": Out(1),
            "opcode": Out(32),
            "adding": Out(1),
            "pooling": Out(1),
            # The pass is a POOL (the pool takes the host's pixels, not the engine's
            # output): latched at start like ``pooling``, so the pool's input multiplexer
            # does not decode this FSM's state across the die (a long path at the board clock).
            "pool_from_host": Out(1),
            "last_frame": Out(1),
            "error_code": Out(32),
            "set_done": Out(1),
            "set_error": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        cmd = self.command
        left = Signal(32)          # entries / words left in this load
        weights_left = Signal(32)  # rows after the first tile's, sent after the activations
        frames_left = Signal(32)
        # `load_last` (left == 1), `last_frame` (frames_left == 1) and `last_row` (below) are
        # flip-flops, set by `load` and `count_down` beside every update of their counters
        # from the value written, so the loader's `last` bits, the engine's start and the
        # pointers behind them wait on no 32-bit comparison.
        last_word, last_frame = Signal(), Signal()

        def load(counter, is_one, value):
            """Set a down-counter and its registered ``counter == 1`` flag."""
            return [counter.eq(value), is_one.eq(value == 1)]

        def count_down(counter, is_one):
            """Count a down-counter by one, keeping its ``counter == 1`` flag."""
            return [counter.eq(counter - 1), is_one.eq(counter == 2)]

        def set_left(value):
            return load(left, last_word, value)

        # `busy` is a flip-flop of its own, set at a start and cleared where the FSM returns
        # to IDLE, so the loader's clear, the pool and the counters far from here read a
        # register rather than a decode of this FSM's state (a long path at the board clock).
        busy = Signal()
        phase_last = Signal()
        m.d.comb += [self.busy.eq(busy), self.load_last.eq(last_word),
                     self.phase_last.eq(last_word | phase_last),
                     self.last_frame.eq(last_frame), self.set_done.eq(self.finished)]
        m.d.sync += self.engine_start.eq(0)  # a one-cycle pulse (set in FIRST_WEIGHTS)

        # --- start: check the command, latch what the pass needs ------------------------
        starting = self.start & ~self.busy & ~self.abort & ~self.force_error
        is_conv = cmd.opcode == OPCODES["CONV"]
        is_pool = cmd.opcode == OPCODES["POOL"]
        is_stream = is_pool
        if self.residual_add:
            is_stream = is_stream | (cmd.opcode == OPCODES["ADD"])
        bad_pool = (cmd.pool_width < 2) | (cmd.pool_width > POOL_MAX_WIDTH) \
            | (cmd.pool_height < 2) | (cmd.pool_frames == 0)
        bad_conv = (cmd.load_params == 0) | (cmd.load_weights == 0) | (cmd.load_act == 0) \
            | (cmd.col_tiles == 0) | (cmd.pixel_groups == 0) | (cmd.pool_enable & bad_pool)
        bad_stream = (cmd.stream_beats == 0) | (is_pool & bad_pool)
        start_conv = starting & is_conv & ~bad_conv
        start_stream = starting & is_stream & ~bad_stream
        with m.If(self.finished | self.abort | self.force_error):
            m.d.sync += busy.eq(0)
        with m.Elif(start_conv | start_stream):
            m.d.sync += busy.eq(1)
        with m.If(self.abort):
            pass
        with m.Elif(self.force_error):
            m.d.sync += self.error_code.eq(ERROR_FORCED)
            m.d.comb += self.set_error.eq(1)
        with m.Elif(starting):
            with m.If(~is_conv & ~is_stream):
                m.d.sync += self.error_code.eq(ERROR_BAD_OPCODE)
                m.d.comb += self.set_error.eq(1)
            with m.Elif((is_conv & bad_conv) | (is_stream & bad_stream)):
                m.d.sync += self.error_code.eq(ERROR_BAD_DESCRIPTOR)
                m.d.comb += self.set_error.eq(1)
            with m.Else():
                m.d.sync += [self.error_code.eq(0), self.opcode.eq(cmd.opcode),
                             self.adding.eq(cmd.opcode == OPCODES["ADD"]),
                             *load(frames_left, last_frame, cmd.pool_frames),
                             self.pool_from_host.eq(is_pool),
                             self.pooling.eq(Mux(is_conv, cmd.pool_enable, is_pool)),
                             *set_left(Mux(is_conv, cmd.load_params, cmd.stream_beats))]
        with m.If(self.frame_taken):
            m.d.sync += count_down(frames_left, last_frame)

        # --- the first column tile's weight rows, C_in * kh * kw, one C_in a cycle -------
        # `rows_to_go` counts the first tile's rows not yet taken (summed up, then counted
        # down), and `last_row` is `rows_to_go == 1` kept as a register, decided one
        # update ahead: the end of the first tile then needs no 32-bit comparison in the
        # cycle its last row goes out (that comparison fed the engine's start, the ECP5 board
        # build's critical path).
        rows_to_go, last_row = Signal(32), Signal()
        sum_u, sum_v, tile_rows_known = Signal(3), Signal(3), Signal()
        starting_up = Signal()  # the cycle between the first tile's last row and the engine
        with m.If(self.busy & ~tile_rows_known):
            summed = rows_to_go + cmd.in_channels
            m.d.sync += [*load(rows_to_go, last_row, summed), sum_v.eq(sum_v + 1)]
            with m.If(sum_v == cmd.kernel_w - 1):
                m.d.sync += [sum_v.eq(0), sum_u.eq(sum_u + 1)]
                with m.If(sum_u == cmd.kernel_h - 1):
                    m.d.sync += tile_rows_known.eq(1)
        # All weights in phase 1 (or none: not a CONV): a zero-sized kernel (a bad
        # descriptor), or a depthwise pass (its tiles' activations follow one another:
        # weights sent after them would hold back every tile but the first).
        all_first = ~is_conv | (cmd.kernel_w == 0) | (cmd.kernel_h == 0)
        if self.depthwise:
            all_first = all_first | cmd.depthwise
        with m.If(self.start & ~self.busy):
            m.d.sync += [*load(rows_to_go, last_row, 0), sum_u.eq(0), sum_v.eq(0),
                         tile_rows_known.eq(all_first)]
        m.d.comb += self.weights_held.eq(~tile_rows_known | starting_up)

        with m.If(self.entry_taken | self.act_taken):
            m.d.sync += count_down(left, last_word)
        act_words = (cmd.load_act + ACTIVATIONS_PER_WORD - 1) // ACTIVATIONS_PER_WORD

        # --- phases ---------------------------------------------------------------------
        def leave_on_end():
            # Last in each state so it wins: the pass ended, or was aborted.
            with m.If(self.finished | self.abort | self.force_error):
                m.next = "IDLE"

        with m.FSM(init="IDLE"):
            with m.State("IDLE"):
                m.d.comb += self.phase.eq(Phase.IDLE)
                with m.If(start_conv):
                    m.next = "PARAMS"
                with m.Elif(start_stream):
                    m.next = "STREAM"
                leave_on_end()
            with m.State("PARAMS"):
                m.d.comb += self.phase.eq(Phase.PARAMS)
                with m.If(self.entry_taken & self.load_last):
                    m.d.sync += set_left(cmd.load_weights)
                    m.next = "FIRST_WEIGHTS"
                leave_on_end()
            with m.State("FIRST_WEIGHTS"):
                # The engine starts once the parameters and the first tile's weights are
                # in: `engine_start` leaves a register, so the start reaches the engine a
                # cycle after the last row (STARTING) and no path runs from the loader's
                # handshake through this FSM into the engine's start logic.
                m.d.comb += [self.phase.eq(Phase.FIRST_WEIGHTS), phase_last.eq(last_row)]
                with m.If(self.entry_taken):
                    m.d.sync += count_down(rows_to_go, last_row)
                    with m.If(self.load_last | last_row):
                        m.d.sync += [*set_left(act_words), weights_left.eq(left - 1),
                                     self.engine_start.eq(~self.abort & ~self.force_error)]
                        m.next = "STARTING"
                leave_on_end()
            with m.State("STARTING"):
                # The engine sees its start now and is busy from the next cycle; the host
                # stream waits (still the weights' phase, held), then activation words are
                # offered, which the engine takes only once it is busy.
                m.d.comb += [self.phase.eq(Phase.FIRST_WEIGHTS), starting_up.eq(1)]
                m.next = "ACTIVATIONS"
                leave_on_end()
            with m.State("ACTIVATIONS"):
                m.d.comb += self.phase.eq(Phase.ACTIVATIONS)
                with m.If(self.act_taken & self.load_last):
                    m.d.sync += set_left(weights_left)
                    with m.If(weights_left == 0):
                        m.next = "DRAIN"
                    with m.Else():
                        m.next = "REST_WEIGHTS"
                leave_on_end()
            with m.State("REST_WEIGHTS"):
                m.d.comb += self.phase.eq(Phase.REST_WEIGHTS)
                with m.If(self.entry_taken & self.load_last):
                    m.next = "DRAIN"
                leave_on_end()
            with m.State("DRAIN"):
                m.d.comb += self.phase.eq(Phase.DRAIN)
                leave_on_end()
            with m.State("STREAM"):
                m.d.comb += self.phase.eq(Phase.STREAM)
                leave_on_end()
        return m
