"""cocotb testbench of the 2x2 max-pool block against the golden model: driver with idle
cycles, receiver with random backpressure, in-order scoreboard. (The post-processing bank,
requantization and residual add, has its own: ``sim/tb_postprocess.py``.)"""

import os

import cocotb
import numpy as np
from cocotb.triggers import with_timeout

from hw.maxpool import pixel_layout
from models.pool import max_pool2d
from sim.cocotb_util import (
    clock_and_reset,
    first_difference,
    receive_stream,
    send_stream,
    testbench_seed,
)
from sim.packing import pack_struct, unpack_struct


async def reset(dut):
    await clock_and_reset(dut, ())


async def exchange(dut, in_prefix, in_layout, beats, out_prefix, out_layout, count, rng):
    words = [pack_struct(in_layout, beat) for beat in beats]
    sender = cocotb.start_soon(send_stream(dut, in_prefix, words, rng=rng, idle=0.2))
    got = await with_timeout(receive_stream(dut, out_prefix, count, rng=rng, stall=0.3),
                             (len(beats) + count) * 20 * 10 + 10_000, "ns")
    await sender
    return [unpack_struct(out_layout, word) for word in got]


@cocotb.test(skip=os.environ.get("TESSERA_BLOCK") != "maxpool")
async def test_max_pool(dut):
    lanes = int(os.environ["TESSERA_LANES"])
    max_width = int(os.environ["TESSERA_MAX_WIDTH"])
    rng = np.random.default_rng(testbench_seed())
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
        assert np.array_equal(got, want), f"seed={testbench_seed()} {height}x{width}: " \
            + first_difference(got, want.astype(np.int64))
