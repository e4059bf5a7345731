"""Device layers -> a resident image (:class:`~.image.DeviceImage`).

Steps (``docs/resident.md``):

1. *Steps*: the device layers in graph order; a Conv whose only reader is a 2x2 MaxPool
   becomes one step with it (the fused pass layer-at-a-time runs); Flatten and Reshape are
   views of their input's block.
2. *Layout*: every tensor HWC in a block of words (:mod:`.layout`), packed at first.
3. *Trace*: each step's layer-at-a-time method, run on index tensors (:mod:`.trace`),
   says which block byte each stream byte is. A consumer of a padded tensor reads the
   padding too (a Conv or MaxPool over the padded channel count, zero weights on the
   padding; a Dense over the whole block in address order, its weight columns permuted;
   an Add over the whole blocks), so every stream word is one data-memory word. A word
   that is not (a pixel straddling two words) pads that tensor, and the trace runs again.
4. *Constants*: each pass's words that do not depend on the input (parameters, weights),
   in stream order, from data-memory address 0.
5. *Arena*: blocks allocated first fit in the words after the constants, in step order;
   a block is released after its last reader (a residual branch stays until the Add).
6. *Program*: ``RECV`` (the inputs' blocks), a ``PASS`` per pass (its register writes and
   its stream words compressed into segments, :mod:`.segments`), ``SEND``, ``END``.

A stream word whose bytes are partly input-independent is padding (the tail of a pass's
activations, a pool's missing lanes): those bytes are don't-care, so the player may send
whatever the data word holds there.
"""

from dataclasses import dataclass, field, replace

import numpy as np

from contract.descriptor import ADD_PARAM_FIELDS
from contract.regmap import REGISTERS
from contract.resident import (
    COLUMN_MULTIPLE,
    HEADER_COUNT_MAX,
    HOST_BASE,
    WORD_MASK,
    ResidentFormatError,
    Segment,
    header,
)
from contract.streams import POOL_MAX_WIDTH
from models.requant import MULTIPLIER_MIN

from .. import graph as g
from ..accelerator import skip_strided_1x1
from ..conv_lowering import lower_conv2d
from ..cycle_model import resident_pass_cycles
from ..errors import ResidentFitError
from ..gap_lowering import dense_chunk, gap_requantization, gap_weights
from ..providers.costs import add_work, pool_work
from ..regs import Reg
from ..shapes import infer_shapes
from .image import DeviceImage, PassInfo, Port
from .layout import Arena, Storage
from .segments import compress
from .trace import trace_layer

__all__ = ["compile_layers", "compile_model", "device_segments"]

_VIEWS = (g.Flatten, g.Reshape)
#: The core's read-write registers (they hold what was written; writing one has no effect
#: of its own), by offset.
_RW_OFFSETS = frozenset(reg.offset for reg in REGISTERS if reg.access == "RW")
_POOL_WINDOW = ((2, 2), (2, 2), (0, 0, 0, 0))


def _is_pool(layer):
    return isinstance(layer, g.MaxPool) and (
        tuple(layer.kernel), tuple(layer.stride), tuple(layer.padding)) == _POOL_WINDOW


def _is_device(layer):
    return (isinstance(layer, (g.Conv, g.Dense, g.Add, g.GlobalAveragePool))
            or _is_pool(layer))


def device_segments(graph):
    """Maximal runs of consecutive device layers (Conv, Dense, 2x2 MaxPool, Add; Flatten
    and Reshape inside a run) of ``graph``, as lists of layers."""
    segments, current, produced = [], [], set()
    for layer in graph.layers:
        if _is_device(layer) or (isinstance(layer, _VIEWS) and layer.inputs[0] in produced):
            current.append(layer)
            produced.add(layer.output)
            continue
        if current:
            segments.append(current)
        current, produced = [], set()
    if current:
        segments.append(current)
    return segments


@dataclass(eq=False)
class _Step:
    layer: object
    pool: object = None  # the MaxPool fused after a Conv
    reads: list = field(default_factory=list)  # tensor names
    output: str = ""


class _Compiler:
    def __init__(self, layers, shapes, config, *, outputs, data_words, program_words,
                 pool_max_width, host_segments=True):
        self.config, self.shapes = config, shapes
        self.host_segments = host_segments
        self.data_words, self.program_words = data_words, program_words
        self.pool_max_width = pool_max_width
        self.layers = list(layers)
        if config.cols % COLUMN_MULTIPLE:
            raise ResidentFitError(
                f"resident execution needs an array whose columns fill whole 32-bit words "
                f"(a multiple of {COLUMN_MULTIPLE}), not {config.cols}: an output beat's words "
                f"would mix channels of two beats", what="config")
        produced = {layer.output for layer in self.layers}
        read = [name for layer in self.layers for name in layer.inputs]
        self.inputs = list(dict.fromkeys(n for n in read if n not in produced))
        self.outputs = list(outputs)
        self.views = {}  # view tensor -> base tensor
        self.storage = {}
        for name in self.inputs:
            self._store(name, "")
        self.steps = self._steps()
        self.cache = {}

    # ------------------------------------------------------------ tensors and steps

    def _shape(self, name):
        if name not in self.shapes:
            raise ResidentFitError(f"tensor {name!r}: its shape is unknown (resident images "
                                   f"need every shape at batch 1)", what=name)
        shape = tuple(self.shapes[name])
        if shape[0] != 1:
            raise ResidentFitError(f"tensor {name!r}: shape {shape}: a resident iteration "
                                   f"runs one image (batch 1)", what=name)
        return shape

    def _store(self, name, writer):
        shape = self._shape(name)
        if len(shape) == 4:
            c, h, w = shape[1:]
        elif len(shape) == 2:
            c, h, w = shape[1], 1, 1
        else:
            raise ResidentFitError(f"tensor {name!r}: shape {shape}: resident tensors are "
                                   f"(1, C, H, W) or (1, K)", what=name)
        self.storage[name] = Storage(name, c, h, w, writer=writer)

    def base(self, name):
        return self.storage[self.views.get(name, name)]

    def _steps(self):
        readers = {}
        for layer in self.layers:
            for name in layer.inputs:
                readers.setdefault(name, []).append(layer)
        steps, fused = [], set()
        for layer in self.layers:
            if layer in fused:
                continue
            if isinstance(layer, _VIEWS):
                self.views[layer.output] = self.views.get(layer.inputs[0], layer.inputs[0])
                continue
            step = _Step(layer, reads=list(layer.inputs), output=layer.output)
            users = readers.get(layer.output, [])
            if (isinstance(layer, g.Conv) and layer.groups == 1
                    and layer.output not in self.outputs and len(users) == 1
                    and _is_pool(users[0]) and self._pool_fits(layer)):
                step.pool, step.output = users[0], users[0].output
                fused.add(users[0])
            if isinstance(layer, g.Add) and layer.constant is None and len(layer.inputs) != 2:
                raise ResidentFitError(f"layer {layer.name!r}: Add needs two tensors or a "
                                       f"constant", what=layer.name)
            self._store(step.output, layer.name)
            steps.append(step)
        for step in steps:
            for name in step.reads:
                self.base(name).readers.append(step)
        return steps

    def _pool_fits(self, conv):
        """Whether ``conv`` runs fused with its pool, as the device provider decides: the
        pool takes its output, and bands of an even row count fit the buffer."""
        shape = self._shape(conv.output)
        if not (len(shape) == 4 and 2 <= shape[3] <= self.pool_max_width and shape[2] >= 2):
            return False
        x, stride = skip_strided_1x1(np.zeros(self._shape(conv.inputs[0]), np.int8),
                                     conv.weight, conv.stride, conv.padding)
        try:
            lower_conv2d(x, conv.weight, conv.bias, conv.multiplier, conv.shift,
                         x_zero_point=conv.x_zero_point, y_zero_point=conv.y_zero_point,
                         lo=conv.lo, hi=conv.hi, stride=stride, padding=conv.padding,
                         groups=conv.groups, config=self.config, name=conv.name,
                         row_multiple=2)
        except ValueError:
            return False
        return True

    # ------------------------------------------------------------ tracing

    def _involved(self, step):
        names = [self.base(n) for n in step.reads] + [self.storage[step.output]]
        return list(dict.fromkeys(names))

    def _trace(self, index):
        step = self.steps[index]
        involved = self._involved(step)
        key = (index, tuple(s.padded for s in involved))
        if key not in self.cache:
            virtual = 0
            for storage in involved:  # local id space: each step's blocks side by side
                storage.virtual = virtual
                virtual += 4 * storage.words
            try:
                traces = self._run_step(step)
            except ValueError as exc:
                raise ResidentFitError(f"layer {step.layer.name!r}: {exc}",
                                       what=step.layer.name) from exc
            if isinstance(traces, _Misaligned):
                traces = [traces]
            self.cache[key] = [self._words(step, involved, t) for t in traces]
        return self.cache[key]

    def _view_ids(self, name):
        storage = self.base(name)
        return storage.ids().reshape(self._shape(name))

    def _run_step(self, step):
        layer, config = step.layer, self.config
        out = self.storage[step.output]
        if isinstance(layer, g.Conv):
            return self._conv(step, layer, out)
        if isinstance(layer, g.Dense):
            x = self.base(layer.inputs[0])
            logical = self._view_ids(layer.inputs[0]).reshape(-1)
            weight = np.zeros((layer.weight.shape[0], 4 * x.words), np.int8)
            weight[:, logical - x.virtual] = layer.weight
            ids = x.all_ids()[None]

            def run(acc, xs):
                return acc.dense(xs, weight, layer.bias, layer.multiplier, layer.shift,
                                 x_zero_point=layer.x_zero_point,
                                 y_zero_point=layer.y_zero_point, lo=layer.lo, hi=layer.hi,
                                 name=layer.name)
            return trace_layer(run, [ids], out.ids().reshape(1, -1), config,
                               self.pool_max_width)
        if isinstance(layer, g.MaxPool):
            x = self._own(layer.inputs[0], layer)
            ids = x.ids(x.stride)
            out_ids = self._padded_out(out, x.stride)
            return trace_layer(lambda acc, xs: acc.max_pool2d(xs, name=layer.name), [ids],
                               out_ids, config, self.pool_max_width)
        if isinstance(layer, g.Add):
            return self._add(layer, out)
        if isinstance(layer, g.GlobalAveragePool):
            # Over the padded channel count too: those means land in the output's padding.
            x = self._own(layer.inputs[0], layer)
            grouped = self._gap_as_samples(layer, x, out)
            if grouped is not None:
                return grouped

            def run(acc, xs):
                return acc.global_average_pool(
                    xs, x_scale=layer.x_scale, x_zero_point=layer.x_zero_point,
                    y_scale=layer.y_scale, y_zero_point=layer.y_zero_point, lo=layer.lo,
                    hi=layer.hi, name=layer.name)
            return trace_layer(run, [x.ids(x.stride)], self._padded_out(out, x.stride),
                               config, self.pool_max_width)
        raise ResidentFitError(f"layer {layer.name!r}: {layer.op} does not run resident",
                               what=layer.name)

    def _gap_as_samples(self, layer, x, out):
        """A global average pool as Dense passes whose samples are the image's groups of
        ``g`` channels, or None when no group size reads whole words.

        Layer at a time the samples are the batch's images (``Accelerator.
        global_average_pool``); a resident iteration has one image, which would leave all
        but one of the array's rows idle and reload the same weights for each group of
        channels. Sample ``j`` here is channels ``j*g .. j*g + g - 1`` in pixel-major order
        (``g`` bytes of every pixel of the HWC block: whole words when ``g`` is a multiple
        of 4), and the weights ``gap_weights(g, HW)`` sum each column's channel over the
        pixels exactly as the per-group passes do, so the results are the same bits. The
        group size with the fewest modelled cycles wins."""
        channels, hw = x.stride, x.height * x.width
        shape = self._shape(layer.inputs[0])
        try:
            multiplier, shift = gap_requantization(layer.x_scale, layer.y_scale,
                                                   shape[2] * shape[3], layer.name)
        except ValueError:
            return None  # the layer-at-a-time path says why
        ids = x.ids(channels)[0].reshape(channels, hw)
        out_ids = self._padded_out(out, channels)
        best = None
        for group in range(4, min(self.config.cols, channels) + 1, 4):
            size = hw * group
            if (channels % group or size > self.config.weight_depth
                    or size > self.config.act_depth):
                continue
            samples = channels // group
            xs = ids.reshape(samples, group, hw).transpose(0, 2, 1).reshape(samples, size)
            weights = gap_weights(group, hw)
            chunk = dense_chunk(size, self.config)

            def run(acc, xs, group=group, weights=weights, chunk=chunk):
                parts = [acc.dense(xs[start:start + chunk], weights, None,
                                   np.full(group, multiplier), np.full(group, shift),
                                   x_zero_point=layer.x_zero_point,
                                   y_zero_point=layer.y_zero_point, lo=layer.lo, hi=layer.hi,
                                   name=layer.name)
                         for start in range(0, len(xs), chunk)]
                return np.concatenate(parts).reshape(1, -1, 1, 1)
            traces = trace_layer(run, [xs], out_ids, self.config, self.pool_max_width)
            cycles = sum(resident_pass_cycles(t.expected_cycles,
                                              csr_writes=len(t.program.csr_writes),
                                              read_segments=1) for t in traces)
            if best is None or cycles < best[0]:
                best = (cycles, traces)
        return None if best is None else best[1]

    def _own(self, name, layer):
        if name in self.views:
            raise ResidentFitError(f"layer {layer.name!r} reads {name!r}, a reshaped view: "
                                   f"resident {layer.op} reads a tensor as its producer laid "
                                   f"it out", what=layer.name)
        return self.storage[name]

    @staticmethod
    def _padded_out(out, channels):
        ids = np.full((1, max(channels, out.channels), out.height, out.width), -1, np.int64)
        ids[:, :out.channels] = out.ids()
        return ids

    def _conv(self, step, layer, out):
        x = self._own(layer.inputs[0], layer)
        stride, c = x.stride, x.channels
        weight, bias = layer.weight, layer.bias
        multiplier, shift = layer.multiplier, layer.shift
        groups = layer.groups
        o = weight.shape[0]
        if groups > 1:
            # Depthwise over the padded channels: zero weights, the first channel's
            # requantization (any in-range value: those results land in padding).
            if stride > c:
                weight = np.concatenate([weight, np.zeros((stride - c, *weight.shape[1:]),
                                                          np.int8)])
                bias = np.concatenate([np.zeros(c, np.int32) if bias is None else bias,
                                       np.zeros(stride - c, np.int32)])
                multiplier = np.broadcast_to(np.asarray(multiplier), (c,))
                shift = np.broadcast_to(np.asarray(shift), (c,))
                multiplier = np.concatenate([multiplier, np.full(stride - c, MULTIPLIER_MIN)])
                shift = np.concatenate([shift, np.full(stride - c, shift[0])])
                groups = stride
            out_ids = self._padded_out(out, stride)
        else:
            if stride > c:
                padded = np.zeros((o, stride, *weight.shape[2:]), np.int8)
                padded[:, :c] = weight
                weight = padded
            out_ids = out.ids()
        pool = step.pool is not None

        def run(acc, xs):
            return acc.conv2d(xs, weight, bias, multiplier, shift,
                              x_zero_point=layer.x_zero_point, y_zero_point=layer.y_zero_point,
                              lo=layer.lo, hi=layer.hi, stride=layer.stride,
                              padding=layer.padding, groups=groups, pool=pool,
                              name=layer.name)
        return trace_layer(run, [x.ids(stride)], out_ids, self.config, self.pool_max_width)

    def _add(self, layer, out):
        a = self._own(layer.inputs[0], layer)
        b = self._own(layer.inputs[1], layer) if layer.constant is None else None
        group = [s for s in (a, b, out) if s is not None]
        if any((s.channels, s.height, s.width) != (a.channels, a.height, a.width)
               for s in group):
            raise ResidentFitError(f"layer {layer.name!r}: a resident Add takes operands of "
                                   f"the output's shape (no broadcasting)", what=layer.name)
        if len({s.padded for s in group}) > 1:
            # An elementwise add over whole blocks needs one layout for all three.
            return _Misaligned(next(s for s in group if not s.padded))
        common = dict(a_scale=layer.a_scale, a_zero_point=layer.a_zero_point,
                      b_scale=layer.b_scale, b_zero_point=layer.b_zero_point,
                      y_scale=layer.y_scale, y_zero_point=layer.y_zero_point, lo=layer.lo,
                      hi=layer.hi, name=layer.name)
        if b is None:
            constant = np.zeros(4 * a.words, np.int8)
            constant[(a.ids() - a.virtual).reshape(-1)] = np.broadcast_to(
                layer.constant, self._shape(layer.inputs[0])).reshape(-1)

            def run(acc, xa):
                return acc.add(xa, b=constant, **common)
            return trace_layer(run, [a.all_ids()], out.all_ids(), self.config)

        def run2(acc, xa, xb):
            return acc.add(xa, b=xb, **common)
        return trace_layer(run2, [a.all_ids(), b.all_ids()], out.all_ids(), self.config)

    def _words(self, step, involved, trace):
        """A traced pass -> ``(program, cycles, h2c, c2h)`` with h2c entries ``("c", value)``
        or ``(storage, word)`` and c2h entries ``(storage, word)`` or None; or a
        :class:`_Misaligned` naming the tensor to pad."""
        if isinstance(trace, _Misaligned):
            return trace
        starts = np.array([s.virtual for s in involved])

        def owner(ids):
            return involved[int(np.searchsorted(starts, ids, "right") - 1)]

        lanes = np.arange(4)
        h2c = []
        ids = trace.h2c_ids.reshape(-1, 4)
        # Bytes of input words that carry no element: padding, which the player may fill
        # with whatever its data word holds there.
        dont_care = ((ids < 0) & (ids >= 0).any(axis=1, keepdims=True)).reshape(-1)
        raw = np.frombuffer(trace.program.h2c, "<u4")
        for index, word in enumerate(ids):
            elements = word >= 0
            if not elements.any():
                h2c.append(("c", int(raw[index])))
                continue
            target = word[elements] // 4
            if (target != target[0]).any() or (word[elements] % 4 != lanes[elements]).any():
                return _Misaligned(owner(int(word[elements][0])))
            storage = owner(int(target[0]) * 4)
            h2c.append((storage, int(target[0]) - storage.virtual // 4))
        c2h = []
        for word in trace.c2h_ids.reshape(-1, 4):
            elements = word >= 0
            if not elements.any():
                c2h.append(None)
                continue
            target = word[elements] // 4
            storage = owner(int(word[elements][0]))
            if (target != target[0]).any() or (word[elements] % 4 != lanes[elements]).any():
                return _Misaligned(storage)
            offset = int(target[0]) - storage.virtual // 4
            # The lanes the pass fills with no element overwrite those bytes of the word:
            # they must be padding of the block.
            mask = storage.element_mask()[4 * offset:4 * offset + 4]
            if (mask & ~elements).any():
                return _Misaligned(storage)
            c2h.append((storage, offset))
        cycles = trace.expected_cycles
        if cycles is None:
            cycles = self._fixed_cycles(step, trace)
        return (trace.program, cycles, h2c, c2h, dont_care)

    def _fixed_cycles(self, step, trace):
        layer = step.layer
        if isinstance(layer, g.MaxPool):
            x = self.base(layer.inputs[0])
            return pool_work((1, x.stride, x.height, x.width), self.config).cycles
        return add_work(4 * self.base(layer.inputs[0]).words, self.config).cycles

    def layout(self):
        """Pad tensors until every pass's words are whole data-memory words."""
        for _ in range(len(self.storage) + 1):
            for index in range(len(self.steps)):
                result = self._trace(index)
                bad = next((r for r in result if isinstance(r, _Misaligned)), None)
                if bad is not None:
                    break
            else:
                return [self._trace(i) for i in range(len(self.steps))]
            storage = bad.storage
            if storage.padded:
                raise ResidentFitError(
                    f"layer {self.steps[index].layer.name!r}: tensor {storage.name!r} "
                    f"({storage.channels} "
                    f"channels) cannot be laid out so that the pass reads and writes whole "
                    f"32-bit words", what=storage.name)
            storage.padded = True
        raise AssertionError("layout did not converge")

    # ------------------------------------------------------------ image

    def compile(self):
        traced = self.layout()
        constants, const_base, runs = [], {}, {}
        for step, passes in zip(self.steps, traced, strict=True):
            for index, (_, _, h2c, _, _) in enumerate(passes):
                words = [v for kind, v in h2c if kind == "c"]
                # Passes with the same constants (a mean's channel groups, a layer run on
                # several bands) share one copy.
                key = np.array(words, np.uint32).tobytes()
                if key not in runs:
                    runs[key] = len(constants)
                    constants.extend(words)
                const_base[(id(step), index)] = runs[key]
            if len(constants) > self.data_words:
                raise ResidentFitError(
                    f"layer {step.layer.name!r}: the constants (weights and parameters) up "
                    f"to this layer need {4 * len(constants)} bytes; the data memory has "
                    f"{4 * self.data_words}", what=step.layer.name,
                    needed=4 * len(constants), free=4 * self.data_words)
        streamed = self._streamed_input(traced)
        fused = self._fused_adds(traced)
        arena = Arena(len(constants), self.data_words - len(constants))
        last = {}
        for index, step in enumerate(self.steps):
            for name in step.reads:
                last[self.base(name).name] = index
        kept = {self.base(name).name for name in self.outputs if name in self.storage
                or name in self.views}
        for name in self.inputs:
            if self.storage[name] is not streamed:
                arena.allocate(self.storage[name])
        for index, step in enumerate(self.steps):
            if index in fused:
                # The convolution writes the Add's output (its own never exists), which must
                # not share words with anything live while it runs.
                arena.allocate(fused[index].y)
            elif index - 1 not in fused:
                arena.allocate(self.storage[step.output])
            for name, final in last.items():
                if (final == index and name not in kept and self.storage[name] is not streamed
                        and self.storage[name].address is not None):
                    arena.release(self.storage[name])
        for name in self.outputs:
            if name not in self.storage and name not in self.views:
                raise ResidentFitError(f"output {name!r} is not a tensor of the segment",
                                       what=name)

        program, passes, dont_care = [], [], []

        def emit(op, what, csr=(), reads=(), writes=()):
            try:
                program.append(header(op, csr=len(csr), reads=len(reads), writes=len(writes)))
            except ResidentFormatError as exc:
                raise ResidentFitError(f"{what}: {exc} (the record format's limit is "
                                       f"{HEADER_COUNT_MAX})", what=what) from exc
            for offset, value in csr:
                program.extend((offset, value & 0xFFFFFFFF))
            for segment in (*reads, *writes):
                program.extend(segment.encode())

        def block(storage):
            return list(range(storage.address, storage.address + storage.words))

        # The core's RW registers keep what was last written (the player is their only
        # writer while it runs): a pass writes those whose value differs from what the passes
        # before it in the program left, 2 cycles each saved. The first pass of the program
        # writes all of its own, so every iteration, and a run after a soft reset or after
        # layer-at-a-time passes, starts from values it wrote itself. Strobes (CTRL) and W1C
        # bits (STATUS) are always written.
        held = {}

        def changed(writes):
            kept = []
            for offset, value in writes:
                value &= 0xFFFFFFFF
                if offset in _RW_OFFSETS and held.get(offset) == value:
                    continue
                held[offset] = value
                kept.append((offset, value))
            return kept

        ports_in = [self._port(n) for n in self.inputs]
        recv = compress([a for n in self.inputs if self.base(n) is not streamed
                         for a in block(self.base(n))])
        if recv:
            emit("RECV", "the inputs", writes=recv)
        for number, (step, traced_passes) in enumerate(zip(self.steps, traced, strict=True)):
            if number - 1 in fused:
                continue  # the Add, done by the convolution's PASS_ADD records
            fusion = fused.get(number)
            for index, (prog, cycles, h2c, c2h, mask) in enumerate(traced_passes):
                dont_care.append(mask)
                base = const_base[(id(step), index)]
                reads = []
                for kind, value in h2c:
                    if kind == "c":
                        reads.append(base)
                        base += 1
                    elif kind is streamed:
                        reads.append(_HOST)
                    else:
                        reads.append(kind.address + value)
                op, csr_writes = "PASS", prog.csr_writes
                if fusion is None:
                    writes = [None if e is None else e[0].address + e[1] for e in c2h]
                else:
                    op = "PASS_ADD"
                    writes = [None if e is None else fusion.y.address + e[1] for e in c2h]
                    # The Add's values before the start (the last write), for the player.
                    csr_writes = (*csr_writes[:-1], *fusion.add_writes, csr_writes[-1])
                record = len(program)
                # Every PASS but the program's first follows a PASS, whose look-ahead
                # starts this one's reader early (the first follows RECV or END).
                ahead = bool(passes)
                reads, writes = _compress_reads(reads), compress(writes)
                if fusion is not None:
                    offset = (fusion.b.address - fusion.y.address) & WORD_MASK
                    writes = [replace(w, fill=offset) for w in writes]
                csr = changed(csr_writes)
                emit(op, f"pass {prog.name!r}", csr=csr, reads=reads, writes=writes)
                passes.append(PassInfo(step.layer.name, prog.name, record, int(cycles),
                                       len(h2c), len(c2h), len(csr), len(reads),
                                       len(writes),
                                       host_csr_writes=len(prog.csr_writes), ahead=ahead))
        ports_out = [self._port(n) for n in self.outputs]
        send = compress([a for n in self.outputs for a in block(self.base(n))])
        emit("SEND", "the outputs", reads=send)
        emit("END", "the end")
        if len(program) > self.program_words:
            raise ResidentFitError(
                f"the program needs {len(program)} words; the program memory has "
                f"{self.program_words}", what="program", needed=len(program),
                free=self.program_words)
        return DeviceImage(
            config=self.config, program=np.array(program, np.uint32),
            data=np.array(constants, np.uint32), data_words=arena.base + arena.peak,
            arena={s.name: (s.address, s.words, s.stride) for s in self.storage.values()},
            inputs=ports_in, outputs=ports_out, passes=passes,
            layers=[layer.name for layer in self.layers], dont_care=dont_care,
            recv_segments=len(recv), send_segments=len(send))

    def _fused_adds(self, traced):
        """``{step index: _Fusion}``: the convolutions whose Add (the next step) the player
        does as their results are stored (``PASS_ADD``, on a build with
        ``resident_add``): a convolution without a pool whose output only that Add reads
        and no one else sees, its other operand a tensor of the same layout."""
        fused = {}
        if not self.config.resident_add:
            return fused
        for index, (step, after) in enumerate(zip(self.steps, self.steps[1:], strict=False)):
            conv, add = step.layer, after.layer
            if not (isinstance(conv, g.Conv) and step.pool is None and isinstance(add, g.Add)
                    and add.constant is None):
                continue
            t = self.storage[step.output]
            if (step.output in self.outputs or step.output in self.views.values()
                    or [r.layer for r in t.readers] != [add]
                    or list(add.inputs).count(step.output) != 1):
                continue
            b = self.base(add.inputs[1 - list(add.inputs).index(step.output)])
            y = self.storage[after.output]
            if any((s.words, s.stride) != (t.words, t.stride) for s in (b, y)):
                continue
            (add_pass, *rest) = traced[index + 1]
            if rest:
                continue
            values = {offset: value for offset, value in add_pass[0].csr_writes}
            params = {name: values[int(getattr(Reg, f"ADD_{name.upper()}"))]
                      for name, _, _, _ in ADD_PARAM_FIELDS}
            if add.inputs[1] == step.output:
                # The player adds the stored word (the convolution's) as ``a``: the sum is
                # symmetric, so the operands' values swap sides.
                side = {"a": "b", "b": "a"}
                params = {(side[name[0]] + name[1:] if name[1:2] == "_" and name[0] in side
                           else name): value for name, value in params.items()}
            writes = tuple((int(getattr(Reg, f"ADD_{name.upper()}")), params[name])
                           for name, _, _, _ in ADD_PARAM_FIELDS)
            fused[index] = _Fusion(y=y, b=b, add_writes=writes)
        return fused

    def _streamed_input(self, traced):
        """The segment's input that goes straight from the host into the one pass that
        reads it (a host segment, ``contract.resident``), or None. So it is when the
        segment has that one input, it is not an output, and one pass reads each of its
        words once, in address order, one after the other: the host's words are then that
        pass's stream as it stands, and ``RECV`` would only copy them into the data memory
        (a cycle a word) for that pass to read back."""
        if len(self.inputs) != 1 or not self.host_segments:
            return None
        storage = self.base(self.inputs[0])
        if storage.name in {self.base(n).name for n in self.outputs if n in self.storage
                            or n in self.views}:
            return None
        readers = [h2c for passes in traced for _, _, h2c, _, _ in passes
                   if any(kind is storage for kind, _ in h2c)]
        if len(readers) != 1:
            return None
        h2c = readers[0]
        at = [i for i, (kind, _) in enumerate(h2c) if kind is storage]
        in_order = [h2c[i][1] for i in at] == list(range(storage.words))
        return storage if in_order and at[-1] - at[0] + 1 == len(at) else None

    def _port(self, name):
        storage = self.base(name)
        storage.virtual = 0
        positions = (storage.ids().reshape(-1) + 0).astype(np.int64)
        return Port(name, self._shape(name), storage.address, storage.words, positions)


@dataclass
class _Fusion:
    """A convolution's ``PASS_ADD`` records: the Add's output ``y`` (which its results
    become), its other operand ``b`` and its ``ADD_*`` register writes."""

    y: Storage
    b: Storage
    add_writes: tuple


#: A read list's marker of a host word (:meth:`_Compiler._streamed_input`).
_HOST = object()


def _compress_reads(reads):
    """Segments of a pass's read list: addresses as :func:`compress` takes them, and one
    host segment in place of the run of :data:`_HOST` markers."""
    hosted = [i for i, r in enumerate(reads) if r is _HOST]
    if not hosted:
        return compress(reads)
    first, last = hosted[0], hosted[-1] + 1
    return [*compress(reads[:first]), Segment(base=HOST_BASE, chunk_words=last - first),
            *compress(reads[last:])]


@dataclass
class _Misaligned:
    storage: Storage


def compile_layers(layers, shapes, config, *, outputs, data_words=None, program_words=None,
                   pool_max_width=POOL_MAX_WIDTH, host_segments=True):
    """Compile device ``layers`` (graph order) into a :class:`DeviceImage`.

    Parameters
    ----------
    layers : list of sw_driver.graph.Layer
        Conv (incl. depthwise, strided 1x1), Dense, 2x2 MaxPool, Add; Flatten and Reshape
        of tensors the layers produce.
    shapes : dict
        Tensor name -> shape at batch 1 (:func:`sw_driver.shapes.infer_shapes`).
    config : ConvEngineConfig
    outputs : list of str
        Tensors the host reads back (``SEND``).
    data_words, program_words : int, optional
        Memory depths; default the configuration's ``resident_words``/``program_words``.
    host_segments : bool
        Whether the player takes host segments (register map 0.9 on): the input then goes
        straight into the pass that reads it; otherwise a ``RECV`` copies it first.

    Raises
    ------
    ResidentFitError
        What does not fit or cannot be laid out, naming the tensor or layer.
    """
    data_words = getattr(config, "resident_words", 0) if data_words is None else data_words
    program_words = getattr(config, "program_words", 0) if program_words is None \
        else program_words
    if not data_words or not program_words:
        raise ResidentFitError(f"configuration {config.name}: no resident memories "
                               f"(data {data_words} words, program {program_words} words)",
                               what="config", needed=None, free=0)
    return _Compiler(layers, shapes, config, outputs=outputs, data_words=data_words,
                     program_words=program_words, pool_max_width=pool_max_width,
                     host_segments=host_segments).compile()


def segment_outputs(graph, segment):
    """Tensors of ``segment`` that later layers outside it, or the model, read."""
    inside = {layer.output for layer in segment}
    members = set(map(id, segment))
    later = {name for layer in graph.layers if id(layer) not in members
             for name in layer.inputs}
    later |= {info.name for info in graph.outputs}
    return [layer.output for layer in segment if layer.output in later and
            layer.output in inside]


def compile_model(session_or_graph, config, *, segment=None, **options):
    """The resident image of one device segment of a model.

    Parameters
    ----------
    session_or_graph : InferenceSession or sw_driver.graph.Graph
    config : ConvEngineConfig
    segment : int, optional
        Which of :func:`device_segments` (default: the one with the most weights).
    **options
        ``data_words``, ``program_words``, ``pool_max_width`` for :func:`compile_layers`.
    """
    graph = getattr(session_or_graph, "graph", session_or_graph)
    segments = device_segments(graph)
    if not segments:
        raise ResidentFitError(f"{graph.source}: no device layers", what=graph.source)
    if segment is None:
        sizes = [sum(getattr(layer, "weight", np.zeros(0)).size for layer in s)
                 for s in segments]
        segment = int(np.argmax(sizes))
    chosen = segments[segment]
    shapes = infer_shapes(graph, 1)
    return compile_layers(chosen, shapes, config, outputs=segment_outputs(graph, chosen),
                          **options)
