"""Residual add and 2x2 max pool blocks against the golden models (Amaranth simulator)."""

import numpy as np
import pytest
from amaranth.sim import Simulator

from hw.maxpool import MaxPool2x2
from hw.residual_add import ResidualAdd
from models.eltwise import add, add_multipliers
from models.pool import max_pool2d
from sim.streams import stream_get, stream_put


def simulate(dut, setup, beats, out_stream, out_count, rng):
    """Feed ``beats`` into the first stream, collect ``out_count`` beats with random stalls."""
    got = []

    async def feed(ctx):
        in_stream, payloads = beats
        setup(ctx)
        for payload in payloads:
            await stream_put(ctx, in_stream, payload)

    async def drain(ctx):
        for _ in range(out_count):
            while rng.random() < 0.3:
                await ctx.tick()
            got.append(await stream_get(ctx, out_stream))

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(feed)
    sim.add_testbench(drain)
    sim.run()
    return got


def first_difference(got, want):
    index = tuple(int(i) for i in np.argwhere(got != want)[0])
    return f"first difference at {list(index)}: RTL {got[index]} != golden {want[index]}"


@pytest.mark.parametrize("scales, zero_points", [
    ((0.05, 0.02, 0.07), (3, -5, 0)),
    ((0.5, 0.001, 0.03), (-128, 127, -128)),   # very different scales, extreme zero points
    ((0.01, 0.01, 0.001), (0, 0, 0)),          # output saturates
    ((0.05, 0.05, 0.1), (0, 0, -20)),          # half the inputs' resolution: odd sums tie
])
def test_residual_add_matches_golden(scales, zero_points, rng, seed):
    lanes, count = 3, 30
    a = rng.integers(-128, 128, (count, lanes), dtype=np.int8)
    b = rng.integers(-128, 128, (count, lanes), dtype=np.int8)
    a[0], b[0] = -128, 127
    (sa, sb, sy), (za, zb, zy) = scales, zero_points
    lo, hi = (zy, 127)  # a fused ReLU
    ma, na, mb, nb, my, ny = add_multipliers(sa, sb, sy)
    dut = ResidualAdd(lanes=lanes)

    def setup(ctx):
        ctx.set(dut.params, {
            "a_zero_point": za, "b_zero_point": zb, "y_zero_point": zy, "lo": lo, "hi": hi,
            "a_multiplier": ma, "a_shift": na, "b_multiplier": mb, "b_shift": nb,
            "y_multiplier": my, "y_shift": ny})

    payloads = [{"a": [int(v) for v in a[i]], "b": [int(v) for v in b[i]],
                 "last": i == count - 1} for i in range(count)]
    out = simulate(dut, setup, (dut.operands, payloads), dut.results, count, rng)
    got = np.array([[int(v) for v in beat.y] for beat in out])
    want = add(a, sa, za, b, sb, zb, sy, zy, lo, hi).astype(np.int64)
    assert [bool(beat.last) for beat in out] == [False] * (count - 1) + [True]
    assert np.array_equal(got, want), f"seed={seed} scales={scales}: " \
        + first_difference(got, want)


@pytest.mark.parametrize("height, width", [(4, 6), (5, 7), (2, 2), (3, 9)])
def test_max_pool_matches_golden(height, width, rng, seed):
    lanes = 2
    frames = 2  # two channel groups back to back: counters must restart
    x = rng.integers(-128, 128, (frames, lanes, height, width), dtype=np.int8)
    x[0, 0, 0, 0] = -128
    dut = MaxPool2x2(lanes=lanes, max_width=16)

    def setup(ctx):
        ctx.set(dut.width, width)
        ctx.set(dut.height, height)

    payloads = [{"x": [int(v) for v in x[f, :, r, c]],
                 "last": r == height - 1 and c == width - 1}
                for f in range(frames) for r in range(height) for c in range(width)]
    want = max_pool2d(x, 2, 2)  # (frames, lanes, OH, OW)
    oh, ow = want.shape[2:]
    out = simulate(dut, setup, (dut.pixels, payloads), dut.pooled, frames * oh * ow, rng)
    got = np.array([[int(v) for v in beat.x] for beat in out]).reshape(frames, oh, ow, lanes)
    got = got.transpose(0, 3, 1, 2)
    expected_last = ([False] * (oh * ow - 1) + [True]) * frames
    assert [bool(beat.last) for beat in out] == expected_last, f"seed={seed}: `last` flags"
    assert np.array_equal(got, want), f"seed={seed} {height}x{width}: " \
        + first_difference(got, want.astype(np.int64))


def test_block_parameters_are_checked():
    with pytest.raises(ValueError, match="lanes must be a positive integer, not 0"):
        ResidualAdd(lanes=0)
    with pytest.raises(ValueError, match="max_width must be at least 2, not 1"):
        MaxPool2x2(lanes=1, max_width=1)
