"""The soak's resident cases: random layer graphs compiled into resident programs and played
on a golden resident device, compared bit for bit with the golden models.

Each case is a pure function of ``(seed, index)`` (:func:`draw_program`): a random residual
network (branches kept alive across an Add, 1x1 projections, strided and depthwise convs,
a 2x2 MaxPool fused with its conv or not, GlobalAveragePool, Flatten -> Dense) with random
channel counts (odd ones force padded layouts), an engine (8x8, or 4x4 with small buffers
so that layers are split into bands and tiles), a batch of 1-3 images and a memory
pressure: data and program memories roomy, just large enough (the compiler's own figure:
every word of the arena is used and dead tensors must be reused), or a few words short.

:func:`run_program_case` compiles the graph with :func:`sw_driver.resident.compile_layers`
and runs the image through :class:`~sw_driver.resident.runner.ResidentRunner` (load,
checksum, one start for the batch) on :class:`.resident_device.ResidentDevice` over
:class:`.golden_device.GoldenDevice`: the resident protocol in front of the golden
layer-at-a-time device. After every layer it compares the layer's output, decoded from the
data memory, with the CPU provider's (the golden models), so a mismatch names the first
layer that went wrong. Outcomes: ``pass``; ``refused`` (the compiler's
:class:`~sw_driver.errors.ResidentFitError`, with its reason: a memory drawn short, or a
layer the engine's buffers cannot take); ``mismatch``; ``error`` (anything else raised,
or a memory drawn short that the compiler accepted, or one just large enough it refused).
"""

from dataclasses import dataclass, field

import numpy as np

from contract.config import ArrayConfig, ConvEngineConfig
from contract.config_file import PRESETS
from models.eltwise import add_multipliers
from models.requant import quantize_multiplier
from sw_driver import graph as g
from sw_driver.errors import ResidentFitError
from sw_driver.providers.cpu import CPUProvider
from sw_driver.resident import compile_layers
from sw_driver.resident.runner import ResidentRunner
from sw_driver.shapes import infer_shapes

from .golden_device import GoldenDevice
from .resident_device import ResidentDevice

__all__ = ["CONFIGS", "RESIDENT_COUNT", "ProgramCase", "ProgramResult",
           "compile_case", "draw_program", "play_case", "program_repro", "run_program_case"]

#: Cases of ``tessera soak --resident`` by default.
RESIDENT_COUNT = 300
#: The engines a case is drawn for: the default 8x8, and a 4x4 whose small buffers make the
#: driver split layers into bands and column tiles (as tests/test_resident_compiler.py).
CONFIGS = {
    "8x8": PRESETS["default"],
    "4x4-small": ConvEngineConfig(array=ArrayConfig(rows=4, cols=4), act_depth=1024,
                                  weight_depth=512, max_col_tiles=4),
}
#: Memories of a "roomy" case: every graph drawn here fits them.
ROOMY_DATA, ROOMY_PROGRAM = 65536, 8192
#: Memory pressures and how often each is drawn.
PRESSURES = {"roomy": 0.15, "exact": 0.55, "data short": 0.15, "program short": 0.15}


def program_repro(seed, index):
    """The command that runs resident case ``index`` of soak ``seed`` again, in full."""
    return f".venv/bin/tessera soak --resident --seed {seed} --only {index}"


# ------------------------------------------------------------ drawing

@dataclass(frozen=True, eq=False)
class ProgramCase:
    """One resident soak case.

    Attributes
    ----------
    seed, index : int
    config_name : str
        A key of :data:`CONFIGS`.
    layers : list of sw_driver.graph.Layer
        Graph order; the input is ``x``.
    shapes : dict
        Tensor -> shape at batch 1.
    outputs : list of str
        Tensors the program sends back (the last, and sometimes one in the middle).
    x : numpy.ndarray of int8
        The batch (N, C, H, W).
    pressure : str
        A key of :data:`PRESSURES`.
    short : int
        Words taken off the exact memory size ("data short", "program short").
    topology : list of str
        The blocks drawn, for the description.
    """

    seed: int
    index: int
    config_name: str
    layers: list
    shapes: dict
    outputs: list
    x: np.ndarray
    pressure: str
    short: int = 0
    topology: list = field(default_factory=list)

    @property
    def config(self):
        return CONFIGS[self.config_name]

    @property
    def description(self):
        c, h, w = self.x.shape[1:]
        return (f"{self.config_name}, {self.x.shape[0]} image(s) {c}x{h}x{w}, "
                f"{len(self.layers)} layers [{', '.join(self.topology)}], memory "
                f"{self.pressure}{f' by {self.short}' if self.short else ''}")


class _Builder:
    """Appends layers to a graph, tracking the current tensor's (C, H, W)."""

    def __init__(self, rng, c, h, w):
        self.rng, self.layers, self.count = rng, [], 0
        self.shape = {"x": (c, h, w)}
        self.blocks = []

    def _name(self, prefix):
        self.count += 1
        return f"{prefix}{self.count}", f"t{self.count}"

    def _requant(self, c_out, products, relu):
        rng = self.rng
        # The accumulator's spread is about 70 * 60 * sqrt(products); aim its requantized
        # value at a few tens, so some outputs clip and most do not.
        target = 40.0 / (70 * 60 * np.sqrt(products))
        real = target * 2.0 ** rng.uniform(-2.5, 2.5, c_out)
        multiplier, shift = quantize_multiplier(real)
        y_zero_point = int(rng.integers(-40, 40))
        return dict(multiplier=multiplier.astype(np.int64), shift=shift.astype(np.int64),
                    y_zero_point=y_zero_point,
                    bias=rng.integers(-3000, 3000, c_out).astype(np.int32),
                    x_zero_point=int(rng.integers(-60, 60)),
                    lo=max(-128, y_zero_point) if relu else -128, hi=127)

    def conv(self, src, c_out, k=3, stride=1, depthwise=False, relu=None):
        rng = self.rng
        c_in, h, w = self.shape[src]
        name, out = self._name("dw" if depthwise else "conv")
        groups = c_in if depthwise else 1
        c_out = c_in if depthwise else c_out
        weight = rng.integers(-90, 90, (c_out, c_in // groups, k, k)).astype(np.int8)
        relu = bool(rng.random() < 0.6) if relu is None else relu
        pad = k // 2
        self.layers.append(g.Conv(name, (src,), out, weight=weight, stride=(stride, stride),
                                  padding=(pad,) * 4, groups=groups,
                                  **self._requant(c_out, k * k * c_in // groups, relu)))
        self.shape[out] = (c_out, (h + 2 * pad - k) // stride + 1,
                           (w + 2 * pad - k) // stride + 1)
        return out

    def pool(self, src):
        c, h, w = self.shape[src]
        name, out = self._name("pool")
        self.layers.append(g.MaxPool(name, (src,), out, kernel=(2, 2), stride=(2, 2)))
        self.shape[out] = (c, h // 2, w // 2)
        return out

    def add(self, a, b):
        rng = self.rng
        name, out = self._name("add")
        scales = rng.uniform(0.01, 0.05, 3) * 2.0 ** rng.uniform(-2, 2, 3)
        add_multipliers(*scales)  # checks the scales are in range
        relu = rng.random() < 0.3
        y_zero_point = int(rng.integers(-30, 30))
        self.layers.append(g.Add(
            name, (a, b), out, a_scale=float(scales[0]), b_scale=float(scales[1]),
            y_scale=float(scales[2]), a_zero_point=int(rng.integers(-40, 40)),
            b_zero_point=int(rng.integers(-40, 40)), y_zero_point=y_zero_point,
            lo=max(-128, y_zero_point) if relu else -128))
        self.shape[out] = self.shape[a]
        return out

    def global_average_pool(self, src):
        rng = self.rng
        name, out = self._name("gap")
        x_scale = float(rng.uniform(0.01, 0.1))
        self.layers.append(g.GlobalAveragePool(
            name, (src,), out, x_scale=x_scale, x_zero_point=int(rng.integers(-60, 60)),
            y_scale=x_scale * float(2.0 ** rng.uniform(-1.5, 1)),
            y_zero_point=int(rng.integers(-30, 30))))
        self.shape[out] = (self.shape[src][0], 1, 1)
        return out

    def dense(self, src, units):
        c, h, w = self.shape[src]
        name, flat = self._name("flat")
        self.layers.append(g.Flatten(name, (src,), flat))
        k = c * h * w
        self.shape[flat] = (k,)
        name, out = self._name("fc")
        weight = self.rng.integers(-90, 90, (units, k)).astype(np.int8)
        self.layers.append(g.Dense(name, (flat,), out, weight=weight,
                                   **self._requant(units, k, self.rng.random() < 0.3)))
        self.shape[out] = (units,)
        return out


def _channels(rng):
    """Channel counts, odd ones included (they pad a tensor's pixels to whole words)."""
    return int(rng.choice([1, 2, 3, 4, 5, 6, 7, 8, 9, 11, 12, 13, 16, 17, 24]))


def _draw_graph(rng):
    c0 = int(rng.choice([1, 2, 3, 4, 5, 8]))
    h, w = int(rng.integers(6, 17)), int(rng.integers(6, 17))
    b = _Builder(rng, c0, h, w)
    t = b.conv("x", _channels(rng), k=int(rng.choice([1, 3, 5])))
    b.blocks.append("stem")
    middle = []
    for _ in range(int(rng.integers(1, 5))):
        c, h, w = b.shape[t]
        choice = rng.choice(["identity", "projection", "depthwise", "strided", "fused pool",
                             "pool", "conv"])
        if choice in ("projection", "strided", "fused pool", "pool") and min(h, w) < 4:
            choice = "identity"
        if choice == "identity":  # the block's input stays alive across two convs
            u = b.conv(b.conv(t, c, relu=True), c, relu=False)
            t = b.add(u, t) if rng.random() < 0.5 else b.add(t, u)
        elif choice == "projection":  # a strided branch and a 1x1 projection of the input
            c2, s = _channels(rng), int(rng.choice([1, 2]))
            u = b.conv(b.conv(t, c2, stride=s, relu=True), c2, relu=False)
            t = b.add(u, b.conv(t, c2, k=1, stride=s, relu=False))
        elif choice == "depthwise":
            t = b.conv(t, c, k=3, stride=int(rng.choice([1, 2])), depthwise=True)
        elif choice == "strided":
            t = b.conv(t, _channels(rng), k=int(rng.choice([1, 3])), stride=2)
        elif choice == "fused pool":  # the conv's only reader: one fused pass
            t = b.pool(b.conv(t, _channels(rng)))
        elif choice == "pool":  # after an Add, or a conv read twice: its own pass
            u = b.conv(t, c)
            t = b.pool(b.add(u, t))
        else:
            t = b.conv(t, _channels(rng), k=int(rng.choice([1, 3, 5])))
        b.blocks.append(str(choice))
        middle.append(t)
    tail = rng.choice(["gap dense", "dense", "gap"])
    if "gap" in tail:
        t = b.global_average_pool(t)
    if "dense" in tail:
        t = b.dense(t, int(rng.integers(1, 13)))
    b.blocks.append(str(tail))
    outputs = [t]
    if rng.random() < 0.3:  # a tensor in the middle read back too: it must stay alive
        outputs.insert(0, middle[int(rng.integers(len(middle)))])
    return b, outputs


def draw_program(seed, index):
    """Resident soak case ``index`` of soak ``seed``: a pure function of the pair."""
    for name, value in (("seed", seed), ("index", index)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
            raise ValueError(f"{name} must be a non-negative integer, not {value!r}")
    # A stream of its own, apart from the layer cases' draw_case(seed, index).
    rng = np.random.default_rng([int(seed), int(index), 0x5E51])
    builder, outputs = _draw_graph(rng)
    c, h, w = builder.shape["x"]
    graph = g.Graph(builder.layers, [g.TensorInfo("x", [1, c, h, w])],
                    [g.TensorInfo(name, None) for name in outputs])
    shapes = infer_shapes(graph, 1)
    n = int(rng.integers(1, 4))
    kind = rng.random()
    if kind < 0.2:
        x = rng.choice(np.array([-128, 127], np.int8), (n, c, h, w))
    else:
        x = rng.integers(-128, 128, (n, c, h, w)).astype(np.int8)
    names, p = list(PRESSURES), np.array(list(PRESSURES.values()))
    pressure = names[int(rng.choice(len(names), p=p / p.sum()))]
    short = int(rng.integers(1, 9)) if "short" in pressure else 0
    config_name = "8x8" if rng.random() < 0.6 else "4x4-small"
    return ProgramCase(int(seed), int(index), config_name, builder.layers, shapes, outputs,
                       x, pressure, short, builder.blocks)


# ------------------------------------------------------------ running

@dataclass
class ProgramResult:
    """What one resident case gave: ``status`` pass, refused, mismatch or error."""

    case: ProgramCase
    status: str
    detail: str = ""
    layer: str = ""
    figures: dict = field(default_factory=dict)

    @property
    def failed(self):
        return self.status in ("mismatch", "error")

    @property
    def message(self):
        """The outcome on one line, naming the seed, the case and the layer, with the
        command that repeats it."""
        case = self.case
        return (f"resident case {case.index} of seed {case.seed} ({case.description}): "
                f"{self.status} {self.detail}; repro: {program_repro(case.seed, case.index)}")


def _one_line(error):
    return f"{type(error).__name__}: {' '.join(str(error).split())}"


def compile_case(case):
    """The image of ``case`` at its drawn memory sizes; the roomy image first tells the
    exact sizes. Returns ``(image, figures)``; ``image`` is None when the drawn memories
    were refused (then ``figures["refusal"]`` is the compiler's reason).

    Raises
    ------
    ResidentFitError
        The roomy compile's refusal: a layer or tensor the engine or memories cannot take.
    """
    def build(data_words, program_words):
        return compile_layers(case.layers, case.shapes, case.config, outputs=case.outputs,
                              data_words=data_words, program_words=program_words)
    roomy = build(ROOMY_DATA, ROOMY_PROGRAM)
    data, program = roomy.data_words, len(roomy.program)
    figures = {"needed_data_words": data, "needed_program_words": program,
               "const_words": roomy.const_words, "arena_words": roomy.arena_words,
               "tensor_words": sum(words for _, words, _ in roomy.arena.values()),
               "passes": len(roomy.passes)}
    if case.pressure == "roomy":
        data, program = ROOMY_DATA, ROOMY_PROGRAM
    elif case.pressure == "data short":
        data -= case.short
    elif case.pressure == "program short":
        program -= case.short
    figures.update(data_words=data, program_words=program)
    try:
        return build(data, program), figures
    except ResidentFitError as exc:
        return None, {**figures, "refusal": " ".join(str(exc).split())}


def run_program_case(case):
    """Compile and play one case; a :class:`ProgramResult`.

    A memory drawn short must be refused with the compiler's named error, and one drawn
    just large enough (or roomy) must be taken: either way round is an error.
    """
    try:
        image, figures = compile_case(case)
    except ResidentFitError as exc:
        return ProgramResult(case, "refused", " ".join(str(exc).split()))
    except Exception as exc:  # any exception: a compiler crash is a finding
        return ProgramResult(case, "error", f"compile: {_one_line(exc)}")
    short = "short" in case.pressure
    if image is None:
        if short:
            return ProgramResult(case, "refused", figures["refusal"], figures=figures)
        return ProgramResult(case, "error", f"refused {case.pressure} memories "
                             f"({figures['data_words']} data, {figures['program_words']} "
                             f"program words): {figures['refusal']}", figures=figures)
    if short:
        memory = case.pressure.split()[0]
        return ProgramResult(case, "error", f"the compiler took a {memory} memory of "
                             f"{figures[memory + '_words']} words, {case.short} fewer than "
                             f"the {figures['needed_' + memory + '_words']} it needs",
                             figures=figures)
    return play_case(case, image, figures)


def _producers(case, image):
    """Layer name -> the tensor its step writes (a fused conv's is its pool's output, or,
    with the player's add, its Add's: its own output then has no block)."""
    readers = {}
    for layer in case.layers:
        for name in layer.inputs:
            readers.setdefault(name, []).append(layer)
    tensors = {}
    for layer in case.layers:
        out = layer.output
        if isinstance(layer, g.Conv) and (out not in image.arena
                                          or image.arena[out][0] is None):
            out = readers[out][0].output
        if out in image.arena and image.arena[out][0] is not None:
            tensors[layer.name] = out
    return tensors


def _decode(memory, placement, shape):
    """Tensor ``(C, H, W)`` or ``(K,)`` from its block (``placement``: address, words,
    stride): element (c, y, x) at byte (y W + x) stride + c."""
    address, words, stride = placement
    c, h, w = (*shape, 1, 1) if len(shape) == 1 else shape
    data = memory[address:address + words].astype("<u4").view(np.int8)
    pixels = data[:h * w * stride].reshape(h * w, stride)[:, :c]
    return pixels.T.reshape(shape)


def _golden(case):
    cpu = CPUProvider()
    tensors = {"x": case.x}
    for layer in case.layers:
        tensors[layer.output] = np.asarray(cpu.run(layer, [tensors[n] for n in layer.inputs]))
    return tensors


def _difference(want, got):
    differ = np.argwhere(got != want)
    first = tuple(int(i) for i in differ[0])
    return (f"{len(differ)} of {want.size} elements differ; first at {first}: golden "
            f"{int(want[first])}, resident {int(got[first])}")


class _Mismatch(Exception):
    def __init__(self, layer, detail):
        super().__init__(detail)
        self.layer, self.detail = layer, detail


def play_case(case, image, figures=None):
    """Play ``image`` (compiled from ``case``, possibly altered by a test) for the case's
    batch on the golden resident device; a :class:`ProgramResult`."""
    figures = dict(figures or {})
    tensors = _golden(case)
    # The memories drawn (roomy, or just large enough: every address past them is refused).
    device = ResidentDevice(GoldenDevice(case.config),
                            data_words=figures.get("data_words", image.data_words),
                            program_words=figures.get("program_words", len(image.program)))
    passes = len(image.passes)
    # The pass after which each layer's output is complete: its last.
    finishing = {k: info.layer for k, info in enumerate(image.passes)
                 if k + 1 == passes or image.passes[k + 1].layer != info.layer}
    written = _producers(case, image)

    def check(iteration, ordinal, memory):
        layer = finishing.get(ordinal)
        if layer not in written:
            return
        name = written[layer]
        want = tensors[name][iteration]
        got = _decode(memory, image.arena[name], want.shape)
        if not np.array_equal(got, want):
            raise _Mismatch(layer, f"layer {layer!r} (tensor {name!r}, image {iteration}): "
                                   f"{_difference(want, got)}")

    device.after_pass = check
    try:
        outputs = ResidentRunner(device, image).run({"x": case.x})
    except _Mismatch as found:
        return ProgramResult(case, "mismatch", found.detail, found.layer, figures)
    except Exception as exc:  # any exception: recorded with its message, the soak goes on
        return ProgramResult(case, "error", _one_line(exc), figures=figures)
    for name in case.outputs:
        want, got = tensors[name], outputs[name]
        if got.shape != want.shape or not np.array_equal(got, want):
            layer = next(layer.name for layer in case.layers if layer.output == name)
            what = (f"shape {got.shape}, golden {want.shape}" if got.shape != want.shape
                    else _difference(want, got))
            return ProgramResult(case, "mismatch", f"output {name!r} of layer {layer!r} "
                                 f"(read back): {what}", layer, figures)
    figures["runs"] = device.runs
    return ProgramResult(case, "pass", figures=figures)
