"""The command sequencer (``hw/sequencer.py``) on its own in Amaranth's simulator: the named
phases of a pass, what each event moves, the errors a start can raise, aborts."""

import pytest
from amaranth.sim import Simulator

from contract.descriptor import DESCRIPTOR_FIELDS
from contract.regmap import ERROR_CODES, OPCODES, by_name
from hw.sequencer import COMMAND_FIELDS, CommandSequencer, Phase, command_layout

BAD_OPCODE = ERROR_CODES["BAD_OPCODE"][0]
BAD_DESCRIPTOR = ERROR_CODES["BAD_DESCRIPTOR"][0]
FORCED = ERROR_CODES["FORCED"][0]

GOOD_CONV = dict(opcode=OPCODES["CONV"], load_params=2, load_weights=5, load_act=9,
                 col_tiles=2, pixel_groups=1, in_channels=2, kernel_w=1, kernel_h=1,
                 pool_width=4, pool_height=4, pool_frames=1, stream_beats=0)


def test_each_command_field_names_a_register_the_host_writes():
    """The top wires the command from :data:`COMMAND_FIELDS` alone: each source is an RW
    register of the map no wider than its field, or a field of the engine's descriptor."""
    registers, descriptor = by_name(), {name for name, *_ in DESCRIPTOR_FIELDS}
    for name, (bits, register) in COMMAND_FIELDS.items():
        if register is None:
            assert name in descriptor, name
        else:
            assert registers[register].access == "RW", (name, register)
            assert registers[register].stored_mask.bit_length() <= bits, (name, register)
    assert list(command_layout().members) == list(COMMAND_FIELDS)


def run(bench, **options):
    """Run ``bench`` on a sequencer (built with ``options``); in every test, at every clock
    edge, ``busy`` (a flip-flop of its own) must equal "the phase is not IDLE" (the FSM's
    state)."""
    dut = CommandSequencer(**options)
    sim = Simulator(dut)
    sim.add_clock(1e-8)
    mismatches = []

    async def testbench(ctx):
        await bench(ctx, dut)

    async def watch_busy(ctx):
        cycle = 0
        async for _, _, busy, state in ctx.tick().sample(dut.busy, dut.phase):
            if busy != (Phase(state) != Phase.IDLE):
                mismatches.append((cycle, busy, Phase(state)))
            cycle += 1

    sim.add_testbench(testbench)
    sim.add_process(watch_busy)
    sim.run()
    assert not mismatches, f"busy disagrees with the phase at (cycle, busy, phase): " \
                           f"{mismatches[:5]}"


async def command(ctx, dut, **fields):
    for name, value in {**GOOD_CONV, **fields}.items():
        ctx.set(getattr(dut.command, name), value)


async def pulse(ctx, dut, name):
    """One cycle of event ``name``; returns what the sequencer showed during it."""
    ctx.set(getattr(dut, name), 1)
    seen = {"load_last": ctx.get(dut.load_last), "engine_start": ctx.get(dut.engine_start),
            "set_error": ctx.get(dut.set_error), "set_done": ctx.get(dut.set_done)}
    await ctx.tick()
    ctx.set(getattr(dut, name), 0)
    return seen


def phase(ctx, dut):
    return Phase(ctx.get(dut.phase))


def test_a_conv_pass_walks_every_phase_in_order():
    trace = []

    async def bench(ctx, dut):
        await command(ctx, dut)
        await pulse(ctx, dut, "start")
        trace.append(phase(ctx, dut))
        lasts = [(await pulse(ctx, dut, "entry_taken"))["load_last"] for _ in range(2)]
        assert lasts == [0, 1]
        trace.append(phase(ctx, dut))
        # C_in * kh * kw = 2 rows in the first tile, summed one C_in a cycle.
        await ctx.tick()
        assert not ctx.get(dut.weights_held)
        first = [await pulse(ctx, dut, "entry_taken") for _ in range(2)]
        assert [s["engine_start"] for s in first] == [0, 0]
        # The start leaves a register: the engine sees it the cycle after the last row,
        # while the host stream is held (still the weights' phase).
        assert ctx.get(dut.engine_start) and ctx.get(dut.weights_held)
        assert phase(ctx, dut) == Phase.FIRST_WEIGHTS
        await ctx.tick()
        assert not ctx.get(dut.engine_start)
        trace.append(phase(ctx, dut))
        acts = [(await pulse(ctx, dut, "act_taken"))["load_last"] for _ in range(3)]
        assert acts == [0, 0, 1]  # ceil(9 / 4) words
        trace.append(phase(ctx, dut))
        rest = [(await pulse(ctx, dut, "entry_taken"))["load_last"] for _ in range(3)]
        assert rest == [0, 0, 1]  # the 5 - 2 weight rows after the first tile
        trace.append(phase(ctx, dut))
        assert ctx.get(dut.busy)
        done = await pulse(ctx, dut, "finished")
        assert done["set_done"] and not done["set_error"]
        trace.append(phase(ctx, dut))
        assert not ctx.get(dut.busy) and ctx.get(dut.error_code) == 0

    run(bench)
    assert trace == [Phase.PARAMS, Phase.FIRST_WEIGHTS, Phase.ACTIVATIONS,
                     Phase.REST_WEIGHTS, Phase.DRAIN, Phase.IDLE]


def test_weights_that_fit_one_tile_go_from_activations_to_drain():
    async def bench(ctx, dut):
        await command(ctx, dut, load_weights=9, in_channels=1, kernel_w=3, kernel_h=3)
        await pulse(ctx, dut, "start")
        for _ in range(2):
            await pulse(ctx, dut, "entry_taken")
        held = 0
        while ctx.get(dut.weights_held):
            held += 1
            await ctx.tick()
        # kh * kw = 9 sums of C_in, one a cycle from the start; 2 ran beside the parameters
        assert held == 9 - 2
        for _ in range(9):
            assert phase(ctx, dut) == Phase.FIRST_WEIGHTS
            await pulse(ctx, dut, "entry_taken")
        await ctx.tick()  # the engine's start
        assert phase(ctx, dut) == Phase.ACTIVATIONS
        for _ in range(3):
            await pulse(ctx, dut, "act_taken")
        assert phase(ctx, dut) == Phase.DRAIN

    run(bench)


def test_bad_starts_are_refused_with_their_code_and_leave_it_idle():
    cases = [(dict(opcode=7), BAD_OPCODE), (dict(load_act=0), BAD_DESCRIPTOR),
             (dict(col_tiles=0), BAD_DESCRIPTOR),
             (dict(pool_enable=1, pool_width=1), BAD_DESCRIPTOR),
             (dict(opcode=OPCODES["POOL"], stream_beats=3, pool_height=1), BAD_DESCRIPTOR),
             (dict(opcode=OPCODES["ADD"], stream_beats=0), BAD_DESCRIPTOR)]
    seen = []

    async def bench(ctx, dut):
        for fields, _ in cases:
            await command(ctx, dut, **fields)
            refused = await pulse(ctx, dut, "start")
            seen.append((refused["set_error"], ctx.get(dut.error_code), phase(ctx, dut)))
        await command(ctx, dut)
        await pulse(ctx, dut, "start")
        seen.append((0, ctx.get(dut.error_code), phase(ctx, dut)))

    run(bench)
    assert seen == [(1, code, Phase.IDLE) for _, code in cases] + [(0, 0, Phase.PARAMS)]


def test_abort_returns_to_idle_keeping_the_error_and_a_forced_error_reports():
    async def bench(ctx, dut):
        await command(ctx, dut, opcode=9)
        await pulse(ctx, dut, "start")
        assert ctx.get(dut.error_code) == BAD_OPCODE
        await command(ctx, dut, opcode=OPCODES["ADD"], stream_beats=4)
        await pulse(ctx, dut, "abort")  # idle: nothing to abort, the code stays
        assert ctx.get(dut.error_code) == BAD_OPCODE
        await pulse(ctx, dut, "start")
        assert phase(ctx, dut) == Phase.STREAM and ctx.get(dut.error_code) == 0
        assert ctx.get(dut.adding)
        await pulse(ctx, dut, "entry_taken")
        await pulse(ctx, dut, "abort")
        assert phase(ctx, dut) == Phase.IDLE
        await pulse(ctx, dut, "start")  # a start while aborting is not lost: it starts now
        assert phase(ctx, dut) == Phase.STREAM
        forced = await pulse(ctx, dut, "force_error")
        assert forced["set_error"] and phase(ctx, dut) == Phase.IDLE
        assert ctx.get(dut.error_code) == FORCED

    run(bench)


def test_a_pool_pass_counts_its_frames():
    async def bench(ctx, dut):
        await command(ctx, dut, opcode=OPCODES["POOL"], stream_beats=8, pool_frames=3)
        await pulse(ctx, dut, "start")
        assert phase(ctx, dut) == Phase.STREAM and ctx.get(dut.pooling)
        lasts = []
        for _ in range(3):
            lasts.append(ctx.get(dut.last_frame))
            await pulse(ctx, dut, "frame_taken")
        assert lasts == [0, 0, 1]
        assert ctx.get(dut.opcode) == OPCODES["POOL"] and not ctx.get(dut.adding)

    run(bench)


async def first_tile(ctx, dut, fields, entries, gaps=()):
    """Start a pass with ``fields``, take the parameters, then up to ``entries`` weight
    rows (idle cycles after the rows listed in ``gaps``); returns after how many rows the
    engine was started (None: not started) and the cycles it was seen high."""
    await command(ctx, dut, **fields)
    await pulse(ctx, dut, "start")
    for _ in range(fields["load_params"]):
        await pulse(ctx, dut, "entry_taken")
    while ctx.get(dut.weights_held):
        await ctx.tick()
    started, highs = None, 0
    for row in range(1, entries + 1):
        await pulse(ctx, dut, "entry_taken")
        highs += ctx.get(dut.engine_start)
        if ctx.get(dut.engine_start) and started is None:
            started = row
            await ctx.tick()
            break
        if row in gaps:
            await ctx.tick()
    for _ in range(3):
        highs += ctx.get(dut.engine_start)
        await ctx.tick()
    return started, highs


def test_the_engine_starts_after_exactly_the_first_tiles_rows():
    # C_in * kh * kw rows, with idle cycles between rows, and a weight load shorter than
    # the tile (a bad host: load_last ends the first tile early). One pulse each time.
    cases = [(dict(in_channels=3, kernel_w=2, kernel_h=2, load_weights=40), 12),
             (dict(in_channels=1, kernel_w=1, kernel_h=1, load_weights=4), 1),
             (dict(in_channels=5, kernel_w=3, kernel_h=1, load_weights=15), 15),
             (dict(in_channels=4, kernel_w=3, kernel_h=3, load_weights=7), 7)]
    seen = []

    async def bench(ctx, dut):
        for fields, _ in cases:
            seen.append(await first_tile(ctx, dut, {**GOOD_CONV, **fields}, 64,
                                         gaps=(1, 2, 5)))
            await pulse(ctx, dut, "abort")

    run(bench)
    assert seen == [(rows, 1) for _, rows in cases]


def test_an_abort_with_the_last_row_starts_no_engine():
    async def bench(ctx, dut):
        await command(ctx, dut, in_channels=2, kernel_w=1, kernel_h=1)
        await pulse(ctx, dut, "start")
        for _ in range(2):
            await pulse(ctx, dut, "entry_taken")
        await ctx.tick()
        await pulse(ctx, dut, "entry_taken")
        ctx.set(dut.abort, 1)
        ctx.set(dut.entry_taken, 1)  # the first tile's last row, aborted in the same cycle
        await ctx.tick()
        ctx.set(dut.abort, 0)
        ctx.set(dut.entry_taken, 0)
        assert phase(ctx, dut) == Phase.IDLE
        for _ in range(3):
            assert not ctx.get(dut.engine_start)
            await ctx.tick()

    run(bench)


@pytest.mark.parametrize("depthwise", [0, 1])
def test_a_depthwise_pass_loads_every_weight_before_its_activations(depthwise):
    # On a build with the depthwise mode: with the flag, all 5 weight rows (two column
    # tiles of K = 2 and a bit) in phase 1, then the activations and DRAIN; without it,
    # the first tile's 2 rows, the activations, then the 3 others.
    trace = []

    async def bench(ctx, dut):
        await command(ctx, dut, depthwise=depthwise)
        await pulse(ctx, dut, "start")
        for _ in range(2):
            await pulse(ctx, dut, "entry_taken")
        while ctx.get(dut.weights_held):
            await ctx.tick()
        rows = 0
        while phase(ctx, dut) == Phase.FIRST_WEIGHTS and not ctx.get(dut.engine_start):
            await pulse(ctx, dut, "entry_taken")
            rows += 1
        await ctx.tick()
        trace.append((rows, phase(ctx, dut)))
        for _ in range(3):
            await pulse(ctx, dut, "act_taken")
        trace.append(phase(ctx, dut))

    run(bench, depthwise=True)
    assert trace == ([(5, Phase.ACTIVATIONS), Phase.DRAIN] if depthwise
                     else [(2, Phase.ACTIVATIONS), Phase.REST_WEIGHTS])


def test_a_build_with_the_depthwise_mode_reads_the_descriptors_flag():
    assert list(command_layout(depthwise=True).members) == [*COMMAND_FIELDS, "depthwise"]
    assert "depthwise" in {name for name, *_ in DESCRIPTOR_FIELDS}
