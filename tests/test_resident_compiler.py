"""The resident compiler and its software player: zoo models and seeded random layer graphs
compiled and played over the golden device (``tests/golden_device.py``), bit-exact with
the CPU provider layer by layer; the player's pass streams equal layer-at-a-time's but for
padding; the arena reuses dead blocks; what does not fit is a named error. Run with ``-s``
for the image figures (``docs/resident.md``)."""

from dataclasses import replace

import numpy as np
import pytest
from golden_device import GoldenDevice

from contract.config import ArrayConfig, ConvEngineConfig
from contract.config_file import PRESETS
from contract.resident import parse_header
from models.eltwise import add_multipliers
from models.zoo import DIGITS_QDQ, random_models
from sw_driver import InferenceSession
from sw_driver import graph as g
from sw_driver.errors import ResidentFitError
from sw_driver.providers.cpu import CPUProvider
from sw_driver.providers.device import DeviceProvider
from sw_driver.resident import PlayStats, compile_layers, compile_model, device_segments, play
from sw_driver.resident.segments import compress, expand
from sw_driver.shapes import infer_shapes
from sw_driver.transport.base import Transport

DEFAULT = PRESETS["default"]
SMALL = ConvEngineConfig(array=ArrayConfig(rows=4, cols=4), act_depth=1024, weight_depth=512,
                         max_col_tiles=4)
#: Memories that hold every zoo model (ResNet-8 needs 35,440 data words, docs/resident.md).
DATA_WORDS, PROGRAM_WORDS = 65536, 4096


def golden_tensors(graph, x):
    """Every tensor of ``graph`` on input ``x``, by the CPU provider (the golden models)."""
    cpu = CPUProvider()
    tensors = {graph.inputs[0].name: x}
    for layer in graph.layers:
        tensors[layer.output] = np.asarray(cpu.run(layer, [tensors[n] for n in layer.inputs]))
    return tensors


def check_outputs(image, got, tensors, what):
    for port in image.outputs:
        want = tensors[port.name]
        diff = np.flatnonzero(got[port.name] != want)
        assert not diff.size, (f"{what}: output {port.name!r} differs at flat index "
                               f"{diff[0]}: resident {got[port.name].flat[diff[0]]}, golden "
                               f"{want.flat[diff[0]]} ({diff.size} elements differ)")


@pytest.mark.parametrize("name", ["digits", *random_models.MODELS])
def test_zoo_models_play_bit_exact(zoo, name, rng, seed):
    graph = InferenceSession(zoo[name]).graph
    x = rng.random((2, *graph.inputs[0].shape[1:]), dtype=np.float32)
    tensors = golden_tensors(graph, x)
    segments = device_segments(graph)
    assert segments
    for index, segment in enumerate(segments):
        image = compile_model(graph, DEFAULT, segment=index, data_words=DATA_WORDS,
                              program_words=PROGRAM_WORDS)
        assert image.layers == [layer.name for layer in segment]
        stats = PlayStats()
        got = play(image, GoldenDevice(DEFAULT), {p.name: tensors[p.name]
                                                  for p in image.inputs}, stats=stats)
        check_outputs(image, got, tensors, f"{name} segment {index} seed={seed}")
        assert stats.iterations == 2 and stats.passes == 2 * len(image.passes)
        figures = image.summary()
        print(f"{name} segment {index} {image.layers}: {figures}; per inference "
              f"{stats.per_inference()}")
        assert figures["link_bytes_resident"] < figures["link_bytes_layer_at_a_time"] / 5


def test_resnet8_mean_is_one_pass_and_passes_write_what_changed(zoo):
    """ResNet-8's mean is one pass an image (its channel groups on the array's rows), a
    32x32 layer whose input fills the buffer one band, and a conv after one of the same
    shape writes only the registers whose values differ; the program's first pass writes
    all of its own (the zoo test above checks the results bit-exact)."""
    graph = InferenceSession(zoo["resnet8"]).graph
    # Without the player's add: a residual block's second conv writes the ADD_* registers.
    image = compile_model(graph, replace(DEFAULT, resident_add=False), data_words=DATA_WORDS,
                          program_words=PROGRAM_WORDS)
    count = {name: sum(p.layer == name for p in image.passes)
             for name in ("gap", "b1_conv1", "b2_conv1")}
    assert count == {"gap": 1, "b1_conv1": 1, "b2_conv1": 1}
    first, conv1, conv2 = (next(p for p in image.passes if p.layer == name)
                           for name in ("stem", "b1_conv1", "b1_conv2"))
    # A pass's registers: 34, and the depthwise mode's CONV_DEPTHWISE and CONV_DW_TILE_DADDR.
    full = 34 + 2 * DEFAULT.depthwise
    assert first.csr_writes == first.host_csr_writes == full
    assert conv1.host_csr_writes == conv2.host_csr_writes == full
    assert 2 <= conv2.csr_writes < conv1.csr_writes < full
    # The kept writes are in the record: its header counts them.
    assert parse_header(int(image.program[conv2.record]))[1]["csr"] == conv2.csr_writes
    assert conv2.expected_cycles < conv1.expected_cycles


class Recording(Transport):
    """Records every host-to-device transfer (one per pass) of the transport it wraps."""

    def __init__(self, inner):
        self.inner, self.h2c = inner, []

    def csr_read(self, offset):
        return self.inner.csr_read(offset)

    def csr_write(self, offset, value):
        self.inner.csr_write(offset, value)

    def dma_write(self, data):
        self.h2c.append(bytes(data))
        self.inner.dma_write(data)

    def dma_read(self, nbytes, *, deadline=None):
        return self.inner.dma_read(nbytes, deadline=deadline)

    def abort_dma(self):
        self.inner.abort_dma()


def test_digits_streams_equal_layer_at_a_time(rng):
    """Pass for pass, the player sends what the session's device provider sends layer at a
    time, byte for byte except the padding the compiler marks don't-care."""
    session_device = Recording(GoldenDevice(DEFAULT))
    session = InferenceSession(str(DIGITS_QDQ),
                               providers=[DeviceProvider(session_device, where="golden")])
    x = rng.random((1, 1, 8, 8), dtype=np.float32)
    session.run(None, {"input": x})
    tensors = golden_tensors(session.graph, x)
    played = []
    for index in range(len(device_segments(session.graph))):
        image = compile_model(session.graph, DEFAULT, segment=index, data_words=DATA_WORDS,
                              program_words=PROGRAM_WORDS)
        device = Recording(GoldenDevice(DEFAULT))
        play(image, device, {p.name: tensors[p.name] for p in image.inputs})
        played.extend(zip(device.h2c, image.dont_care, strict=True))
    # conv1 with its pool, conv2, the mean, fc: all in one segment. Layer at a time the mean
    # is a pass per 8 channels with the batch on the array's rows; resident, one pass whose
    # rows are the image's groups of channels (its results are checked bit-exact by the
    # zoo tests below), so only the other passes are compared byte for byte.
    assert len(device_segments(session.graph)) == 1
    conv2 = next(layer for layer in session.graph.layers if layer.name == "conv2")
    gap_passes = -(-conv2.weight.shape[0] // DEFAULT.cols)
    assert len(session_device.h2c) == 3 + gap_passes
    assert len(played) == 4
    theirs_kept = [*session_device.h2c[:2], session_device.h2c[-1]]
    for number, ((ours, dont_care), theirs) in enumerate(zip([*played[:2], played[-1]],
                                                             theirs_kept, strict=True)):
        assert len(ours) == len(theirs), f"pass {number}: {len(ours)} vs {len(theirs)} bytes"
        a, b = np.frombuffer(ours, np.uint8), np.frombuffer(theirs, np.uint8)
        differ = np.flatnonzero((a != b) & ~dont_care)
        assert not differ.size, f"pass {number}: byte {differ[0]} differs"


# ------------------------------------------------------------ random layer graphs

def requant(rng, channels):
    return dict(multiplier=rng.integers(2**30, 2**31, channels),
                shift=rng.integers(9, 14, channels), y_zero_point=int(rng.integers(-20, 20)),
                bias=rng.integers(-500, 500, channels).astype(np.int32),
                x_zero_point=int(rng.integers(-10, 10)))


def conv(rng, name, src, dst, c_in, c_out, k=3, stride=1, groups=1, relu=False):
    pad = k // 2
    weight = rng.integers(-60, 60, (c_out, c_in // groups, k, k)).astype(np.int8)
    return g.Conv(name, (src,), dst, weight=weight, stride=(stride, stride),
                  padding=(pad,) * 4, groups=groups, lo=0 if relu else -128,
                  **requant(rng, c_out))


def add(rng, name, a, b, dst):
    scales = rng.uniform(0.02, 0.05, 3)
    add_multipliers(*scales)
    return g.Add(name, (a, b), dst, a_scale=scales[0], b_scale=scales[1], y_scale=scales[2],
                 a_zero_point=int(rng.integers(-5, 5)), b_zero_point=int(rng.integers(-5, 5)),
                 y_zero_point=int(rng.integers(-5, 5)))


def random_graph(rng):
    """A random residual network: stem, a residual block (two convs and an Add, the stem
    kept alive for it), an unfused 2x2 MaxPool after the Add, a conv fused with its pool or
    a depthwise conv, a strided 1x1 conv, Flatten and Dense; odd channel counts included
    (so tensors get padded) and a second output in the middle."""
    c0 = int(rng.choice([1, 3, 4, 6]))
    c1 = int(rng.choice([4, 6, 8, 12]))
    c2 = int(rng.choice([5, 8, 16]))
    h, w = 2 * int(rng.integers(3, 7)), 2 * int(rng.integers(3, 7))
    layers = [conv(rng, "stem", "x", "t0", c0, c1, relu=True),
              conv(rng, "b_conv1", "t0", "t1", c1, c1, relu=True),
              conv(rng, "b_conv2", "t1", "t2", c1, c1),
              # Either side: the player's add takes the conv's result as its `a`.
              add(rng, "b_add", *(("t2", "t0") if rng.random() < 0.5 else ("t0", "t2")),
                  "t3"),
              g.MaxPool("pool", ("t3",), "t4", kernel=(2, 2), stride=(2, 2))]
    if rng.random() < 0.5:
        layers += [conv(rng, "dw", "t4", "t5", c1, c1, groups=c1)]
    else:
        layers += [conv(rng, "c5", "t4", "t5a", c1, c1),
                   g.MaxPool("pool5", ("t5a",), "t5b", kernel=(2, 2), stride=(2, 2)),
                   conv(rng, "c5b", "t5b", "t5", c1, c1, k=1)]
    layers += [conv(rng, "proj", "t5", "t6", c1, c2, k=1, stride=2),
               g.Flatten("flat", ("t6",), "t7"),
               g.Dense("fc", ("t7",), "y", weight=np.zeros((10, 1), np.int8),
                        **requant(rng, 10))]
    graph = g.Graph(layers, [g.TensorInfo("x", [1, c0, h, w])], [g.TensorInfo("y", [1, 10])])
    shapes = infer_shapes(graph, 1)
    layers[-1].weight = rng.integers(-60, 60, (10, shapes["t7"][1])).astype(np.int8)
    return graph, shapes


@pytest.mark.parametrize("config", [DEFAULT, SMALL], ids=["8x8", "4x4-small-buffers"])
@pytest.mark.parametrize("case", range(4))
def test_random_graphs_play_bit_exact(config, case, seed):
    rng = np.random.default_rng([seed, case])
    graph, shapes = random_graph(rng)
    what = f"seed={seed} case={case} config={config.name} shapes={shapes}"
    x = rng.integers(-128, 128, (3, *shapes["x"][1:])).astype(np.int8)
    cpu = CPUProvider()
    tensors = {"x": x}
    for layer in graph.layers:
        tensors[layer.output] = np.asarray(cpu.run(layer, [tensors[n] for n in layer.inputs]))
    image = compile_layers(graph.layers, shapes, config, outputs=["t3", "y"],
                           data_words=DATA_WORDS, program_words=PROGRAM_WORDS)
    got = play(image, GoldenDevice(config), {"x": x})
    check_outputs(image, got, tensors, what)
    # The input goes straight into its pass (a host segment) when one pass reads it in
    # order; otherwise a RECV copies it into the data memory first.
    ops = [parse_header(int(w))[0] for w in image.program[:1]]
    assert ops == (["PASS"] if image.inputs[0].address is None else ["RECV"]), what


def chain(rng, count, channels=8, size=8):
    layers = [conv(rng, f"c{i}", f"t{i}", f"t{i + 1}", channels, channels)
              for i in range(count)]
    shapes = {f"t{i}": (1, channels, size, size) for i in range(count + 1)}
    return layers, shapes


def test_arena_reuses_dead_blocks(rng, seed):
    """Six convolutions in a chain need two blocks at a time, not seven (the input, which
    goes straight from the host into the first pass, none)."""
    layers, shapes = chain(rng, 6)
    image = compile_layers(layers, shapes, DEFAULT, outputs=["t6"], data_words=DATA_WORDS,
                           program_words=PROGRAM_WORDS)
    block = 8 * 8 * 8 // 4
    assert image.arena_words == 2 * block, image.arena
    assert image.arena["t0"][0] is None, image.arena
    addresses = {address for address, _, _ in image.arena.values()} - {None}
    assert len(addresses) == 2
    x = rng.integers(-128, 128, (1, 8, 8, 8)).astype(np.int8)
    tensors = {"t0": x}
    for layer in layers:
        tensors[layer.output] = CPUProvider().run(layer, [tensors[layer.inputs[0]]])
    check_outputs(image, play(image, GoldenDevice(DEFAULT), {"t0": x}), tensors,
                  f"seed={seed}")


@pytest.mark.parametrize("resident_add", [False, True], ids=["add-pass", "pass-add"])
def test_residual_branch_stays_alive(rng, resident_add):
    graph, shapes = random_graph(rng)
    image = compile_layers(graph.layers, shapes, replace(DEFAULT, resident_add=resident_add),
                           outputs=["y"], data_words=DATA_WORDS, program_words=PROGRAM_WORDS)

    def span(name):
        address, words, _ = image.arena[name]
        return set(range(address, address + words))
    # t0 (the stem's output) is read by the Add, so t1 and t2 live beside it; with the
    # player's add, b_conv2 writes the Add's output t3 (t2 never exists) while t0 and its
    # input t1 are live.
    if resident_add:
        assert image.arena["t2"][0] is None, image.arena
        assert not span("t0") & span("t1") and not (span("t0") | span("t1")) & span("t3")
    else:
        assert not span("t0") & span("t1") and not span("t0") & span("t2")


def test_resnet8_adds_are_done_by_the_player(zoo):
    """On the default preset (with ``resident_add``) each residual block's Add is its
    second conv's PASS_ADD records: no ADD pass, no block for the conv's output, and the
    ADD_* values written before the start (the zoo test above checks the results)."""
    graph = InferenceSession(zoo["resnet8"]).graph
    image = compile_model(graph, DEFAULT, data_words=DATA_WORDS, program_words=PROGRAM_WORDS)
    assert not [p for p in image.passes if p.layer.endswith("_add")], image.passes
    ops = {p.layer: parse_header(int(image.program[p.record]))[0] for p in image.passes}
    assert {layer for layer, op in ops.items() if op == "PASS_ADD"} == {
        "b1_conv2", "b2_conv2", "b3_conv2"}, ops
    outputs = {layer.name: layer.output for layer in graph.layers}
    for block in ("b1", "b2", "b3"):
        assert image.arena[outputs[f"{block}_conv2"]][0] is None, image.arena


def test_what_does_not_fit_is_a_named_error(rng):
    layers, shapes = chain(rng, 3)
    image = compile_layers(layers, shapes, DEFAULT, outputs=["t3"], data_words=DATA_WORDS,
                           program_words=PROGRAM_WORDS)
    # One word short of the constants plus two blocks.
    with pytest.raises(ResidentFitError, match=r"tensor 't\d' \(output of layer 'c\d'\) "
                                               r"needs 512 bytes of the arena; its largest "
                                               r"free block is \d+ bytes") as info:
        compile_layers(layers, shapes, DEFAULT, outputs=["t3"],
                       data_words=image.data_words - 1, program_words=PROGRAM_WORDS)
    assert info.value.needed == 512 and info.value.free < 512
    with pytest.raises(ResidentFitError, match=r"layer 'c0': the constants .* need \d+ bytes"):
        compile_layers(layers, shapes, DEFAULT, outputs=["t3"], data_words=10,
                       program_words=PROGRAM_WORDS)
    with pytest.raises(ResidentFitError, match=rf"the program needs {len(image.program)} "
                                               rf"words; the program memory has 20"):
        compile_layers(layers, shapes, DEFAULT, outputs=["t3"], data_words=DATA_WORDS,
                       program_words=20)
    with pytest.raises(ResidentFitError, match=r"a multiple of 4\), not 2"):
        compile_layers(layers, shapes, PRESETS["tiny"], outputs=["t3"],
                       data_words=DATA_WORDS, program_words=PROGRAM_WORDS)


def test_segments_round_trip(rng, seed):
    for _ in range(200):
        words = [None if rng.random() < 0.2 else int(rng.integers(0, 30))
                 for _ in range(int(rng.integers(0, 20)))]
        assert expand(compress(words)) == words, f"seed={seed} {words}"
    # Interleaved a/b beats of an Add: one segment.
    assert len(compress([0, 1, 100, 101, 2, 3, 102, 103, 4, 5, 104, 105])) == 1
