"""cocotb testbench of the engine's post-processing bank (``hw.postprocess.PostProcessBank``)
on its own: passes alternating requantization and residual add through one bank, random
idle cycles on the input stream and random backpressure on the output stream of each pass,
a passive monitor on all four streams, and every result beat checked bit-exact against
``models.requant.requantize`` / ``models.eltwise.add``. The testbench plays the sequencer:
it sets ``adding`` and the pass constants while the bank is empty, between passes.

The monitors are the scoreboard for loss and duplication: each stream's transfers must be
exactly the beats sent, or exactly the golden beats in order, and after the last pass the
idle side of each mode must have moved nothing."""

import os

import cocotb
import numpy as np
from cocotb.triggers import ReadOnly, RisingEdge, with_timeout

from contract.requant import (
    BIAS_WIDTH,
    MULTIPLIER_MAX,
    MULTIPLIER_MIN,
    MULTIPLIER_WIDTH,
    SHIFT_MAX,
    SHIFT_MIN,
    SHIFT_WIDTH,
)
from hw.postprocess import (
    RequantParams,
    accumulator_layout,
    add_params_layout,
    operand_pair_layout,
    output_layout,
    sum_layout,
)
from models.eltwise import add, add_multipliers
from models.requant import requantize
from sim.cocotb_util import (
    StreamMonitor,
    clock_and_reset,
    first_difference,
    receive_stream,
    send_stream,
    testbench_seed,
)
from sim.packing import pack_struct, unpack_struct

#: The bank's inputs, held low through the reset (the level constants as well).
BANK_INPUTS = ("adding", "accumulators__valid", "operands__valid", "results__ready",
               "sums__ready", "bias", "multiplier", "shift", "params", "add_params")
STREAMS = ("accumulators", "operands", "results", "sums")




def requant_pass(rng, lanes, beats):
    """A CONV pass's accumulators and per-lane constants, and its golden results: random
    values with the extremes (int32 limits, shifts 1 and 62, M at both ends) mixed in."""
    acc = rng.integers(-2**20, 2**20, (beats, lanes), dtype=np.int64)
    acc[0, 0], acc[-1, -1] = 2**31 - 1, -2**31
    bias = rng.integers(-2**16, 2**16, lanes)
    multiplier = rng.integers(MULTIPLIER_MIN, MULTIPLIER_MAX + 1, lanes)
    multiplier[-1] = MULTIPLIER_MAX
    shift = rng.integers(20, 40, lanes)
    shift[0], shift[-1] = SHIFT_MIN, SHIFT_MAX
    zero_point = int(rng.integers(-128, 128))
    # the int8 range, a fused ReLU, a ReLU6-like band
    lo, hi = [(-128, 127), (zero_point, 127),
              (zero_point, min(127, zero_point + 40))][int(rng.integers(3))]
    want = requantize((acc + bias).astype(np.int32), multiplier, shift, zero_point, lo, hi,
                      axis=1)
    return {"adding": 0, "sink": "accumulators", "source": "results",
            "in_layout": accumulator_layout(lanes), "out_layout": output_layout(lanes),
            "levels": {"bias": _pack_lanes(bias, BIAS_WIDTH),
                       "multiplier": _pack_lanes(multiplier, MULTIPLIER_WIDTH),
                       "shift": _pack_lanes(shift, SHIFT_WIDTH),
                       "params": pack_struct(RequantParams,
                                             {"zero_point": zero_point, "lo": lo, "hi": hi})},
            "beats": [{"acc": row, "last": i == beats - 1} for i, row in enumerate(acc)],
            "want": want.astype(np.int64),
            "label": f"requant z={zero_point} lo={lo} hi={hi}"}


def add_pass(rng, lanes, beats):
    """An ADD pass's operand pairs and scales, and its golden sums; the first beat holds
    the extreme operands."""
    scales = tuple(float(s) for s in 10.0 ** rng.uniform(-4, -0.3, 3))
    (sa, sb, sy), (za, zb, zy) = scales, tuple(int(z) for z in rng.integers(-128, 128, 3))
    a = rng.integers(-128, 128, (beats, lanes), dtype=np.int8)
    b = rng.integers(-128, 128, (beats, lanes), dtype=np.int8)
    a[0], b[0] = -128, 127
    lo, hi = (zy, 127) if rng.random() < 0.5 else (-128, 127)
    ma, na, mb, nb, my, ny = add_multipliers(sa, sb, sy)
    params = {"a_zero_point": za, "b_zero_point": zb, "y_zero_point": zy, "lo": lo,
              "hi": hi, "a_multiplier": ma, "a_shift": na, "b_multiplier": mb,
              "b_shift": nb, "y_multiplier": my, "y_shift": ny}
    want = add(a, sa, za, b, sb, zb, sy, zy, lo, hi)
    return {"adding": 1, "sink": "operands", "source": "sums",
            "in_layout": operand_pair_layout(lanes), "out_layout": sum_layout(lanes),
            "levels": {"add_params": pack_struct(add_params_layout(), params)},
            "beats": [{"a": a[i], "b": b[i], "last": i == beats - 1} for i in range(beats)],
            "want": want.astype(np.int64),
            "label": f"add scales={tuple(round(s, 6) for s in scales)} "
                     f"zero points={(za, zb, zy)} lo={lo}"}


def _pack_lanes(values, width):
    """A per-lane level port's integer: lane 0 in the lowest ``width`` bits."""
    return sum((int(v) & ((1 << width) - 1)) << (width * i) for i, v in enumerate(values))


def _packed_outputs(work):
    """The golden result beats as the output port's payload integers."""
    count = len(work["want"])
    return [pack_struct(work["out_layout"], {"y": row, "last": i == count - 1})
            for i, row in enumerate(work["want"])]


async def _run_pass(dut, work, rng, idle, stall, label):
    """Set the pass's mode and constants (the bank is empty), send its beats with idle
    cycles, take its results with backpressure; returns the result payloads."""
    dut.adding.value = work["adding"]
    for port, value in work["levels"].items():
        getattr(dut, port).value = value
    await RisingEdge(dut.clk)  # the bank registers the mode's output constants
    words = [pack_struct(work["in_layout"], beat) for beat in work["beats"]]
    sender = cocotb.start_soon(send_stream(dut, work["sink"], words, rng=rng, idle=idle))
    # Generous: a beat takes at most `lanes` cycles, plus stalls and the pipeline.
    budget = 200 + 40 * len(words) * int(os.environ["TESSERA_LANES"])
    got = await with_timeout(receive_stream(dut, work["source"], len(words), rng=rng,
                                            stall=stall), budget * 10, "ns")
    await with_timeout(sender, 100, "ns")
    values = [unpack_struct(work["out_layout"], word) for word in got]
    lasts = [v["last"] for v in values]
    assert lasts == [0] * (len(words) - 1) + [1], \
        f"seed={testbench_seed()} {label} {work['label']}: last flags {lasts}"
    y = np.array([v["y"] for v in values], dtype=np.int64)
    assert np.array_equal(y, work["want"]), \
        f"seed={testbench_seed()} {label} {work['label']}: " + first_difference(y, work["want"])
    return got


@cocotb.test()
@cocotb.parametrize(traffic=[("eager", 0.0, 0.0), ("stalls", 0.3, 0.4),
                             ("starved", 0.7, 0.2), ("throttled", 0.1, 0.8)])
async def test_passes_alternate_under_backpressure(dut, traffic):
    """requant, add, requant, add, add, requant through one bank, each pass bit-exact under
    the traffic pattern (idle probability on the input, stall probability on the output)."""
    name, idle, stall = traffic
    lanes = int(os.environ["TESSERA_LANES"])
    rng = np.random.default_rng([testbench_seed(), len(name)])
    label = f"lanes={lanes} traffic={name}"
    await clock_and_reset(dut, BANK_INPUTS)
    monitors = {port: StreamMonitor(dut, port) for port in STREAMS}
    for monitor in monitors.values():
        cocotb.start_soon(monitor.run())
    sent = {port: [] for port in STREAMS}
    for kind in ("requant", "add", "requant", "add", "add", "requant"):
        beats = int(rng.integers(1, 25))
        work = (requant_pass if kind == "requant" else add_pass)(rng, lanes, beats)
        got = await _run_pass(dut, work, rng, idle, stall, label)
        sent[work["sink"]] += [pack_struct(work["in_layout"], b) for b in work["beats"]]
        sent[work["source"]] += _packed_outputs(work)
        assert got == _packed_outputs(work)
    # Nothing more may come out of either side, whichever mode the bank is left in.
    dut.results__ready.value = 1
    dut.sums__ready.value = 1
    for adding in (0, 1):
        dut.adding.value = adding
        for _ in range(40):
            await RisingEdge(dut.clk)
    await ReadOnly()
    for port, monitor in monitors.items():
        monitor.check()
        assert monitor.beats == sent[port], (
            f"seed={testbench_seed()} {label}: {port} carried {len(monitor.beats)} beats, "
            f"{len(sent[port])} expected (lost, duplicated or reordered); first got "
            f"{[hex(b) for b in monitor.beats[:3]]}, want {[hex(b) for b in sent[port][:3]]}")
