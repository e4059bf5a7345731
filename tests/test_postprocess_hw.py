"""The residual add (the post-processing bank's add side) and the 2x2 max pool block against
the golden models (Amaranth simulator)."""

import numpy as np
import pytest
from amaranth.sim import Simulator

from hw.maxpool import MaxPool2x2
from hw.postprocess import PostProcessBank
from models.eltwise import ADD_LEFT_SHIFT, add, add_multipliers
from models.pool import max_pool2d
from models.requant import rounding_shift
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


@pytest.mark.parametrize("scales, zero_points, lanes", [
    ((0.05, 0.02, 0.07), (3, -5, 0), 3),
    # very different scales, extreme zero points; 8 lanes through the one datapath
    ((0.5, 0.001, 0.03), (-128, 127, -128), 8),
    ((0.01, 0.01, 0.001), (0, 0, 0), 4),          # output saturates
    ((0.05, 0.05, 0.1), (0, 0, -20), 2),          # half the inputs' resolution: ties
    ((3e-5, 0.7, 0.02), (-7, 100, 5), 16),        # a_shift far above b_shift; 2 datapaths
])
def test_residual_add_matches_golden(scales, zero_points, lanes, rng, seed):
    count = 30
    a = rng.integers(-128, 128, (count, lanes), dtype=np.int8)
    b = rng.integers(-128, 128, (count, lanes), dtype=np.int8)
    a[0], b[0] = -128, 127
    (sa, sb, sy), (za, zb, zy) = scales, zero_points
    lo, hi = (zy, 127)  # a fused ReLU
    ma, na, mb, nb, my, ny = add_multipliers(sa, sb, sy)
    dut = PostProcessBank(lanes=lanes)

    def setup(ctx):
        ctx.set(dut.adding, 1)
        ctx.set(dut.add_params, {
            "a_zero_point": za, "b_zero_point": zb, "y_zero_point": zy, "lo": lo, "hi": hi,
            "a_multiplier": ma, "a_shift": na, "b_multiplier": mb, "b_shift": nb,
            "y_multiplier": my, "y_shift": ny})

    payloads = [{"a": [int(v) for v in a[i]], "b": [int(v) for v in b[i]],
                 "last": i == count - 1} for i in range(count)]
    out = simulate(dut, setup, (dut.operands, payloads), dut.sums, count, rng)
    got = np.array([[int(v) for v in beat.y] for beat in out])
    want = add(a, sa, za, b, sb, zb, sy, zy, lo, hi).astype(np.int64)
    assert [bool(beat.last) for beat in out] == [False] * (count - 1) + [True]
    assert np.array_equal(got, want), f"seed={seed} scales={scales} lanes={lanes}: " \
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


def test_max_pool_two_wide_frames_do_not_share_a_bypass(rng, seed):
    """Two pixels wide, the line-buffer read of an odd row meets the write of the row above
    and takes the written value from a bypass; frames of large values followed by frames
    of small ones show a bypass leaking into the next frame's even row."""
    lanes, frames = 2, 4
    x = rng.integers(-128, 1, (frames, lanes, 2, 2), dtype=np.int8)
    x[0::2] = 127
    dut = MaxPool2x2(lanes=lanes, max_width=16)

    def setup(ctx):
        ctx.set(dut.width, 2)
        ctx.set(dut.height, 2)

    payloads = [{"x": [int(v) for v in x[f, :, r, c]], "last": r == 1 and c == 1}
                for f in range(frames) for r in range(2) for c in range(2)]
    out = simulate(dut, setup, (dut.pixels, payloads), dut.pooled, frames, rng)
    got = np.array([[int(v) for v in beat.x] for beat in out])
    want = x.max(axis=(2, 3)).astype(np.int64)
    assert np.array_equal(got, want), f"seed={seed}: " + first_difference(got, want)


def test_narrowed_input_rescale_is_exact(rng, seed):
    """The identity the residual add's input rescale rests on
    (docs/conv-engine.md): rnd(v << 20, M, n) == rnd(v, M, n - 20) for every n > 20, checked
    on every v = x - z and every shift, with random and extreme multipliers."""
    v = np.arange(-255, 256, dtype=np.int64)
    multipliers = [2**30, 2**31 - 1, 3 << 29, *rng.integers(2**30, 2**31, 8).tolist()]
    for m in multipliers:
        for n in range(21, 63):
            wide = rounding_shift(v << ADD_LEFT_SHIFT, np.int64(m), np.int64(n))
            narrow = rounding_shift(v, np.int64(m), np.int64(n - ADD_LEFT_SHIFT))
            assert np.array_equal(wide, narrow), f"seed={seed} M={m} n={n}: " \
                + first_difference(narrow, wide)


@pytest.mark.parametrize("height, width", [(5, 4), (4, 5), (3, 3), (2, 4)])
def test_max_pool_consumes_the_frame_before_its_last_beat(height, width, seed):
    """The pooled beat with ``last`` leaves only after the frame's final input pixel has
    been taken, also when an unpaired last row or column is dropped: a pass that ends on
    that ``last`` must leave nothing of the frame in the input stream. (The old RTL sent
    ``last`` after the last row pair, and an odd last row stayed behind in the stream.)"""
    lanes = 1
    x = np.arange(height * width, dtype=np.int64).reshape(1, 1, height, width) % 100
    dut = MaxPool2x2(lanes=lanes, max_width=8)
    fed = []      # cycle at which each pixel was taken
    pooled = []   # (cycle, value, last) of each pooled beat
    cycle = [0]

    async def clock(ctx):
        while True:
            await ctx.tick()
            cycle[0] += 1

    async def feed(ctx):
        ctx.set(dut.width, width)
        ctx.set(dut.height, height)
        for r in range(height):
            if r == height - 1:
                await ctx.tick().repeat(20)  # the final row comes late
            for c in range(width):
                await stream_put(ctx, dut.pixels, {"x": [int(x[0, 0, r, c])],
                                                   "last": r == height - 1 and c == width - 1})
                fed.append(cycle[0])

    async def drain(ctx):
        want = max_pool2d(x.astype(np.int8), 2, 2).reshape(-1)
        for _ in range(want.size):
            payload = await stream_get(ctx, dut.pooled)
            pooled.append((cycle[0], int(payload.x[0]), bool(payload.last)))
        assert [v for _, v, _ in pooled] == [int(v) for v in want], f"seed={seed}: {pooled}"

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_process(clock)
    sim.add_testbench(feed)
    sim.add_testbench(drain)
    sim.run_until(1e-8 * 400)
    assert len(fed) == height * width and len(pooled) == (height // 2) * (width // 2)
    assert [last for _, _, last in pooled] == [False] * (len(pooled) - 1) + [True]
    assert pooled[-1][0] > fed[-1], \
        f"{height}x{width}: last pooled beat at cycle {pooled[-1][0]}, before the final " \
        f"pixel was taken at cycle {fed[-1]}"


def test_block_parameters_are_checked():
    with pytest.raises(ValueError, match="max_width must be at least 2, not 1"):
        MaxPool2x2(lanes=1, max_width=1)
