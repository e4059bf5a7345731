"""The loader (``hw/loader.py``) in Amaranth's simulator: a gathered entry of n words takes n
cycles under a ready consumer, and the word after a phase's last entry waits for the next
phase."""

import numpy as np
from amaranth.sim import Simulator

from hw.loader import HostLoader
from hw.sequencer import Phase


def test_an_entry_a_word_a_cycle_and_nothing_past_the_phase():
    cols, rows = 8, 4  # a weight row: two words
    dut = HostLoader(cols)
    log = []  # per cycle: (h2c word taken or None, weight row out or None, act out or None)

    async def tb(ctx):
        ctx.set(dut.phase, Phase.REST_WEIGHTS)
        ctx.set(dut.weights.ready, 1)
        ctx.set(dut.acts.ready, 1)
        ctx.set(dut.h2c.valid, 1)
        word, rows_out, phase = 0, 0, Phase.REST_WEIGHTS
        for _ in range(4 * rows + 6):
            ctx.set(dut.h2c.payload.data, word)
            # As the sequencer: the entry out is the phase's last once rows - 1 went out.
            ctx.set(dut.phase_last, rows_out == rows - 1)
            ctx.set(dut.phase, phase)
            took = ctx.get(dut.h2c.valid) and ctx.get(dut.h2c.ready)
            row = None
            if ctx.get(dut.weights.valid) and ctx.get(dut.weights.ready):
                row = [int(v) & 0xFF for v in ctx.get(dut.weights.payload.w)]
            act = (ctx.get(dut.acts.payload.x.as_value()) if ctx.get(dut.acts.valid)
                   else None)
            log.append((word if took else None, row, act))
            await ctx.tick()
            if took:
                word += 1
            if row is not None:
                rows_out += 1
                if rows_out == rows:  # the sequencer moves on a cycle after the last row
                    phase = Phase.ACTIVATIONS

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(tb)
    sim.run()
    taken = [w for w, _, _ in log if w is not None]
    out_cycles = [cycle for cycle, (_, row, _) in enumerate(log) if row is not None]
    rows_seen = [row for _, row, _ in log if row is not None]
    assert len(rows_seen) == rows, log
    # Row r is words 2r and 2r + 1 (little-endian bytes of the word values).
    for r, row in enumerate(rows_seen):
        want = [(2 * r).to_bytes(4, "little"), (2 * r + 1).to_bytes(4, "little")]
        assert row == list(want[0] + want[1]), (r, row)
    # A row every 2 cycles, back to back: no gathering gap.
    assert np.diff(out_cycles).tolist() == [2] * (rows - 1), log
    # Nothing is taken as a weight word after the last row's words: the next word goes
    # to the activations, in the new phase.
    first_act = next(cycle for cycle, (_, _, act) in enumerate(log) if act is not None)
    assert first_act > out_cycles[-1], log
    assert log[first_act][2] == 2 * rows, log
    assert taken[:2 * rows + 1] == list(range(2 * rows + 1))
