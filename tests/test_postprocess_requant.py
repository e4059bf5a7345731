"""The post-processing bank's requantization side (hw/postprocess.py, ``adding`` low)
against models.requant.requantize on directed cases: the int32 limits, ties, every shift,
and the narrowing before the clamp (Amaranth simulator). The random passes alternating both
modes are in test_postprocess_bank.py and, on Verilator, test_postprocess_cocotb.py."""

import numpy as np
import pytest
from amaranth.sim import Simulator

from contract.postprocess import requant_units
from hw.postprocess import PostProcessBank
from hw.postprocess_lean import SerialRequantizer
from models.requant import requantize
from sim.streams import run_bounded, stream_get, stream_put

#: Each test runs on the pipelined bank and on the serial requantizer of a lean build.
UNITS = {"bank": PostProcessBank, "serial": SerialRequantizer}


@pytest.fixture(params=sorted(UNITS))
def unit(request):
    """The requantizer under test (each test that takes it runs on both)."""
    return UNITS[request.param]


def run_bank(unit, lanes, acc, bias, multiplier, shift, zero_point, lo, hi, stall_rng=None):
    """Requantize the beats ``acc`` through ``unit`` of ``lanes`` lanes; the results."""
    dut = unit(lanes=lanes)
    per_lane = getattr(dut, "MAX_CYCLES_PER_LANE", 20)
    got, lasts = [], []

    async def setup_and_feed(ctx):
        ctx.set(dut.adding, 0)
        ctx.set(dut.bias, [int(v) for v in bias])
        ctx.set(dut.multiplier, [int(v) for v in multiplier])
        ctx.set(dut.shift, [int(v) for v in shift])
        ctx.set(dut.params, {"zero_point": zero_point, "lo": lo, "hi": hi})
        for index, row in enumerate(acc):
            await stream_put(ctx, dut.accumulators,
                             {"acc": [int(v) for v in row], "last": index == len(acc) - 1})

    async def drain(ctx):
        for _ in range(len(acc)):
            while stall_rng is not None and stall_rng.random() < 0.3:
                await ctx.tick()
            payload = await stream_get(ctx, dut.results)
            got.append([int(v) for v in payload.y])
            lasts.append(bool(payload.last))

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(setup_and_feed)
    sim.add_testbench(drain)
    # A lost beat would leave `drain` waiting: bounded, then counted below.
    run_bounded(sim, (200 + per_lane * lanes * len(acc)) * 1e-8)
    assert len(got) == len(acc), f"{len(got)} of {len(acc)} result beats came out"
    assert lasts == [False] * (len(acc) - 1) + [True]
    return np.array(got, dtype=np.int64)


def expected(acc, bias, multiplier, shift, zero_point, lo, hi):
    total = (acc.astype(np.int64) + bias).astype(np.int32)
    return requantize(total, multiplier, shift, zero_point, lo, hi, axis=1).astype(np.int64)


def compare(got, want, seed, label):
    if not np.array_equal(got, want):
        index = tuple(int(i) for i in np.argwhere(got != want)[0])
        raise AssertionError(f"seed={seed} {label}: first difference at {list(index)}: "
                             f"RTL {got[index]} != golden {want[index]}")


# One rescaler for all lanes (1, 3), two lanes a rescaler (6, 8: the 8x8 array's bank).
@pytest.mark.parametrize("lanes", [1, 3, 6, 8])
def test_random_requantization(unit, lanes, rng, seed):
    beats = 40
    acc = rng.integers(-2**20, 2**20, (beats, lanes), dtype=np.int64)
    bias = rng.integers(-2**16, 2**16, lanes)
    multiplier = rng.integers(2**30, 2**31, lanes)
    shift = rng.integers(20, 40, lanes)
    zero_point, lo, hi = int(rng.integers(-128, 128)), -128, 127
    got = run_bank(unit, lanes, acc, bias, multiplier, shift, zero_point, lo, hi, stall_rng=rng)
    compare(got, expected(acc, bias, multiplier, shift, zero_point, lo, hi), seed,
            f"lanes={lanes} zero_point={zero_point}")


def test_extremes(unit, seed):
    # acc at the int32 limits, M near 2^31, shifts 1 and 40+, zero points -128 and 127,
    # results that saturate, and a ReLU6-style clamp.
    acc = np.array([[2**31 - 1, -2**31, 0, 1], [-1, 12345, -12345, 2**30],
                    [7, -7, 2**31 - 1, -2**31]], dtype=np.int64)
    bias = np.array([0, 0, 0, -1])
    multiplier = np.array([2**31 - 1, 2**30, 2**31 - 1, 2**30 + 12345])
    shift = np.array([1, 62, 40, 45])
    for zero_point, lo, hi in ((-128, -128, 127), (127, -128, 127), (-128, -128, -32)):
        got = run_bank(unit, 4, acc, bias, multiplier, shift, zero_point, lo, hi)
        compare(got, expected(acc, bias, multiplier, shift, zero_point, lo, hi), seed,
                f"extremes z={zero_point} lo={lo} hi={hi}")


def test_ties_round_to_even(unit, seed):
    # M / 2**n = 1/2, 1/4, 3/16 and 2**-32: small accumulators land exactly on ties, which
    # must go to the even neighbour like the golden model (and ONNX QuantizeLinear).
    acc = np.stack([np.arange(-20, 20)] * 3 + [np.full(40, -2**31)], axis=1)
    acc[::2, 3] = 2**31 - 1
    bias = np.array([0, 1, -1, 0])
    multiplier = np.array([2**30, 2**30, 3 << 29, 2**30])
    shift = np.array([31, 32, 33, 62])
    want = expected(acc, bias, multiplier, shift, 0, -128, 127)
    ties_up = np.floor((acc + bias) * (multiplier / 2.0**shift) + 0.5).astype(np.int64)
    assert (want != ties_up).any(), "the case must contain ties that ties-up rounds differently"
    got = run_bank(unit, 4, acc, bias, multiplier, shift, 0, -128, 127)
    compare(got, want, seed, "ties")


def test_every_shift_through_both_steps_of_the_shifter(unit, rng, seed):
    """Shifts 1..62 (every coarse step of 8 and every remainder), each on accumulators
    aimed at results around the int8 range (so rounding decides them) and on one of random
    magnitude."""
    multiplier = rng.integers(2**30, 2**31, 2)
    for first in range(1, 63, 2):
        shift = np.array([first, first + 1])
        target = rng.integers(-200, 200, (4, 2))
        aimed = np.floor(target * 2.0 ** shift / multiplier) + rng.integers(-2, 3, (4, 2))
        wild = rng.choice([-1, 1], (1, 2)) * rng.integers(0, 2**31, (1, 2))
        acc = np.clip(np.concatenate([aimed, wild]), -2**31, 2**31 - 1).astype(np.int64)
        got = run_bank(unit, 2, acc, np.zeros(2, np.int64), multiplier, shift, 0, -128, 127)
        want = expected(acc, np.zeros(2, np.int64), multiplier, shift, 0, -128, 127)
        compare(got, want, seed, f"shifts={shift.tolist()}")


def test_narrowing_before_the_clamp_is_exact(unit, seed):
    """Rescaled values around the narrowing bound (+-2**9) and the int8 range, with the
    zero points and clamps that move the clamp's edge furthest: the saturated narrow value
    must land on the same bound as the wide one, and values inside it pass unchanged."""
    # M / 2**n = 1/2: acc = 2 * target (+1 for the ties) gives rescaled values `target`.
    targets = np.concatenate([np.arange(c - 4, c + 4) for c in
                              (-1 << 20, -1030, -514, -385, -255, 0, 255, 383, 511, 1026)])
    acc = (2 * targets + np.tile([0, 1], len(targets) // 2)).reshape(-1, 4)
    bias = np.zeros(4, dtype=np.int64)
    multiplier = np.full(4, 2**30)
    shift = np.full(4, 31)
    for zero_point, lo, hi in ((-128, -128, 127), (127, -128, 127), (0, -5, 6), (127, 126, 127)):
        got = run_bank(unit, 4, acc, bias, multiplier, shift, zero_point, lo, hi)
        want = expected(acc, bias, multiplier, shift, zero_point, lo, hi)
        compare(got, want, seed, f"narrowing z={zero_point} lo={lo} hi={hi}")


def test_rounding_shift_stages_are_checked():
    from amaranth import Module, Signal

    from hw.fixedpoint import rounding_shift
    m = Module()
    m._MustUse__silence = True  # only the checks run; nothing is elaborated
    with pytest.raises(ValueError, match="stages must be 2 or 3, or 4 with pipelined, not 4"):
        rounding_shift(m, Signal(8), Signal(8), Signal(6), en=1, name="x", stages=4)
    with pytest.raises(ValueError, match="narrow must be 2..63 bits with stages 3 or 4"):
        rounding_shift(m, Signal(8), Signal(8), Signal(6), en=1, name="x", narrow=8)


def test_default_units_share_the_lanes():
    # The 8x8 array's 8 lanes share four 32x31-bit rescalers: a beat every 2 cycles.
    assert [requant_units(n) for n in (1, 4, 8, 12, 16)] == [1, 2, 4, 6, 8]
