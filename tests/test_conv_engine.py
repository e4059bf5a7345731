"""The convolution engine: lowering and address order (fast), RTL on Verilator (slow)."""

from dataclasses import replace

import numpy as np
import pytest
from amaranth.sim import Simulator

from contract.config import ArrayConfig, ConvEngineConfig
from contract.descriptor import DEPTHWISE_FIELDS
from contract.streams import ACTIVATIONS_PER_WORD
from hw.addrgen import AddressGenerator, address_width
from hw.addrgen_lean import LeanAddressGenerator
from hw.conv_engine import ConvEngine
from models.conv import conv2d, conv_output_size
from models.requant import requantize
from sim.streams import run_bounded, stream_put
from sw_driver.conv_lowering import (
    assemble_output,
    engine_reference,
    fold_zero_point,
    lower_conv2d,
    make_descriptor,
)
from twin.runner import run_testbench

SMALL = ConvEngineConfig(array=ArrayConfig(rows=4, cols=4), act_depth=1024, weight_depth=512,
                         max_col_tiles=8)
#: The RTL configuration: big enough for the 3x3, 16 -> 16 channel, 16x16 benchmark layer.
RTL = ConvEngineConfig(array=ArrayConfig(rows=4, cols=4), act_depth=4096, weight_depth=1024,
                       max_col_tiles=8)


def random_layer(rng, *, kernel=None, stride=None, depthwise=False, batch=1):
    """A random layer inside SMALL's limits (odd sizes, channels not multiples of 4)."""
    k = kernel or int(rng.choice([1, 2, 3, 5, 7]))
    s = stride or int(rng.choice([1, 2]))
    pads = tuple(int(rng.integers(0, k // 2 + 1)) for _ in range(4))
    c_in = int(rng.integers(1, 7))
    c_out = c_in if depthwise else int(rng.integers(1, 11))
    # Any size with an output (H + top + bottom >= k), odd ones included.
    h = int(rng.integers(max(1, k - pads[0] - pads[2]), 10))
    w = int(rng.integers(max(1, k - pads[1] - pads[3]), 10))
    x = rng.integers(-128, 128, (batch, c_in, h, w), dtype=np.int8)
    wt = rng.integers(-128, 128, (c_out, 1 if depthwise else c_in, k, k), dtype=np.int8)
    return dict(x=x, w=wt, stride=s, padding=pads, groups=c_in if depthwise else 1)


def golden(layer, bias, multiplier, shift, zx, zy, lo=-128, hi=127):
    acc = conv2d(layer["x"], layer["w"], bias, x_zero_point=zx, stride=layer["stride"],
                 padding=layer["padding"], groups=layer["groups"])
    return requantize(acc, multiplier, shift, zy, lo, hi)


def compare(got, want, seed, label):
    if not np.array_equal(got, want):
        index = tuple(int(i) for i in np.argwhere(got != want)[0])
        raise AssertionError(f"seed={seed} {label}: first difference at {list(index)}: "
                             f"engine {got[index]} != golden {want[index]}")


# --- Lowering: zero point folding, padding, stride, depthwise ---------------------------

@pytest.mark.parametrize("zx", [-128, 127, 0, 37])
def test_lowering_matches_golden(zx, rng, seed):
    for trial in range(12):
        layer = random_layer(rng, depthwise=trial % 4 == 3, batch=1 + trial % 2)
        o = layer["w"].shape[0]
        bias = rng.integers(-2**20, 2**20, o).astype(np.int32)
        multiplier = rng.integers(2**30, 2**31, o)
        shift = rng.integers(8, 40, o)
        zy = int(rng.integers(-128, 128))
        want = golden(layer, bias, multiplier, shift, zx, zy)
        passes = lower_conv2d(layer["x"], layer["w"], bias, multiplier, shift, x_zero_point=zx,
                              y_zero_point=zy, stride=layer["stride"],
                              padding=layer["padding"], groups=layer["groups"], config=RTL)
        got = assemble_output(passes, [engine_reference(p) for p in passes], o)
        compare(got, want, seed, f"zx={zx} trial={trial} x={layer['x'].shape} "
                f"w={layer['w'].shape} stride={layer['stride']} pads={layer['padding']}")


def test_fold_zero_point_wraps_exactly():
    # bias near the int32 limit and z_x = -128: the folded bias wraps, the result does not.
    w = np.full((1, 1, 1, 1), 127, np.int8)
    bias = np.array([2**31 - 100], np.int32)
    folded = fold_zero_point(w, bias, -128)
    assert int(folded[0]) == 2**31 - 100 + 128 * 127 - 2**32
    x = np.full((1, 1, 1, 1), -128, np.int8)
    acc = conv2d(x, w, bias, x_zero_point=-128)
    hw_acc = (int(folded[0]) + (-128) * 127 + 2**31) % 2**32 - 2**31
    assert hw_acc == int(acc[0, 0, 0, 0]) == 2**31 - 100


def test_extreme_requantization_and_clamp(rng, seed):
    layer = random_layer(rng, kernel=3, stride=1)
    o = layer["w"].shape[0]
    bias = rng.integers(-2**24, 2**24, o).astype(np.int32)
    multiplier = np.where(np.arange(o) % 2, 2**31 - 1, 2**30)
    shift = np.where(np.arange(o) % 3 == 0, 1, 45)
    for zx, zy, lo, hi in ((-128, 127, -128, 127), (127, -128, -128, 127), (5, -3, -3, 60)):
        want = golden(layer, bias, multiplier, shift, zx, zy, lo, hi)
        passes = lower_conv2d(layer["x"], layer["w"], bias, multiplier, shift, x_zero_point=zx,
                              y_zero_point=zy, lo=lo, hi=hi, stride=1,
                              padding=layer["padding"], config=RTL)
        got = assemble_output(passes, [engine_reference(p) for p in passes], o)
        compare(got, want, seed, f"extremes zx={zx} zy={zy} lo={lo} hi={hi}")


@pytest.mark.parametrize("change, message", [
    (dict(w_shape=(4, 2, 9, 9)), r"'bad': kernel 9x9 exceeds the conv engine's maximum of 7x7"),
    (dict(dilation=2), r"'bad': dilation \(2, 2\) is not supported"),
    (dict(groups=2, w_shape=(4, 1, 3, 3)), r"'bad': groups=2 is not supported"),
    (dict(stride=3), r"'bad': stride \(3, 3\) is not supported"),
    (dict(padding=2), r"'bad': padding \(2, 2, 2, 2\) exceeds .* half the kernel \(1, 1\)"),
    # Larger layers are split into row bands and output-channel chunks (see
    # tests/test_conv_tiling.py); refused is what no split fits: one band's halo rows, or
    # one column tile's weights.
    (dict(x_shape=(1, 2, 8, 300)), r"activations 2x2x300 = 1200 exceed the activation "
                                   r"buffer of 1024"),
    (dict(x_shape=(1, 11, 8, 8), w_shape=(4, 11, 7, 7), padding=3),
     r"1 column tiles x K=539 = 539 words, more than the weight buffer's 512"),
])
def test_lowering_refuses_what_the_engine_cannot_run(change, message):
    x = np.zeros(change.get("x_shape", (1, 2, 8, 8)), np.int8)
    w = np.zeros(change.get("w_shape", (4, 2, 3, 3)), np.int8)
    with pytest.raises(ValueError, match=message):
        lower_conv2d(x, w, None, 2**30, 10, x_zero_point=0, y_zero_point=0,
                     stride=change.get("stride", 1), padding=change.get("padding", 1),
                     dilation=change.get("dilation", 1), groups=change.get("groups", 1),
                     config=SMALL, name="bad")


def test_config_checks():
    with pytest.raises(ValueError, match="act_depth must be a positive integer, not 0"):
        ConvEngineConfig(act_depth=0)
    with pytest.raises(ValueError, match="array.acc_width must be 32, not 24"):
        ConvEngineConfig(array=ArrayConfig(acc_width=24))
    with pytest.raises(TypeError, match="config must be a ConvEngineConfig, not 3"):
        AddressGenerator(3)
    with pytest.raises(TypeError, match="config must be a ConvEngineConfig, not 'x'"):
        ConvEngine("x")


# --- Address generator order (Amaranth simulator) ---------------------------------------

def expected_addresses(desc, config, out_size):
    """Beats by the direct formula (not the hardware's incremental one)."""
    rows, mask = config.rows, (1 << address_width(config.act_depth)) - 1
    c_in, h, w = desc["in_channels"], desc["in_height"], desc["in_width"]
    kh, kw, s = desc["kernel_h"], desc["kernel_w"], desc["stride"]
    oh, ow = out_size
    k_total = c_in * kh * kw
    beats = []
    for t in range(desc["col_tiles"]):
        for g in range(desc["pixel_groups"]):
            for k in range(k_total):
                u, rest = divmod(k, kw * c_in)
                v, c = divmod(rest, c_in)
                addrs, inside = [], []
                for r in range(rows):
                    i, j = divmod(g * rows + r, ow)
                    iy, ix = i * s + u - desc["pad_top"], j * s + v - desc["pad_left"]
                    ok = 0 <= iy < h and 0 <= ix < w
                    inside.append(ok)
                    addrs.append(((iy * w + ix) * c_in + c) & mask if ok else None)
                beats.append((addrs, inside, t * k_total + k, k == k_total - 1))
    return beats


def fields_of(desc, config):
    """``desc`` less the fields a build does not have (``depthwise``, without the mode)."""
    return {name: value for name, value in desc.items()
            if config.depthwise or name not in DEPTHWISE_FIELDS}


def run_address_generator(config, desc, count, rng, generator=AddressGenerator):
    dut = generator(config)
    got = []

    async def bench(ctx):
        ctx.set(dut.descriptor, fields_of(desc, config))
        ctx.set(dut.start, 1)
        await ctx.tick()
        ctx.set(dut.start, 0)
        while len(got) < count:
            ready = rng.random() < 0.7
            ctx.set(dut.beats.ready, ready)
            await ctx.delay(1e-9)
            if ready and ctx.get(dut.beats.valid):
                p = ctx.get(dut.beats.payload)
                got.append(([int(a) for a in p.addr],
                            [bool((int(p.inside) >> r) & 1) for r in range(config.rows)],
                            int(p.w_addr), bool(p.last)))
            await ctx.tick()
        ctx.set(dut.beats.ready, 1)
        for _ in range(4):
            await ctx.tick()
        assert not ctx.get(dut.busy) and not ctx.get(dut.beats.valid), "extra beats"

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    return got


@pytest.mark.parametrize("kernel, stride, pads, c_in, size, c_out", [
    (3, 1, (1, 1, 1, 1), 2, (5, 6), 5),   # padding all round, two column tiles
    (7, 2, (3, 2, 0, 3), 1, (9, 7), 3),   # large kernel, stride 2, asymmetric pads
    (1, 2, (0, 0, 0, 0), 3, (5, 5), 4),   # 1x1, stride 2: OW = 3 < R wraps in a group
    (2, 1, (1, 0, 1, 1), 2, (3, 2), 1),   # even kernel, OW = 3, one output channel
    # Every loop of length 1 but the tiles (each beat ends a group; one group): the
    # registered `last` flags of single-iteration loops.
    (1, 1, (0, 0, 0, 0), 1, (2, 2), 9),
    # Several groups, one beat each, and a pixel step that wraps rows every other group.
    (1, 1, (0, 0, 0, 0), 1, (3, 6), 4),
])
@pytest.mark.parametrize("generator", [AddressGenerator, LeanAddressGenerator],
                         ids=["pipelined", "lean"])
def test_address_generator_order(kernel, stride, pads, c_in, size, c_out, generator, rng):
    top, left, bottom, right = pads
    oh = conv_output_size(size[0], kernel, stride, top, bottom)
    ow = conv_output_size(size[1], kernel, stride, left, right)
    desc = make_descriptor(config=SMALL, in_channels=c_in, in_size=size,
                           kernel=(kernel, kernel), stride=stride, pad_top=top, pad_left=left,
                           out_size=(oh, ow), col_tiles=-(-c_out // SMALL.cols),
                           x_zero_point=0, y_zero_point=0, lo=-128, hi=127)
    want = expected_addresses(desc, SMALL, (oh, ow))
    got = run_address_generator(SMALL, desc, len(want), rng, generator)
    for index, ((w_addrs, w_in, w_w, w_last), (g_addrs, g_in, g_w, g_last)) in \
            enumerate(zip(want, got, strict=True)):
        assert (w_in, w_w, w_last) == (g_in, g_w, g_last), \
            f"beat {index}: want inside/w_addr/last {w_in, w_w, w_last}, got {g_in, g_w, g_last}"
        for r, (a, b) in enumerate(zip(w_addrs, g_addrs, strict=True)):
            assert a is None or a == b, f"beat {index} row {r}: address {b}, want {a}"


# --- RTL on Verilator ---------------------------------------------------------------------

RTL_CONFIGS = [
    RTL,
    # Non-square with an odd R: R % OW and R // OW take other values, rows != cols.
    ConvEngineConfig(array=ArrayConfig(rows=3, cols=5), act_depth=4096, weight_depth=1024,
                     max_col_tiles=8),
    # The lean engine (the iCEBreaker's): its address generator, the serial requantizer
    # and no skid buffers.
    ConvEngineConfig(array=ArrayConfig(rows=3, cols=5), act_depth=4096, weight_depth=1024,
                     max_col_tiles=8, pipelined=False, residual_add=False),
    # The depthwise mode, six columns (two activation words a pixel, the second half
    # full): regular layers with the mode off, depthwise ones with it on.
    ConvEngineConfig(array=ArrayConfig(rows=3, cols=6), act_depth=4096, weight_depth=1024,
                     max_col_tiles=8, depthwise=True),
    # The double-pumped array (hw/double_pumped.py): its processing elements on a second
    # clock at twice the engine's, two rows to a multiplier.
    ConvEngineConfig(array=ArrayConfig(rows=4, cols=3, pump=2), act_depth=4096,
                     weight_depth=1024, max_col_tiles=8),
]


@pytest.mark.slow
@pytest.mark.parametrize("config", RTL_CONFIGS, ids=lambda c: c.name)
def test_conv_engine_against_golden(config, seed):
    print(f"seed={seed} config={config.as_dict()}")
    # Under pytest, the cocotb runner raises when any cocotb test fails.
    run_testbench("sim.tb_conv", config, seed=seed, name=f"pytest-{seed}")


# --- Loading during the run: the engine reads only what is written ------------------------

STREAMING = ConvEngineConfig(array=ArrayConfig(rows=3, cols=2), act_depth=256,
                             weight_depth=128, max_col_tiles=4)


def run_streaming_pass(config, p, rng, gap):
    """Run pass ``p`` with ``load_during_run``: the parameters and the first column tile's
    weights before ``start``, then the activations and the other tiles' weights during the
    run, each word after 0..``gap`` idle cycles (weight rows 0..3 * ``gap``), and the output
    under random backpressure.

    The activation buffer first holds the bitwise complement of the pass's activations, so
    a word read before its write lands cannot match by chance. Returns the output beats
    and the cycles from ``start`` to the last beat."""
    per_word = ACTIVATIONS_PER_WORD
    acts = np.zeros(-(-p.activations.size // per_word) * per_word, np.int8)
    acts[:p.activations.size] = p.activations
    words = [[int(b) for b in acts[i:i + per_word]] for i in range(0, acts.size, per_word)]
    k_rows = len(p.weights) // p.bias.shape[0]
    dut = ConvEngine(config)
    beats, timing = [], {}

    async def put_all(ctx, port, payloads, *, idle):
        for index, payload in enumerate(payloads):
            for _ in range(int(rng.integers(0, idle + 1))):
                await ctx.tick()
            await stream_put(ctx, port, {**payload, "last": index == len(payloads) - 1})

    async def setup_and_acts(ctx):
        await put_all(ctx, dut.act_in, [{"x": [~b for b in w]} for w in words], idle=0)
        await put_all(ctx, dut.param_in, [
            {"word": {name: [int(v) for v in getattr(p, name)[t]]
                      for name in ("bias", "multiplier", "shift")}}
            for t in range(p.bias.shape[0])], idle=0)
        for row in p.weights[:k_rows]:  # no `last`: the other tiles follow during the run
            await stream_put(ctx, dut.weight_in, {"w": [int(v) for v in row], "last": 0})
        ctx.set(dut.descriptor, fields_of(p.descriptor, config))
        ctx.set(dut.load_during_run, 1)
        ctx.set(dut.start, 1)
        await ctx.tick()
        ctx.set(dut.start, 0)
        timing["start"] = timing["now"]
        await put_all(ctx, dut.act_in, [{"x": w} for w in words], idle=gap)

    async def late_weights(ctx):
        await ctx.tick().until(dut.busy)
        # Slower than the activations, so the second column tile waits for its rows.
        await put_all(ctx, dut.weight_in,
                      [{"w": [int(v) for v in row]} for row in p.weights[k_rows:]],
                      idle=3 * gap)

    async def clock(ctx):
        timing["now"] = 0
        async for _ in ctx.tick():
            timing["now"] += 1

    async def collect(ctx):
        await ctx.tick().until(dut.busy)
        while len(beats) < p.output_beats:
            ready = rng.random() < 0.8
            ctx.set(dut.output.ready, ready)
            await ctx.delay(1e-9)
            if ready and ctx.get(dut.output.valid):
                out = ctx.get(dut.output.payload)
                beats.append([int(y) for y in out.y])
                if out.last:
                    timing["end"] = timing["now"]
            await ctx.tick()
        ctx.set(dut.output.ready, 0)

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_process(clock)
    sim.add_testbench(setup_and_acts, background=True)
    sim.add_testbench(late_weights, background=True)
    sim.add_testbench(collect)
    run_bounded(sim, 1e-8 * 40 * (p.beats + (3 * gap + 1) * (len(words) + len(p.weights)) + 200))
    assert len(beats) == p.output_beats, \
        f"{len(beats)} of {p.output_beats} output beats before the time limit (a hang)"
    return np.array(beats, dtype=np.int8), timing["end"] - timing["start"]


@pytest.mark.parametrize("gap", [0, 3, 9])
def test_streaming_loads_never_read_ahead(gap, rng, seed):
    # Loading is slower than computing at gap 3 and 9 (one word per 1 to 10 cycles against
    # a 3x3 window over 3 channels), so the array keeps catching up with the loaders and
    # every beat's `written` gate decides when it may go: opened a word early (`<=` in
    # either of the generator's count comparisons) it reads a complemented activation
    # word or a weight row not yet written, and this fails.
    x = rng.integers(-128, 128, (1, 3, 5, 6), dtype=np.int8)
    w = rng.integers(-128, 128, (5, 3, 3, 3), dtype=np.int8)
    bias = rng.integers(-2**12, 2**12, 5).astype(np.int32)
    multiplier = rng.integers(2**30, 2**31, 5)
    shift = np.full(5, 40)
    zx, zy = int(rng.integers(-128, 128)), int(rng.integers(-128, 128))
    layer = dict(x=x, w=w, stride=1, padding=(1, 0, 1, 1), groups=1)
    passes = lower_conv2d(x, w, bias, multiplier, shift, x_zero_point=zx, y_zero_point=zy,
                          stride=1, padding=(1, 0, 1, 1), config=STREAMING)
    assert len(passes) == 1 and passes[0].bias.shape[0] == 3
    got, cycles = run_streaming_pass(STREAMING, passes[0], rng, gap)
    print(f"seed={seed} gap={gap}: {cycles} cycles start -> last beat")
    compare(got, engine_reference(passes[0]), seed, f"gap={gap} beats vs engine_reference")
    compare(assemble_output(passes, [got], 5), golden(layer, bias, multiplier, shift, zx, zy),
            seed, f"gap={gap} vs golden")


# --- The depthwise mode (Amaranth simulator): every column its own channel ---------------

#: Six columns: two activation words a pixel, the second half full, so columns 4 and 5 take
#: bytes 0 and 1 of the second word (both the byte-0 ``a`` path and the ``a_rest`` chain);
#: three rows: groups wrap output rows at other places than with four.
DEPTHWISE = ConvEngineConfig(array=ArrayConfig(rows=3, cols=6), act_depth=1024,
                             weight_depth=128, max_col_tiles=4, depthwise=True)


@pytest.mark.parametrize("pipelined", [True, False], ids=["pipelined", "lean"])
def test_depthwise_passes_on_the_engine(pipelined, rng, seed):
    # Loading during the run with idle gaps, so a depthwise beat's `written` gate (word
    # addresses) decides when it goes, and the later column tiles' weights arriving during
    # the run; each tile reads its own activations; the channels (not a multiple of 6)
    # leave the last tile's lanes partly unused; z_x at both ends of int8 fills the
    # padding.
    config = replace(DEPTHWISE, pipelined=pipelined, residual_add=pipelined)
    cases = [(3, 1, (1, 1, 1, 1), 8, (5, 6), -128, 2), (7, 2, (3, 2, 1, 3), 5, (7, 6), 127, 0),
             (1, 2, (0, 0, 0, 0), 13, (5, 4), 127, 1), (5, 1, (2, 0, 1, 2), 3, (4, 5), -128, 3)]
    for kernel, stride, pads, channels, size, zx, gap in cases:
        x = rng.integers(-128, 128, (1, channels) + size, dtype=np.int8)
        w = rng.integers(-128, 128, (channels, 1, kernel, kernel), dtype=np.int8)
        bias = rng.integers(-2**12, 2**12, channels).astype(np.int32)
        multiplier = rng.integers(2**30, 2**31, channels)
        shift = rng.integers(12, 24, channels)
        zy = int(rng.integers(-128, 128))
        layer = dict(x=x, w=w, stride=stride, padding=pads, groups=channels)
        passes = lower_conv2d(x, w, bias, multiplier, shift, x_zero_point=zx, y_zero_point=zy,
                              stride=stride, padding=pads, groups=channels, config=config)
        label = (f"seed={seed} pipelined={pipelined} k={kernel} s={stride} pads={pads} "
                 f"c={channels} size={size} zx={zx}")
        # One pass, a column tile per 6 channels; K = taps x 2 words, not taps x 6
        # channels: a third of the beats of the block-diagonal lowering.
        (p,) = passes
        tiles = -(-channels // 6)
        assert (p.descriptor["depthwise"], p.descriptor["col_tiles"]) == (1, tiles), label
        assert p.beats == tiles * p.descriptor["pixel_groups"] * kernel * kernel * 2, label
        results = []
        for p in passes:
            got, _ = run_streaming_pass(config, p, rng, gap)
            compare(got, engine_reference(p), seed, f"{label} {p.name} vs engine_reference")
            results.append(got)
        compare(assemble_output(passes, results, channels),
                golden(layer, bias, multiplier, shift, zx, zy), seed, f"{label} vs golden")


def test_depthwise_lowering_without_the_mode_is_block_diagonal(rng):
    # The driver keeps the old lowering for a device without the mode: the same answer.
    x = rng.integers(-128, 128, (1, 7, 5, 5), dtype=np.int8)
    w = rng.integers(-128, 128, (7, 1, 3, 3), dtype=np.int8)
    layer = dict(x=x, w=w, stride=1, padding=1, groups=7)
    bias, multiplier, shift = np.zeros(7, np.int32), np.full(7, 2**30), np.full(7, 14)
    outputs = []
    for config in (DEPTHWISE, replace(DEPTHWISE, depthwise=False)):
        passes = lower_conv2d(x, w, bias, multiplier, shift, x_zero_point=-5, y_zero_point=1,
                              padding=1, groups=7, config=config)
        # With the mode one pass of two column tiles (K = 9 taps x 2 words); without it
        # two passes of a tile each (K = 9 taps x 6 channels, then x 1).
        assert [p.descriptor["depthwise"] for p in passes] == (
            [1] if config.depthwise else [0, 0])
        assert [p.beats for p in passes] == (
            [2 * 9 * 9 * 2] if config.depthwise else [9 * 9 * 6, 9 * 9 * 1])
        outputs.append(assemble_output(passes, [engine_reference(p) for p in passes], 7))
    want = golden(layer, bias, multiplier, shift, -5, 1)
    assert np.array_equal(outputs[0], want) and np.array_equal(outputs[1], want)
