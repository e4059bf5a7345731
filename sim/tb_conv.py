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

from bench.conv_cases import draw_random_layer, make_layer, worst_random_layer
from contract.config import ConvEngineConfig
from contract.streams import ACTIVATIONS_PER_WORD
from hw.addrgen import descriptor_layout
from hw.conv_engine import (
    activation_load_layout,
    param_load_layout,
    weight_load_layout,
)
from hw.postprocess import output_layout
from hw.postprocess_lean import SerialRequantizer
from models.conv import conv2d
from models.requant import requantize
from sim.cocotb_util import clock_and_reset, send_stream, testbench_seed
from sim.packing import pack_struct
from sim.tb_budgets import BUDGET_MARGIN, pass_budget
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
    dut.descriptor.value = pack_struct(descriptor_layout(depthwise=config.depthwise),
                                       p.descriptor)
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
        # A hang is a failure with a message, after a multiple of the cycles the model
        # gives this pass on this configuration, stretched by the stall rate.
        budget = pass_budget(p, config, stall=stall)
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
            "budget": budget,
            "ideal_cycles": ideal, "array_beats": p.beats, "efficiency": ideal / cycles,
            "beat_rate": p.beats / cycles, "depthwise": bool(d.get("depthwise")),
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
        layer = draw_random_layer(rng, index, config.cols)
        await run_layer(dut, config, layer, rng, counter, stall=stall,
                        label=f"{name}/random{index}")


@cocotb.test()
async def test_random_depthwise_layers(dut):
    """Depthwise layers: kernels 1 to 7, strides 1 and 2, padding 0..k/2, channel counts
    that are not multiples of C, z_x at -128 and 127 and between, output stalled at random.
    On a build with the depthwise mode every pass must use it (K over the taps and the
    words of a pixel); on one without, the driver's block-diagonal passes run instead."""
    config = _config()
    rng = np.random.default_rng([testbench_seed(), 11])
    counter = await start(dut)
    cases = int(os.environ.get("TESSERA_CASES", "8"))
    for index in range(cases):
        kernel = index % 7 + 1
        channels = int(rng.choice([1, 2, config.cols + 1, 2 * config.cols + 3, 3, 13]))
        layer = make_layer(rng, kernel=kernel, stride=1 + index % 2, c_in=channels,
                           c_out=channels, size=(int(rng.integers(1, 10)),
                                                 int(rng.integers(1, 10))),
                           depthwise=channels > 1, zx=(-128, 127, None)[index % 3],
                           batch=1 + (index % 4 == 3), extreme=index % 5 == 4)
        measurements = await run_layer(dut, config, layer, rng, counter, stall=0.3,
                                       label=f"depthwise{index}")
        if config.depthwise and channels > 1:
            assert all(m["array_beats"] % (kernel * kernel * -(-config.cols // 4)) == 0
                       and m["depthwise"] for m in measurements), (
                f"seed={testbench_seed()} config={config.name} depthwise{index}: a pass did "
                f"not run in the depthwise mode: {measurements}")


@cocotb.test()
async def test_worst_random_layer(dut):
    """The largest layer the random draws can make, under the stall rate they use: it must
    end well inside its budget (half of it), so no random layer can time out."""
    config = _config()
    rng = np.random.default_rng([testbench_seed(), 7])
    counter = await start(dut)
    stall = 0.35
    layer = worst_random_layer(rng, config.cols)
    for m in await run_layer(dut, config, layer, rng, counter, stall=stall, label="worst"):
        assert 2 * m["cycles"] <= m["budget"], (
            f"seed={testbench_seed()} config={config.name}: the worst random layer's pass "
            f"{m['pass']} took {m['cycles']} cycles, more than half its budget "
            f"{m['budget']} ({BUDGET_MARGIN}x the cycle model, stall {stall})")


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


def throughput_side(act_depth, channels=16, side=16):
    """The side of the square image of the throughput layer (3x3, 16 -> 16 channels): 16,
    or the largest whose activations fit a smaller activation buffer."""
    while side > 3 and channels * side * side > act_depth:
        side -= 1
    return side


@cocotb.test()
async def test_throughput(dut):
    """Cycles per layer against the ideal MACs / (R*C), with a ready output. The 3x3,
    16 -> 16 channel layer (16x16, or as large as the activation buffer holds; 8x8 on a
    lean engine) must reach 85 % (the benchmark's target) on a pipelined engine, and stay
    inside the lean engine's bound on a lean one."""
    config = _config()
    rng = np.random.default_rng(testbench_seed())
    counter = await start(dut)
    # The lean engine's check is a bound, not a rate: a quarter of the image shows it at a
    # quarter of the simulated cycles (its serial requantizer makes every output slow).
    side = throughput_side(config.act_depth, side=16 if config.pipelined else 8)
    big_label = f"3x3 16->16 {side}x{side}"
    shapes = [(big_label, 3, 1, 16, 16, (side, side)),
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
    dw = [m for m in measurements if m["case"] == "3x3 depthwise 8 8x8"]
    if config.depthwise and config.pipelined and dw:
        # The depthwise mode: K = 9 taps x ceil(C / 4) words a pixel group and column
        # tile, every pass in the mode, and a beat a cycle but for the fixed fill and drain.
        words, groups = -(-config.cols // 4), -(-64 // config.rows)
        beats = sum(m["array_beats"] for m in dw)
        assert all(m["depthwise"] for m in dw) and beats == \
            -(-8 // config.cols) * groups * 9 * words, (
                f"seed={testbench_seed()} config={config.name}: depthwise passes {dw}")
        assert beats >= 0.9 * sum(m["cycles"] for m in dw), (
            f"seed={testbench_seed()} config={config.name}: the depthwise layer moved "
            f"{beats} beats in {sum(m['cycles'] for m in dw)} cycles")
    big = [m for m in measurements if m["case"] == big_label]
    assert big, f"seed={testbench_seed()} config={config.name}: {big_label} did not run"
    # Over all of the layer's passes (a buffer-sized layer may split in two).
    cycles = sum(m["cycles"] for m in big)
    beats = sum(m["array_beats"] for m in big)
    efficiency = sum(m["ideal_cycles"] for m in big) / cycles
    pixels = side * side
    if not config.pipelined:
        # The lean engine trades rate for logic: its serial requantizer takes up to
        # MAX_CYCLES_PER_LANE a result, and its address generator R idle cycles a group;
        # the layer must take no longer than those add to the array's beats.
        tiles, groups = -(-16 // config.cols), -(-pixels // config.rows)
        bound = (beats + tiles * groups * config.rows
                 + tiles * pixels * config.cols * SerialRequantizer.MAX_CYCLES_PER_LANE
                 + 500 * len(big))
        assert cycles <= bound, (
            f"seed={testbench_seed()} config={config.name}: {big_label} took {cycles} "
            f"cycles, more than the lean engine's bound {bound}")
    else:
        # The pipeline adds no bubbles: all but a fixed fill/drain cost is array beats.
        assert beats >= 0.95 * cycles, (
            f"seed={testbench_seed()} config={config.name}: {big_label} moved {beats} "
            f"beats in {cycles} cycles")
        # The benchmark's target, where R and C divide the layer (no padded lanes).
        if 16 % config.cols == 0 and pixels % config.rows == 0:
            assert efficiency >= 0.85, (
                f"seed={testbench_seed()} config={config.name}: {big_label} ran at "
                f"{100 * efficiency:.1f} % of the ideal rate, below 85 %")
