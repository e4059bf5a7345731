"""cocotb testbenches of the residual-add and 2x2 max-pool blocks against the golden
models: driver with idle cycles, monitor with random backpressure, in-order scoreboard."""

import os

import cocotb
import numpy as np
from cocotb.triggers import with_timeout

from hw.maxpool import pixel_layout
from hw.residual_add import add_params_layout, operand_pair_layout, sum_layout
from models.eltwise import add, add_multipliers
from models.pool import max_pool2d
from sim.cocotb_util import clock_and_reset, first_difference, receive_stream, send_stream
from sim.packing import pack_struct, unpack_struct


def _seed():
    return int(os.environ.get("TESSERA_SEED", "1"))


async def reset(dut):
    await clock_and_reset(dut, ())


async def exchange(dut, in_prefix, in_layout, beats, out_prefix, out_layout, count, rng):
    words = [pack_struct(in_layout, beat) for beat in beats]
    sender = cocotb.start_soon(send_stream(dut, in_prefix, words, rng=rng, idle=0.2))
    got = await with_timeout(receive_stream(dut, out_prefix, count, rng=rng, stall=0.3),
                             (len(beats) + count) * 20 * 10 + 10_000, "ns")
    await sender
    return [unpack_struct(out_layout, word) for word in got]


@cocotb.test(skip=os.environ.get("TESSERA_BLOCK") != "residual_add")
async def test_residual_add(dut):
    lanes = int(os.environ["TESSERA_LANES"])
    rng = np.random.default_rng(_seed())
    await reset(dut)
    for case, (scales, zps) in enumerate([((0.05, 0.02, 0.07), (3, -5, 0)),
                                          ((0.5, 0.001, 0.03), (-128, 127, -128)),
                                          ((0.01, 0.01, 0.001), (0, 0, 0)),
                                          ((0.02, 0.09, 0.05), (127, -128, 127))]):
        count = 60
        a = rng.integers(-128, 128, (count, lanes), dtype=np.int8)
        b = rng.integers(-128, 128, (count, lanes), dtype=np.int8)
        a[0], b[0] = -128, 127
        (sa, sb, sy), (za, zb, zy) = scales, zps
        lo, hi = (zy, 127) if case % 2 else (-128, 127)
        ma, na, mb, nb, my, ny = add_multipliers(sa, sb, sy)
        dut.params.value = pack_struct(add_params_layout(), {
            "a_zero_point": za, "b_zero_point": zb, "y_zero_point": zy, "lo": lo, "hi": hi,
            "a_multiplier": ma, "a_shift": na, "b_multiplier": mb, "b_shift": nb,
            "y_multiplier": my, "y_shift": ny})
        beats = [{"a": a[i], "b": b[i], "last": i == count - 1} for i in range(count)]
        out = await exchange(dut, "operands", operand_pair_layout(lanes), beats, "results",
                             sum_layout(lanes), count, rng)
        got = np.array([beat["y"] for beat in out])
        want = add(a, sa, za, b, sb, zb, sy, zy, lo, hi).astype(np.int64)
        assert [beat["last"] for beat in out] == [0] * (count - 1) + [1]
        assert np.array_equal(got, want), f"seed={_seed()} case {case}: " \
            + first_difference(got, want)


@cocotb.test(skip=os.environ.get("TESSERA_BLOCK") != "maxpool")
async def test_max_pool(dut):
    lanes = int(os.environ["TESSERA_LANES"])
    max_width = int(os.environ["TESSERA_MAX_WIDTH"])
    rng = np.random.default_rng(_seed())
    await reset(dut)
    dut.active.value = 1  # the top holds it high while a pass may pool
    for height, width in [(4, 6), (5, 7), (2, 2), (3, max_width), (9, 1 + max_width // 2)]:
        frames = 2
        x = rng.integers(-128, 128, (frames, lanes, height, width), dtype=np.int8)
        dut.width.value = width
        dut.height.value = height
        beats = [{"x": x[f, :, r, c], "last": r == height - 1 and c == width - 1}
                 for f in range(frames) for r in range(height) for c in range(width)]
        want = max_pool2d(x, 2, 2)
        oh, ow = want.shape[2:]
        out = await exchange(dut, "pixels", pixel_layout(lanes), beats, "pooled",
                             pixel_layout(lanes), frames * oh * ow, rng)
        got = np.array([beat["x"] for beat in out]).reshape(frames, oh, ow, lanes)
        got = got.transpose(0, 3, 1, 2)
        assert [beat["last"] for beat in out] == ([0] * (oh * ow - 1) + [1]) * frames
        assert np.array_equal(got, want), f"seed={_seed()} {height}x{width}: " \
            + first_difference(got, want.astype(np.int64))
