"""cocotb testbench: the convolution engine against the golden model.

Driver (loads the three buffers, writes the descriptor, pulses ``start``) + monitor (output
beats under random backpressure) + golden model (``models.conv.conv2d`` then
``models.requant.requantize``) + scoreboard (the beats reassembled by
``sw_driver.conv_lowering.assemble_output`` must equal the golden tensor). The engine is
not reset between layers, so every test also checks that a layer leaves no state behind.

Configuration arrives through the environment (``TESSERA_ROWS``, ``TESSERA_COLS``,
``TESSERA_ACT_DEPTH``, ``TESSERA_WEIGHT_DEPTH``, ``TESSERA_MAX_COL_TILES``,
``TESSERA_SEED``); ``TESSERA_REPORT`` names a JSON file for the cycle measurements.
"""

import json
import os

import cocotb
import numpy as np
from cocotb.triggers import ReadOnly, RisingEdge, with_timeout

from contract.config import ConvEngineConfig
from contract.streams import ACTIVATIONS_PER_WORD
from hw.addrgen import descriptor_layout
from hw.conv_engine import (
    activation_load_layout,
    param_load_layout,
    weight_load_layout,
)
from hw.postprocess_lean import SerialRequantizer
from hw.requant import output_layout
from models.conv import conv2d
from models.requant import requantize
from sim.cocotb_util import clock_and_reset, send_stream, testbench_seed
from sim.packing import pack_struct
from sw_driver.conv_lowering import assemble_output, engine_reference, lower_conv2d


def _config():
    return ConvEngineConfig.from_env(os.environ)




def unpack_output(word, cols):
    layout = output_layout(cols)
    y = layout["y"]
    values = []
    for index in range(cols):
        raw = (word >> (y.offset + 8 * index)) & 0xFF
        values.append(raw - 256 if raw & 0x80 else raw)
    return values, bool((word >> layout["last"].offset) & 1)


async def start(dut):
    """Clock, reset, idle interfaces; returns a running cycle counter."""
    return await clock_and_reset(dut, ("act_in__valid", "weight_in__valid",
                                       "param_in__valid", "output__ready", "start"))


async def send(dut, port, layout, payloads):
    """Drive ``payloads`` (``last`` on the final one) into stream ``port``, one per cycle
    while it is ready."""
    await send_stream(dut, port, [pack_struct(layout, {**value, "last": index == len(payloads) - 1})
                                  for index, value in enumerate(payloads)])


async def run_pass(dut, config, p, rng, counter, *, stall):
    """Load, start and drain one engine pass; returns (beats, cycles start->done)."""
    cols = config.cols
    per_beat = ACTIVATIONS_PER_WORD
    acts = np.zeros(-(-p.activations.size // per_beat) * per_beat, np.int8)
    acts[:p.activations.size] = p.activations.reshape(-1)
    await send(dut, "act_in", activation_load_layout(),
               [{"x": list(acts[i:i + per_beat])} for i in range(0, acts.size, per_beat)])
    await send(dut, "weight_in", weight_load_layout(cols), [{"w": row} for row in p.weights])
    await send(dut, "param_in", param_load_layout(cols), [
        {"word": {"bias": p.bias[t], "multiplier": p.multiplier[t], "shift": p.shift[t]}}
        for t in range(p.bias.shape[0])])
    dut.descriptor.value = pack_struct(descriptor_layout(), p.descriptor)
    dut.start.value = 1
    await RisingEdge(dut.clk)
    dut.start.value = 0
    began = counter.value
    beats, lasts = [], []
    while True:
        dut.output__ready.value = 0 if rng.random() < stall else 1
        await ReadOnly()
        if dut.output__valid.value and dut.output__ready.value:
            values, last = unpack_output(dut.output__payload.value.to_unsigned(), cols)
            beats.append(values)
            lasts.append(last)
            if last:
                await RisingEdge(dut.clk)
                break
        await RisingEdge(dut.clk)
    dut.output__ready.value = 0
    cycles = counter.value - began
    await ReadOnly()
    assert dut.done.value and not dut.busy.value, \
        f"seed={testbench_seed()} pass {p.name}: done/busy not set after the last beat"
    assert len(beats) == p.output_beats and lasts.index(True) == len(lasts) - 1, (
        f"seed={testbench_seed()} pass {p.name}: {len(beats)} beats with `last` at "
        f"{lasts.index(True)}, expected {p.output_beats} with `last` on the final one")
    await RisingEdge(dut.clk)
    return np.array(beats, dtype=np.int8), cycles


def describe(layer):
    return (f"x{layer['x'].shape} w{layer['w'].shape} stride={layer['stride']} "
            f"pads={layer['padding']} groups={layer['groups']} zx={layer['zx']} "
            f"zy={layer['zy']} clamp=({layer['lo']}, {layer['hi']})")


async def run_layer(dut, config, layer, rng, counter, *, stall=0.0, label=""):
    """Run every pass of ``layer`` and compare with the golden model; returns the per-pass
    cycle measurements."""
    context = f"seed={testbench_seed()} config={config.name} case={label} layer: {describe(layer)}"
    passes = lower_conv2d(layer["x"], layer["w"], layer["bias"], layer["multiplier"],
                          layer["shift"], x_zero_point=layer["zx"], y_zero_point=layer["zy"],
                          lo=layer["lo"], hi=layer["hi"], stride=layer["stride"],
                          padding=layer["padding"], groups=layer["groups"], config=config,
                          name=label)
    results, measurements = [], []
    for p in passes:
        # A hang is a failure with a message: 10x the beats the pass needs, plus the
        # array's and the loads' fixed costs, stretched by the stall rate.
        budget = int(10 * (p.beats + 4 * len(p.activations) + 64 * (config.rows + config.cols)
                           + 100) / (1.0 - stall))
        try:
            beats, cycles = await with_timeout(
                run_pass(dut, config, p, rng, counter, stall=stall), budget * 10, "ns")
        except TimeoutError as error:
            raise AssertionError(f"{context}: pass {p.name} made no progress within "
                                 f"{budget} cycles") from error
        results.append(beats)
        d = p.descriptor
        # Useful MACs only: a depthwise pass multiplies by zero off the diagonal.
        per_output = (layer["w"].shape[1] * d["kernel_h"] * d["kernel_w"])
        macs = p.out_size[0] * p.out_size[1] * int((p.channels >= 0).sum()) * per_output
        ideal = macs / (config.rows * config.cols)
        measurements.append({
            "case": label, "pass": p.name, "layer": describe(layer), "cycles": cycles,
            "ideal_cycles": ideal, "array_beats": p.beats, "efficiency": ideal / cycles,
            "beat_rate": p.beats / cycles,
            "load_beats": len(p.activations) + len(p.weights) + len(p.bias)})
    acc = conv2d(layer["x"], layer["w"], layer["bias"], x_zero_point=layer["zx"],
                 stride=layer["stride"], padding=layer["padding"], groups=layer["groups"])
    want = requantize(acc, layer["multiplier"], layer["shift"], layer["zy"], layer["lo"],
                      layer["hi"])
    got = assemble_output(passes, results, layer["w"].shape[0])
    if not np.array_equal(got, want):
        index = tuple(int(i) for i in np.argwhere(got != want)[0])
        detail = ""
        for p, beats in zip(passes, results, strict=True):
            ref = engine_reference(p)
            bad = np.argwhere(beats != ref)
            if len(bad):
                beat, lane = (int(i) for i in bad[0])
                detail = (f"; pass {p.name} beat {beat} lane {lane}: RTL {beats[beat, lane]} "
                          f"!= reference {ref[beat, lane]}")
                break
        raise AssertionError(f"{context}: first difference at y{list(index)}: RTL "
                             f"{got[index]} != golden {want[index]}{detail}")
    for m in measurements:
        dut._log.info("cycles: %s", m)
    return measurements


def make_layer(rng, *, kernel, stride, c_in, c_out, size, depthwise=False, zx=None,
               batch=1, extreme=False):
    """Random layer: padding 0..k/2 per side, random zero points, realistic or extreme
    requantization constants."""
    pads = tuple(int(rng.integers(0, kernel // 2 + 1)) for _ in range(4))
    h = max(size[0], kernel - pads[0] - pads[2])
    w = max(size[1], kernel - pads[1] - pads[3])
    if depthwise:
        c_out = c_in
    x = rng.integers(-128, 128, (batch, c_in, h, w), dtype=np.int8)
    wt = rng.integers(-128, 128, (c_out, 1 if depthwise else c_in, kernel, kernel),
                      dtype=np.int8)
    k = (1 if depthwise else c_in) * kernel * kernel
    if extreme:
        # Accumulators far past what the int8 output holds (saturation both ways),
        # multipliers at both ends of [2^30, 2^31), shifts from 1 to 45.
        bias = rng.integers(-2**28, 2**28, c_out).astype(np.int32)
        multiplier = rng.choice(np.array([2**30, 2**31 - 1, 2**31 - 2, 2**30 + 1]), c_out)
        shift = rng.choice(np.array([1, 2, 31, 40, 45, 62]), c_out)
    else:
        bias = rng.integers(-2**16, 2**16, c_out).astype(np.int32)
        multiplier = rng.integers(2**30, 2**31, c_out)
        # About log2(K * 2^14) bits above the int8 range, so outputs spread over it.
        shift = np.full(c_out, int(np.log2(k * 2**14)) + 31 - 7) + rng.integers(-2, 3, c_out)
    lo, hi = (-128, 127) if rng.random() < 0.7 else (int(rng.integers(-128, 0)),
                                                     int(rng.integers(0, 128)))
    return {"x": x, "w": wt, "bias": bias, "multiplier": multiplier, "shift": shift,
            "stride": stride, "padding": pads, "groups": c_in if depthwise else 1,
            "zx": int(rng.integers(-128, 128)) if zx is None else zx,
            "zy": int(rng.integers(-128, 128)), "lo": lo, "hi": hi}


def _report(measurements):
    path = os.environ.get("TESSERA_REPORT")
    if path:
        existing = []
        if os.path.exists(path):
            with open(path) as f:
                existing = json.load(f)
        with open(path, "w") as f:
            json.dump(existing + measurements, f, indent=2)


@cocotb.test()
@cocotb.parametrize(traffic=[("ready", 0.0), ("stalls", 0.35)])
async def test_random_layers(dut, traffic):
    """Kernels 1, 3, 5, 7, strides 1 and 2, padding 0..k/2, odd sizes, channel counts not
    multiples of R or C (and 1), depthwise, batch 2; output stalled at random."""
    name, stall = traffic
    config = _config()
    rng = np.random.default_rng([testbench_seed(), len(name)])
    counter = await start(dut)
    cases = int(os.environ.get("TESSERA_CASES", "8"))
    for index in range(cases):
        kernel = (1, 3, 5, 7)[index % 4]
        c_in = int(rng.choice([1, 2, 3, 5]))
        layer = make_layer(
            rng, kernel=kernel, stride=int(rng.choice([1, 2])), c_in=c_in,
            c_out=int(rng.choice([1, 3, config.cols + 1, 2 * config.cols - 1])),
            size=(int(rng.choice([3, 5, 6, 7, 9])), int(rng.choice([1, 3, 4, 5, 7]))),
            depthwise=index % 5 == 4, batch=2 if index % 6 == 5 else 1)
        await run_layer(dut, config, layer, rng, counter, stall=stall,
                        label=f"{name}/random{index}")


@cocotb.test()
async def test_extreme_values(dut):
    """Zero points -128 and 127, saturating accumulators, M near 2^31, shifts 1 to 62,
    ReLU-style clamps, all -128 inputs and weights over a 7x7 window."""
    config = _config()
    rng = np.random.default_rng(testbench_seed())
    counter = await start(dut)
    for index, zx in enumerate((-128, 127, -128, 127)):
        layer = make_layer(rng, kernel=(3, 5, 1, 7)[index], stride=1 + index % 2,
                           c_in=(3, 2, 5, 1)[index], c_out=config.cols + 1 + index % 2,
                           size=(5, 6), zx=zx, extreme=True)
        await run_layer(dut, config, layer, rng, counter, stall=0.2, label=f"extreme{index}")
    layer = make_layer(rng, kernel=7, stride=1, c_in=2, c_out=config.cols, size=(7, 7),
                       zx=127, extreme=True)
    layer["x"][:] = -128
    layer["w"][:] = -128
    layer["padding"] = (3, 3, 3, 3)
    await run_layer(dut, config, layer, rng, counter, stall=0.2, label="all -128, 7x7")


@cocotb.test()
async def test_throughput(dut):
    """Cycles per layer against the ideal MACs / (R*C), with a ready output. The 3x3,
    16 -> 16 channel, 16x16 layer must reach 85 % (the benchmark's target)."""
    config = _config()
    rng = np.random.default_rng(testbench_seed())
    counter = await start(dut)
    shapes = [("3x3 16->16 16x16", 3, 1, 16, 16, (16, 16)),
              ("3x3 8->8 8x8 stride 2", 3, 2, 8, 8, (8, 8)),
              ("1x1 16->16 8x8", 1, 1, 16, 16, (8, 8)),
              ("7x7 3->8 9x9", 7, 1, 3, 8, (9, 9)),
              ("3x3 depthwise 8 8x8", 3, 1, 8, 8, (8, 8))]
    measurements = []
    for label, kernel, stride, c_in, c_out, size in shapes:
        if c_in * size[0] * size[1] > config.act_depth:
            dut._log.info("throughput: %s skipped, activations exceed act_depth=%d", label,
                          config.act_depth)
            continue
        layer = make_layer(rng, kernel=kernel, stride=stride, c_in=c_in, c_out=c_out,
                           size=size, depthwise="depthwise" in label)
        layer["padding"] = (kernel // 2,) * 4
        measurements += await run_layer(dut, config, layer, rng, counter, label=label)
    _report(measurements)
    for m in measurements:
        dut._log.info("throughput: %-24s %6d cycles, %6d array beats, ideal %8.0f, "
                      "efficiency %.1f %%", m["case"], m["cycles"], m["array_beats"],
                      m["ideal_cycles"], 100 * m["efficiency"])
    big = [m for m in measurements if m["case"] == "3x3 16->16 16x16"]
    if big and not config.pipelined:
        # The lean engine trades rate for logic: its serial requantizer takes up to
        # MAX_CYCLES_PER_LANE a result, and its address generator R idle cycles a group;
        # the layer must take no longer than those add to the array's beats.
        tiles, groups = -(-16 // config.cols), -(-256 // config.rows)
        bound = (big[0]["array_beats"] + tiles * groups * config.rows
                 + tiles * 256 * config.cols * SerialRequantizer.MAX_CYCLES_PER_LANE + 500)
        assert big[0]["cycles"] <= bound, (
            f"seed={testbench_seed()} config={config.name}: 3x3 16->16 16x16 took "
            f"{big[0]['cycles']} cycles, more than the lean engine's bound {bound}")
    elif big:
        # The pipeline adds no bubbles: all but a fixed fill/drain cost is array beats.
        assert big[0]["beat_rate"] >= 0.95, (
            f"seed={testbench_seed()} config={config.name}: 3x3 16->16 16x16 moved "
            f"{big[0]['array_beats']} beats in {big[0]['cycles']} cycles")
        # The benchmark's target, where R and C divide the layer (no padded lanes).
        if 16 % config.cols == 0 and 256 % config.rows == 0:
            assert big[0]["efficiency"] >= 0.85, (
                f"seed={testbench_seed()} config={config.name}: 3x3 16->16 16x16 ran at "
                f"{100 * big[0]['efficiency']:.1f} % of the ideal rate, below 85 %")
