"""What the "sim" and "pcie" providers share: Tessera's layers on a Tessera accelerator.

Both run, with :class:`sw_driver.Accelerator` over a :class:`~sw_driver.transport.Transport`,
Conv (regular and depthwise) and Dense layers on the engine, MatMul layers of two
activations (attention ``Q @ K^T``, ``attention @ V``) as Dense passes whose weights are
the second operand, both streamed per pass (:mod:`sw_driver.matmul_lowering`), 2x2 / stride
2 MaxPool layers
on the device's pool (when its ``POOL_MAX_WIDTH`` register says it has one, for feature
maps up to that wide) and Add layers on its residual-add unit; they differ only in the
transport (the Verilator twin or the XDMA devices) and in whether the planner gets a time
estimate. Layers are mapped onto the accelerator with exactly the fields the CPU provider
gives the golden functions, so outputs are identical bit for bit (``tests/test_twin.py``,
``tests/test_providers_sim.py``); everything else falls back with the reason.

A Conv whose only reader is a 2x2 MaxPool on the same device runs fused with it, in one
pass per band (:mod:`.fusion`, decided in :meth:`DeviceProvider.prepare`).
"""

import threading
import weakref
from dataclasses import dataclass

import numpy as np

from contract.config import NOMINAL_CLOCK_MHZ
from models.eltwise import add_multipliers

from .. import graph as g
from .. import shapes
from ..accelerator import NO_ADD, Accelerator, AcceleratorError
from ..conv_lowering import lower_conv2d
from ..errors import ProviderUnavailableError, RefusedAtRunError, ResidentFitError
from ..gap_lowering import gap_refusal
from ..matmul_lowering import lower_matmul, matmul_refusal, matmul_work
from ..regs import Reg
from ..resident.compiler import compile_layers
from ..resident.plan import ResidentSegment, placed_runs
from ..resident.runner import ResidentRunner
from ..transport.base import Transport, TransportError
from . import costs
from .base import Concurrency, Cost, Provider, Refusal
from .fusion import POOL_WINDOW, PooledConvOutput, fusable_pairs

__all__ = ["CountingTransport", "DeviceProvider", "engine_refusal", "kind_refusal"]


class CountingTransport(Transport):
    """A transport that counts what crosses it (DMA bytes each way, register accesses), so
    the profile reports the bytes of the pass programs actually run."""

    def __init__(self, inner):
        self.inner = inner
        self.h2c_bytes = self.c2h_bytes = self.csr_accesses = 0

    def csr_read(self, offset):
        self.csr_accesses += 1
        return self.inner.csr_read(offset)

    def csr_write(self, offset, value):
        self.csr_accesses += 1
        self.inner.csr_write(offset, value)

    def dma_write(self, data):
        self.inner.dma_write(data)
        self.h2c_bytes += memoryview(data).nbytes

    def dma_read(self, nbytes, *, deadline=None):
        data = self.inner.dma_read(nbytes, deadline=deadline)
        self.c2h_bytes += len(data)
        return data

    def abort_dma(self):
        self.inner.abort_dma()

    def close(self):
        self.inner.close()

    @property
    def min_cycles_per_second(self):
        return self.inner.min_cycles_per_second

    @property
    def lock(self):
        """The device's lock: the wrapped transport's."""
        return self.inner.lock

    @property
    def moved(self):
        return self.h2c_bytes + self.c2h_bytes


def _probe_input(layer):
    """The smallest int8 input the layer's kernel and padding accept (one image)."""
    if isinstance(layer, g.Dense):
        return np.zeros((1, layer.weight.shape[1], 1, 1), np.int8)
    _, cg, kh, kw = layer.weight.shape
    top, left, bottom, right = layer.padding
    h, w = max(1, kh - top - bottom), max(1, kw - left - right)
    return np.zeros((1, cg * layer.groups, h, w), np.int8)


def pool_refusal(layer, max_width, shape=None):
    """Why a device whose pool takes feature maps up to ``max_width`` wide (its
    ``POOL_MAX_WIDTH`` register; 0: no pool) cannot run MaxPool ``layer``, or None."""
    if max_width < 2:
        return (f"this device has no max pool (its POOL_MAX_WIDTH register reads "
                f"{max_width})")
    window = (tuple(layer.kernel), tuple(layer.stride), tuple(layer.padding))
    if window != POOL_WINDOW:
        return (f"the device's max pool is 2x2, stride 2, no padding; not kernel "
                f"{layer.kernel}, stride {layer.stride}, padding {layer.padding}")
    if shape is not None and (len(shape) != 4 or not 2 <= shape[3] <= max_width
                              or shape[2] < 2):
        return (f"at input shape {list(shape)}: the device's max pool takes NCHW feature "
                f"maps 2 to {max_width} wide (POOL_MAX_WIDTH) and at least 2 high")
    return None


def add_refusal(layer, config=None):
    """Why the device's residual-add unit cannot run Add ``layer``, or None: the device
    (``config``, as its registers describe it; None: one with the add) must have the add,
    and the scales must give the fixed-point multipliers of
    :func:`models.eltwise.add_multipliers`."""
    if config is not None and not config.residual_add:
        return NO_ADD
    try:
        add_multipliers(layer.a_scale, layer.b_scale, layer.y_scale)
    except ValueError as exc:
        return str(exc)
    return None


#: The layer kinds the device runs, in refusals.
DEVICE_LAYERS = "Conv, Dense, MatMul, 2x2 MaxPool, GlobalAveragePool and Add"
#: The clock profiles price a device's cycles at when neither the provider nor the
#: configuration names one: the twin's nominal 50 MHz.
NOMINAL_CLOCK_HZ = NOMINAL_CLOCK_MHZ * 1e6
#: The register map from which a resident player takes host segments (the model's input
#: straight into its pass, ``contract.resident``).
HOST_SEGMENTS_SINCE = (0, 9)


def kind_refusal(layer, runs=DEVICE_LAYERS):
    """Why a device that runs the int8 layers ``runs`` cannot run ``layer``, a layer of
    another kind.

    A float layer shares its name with an int8 kind at times (the float32 Add of a residual
    in an attention block, dequantized on both sides): "not Add" would contradict the list,
    so such refusals say what is float."""
    if isinstance(layer, g.FloatOp):
        what = f"this {layer.op} computes in float32: its operands are float, not int8"
    elif isinstance(layer, g.Softmax):
        what = "Softmax computes in float32: its operand is float, not int8"
    elif isinstance(layer, g.Quantize):
        what = "Quantize reads a float operand, not int8"
    elif isinstance(layer, g.Dequantize):
        what = "Dequantize writes a float result, not int8"
    else:
        return f"the device runs {runs}, not {layer.op}"
    return f"{what}; the device runs int8 {runs} only"


def engine_refusal(layer, config):
    """Why the engine of ``config`` cannot run ``layer`` at any input size, or None
    (a MatMul: :func:`~sw_driver.matmul_lowering.matmul_refusal`).

    The driver's own lowering decides (kernel above 7x7, unequal strides or strides above
    2, dilation, padding above half the kernel, groups other than 1 or depthwise, a weight
    or parameter buffer too small, requantization values out of range), run on the
    smallest input the layer accepts; what depends on the input size (the activation
    buffer) is checked by the planner with the real shape (:func:`costs.device_work`).
    """
    if isinstance(layer, g.MatMul):
        return matmul_refusal(layer, config)
    if not isinstance(layer, (g.Conv, g.Dense)):
        return kind_refusal(layer)
    weight = layer.weight if isinstance(layer, g.Conv) \
        else layer.weight.reshape(*layer.weight.shape, 1, 1)
    options = {} if isinstance(layer, g.Dense) else {
        "stride": layer.stride, "padding": layer.padding, "dilation": layer.dilation,
        "groups": layer.groups}
    try:
        lower_conv2d(_probe_input(layer), weight, layer.bias, layer.multiplier, layer.shift,
                     x_zero_point=layer.x_zero_point, y_zero_point=layer.y_zero_point,
                     lo=layer.lo, hi=layer.hi, config=config, name=layer.name, **options)
    except ValueError as exc:
        return str(exc)
    return None


@dataclass(frozen=True)
class _Run:
    cycles: int | None  # None: the device has no performance counters
    bytes: int
    fused: bool = False  # a MaxPool computed in its Conv's pass


class DeviceProvider(Provider):
    """Runs Conv, Dense, MatMul, 2x2 MaxPool, GlobalAveragePool and Add layers on the
    accelerator behind ``transport`` (see the module docstring for what it refuses).

    Parameters
    ----------
    transport : sw_driver.transport.Transport
        Wrapped in a :class:`CountingTransport`; closed by :meth:`close`.
    where : str
        Where the device is, for messages (e.g. ``"/dev/xdma0"``).

    Raises
    ------
    ProviderUnavailableError
        No Tessera accelerator answers behind the transport.
    """

    name = "device"
    #: A layer is a self-contained sequence of passes (nothing stays on the device after
    #: it), so threads take turns layer by layer.
    concurrency = Concurrency.PER_LAYER
    #: Fuse a Conv with the 2x2 MaxPool that alone reads it (:mod:`.fusion`); set False
    #: before creating a session to run them as two passes (the planner's per-layer
    #: estimates count them so).
    fuse = True

    def __init__(self, transport, *, where, resident=True):
        if not isinstance(resident, bool):
            raise ValueError(f"provider {self.name!r}: option resident must be true or false "
                             f"(run whole segments of the model from on-chip memory when "
                             f"the device can), not {resident!r}")
        self.where = where
        #: Run runs of this device's layers resident (:mod:`sw_driver.resident`) when the
        #: device has the player and the run fits; otherwise layer at a time.
        self.resident = resident
        self.transport = CountingTransport(transport)
        try:
            self.accelerator = Accelerator(self.transport)
        except (AcceleratorError, TransportError) as exc:
            transport.close()
            raise ProviderUnavailableError(
                f"provider {self.name!r}: no Tessera accelerator at {where}: {exc}") from exc
        self.config = self.accelerator.config
        self._runs = weakref.WeakKeyDictionary()  # layer -> its last _Run, for the profile
        self._fused = weakref.WeakKeyDictionary()  # conv -> the MaxPool fused with it
        self._fused_lock = threading.Lock()  # sessions are created while others run

    @property
    def label(self):
        """The device in words, e.g. ``"8x8 engine (Verilator twin)"``."""
        return f"{self.config.rows}x{self.config.cols} engine ({self.where})"

    def __repr__(self):
        return f"<{type(self).__name__} {self.name!r}: {self.label}>"

    # ------------------------------------------------------------ the Provider interface

    def supports(self, layer, shape=None):
        if isinstance(layer, g.MaxPool):
            problem = pool_refusal(layer, self.accelerator.pool_max_width, shape)
            return None if problem is None else Refusal(problem)
        if isinstance(layer, g.Add):
            problem = add_refusal(layer, self.config)
            return None if problem is None else Refusal(problem)
        if isinstance(layer, g.MatMul):
            problem = matmul_refusal(layer, self.config, shape)
            return None if problem is None else Refusal(problem)
        if isinstance(layer, g.GlobalAveragePool):
            problem = gap_refusal(layer, self.config, shape)
            return None if problem is None else Refusal(problem)
        problem = engine_refusal(layer, self.config)
        if problem is None and shape is not None:
            try:
                costs.device_work(layer, shape, self.config)
            except ValueError as exc:
                problem = f"at input shape {list(shape)}: {exc}"
        return None if problem is None else Refusal(problem)

    def describe(self, layer):
        kind = {g.MaxPool: "2x2 MaxPool on the pool of", g.Add: "Add on the adder of",
                g.MatMul: "MatMul (both operands streamed, as Dense passes) on",
                g.GlobalAveragePool: "GlobalAveragePool (Dense passes over channel groups) "
                                     "on"}.get(
            type(layer), "depthwise Conv on" if isinstance(layer, g.Conv)
            and layer.groups > 1 else f"{layer.op} on")
        return f"{kind} the {self.label}"

    def estimate(self, layer, shape):
        """Modelled cycles and bytes of ``layer`` on ``shape``, without seconds: the twin's
        wall time is a simulator's (the "pcie" provider adds its clock and link)."""
        work = self.device_work(layer, shape)
        return Cost(seconds=None, cycles=work.cycles, bytes=work.bytes,
                    note=f"~{work.cycles:,} cycles in {work.passes} pass(es)")

    def device_work(self, layer, shape):
        """:func:`costs.device_work` of ``layer`` on its first input's ``shape``; for a
        MatMul, whose second operand's shape the planner does not know, that operand is
        taken as (..., K, M), the square score matrix of self-attention."""
        if isinstance(layer, g.MatMul):
            return matmul_work(layer, shape, (*shape[:-2], shape[-1], shape[-2]),
                               self.config)
        return costs.device_work(layer, shape, self.config)

    def run(self, layer, inputs):
        before = self.transport.moved
        fused = self._fused_conv(layer, inputs[0])
        if fused is not None:
            y, cycles = fused
        elif isinstance(layer, g.MaxPool) and isinstance(inputs[0], PooledConvOutput) \
                and inputs[0].pool is layer:
            # Computed in the Conv's pass: no cycles of its own (none at all without counters).
            self._runs[layer] = _Run(0 if self.accelerator.has_counters else None, 0,
                                     fused=True)
            return inputs[0].pooled
        elif isinstance(layer, g.Conv):
            y, cycles = self._conv(layer, inputs[0])
        elif isinstance(layer, g.Dense):
            y, cycles = self._dense(layer, inputs[0])
        elif isinstance(layer, g.MatMul):
            y, cycles = self._matmul(layer, inputs[0], inputs[1])
        elif isinstance(layer, g.MaxPool):
            y = self.accelerator.max_pool2d(inputs[0], name=layer.name)
            cycles = self.accelerator.last_cycles
        elif isinstance(layer, g.Add):
            y, cycles = self._add(layer, inputs)
        elif isinstance(layer, g.GlobalAveragePool):
            y = self.accelerator.global_average_pool(
                inputs[0], x_scale=layer.x_scale, x_zero_point=layer.x_zero_point,
                y_scale=layer.y_scale, y_zero_point=layer.y_zero_point, lo=layer.lo,
                hi=layer.hi, name=layer.name)
            cycles = self.accelerator.last_cycles
        else:
            raise ValueError(f"layer {layer.name!r}: {layer.op} does not run on the "
                             f"accelerator")
        self._runs[layer] = _Run(cycles, self.transport.moved - before)
        return y

    def prepare(self, placement, outputs):
        """Fuse each Conv with the 2x2 MaxPool that alone reads it, both on this device
        (:func:`~.fusion.fusable_pairs`)."""
        pairs = fusable_pairs(placement, outputs, self) if self.fuse else {}
        mine = {layer for layer, provider in placement if provider is self}
        with self._fused_lock:
            for layer in [conv for conv in self._fused if conv in mine]:
                del self._fused[layer]
            self._fused.update(pairs)

    def _fused_conv(self, layer, x):
        """``(PooledConvOutput, cycles)`` when ``layer`` is fused with its MaxPool and the
        pool takes its output for input ``x``; else None (it runs unfused)."""
        with self._fused_lock:
            pool = self._fused.get(layer)
        if pool is None or not isinstance(x, np.ndarray) or x.ndim != 4:
            return None
        shape = shapes.infer_layer_shape(layer, x.shape)
        if not (2 <= shape[3] <= self.accelerator.pool_max_width and shape[2] >= 2):
            return None
        try:
            y, cycles = self._conv(layer, x, pool=True)
        except ValueError:  # bands of an even row count do not fit the buffer
            return None
        return PooledConvOutput(y, layer, pool, x, shape), cycles

    # ------------------------------------------------------------ link and clock

    #: The engine's clock for profiles' compute time; None: the configuration's
    #: ``clock_mhz``, else :data:`NOMINAL_CLOCK_HZ`.
    clock_hz = None

    def compute_clock_hz(self):
        if self.clock_hz:
            return self.clock_hz
        mhz = getattr(self.config, "clock_mhz", None)
        return mhz * 1e6 if mhz else NOMINAL_CLOCK_HZ

    def link_seconds(self, nbytes, *, transfers, csr_accesses):
        """``(seconds or None, what the figure is)``: the host link's time for ``nbytes``
        of payload in ``transfers`` DMA transfers and ``csr_accesses`` register accesses,
        from the provider's link model; None where it has none."""
        inner = getattr(self.transport, "inner", self.transport)
        baud = getattr(getattr(inner, "port", None), "baudrate", None)
        if baud:
            # Payload at 10 bits a byte (8N1); the frames' headers, CRCs and polls add to it.
            return nbytes * 10 / baud, f"UART payload at {baud / 1e6:g} Mbaud"
        return None, "none: the twin's host stream keeps pace with the device"

    # ------------------------------------------------------------ resident segments

    def resident_memory(self):
        """``(data words, program words)`` of the device's resident player, from its
        ``RES_DATA_WORDS``/``RES_PROGRAM_WORDS`` registers; (0, 0) when it has none."""
        return self.config.resident_words, self.config.program_words

    def _host_segments(self):
        """Whether the device's player takes host segments: a player from before them
        (register map 0.8 and older) would stop on one with BAD_ADDRESS."""
        return getattr(self.accelerator, "map_version", HOST_SEGMENTS_SINCE) \
            >= HOST_SEGMENTS_SINCE

    def resident_segments(self, graph, placement, outputs):
        """Compile each run of this device's layers into a resident image; a run that does
        not fit stays layer at a time, and :attr:`resident_notes` says why."""
        self.resident_notes = []
        if not self.resident:
            return []
        data_words, program_words = self.resident_memory()
        if not data_words:
            return []
        sizes = shapes.infer_shapes(graph, 1)
        segments = []
        for layers, segment_outputs in placed_runs(graph, placement, self):
            try:
                image = compile_layers(layers, sizes, self.config, outputs=segment_outputs,
                                       data_words=data_words, program_words=program_words,
                                       pool_max_width=self.accelerator.pool_max_width,
                                       host_segments=self._host_segments())
            except ResidentFitError as exc:
                self.resident_notes.append(f"layers {layers[0].name!r}..{layers[-1].name!r} "
                                           f"run layer at a time: {exc}")
                continue
            runner = ResidentRunner(self.transport, image)
            segments.append(ResidentSegment(self, layers, image, runner))
        return segments

    def run_resident(self, segment, feeds):
        """Run ``segment`` on int8 ``feeds`` (``{input: (N, ...)}``); returns its outputs
        and ``(bytes moved, cycles or None)``. Called with :attr:`lock` held."""
        before = self.transport.moved
        # PERF_CYCLES alone, before and after: on a UART every register read is a frame,
        # and the whole run's cycles is what the profile shows of it.
        read = self.transport.csr_read
        start = read(Reg.PERF_CYCLES) if self.accelerator.has_counters else None
        outputs = segment.runner.run(feeds)
        cycles = None
        if start is not None:
            cycles = (read(Reg.PERF_CYCLES) - start) % (1 << 32)
        return outputs, (self.transport.moved - before, cycles)

    def finish_profile(self, profile):
        """Say in the reason of each MaxPool that ran inside its Conv's pass."""
        with self._fused_lock:
            fused = {pool.name: (pool, conv) for conv, pool in self._fused.items()}
        for entry in profile:
            pool, conv = fused.get(entry["layer"], (None, None))
            run = self._runs.get(pool) if pool is not None else None
            if entry["provider"] == self.name and run is not None and run.fused:
                entry["reason"] += (f"; fused into {conv.name!r}'s device pass (the "
                                    f"engine's 2x2 max pool after requantization)")

    def bytes_moved(self, layer, inputs, output):
        run = self._runs.get(layer)
        return run.bytes if run else 0

    @property
    def lock(self):
        """The transport's lock: every provider driving this device shares it."""
        return self.transport.lock

    def reset(self):
        """Soft-reset the accelerator and drop queued DMA data (a retry follows)."""
        self.accelerator.reset()

    def cycles(self, layer):
        """Device cycles (PERF_CYCLES) of ``layer``'s last run, or None (also on a device
        built without performance counters: ``Accelerator.has_counters``)."""
        run = self._runs.get(layer)
        return run.cycles if run else None

    def close(self):
        """Release the device (the twin's model, the XDMA file descriptors)."""
        self.transport.close()

    # ------------------------------------------------------------ layers

    def _conv(self, layer, x, pool=False):
        # The fields the CPU provider gives models.conv.conv2d and models.requant.requantize;
        # keyword arguments only, so options added to Accelerator.conv2d keep defaults.
        y = self.accelerator.conv2d(
            x, layer.weight, layer.bias, layer.multiplier, layer.shift,
            x_zero_point=layer.x_zero_point, y_zero_point=layer.y_zero_point, lo=layer.lo,
            hi=layer.hi, stride=layer.stride, padding=layer.padding, groups=layer.groups,
            pool=pool, name=layer.name)
        return y, self.accelerator.last_cycles

    def _add(self, layer, inputs):
        b = inputs[1] if layer.constant is None else layer.constant
        y = self.accelerator.add(inputs[0], layer.a_scale, layer.a_zero_point, b,
                                 layer.b_scale, layer.b_zero_point, layer.y_scale,
                                 layer.y_zero_point, layer.lo, layer.hi, name=layer.name)
        return y, self.accelerator.last_cycles

    def _dense(self, layer, x):
        lead = x.shape[:-1]
        y, cycles = self._dense_rows(layer, x.reshape(-1, x.shape[-1]), layer.weight,
                                     layer.bias, layer.x_zero_point)
        return y.reshape(*lead, y.shape[-1]), cycles

    def _dense_rows(self, layer, x, weight, bias, x_zero_point):
        """``x`` (P, K) through Dense passes of ``weight`` (O, K) with ``layer``'s
        requantization; ``((P, O) int8, cycles)``."""
        chunk = costs.dense_chunk(x.shape[1], self.config)
        outputs, cycles = [], (0 if self.accelerator.has_counters else None)
        # One pass per chunk: the chunk is the pass's image width and must fit the buffer.
        for start in range(0, len(x), chunk):
            outputs.append(self.accelerator.dense(
                x[start:start + chunk], weight, bias, layer.multiplier, layer.shift,
                x_zero_point=x_zero_point, y_zero_point=layer.y_zero_point, lo=layer.lo,
                hi=layer.hi, name=layer.name))
            if cycles is not None:
                cycles += self.accelerator.last_cycles
        return np.concatenate(outputs), cycles

    def _matmul(self, layer, a, b):
        """Both operands streamed: one Dense call per weights slice
        (:func:`~sw_driver.matmul_lowering.lower_matmul`)."""
        problem = matmul_refusal(layer, self.config, np.shape(a))
        if problem is not None:
            raise RefusedAtRunError(f"layer {layer.name!r}: {problem}")
        lowering = lower_matmul(a, b, a_zero_point=layer.a_zero_point,
                                b_zero_point=layer.b_zero_point, name=layer.name)
        outputs, cycles = [], 0
        for job in lowering.jobs:
            y, job_cycles = self._dense_rows(layer, job.x, job.w, None, job.x_zero_point)
            outputs.append(y)
            cycles = None if job_cycles is None else cycles + job_cycles
        return lowering.assemble(outputs), cycles
