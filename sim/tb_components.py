"""cocotb testbenches of the top's stream components on their own (``hw/loader.py``,
``hw/result_writer.py``): random idle cycles on every input stream, random backpressure on
every output stream, a passive monitor on each stream checking the handshake rules, and a
scoreboard of every beat against what the host sent. The testbench plays the sequencer."""

import os

import cocotb
import numpy as np
from cocotb.triggers import ReadOnly, RisingEdge, with_timeout

from contract.streams import WORD_BITS, add_words, output_words, param_words, weight_words
from hw.sequencer import Phase
from sim.cocotb_util import StreamMonitor, clock_and_reset, send_stream, testbench_seed

LOADER_OUTPUTS = ("params", "weights", "acts", "pairs", "pixels")
#: The loader's inputs, held low through the reset.
LOADER_INPUTS = ("h2c__valid", "load_last", "weights_held", "clear", "adding",
                 *(f"{p}__ready" for p in LOADER_OUTPUTS))
WRITER_INPUTS = ("results__valid", "c2h__ready", "hold_last", "clear")




async def _start(dut, idle_inputs):
    """Clock and reset with ``idle_inputs`` low; the lanes and the seeded generator."""
    await clock_and_reset(dut, idle_inputs)
    return int(os.environ["TESSERA_LANES"]), np.random.default_rng(testbench_seed())


def _join(values, width=WORD_BITS):
    """``width``-bit values as one integer, the first lowest (the link's order)."""
    return sum(int(v) << (width * i) for i, v in enumerate(values))


def _last_offset(dut, port):
    # Every beat layout ends with its one-bit ``last``, above the data fields.
    return len(getattr(dut, f"{port}__payload")) - 1


async def _take(dut, port, count, rng, stall, *, load_last=True):
    """Accept ``count`` beats on ``port`` with random backpressure, driving the sequencer's
    ``load_last`` (the next beat is the load's last) as the sequencer would."""
    valid, payload, ready = (getattr(dut, f"{port}__{n}") for n in ("valid", "payload",
                                                                     "ready"))
    beats = []
    while len(beats) < count:
        if load_last:
            dut.load_last.value = int(len(beats) == count - 1)
        ready.value = int(rng.random() >= stall)
        await ReadOnly()
        if valid.value and ready.value:
            beats.append(payload.value.to_unsigned())
        await RisingEdge(dut.clk)
    ready.value = 0
    return beats


@cocotb.test(skip=os.environ.get("TESSERA_BLOCK") != "host_loader")
async def test_host_loader(dut):
    cols, rng = await _start(dut, LOADER_INPUTS)
    monitors = {p: StreamMonitor(dut, p) for p in ("h2c", *LOADER_OUTPUTS)}
    for monitor in monitors.values():
        cocotb.start_soon(monitor.run())
    # One pass in the sequencer's order, then the two streaming ops.
    loads = [(Phase.PARAMS, "params", param_words(cols), 0),
             (Phase.FIRST_WEIGHTS, "weights", weight_words(cols), 0),
             (Phase.ACTIVATIONS, "acts", 1, 0),
             (Phase.REST_WEIGHTS, "weights", weight_words(cols), 0),
             (Phase.STREAM, "pairs", add_words(cols), 1),
             (Phase.STREAM, "pixels", output_words(cols), 0)]
    expected = {p: [] for p in LOADER_OUTPUTS}
    words_sent = 0
    for phase, port, per_beat, adding in loads:
        beats = int(rng.integers(1, 12))
        words = rng.integers(0, 2**WORD_BITS, beats * per_beat, dtype=np.uint64)
        words_sent += len(words)
        dut.phase.value = phase.value
        dut.adding.value = adding
        held = phase == Phase.FIRST_WEIGHTS
        dut.weights_held.value = int(held)
        sender = cocotb.start_soon(send_stream(dut, "h2c", words, rng=rng, idle=0.3))
        if held:  # the sequencer is still summing the first tile's rows
            for _ in range(int(rng.integers(1, 6))):
                await ReadOnly()
                assert not dut.h2c__ready.value, f"seed={testbench_seed()}: took a held weight word"
                await RisingEdge(dut.clk)
            dut.weights_held.value = 0
        await with_timeout(_take(dut, port, beats, rng, stall=0.4), 100_000, "ns")
        await sender
        top = _last_offset(dut, port)
        for i in range(beats):
            data = _join(words[i * per_beat:(i + 1) * per_beat]) & ((1 << top) - 1)
            expected[port].append(data | int(i == beats - 1) << top)
    dut.phase.value = Phase.IDLE.value
    for _ in range(4):
        await RisingEdge(dut.clk)
    for port, monitor in monitors.items():
        monitor.check()
        if port != "h2c":
            assert monitor.beats == expected[port], (
                f"seed={testbench_seed()}: {port} beats differ; first got "
                f"{[hex(b) for b in monitor.beats[:3]]}, want "
                f"{[hex(b) for b in expected[port][:3]]}")
    assert len(monitors["h2c"].beats) == words_sent, \
        f"seed={testbench_seed()}: {len(monitors['h2c'].beats)} host words taken, {words_sent} sent"


@cocotb.test(skip=os.environ.get("TESSERA_BLOCK") != "host_loader")
async def test_host_loader_clear_drops_a_partial_entry(dut):
    cols, rng = await _start(dut, LOADER_INPUTS)
    per_beat = weight_words(cols)
    dut.phase.value = Phase.REST_WEIGHTS.value
    stale = rng.integers(0, 2**WORD_BITS, per_beat - 1 or 1, dtype=np.uint64)
    if per_beat > 1:
        await send_stream(dut, "h2c", stale)
        dut.clear.value = 1
        await RisingEdge(dut.clk)
        dut.clear.value = 0
    words = rng.integers(0, 2**WORD_BITS, per_beat, dtype=np.uint64)
    sender = cocotb.start_soon(send_stream(dut, "h2c", words, rng=rng, idle=0.3))
    (beat,) = await with_timeout(_take(dut, "weights", 1, rng, stall=0.4), 10_000, "ns")
    await sender
    top = _last_offset(dut, "weights")
    assert beat == (_join(words) & ((1 << top) - 1)) | 1 << top, \
        f"seed={testbench_seed()}: a cleared partial entry leaked into the next one"


@cocotb.test(skip=os.environ.get("TESSERA_BLOCK") != "result_writer")
async def test_result_writer(dut):
    cols, rng = await _start(dut, WRITER_INPUTS)
    per_out = output_words(cols)
    monitors = {p: StreamMonitor(dut, p) for p in ("results", "c2h")}
    for monitor in monitors.values():
        cocotb.start_soon(monitor.run())
    done_pulses, last_words_seen = [], []

    async def watch_done():
        while True:
            await ReadOnly()
            taken = dut.c2h__valid.value and dut.c2h__ready.value
            if dut.done.value:
                done_pulses.append(bool(taken and dut.c2h__payload.value.to_unsigned()
                                        >> WORD_BITS))
            if taken and dut.hold_last.value and dut.c2h__payload.value.to_unsigned() \
                    >> WORD_BITS:
                last_words_seen.append("while held")
            await RisingEdge(dut.clk)

    cocotb.start_soon(watch_done())
    want = []
    for case in range(3):
        count = int(rng.integers(1, 20))
        values = rng.integers(0, 256, (count, cols), dtype=np.uint64)
        beats = [_join(row, 8) | int(i == count - 1) << (8 * cols)
                 for i, row in enumerate(values)]
        for i, row in enumerate(values):
            words = [(_join(row, 8) >> (WORD_BITS * k)) & (2**WORD_BITS - 1)
                     for k in range(per_out)]
            want += [w | int(i == count - 1 and k == per_out - 1) << WORD_BITS
                     for k, w in enumerate(words)]
        # The host is still sending for a while: the final word must wait.
        dut.hold_last.value = 1
        sender = cocotb.start_soon(send_stream(dut, "results", beats, rng=rng, idle=0.3))
        taker = cocotb.start_soon(_take(dut, "c2h", count * per_out, rng, stall=0.4,
                                        load_last=False))
        await sender
        for _ in range(int(rng.integers(0, 8)) + per_out + 2):
            await RisingEdge(dut.clk)
        dut.hold_last.value = 0
        await with_timeout(taker, 100_000, "ns")
        assert len(done_pulses) == case + 1 and all(done_pulses), \
            f"seed={testbench_seed()} case {case}: done pulses {done_pulses}"
    for monitor in monitors.values():
        monitor.check()
    assert not last_words_seen, f"seed={testbench_seed()}: the final word left while held"
    assert monitors["c2h"].beats == want, (
        f"seed={testbench_seed()}: c2h words differ; got "
        f"{[hex(b) for b in monitors['c2h'].beats[:4]]}, want {[hex(b) for b in want[:4]]}")

