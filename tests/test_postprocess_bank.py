"""The shared post-processing bank (hw/postprocess.py) against models.requant and
models.eltwise.add, in both modes and switching between them (Amaranth simulator)."""

import numpy as np
import pytest
from amaranth.sim import Simulator

from contract.postprocess import (
    add_units,
    bank_rescalers,
    postprocess_multipliers,
    requant_units,
)
from hw.postprocess import PostProcessBank, credit_groups
from models.eltwise import add, add_multipliers
from models.requant import requantize
from sim.streams import run_bounded, stream_get, stream_put


def requant_pass(rng, lanes, beats):
    """Random accumulators and per-lane constants, and the golden results."""
    acc = rng.integers(-2**20, 2**20, (beats, lanes), dtype=np.int64)
    acc[0, 0], acc[-1, -1] = 2**31 - 1, -2**31
    bias = rng.integers(-2**16, 2**16, lanes)
    multiplier = rng.integers(2**30, 2**31, lanes)
    shift = rng.integers(20, 63, lanes)
    shift[0] = 1
    zero_point = int(rng.integers(-128, 128))
    # the int8 range, a fused ReLU, a ReLU6-like band
    lo, hi = [(-128, 127), (zero_point, 127),
              (zero_point, min(127, zero_point + 40))][int(rng.integers(3))]
    total = (acc + bias).astype(np.int32)
    want = requantize(total, multiplier, shift, zero_point, lo, hi, axis=1)
    setup = {"bias": [int(v) for v in bias], "multiplier": [int(v) for v in multiplier],
             "shift": [int(v) for v in shift],
             "params": {"zero_point": zero_point, "lo": lo, "hi": hi}}
    beats_in = [{"acc": [int(v) for v in row], "last": i == beats - 1}
                for i, row in enumerate(acc)]
    return {"adding": 0, "setup": setup, "beats": beats_in,
            "want": want.astype(np.int64), "label": f"requant z={zero_point} lo={lo}"}


def add_pass(rng, lanes, beats, scales=None, zero_points=None):
    """Random operand pairs and scales, and the golden sums."""
    if scales is None:
        scales = tuple(float(s) for s in 10.0 ** rng.uniform(-4, -0.3, 3))
    if zero_points is None:
        zero_points = tuple(int(z) for z in rng.integers(-128, 128, 3))
    (sa, sb, sy), (za, zb, zy) = scales, zero_points
    a = rng.integers(-128, 128, (beats, lanes), dtype=np.int8)
    b = rng.integers(-128, 128, (beats, lanes), dtype=np.int8)
    a[0], b[0] = -128, 127
    lo, hi = (zy, 127) if rng.random() < 0.5 else (-128, 127)
    ma, na, mb, nb, my, ny = add_multipliers(sa, sb, sy)
    setup = {"add_params": {
        "a_zero_point": za, "b_zero_point": zb, "y_zero_point": zy, "lo": lo, "hi": hi,
        "a_multiplier": ma, "a_shift": na, "b_multiplier": mb, "b_shift": nb,
        "y_multiplier": my, "y_shift": ny}}
    beats_in = [{"a": [int(v) for v in a[i]], "b": [int(v) for v in b[i]],
                 "last": i == beats - 1} for i in range(beats)]
    want = add(a, sa, za, b, sb, zb, sy, zy, lo, hi).astype(np.int64)
    return {"adding": 1, "setup": setup, "beats": beats_in, "want": want,
            "label": f"add scales={scales} zero points={zero_points} lo={lo}"}


def run_bank(lanes, passes, rng, stall=0.3, add_lanes=8):
    """Run ``passes`` one after the other through one bank (the mode switched between
    them, once the previous pass has left), with random stalls on both sides; returns
    per pass the results and their ``last`` flags."""
    dut = PostProcessBank(lanes=lanes, add_lanes=add_lanes)
    got = [[] for _ in passes]
    lasts = [[] for _ in passes]

    async def feed(ctx):
        for index, work in enumerate(passes):
            while index and len(got[index - 1]) < len(passes[index - 1]["beats"]):
                await ctx.tick()
            ctx.set(dut.adding, work["adding"])
            for port, value in work["setup"].items():
                ctx.set(getattr(dut, port), value)
            sink = dut.operands if work["adding"] else dut.accumulators
            for payload in work["beats"]:
                while rng.random() < stall:
                    await ctx.tick()
                await stream_put(ctx, sink, payload)

    async def drain(ctx):
        for index, work in enumerate(passes):
            source = dut.sums if work["adding"] else dut.results
            for _ in work["beats"]:
                while rng.random() < stall:
                    await ctx.tick()
                payload = await stream_get(ctx, source)
                got[index].append([int(v) for v in payload.y])
                lasts[index].append(bool(payload.last))

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(feed)
    sim.add_testbench(drain)
    # A bank that loses or invents a beat would leave a testbench waiting: bounded.
    cycles = 200 + sum(10 * lanes * len(work["beats"]) for work in passes)
    run_bounded(sim, cycles * 1e-8)
    for work, values in zip(passes, got, strict=True):
        assert len(values) == len(work["beats"]), \
            f"lanes={lanes} {work['label']}: {len(values)} of {len(work['beats'])} result " \
            f"beats after {cycles} cycles"
    return [np.array(g, dtype=np.int64) for g in got], lasts


def check(passes, got, lasts, seed, lanes):
    for work, values, flags in zip(passes, got, lasts, strict=True):
        count = len(work["beats"])
        assert flags == [False] * (count - 1) + [True], \
            f"seed={seed} lanes={lanes} {work['label']}: last flags {flags}"
        want = work["want"]
        if not np.array_equal(values, want):
            index = tuple(int(i) for i in np.argwhere(values != want)[0])
            raise AssertionError(f"seed={seed} lanes={lanes} {work['label']}: first "
                                 f"difference at {list(index)}: RTL {values[index]} != "
                                 f"golden {want[index]}")


@pytest.mark.parametrize("lanes", [8, 3, 4, 1, 16])
def test_modes_alternate_bit_exact(lanes, rng, seed):
    """requant, add, add, requant, add through one bank: every pass bit-exact, and no
    result of one mode leaks into the next pass."""
    passes = [requant_pass(rng, lanes, 12), add_pass(rng, lanes, 10),
              add_pass(rng, lanes, 5, scales=(0.05, 0.05, 0.1), zero_points=(0, 0, -20)),
              requant_pass(rng, lanes, 9), add_pass(rng, lanes, 7)]
    got, lasts = run_bank(lanes, passes, rng)
    check(passes, got, lasts, seed, lanes)


@pytest.mark.parametrize("lanes, add_lanes", [(8, 4), (8, 2), (6, 4)])
def test_more_add_datapaths_bit_exact(lanes, add_lanes, rng, seed):
    """With two or more add datapaths (``add_lanes`` below the lanes), each takes its own
    lanes of a beat: every pass still bit-exact, modes alternating."""
    passes = [add_pass(rng, lanes, 9), requant_pass(rng, lanes, 7),
              add_pass(rng, lanes, 6, (0.5, 0.001, 0.03), (-128, 127, -128))]
    got, lasts = run_bank(lanes, passes, rng, add_lanes=add_lanes)
    check(passes, got, lasts, seed, lanes)


def test_add_extremes(rng, seed):
    """Very different input scales, extreme zero points, a saturating output."""
    passes = [add_pass(rng, 8, 20, (0.5, 0.001, 0.03), (-128, 127, -128)),
              add_pass(rng, 8, 20, (0.01, 0.01, 0.001), (0, 0, 0)),
              add_pass(rng, 8, 20, (3e-5, 0.7, 0.02), (-7, 100, 5))]
    got, lasts = run_bank(8, passes, rng, stall=0.1)
    check(passes, got, lasts, seed, 8)


async def put_pass(ctx, dut, work, taken=None):
    """Set the bank's mode and constants for ``work`` and put its beats in, back to back;
    append to ``taken`` as each is taken."""
    ctx.set(dut.adding, work["adding"])
    for port, value in work["setup"].items():
        ctx.set(getattr(dut, port), value)
    sink = dut.operands if work["adding"] else dut.accumulators
    for payload in work["beats"]:
        await stream_put(ctx, sink, payload)
        if taken is not None:
            taken.append(True)


def beat_times(lanes, adding, beats, add_lanes=8):
    """Cycles at which result beats leave under a ready consumer and an eager producer."""
    rng = np.random.default_rng(0)
    work = add_pass(rng, lanes, beats) if adding else requant_pass(rng, lanes, beats)
    dut = PostProcessBank(lanes=lanes, add_lanes=add_lanes)
    times = []

    async def feed(ctx):
        await put_pass(ctx, dut, work)

    async def drain(ctx):
        source = dut.sums if adding else dut.results
        ctx.set(source.ready, 1)
        cycle = 0
        while len(times) < beats:
            _, _, valid = await ctx.tick().sample(source.valid)
            cycle += 1
            if valid:
                times.append(cycle)

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(feed)
    sim.add_testbench(drain)
    sim.run()
    return times, dut


@pytest.mark.parametrize("adding", [0, 1])
def test_beats_leave_at_the_contract_rate(adding):
    """On 8 lanes a requantized beat leaves every 2 cycles and a sum every 8, back to
    back, after the mode's latency."""
    times, dut = beat_times(8, adding, 6)
    per_beat = dut.cycles_per_beat(adding)
    assert per_beat == (8 // requant_units(8) if not adding else 8 // add_units(8))
    assert np.diff(times).tolist() == [per_beat] * 5
    latency = dut.ADD_LATENCY if adding else dut.REQUANT_LATENCY
    # The first beat: its transfer in, then the latency plus a cycle per further group.
    assert times[0] == 1 + latency + per_beat - 1


def test_two_add_datapaths_give_a_sum_every_four_cycles():
    times, dut = beat_times(8, 1, 6, add_lanes=4)
    assert (dut.add_units, dut.rescalers, dut.cycles_per_beat(1)) == (2, 6, 4)
    assert np.diff(times).tolist() == [4] * 5
    assert postprocess_multipliers(8, add_lanes=4) == 24
    with pytest.raises(ValueError, match="add_lanes must be one of"):
        add_units(8, 3)


def test_the_bank_owns_four_rescalers_on_eight_lanes():
    assert (requant_units(8), add_units(8), bank_rescalers(8)) == (4, 1, 4)
    assert postprocess_multipliers(8) == 16  # a quarter of the 8x8 array's 64
    assert [bank_rescalers(n) for n in (1, 3, 4, 16)] == [3, 3, 3, 8]


def test_bad_lanes():
    with pytest.raises(ValueError, match="lanes must be a positive integer, not 0"):
        PostProcessBank(lanes=0)


@pytest.mark.parametrize("lanes, adding", [(8, 0), (8, 1), (1, 0), (4, 1)])
def test_a_stopped_consumer_fills_the_queue_and_loses_nothing(lanes, adding, rng, seed):
    """The pipeline never stalls: with the consumer not ready for 120 cycles the bank takes
    beats until its credits are spent (the queue full, nothing dropped), then refuses
    more; once the consumer takes, every result comes out bit-exact and in order."""
    beats = 40
    work = add_pass(rng, lanes, beats) if adding else requant_pass(rng, lanes, beats)
    dut = PostProcessBank(lanes=lanes)
    groups = dut.cycles_per_beat(adding)
    taken, got, lasts = [], [], []

    async def feed(ctx):
        await put_pass(ctx, dut, work, taken)

    async def drain(ctx):
        source = dut.sums if adding else dut.results
        await ctx.tick().repeat(120)
        held_back = len(taken)
        # The queue's groups, a beat in the output register, one in the holding register.
        assert held_back <= credit_groups(dut.residual_add) // groups + 2, \
            f"seed={seed}: {held_back} beats taken with the consumer stopped"
        assert held_back >= 2, f"seed={seed}: the bank took {held_back} beats"
        for _ in range(beats):
            payload = await stream_get(ctx, source)
            got.append([int(v) for v in payload.y])
            lasts.append(bool(payload.last))

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(feed)
    sim.add_testbench(drain)
    run_bounded(sim, (400 + 20 * lanes * beats) * 1e-8)
    assert len(got) == beats, f"seed={seed}: {len(got)} of {beats} result beats"
    check([work], [np.array(got, dtype=np.int64)], [lasts], seed, lanes)
