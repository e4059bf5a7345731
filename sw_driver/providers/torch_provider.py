"""The "torch" provider: Tessera's integer layers on PyTorch, bit-identical to "cpu".

On CUDA the int8 values go to the tensor cores as float16 with float32 accumulation; on the
CPU (where this is tested) as float32. Both are exact by the argument of
``docs/semantics.md`` ("Exact int8 on float hardware"), enforced in
:mod:`.torch_kernels`: im2col plus a plain matrix multiply (no convolution algorithm
choice, so no Winograd or FFT), TF32 and reduced-precision reductions off, reductions
longer than :data:`~.cpu_kernels.CHUNK` products split into exact chunks (the profile's
``chunked`` field says so), and zero points, bias and requantization in int64 on the
device. The integer-only sequence layers (``IntSoftmax``, ``IntLayerNorm``, ``IntGelu``)
follow :mod:`models.intonly`'s recipes operation for operation in int64. Softmax (float
``exp``) runs on the host with the CPU provider's code; the float32 operators of the
ORT-compatible sequence mode are refused.

PyTorch is an optional extra (``pip install tessera[gpu]``) and is imported only when this
provider is built: the runtime never imports it otherwise (``tests/test_torch_provider.py``
checks). Within a run, a layer whose consumers all run here keeps its output on the device
(:meth:`TorchProvider.prepare`, as the "opencl" provider does); only the model's input
(float32, quantized on the device) and outputs cross to the host. Out of device memory, a
layer's batch is split in halves until it fits.

The "gpu" provider is this one on CUDA when PyTorch sees a CUDA device, else the OpenCL GPU
path (:mod:`.gpu`).

Placement: :meth:`TorchProvider.estimate` gives a time for every layer from a
:class:`TorchCostModel` (a fixed cost per layer plus MACs or elements at a rate), so the
planner compares it with the "cpu" provider's estimate layer by layer. On CUDA the rates are
calibrated: measured once per process and device with this provider's own kernels
(:func:`measure_costs`), the first time a session asks. On the CPU they are the fixed
figures of :data:`CPU_COSTS`, measured on the development machine, which do not beat the
"cpu" provider's: there the torch provider runs a layer only where it is listed first
without a rival estimate, or given faster ``costs``.
"""

import importlib.util
import math
import time
import weakref
from dataclasses import dataclass

import numpy as np

from models import intonly

from .. import graph as g
from ..errors import ProviderUnavailableError
from ..shapes import conv_output_hw
from .base import Cost, Provider, Refusal, keep_on_device
from .cpu import CPUProvider
from .cpu_kernels import CHUNK

__all__ = ["ALWAYS_CHOSEN", "CPU_COSTS", "INSTALL_HINT", "TorchCostModel", "TorchProvider",
           "graph_runner", "measure_costs", "torch_cuda_provider", "torch_cuda_status"]

INSTALL_HINT = "install tessera[gpu] (pip install 'tessera[gpu]', which brings PyTorch)"
#: Layers run on the host with the CPU provider's code: float exp does not round alike.
HOST_LAYERS = (g.Softmax,)
VIEW_LAYERS = (g.Flatten, g.Reshape)
#: Input shapes (batch sizes) a session captures as CUDA graphs; more run eagerly.
CAPTURED_SHAPES_MAX = 8


@dataclass(frozen=True)
class TorchCostModel:
    """The rates of the torch provider's time estimate: ``layer_seconds`` plus the layer's
    MACs at ``macs_per_second`` (Conv, Dense, MatMul) or its input elements at
    ``elements_per_second`` (pools, Add, Quantize, Dequantize).

    Parameters
    ----------
    macs_per_second, layer_seconds, elements_per_second : float
        Positive (``layer_seconds`` may be 0).
    source : str
        Where the figures come from, shown in the placement reason.
    """

    macs_per_second: float
    layer_seconds: float
    elements_per_second: float
    source: str = "given"

    def __post_init__(self):
        for name in ("macs_per_second", "layer_seconds", "elements_per_second"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not (
                    value > 0 or (value == 0 and name == "layer_seconds")) or \
                    not math.isfinite(value):
                raise ValueError(f"TorchCostModel.{name} must be a positive number, not "
                                 f"{value!r}")


#: The torch provider on PyTorch's CPU (float32, one thread), measured on the development
#: machine with ``bench/bench_torch.py`` (docs/performance.md): at batch 64 it matches the
#: "cpu" provider's rate, at batch 1 its fixed cost per layer is about twice as high. So
#: it is estimated at the cpu provider's default rates (``sw_driver.planner.CostModel``)
#: with twice the fixed cost, and never wins against it by default.
CPU_COSTS = TorchCostModel(macs_per_second=2e9, layer_seconds=40e-6,
                           elements_per_second=1e9,
                           source="PyTorch CPU figures of the development machine")

#: Figures that make the planner choose the torch provider for every layer it can run (the
#: exactness checks, which must not depend on what is faster where they run).
ALWAYS_CHOSEN = TorchCostModel(macs_per_second=1e18, layer_seconds=0.0,
                               elements_per_second=1e18,
                               source="set to be chosen wherever it can run")

_MEASURED = {}  # str(torch.device) -> TorchCostModel, measured once per process


def measure_costs(provider, *, repeats=5):
    """A :class:`TorchCostModel` measured on ``provider``'s device with its own kernels.

    Times a tiny convolution (the fixed cost per layer: launches and Python), a large one
    (its MACs beyond the tiny one's give the rate) and an Add of many elements, each the
    median of ``repeats`` after a warm-up, synchronizing the device around each. Takes
    about a second on a GPU (most of it the first use of the device).
    """
    torch = provider._torch
    kernels = provider.kernels
    rng = np.random.default_rng(0)

    def conv(c, o, hw, n):
        weight = rng.integers(-128, 128, (o, c, 3, 3), dtype=np.int8)
        layer = g.Conv("calibration", ("x",), "y", weight=weight,
                       bias=np.zeros(o, np.int32), x_zero_point=0,
                       multiplier=np.full(o, 1 << 30), shift=np.full(o, 20),
                       y_zero_point=0, padding=(1, 1, 1, 1))
        x = kernels.upload(rng.integers(-128, 128, (n, c, hw, hw), dtype=np.int8))
        return (lambda: _conv(provider, layer, [x])), n * hw * hw * o * c * 9

    def timed(run):
        def sync():
            if kernels.device.type == "cuda":
                torch.cuda.synchronize(kernels.device)
        run()
        sync()
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            run()
            sync()
            times.append(time.perf_counter() - start)
        return float(np.median(times))

    big_n = 64 if kernels.device.type == "cuda" else 4
    tiny, tiny_macs = conv(4, 4, 4, 1)
    big, big_macs = conv(64, 64, 32, big_n)
    fixed = timed(tiny)
    rate = (big_macs - tiny_macs) / max(timed(big) - fixed, 1e-9)
    add = g.Add("calibration", ("a", "b"), "y", a_scale=0.1, a_zero_point=0, b_scale=0.1,
                b_zero_point=0, y_scale=0.2, y_zero_point=0)
    a = kernels.upload(rng.integers(-128, 128, (big_n, 64, 32, 32), dtype=np.int8))
    elements = 2 * a.numel()
    per_element = max(timed(lambda: _add(provider, add, [a, a])) - fixed, 1e-9)
    return TorchCostModel(macs_per_second=rate, layer_seconds=fixed,
                          elements_per_second=elements / per_element,
                          source=f"measured on {kernels.device}")


def _import_torch(name):
    try:
        import torch
    except ImportError as exc:
        raise ProviderUnavailableError(
            f"provider {name!r} needs PyTorch, which does not import here ({exc}); "
            f"{INSTALL_HINT}") from exc
    return torch


def torch_cuda_status():
    """``(True, "")`` when PyTorch is installed and sees a CUDA device, else
    ``(False, why)``. Imports torch only when it is installed."""
    if importlib.util.find_spec("torch") is None:
        return False, f"PyTorch is not installed ({INSTALL_HINT})"
    import torch

    if not torch.cuda.is_available():
        return False, (f"PyTorch {torch.__version__} sees no CUDA device "
                       f"(built for CUDA {torch.version.cuda})")
    return True, ""


def torch_cuda_provider():
    """The "gpu" provider on PyTorch and CUDA, or None where either is missing."""
    ok, _ = torch_cuda_status()
    if not ok:
        return None
    provider = TorchProvider("cuda")
    provider.name = "gpu"
    return provider


class TorchProvider(Provider):
    """Runs Tessera's integer layers with PyTorch, bit-identical to the "cpu" provider.

    Parameters
    ----------
    device : {"cuda", "cuda:N", "cpu"} or None
        None: CUDA when PyTorch sees a device, else the CPU.
    costs : TorchCostModel, optional
        The rates of :meth:`estimate`. Default: on CUDA measured by :func:`measure_costs`
        (once per process and device, when first needed), on the CPU :data:`CPU_COSTS`.
    compile : bool
        Run requantization and im2col through ``torch.compile`` (fused kernels; the GEMM
        stays eager, see ``torch_kernels``). The first run of each input shape compiles
        (seconds to a minute); then a batch of 256 on an H200 runs about 1.6 times faster.

    Raises
    ------
    ProviderUnavailableError
        PyTorch does not import (the message says to install ``tessera[gpu]``), or CUDA
        was asked for and PyTorch sees no CUDA device (the message says which).
    """

    name = "torch"

    def __init__(self, device=None, *, costs=None, compile=False):
        if costs is not None and not isinstance(costs, TorchCostModel):
            raise TypeError(f"costs must be a sw_driver.providers.torch_provider."
                            f"TorchCostModel, not {type(costs).__name__}")
        torch = _import_torch(self.name)
        if device is None:
            device = "cuda" if torch.cuda.is_available() else "cpu"
        device = str(device)
        if device != "cpu" and not device.startswith("cuda"):
            raise ProviderUnavailableError(
                f"provider {self.name!r}: device must be 'cuda', 'cuda:N' or 'cpu', not "
                f"{device!r}")
        if device.startswith("cuda"):
            ok, why = torch_cuda_status()
            if not ok:
                raise ProviderUnavailableError(f"provider {self.name!r}: no CUDA: {why}")
        from . import torch_kernels

        self._torch = torch
        self._tk = torch_kernels
        self.kernels = torch_kernels.Kernels(device, compile=compile)
        self._cpu = CPUProvider()
        # Keyed by layer object: dropped with the session's graph.
        self._constants = weakref.WeakKeyDictionary()
        self._keep = weakref.WeakSet()
        self._moved = weakref.WeakKeyDictionary()
        self._notes = {}  # layer name -> what happened in its last run, for the profile
        self._costs = costs

    @property
    def device(self):
        """The ``torch.device`` the layers run on."""
        return self.kernels.device

    def __repr__(self):
        return f"<{type(self).__name__} {self.name!r} on {self.device}>"

    # ------------------------------------------------------------ the Provider interface

    def supports(self, layer, shape=None):
        if isinstance(layer, HOST_LAYERS) or isinstance(layer, VIEW_LAYERS):
            return None
        if isinstance(layer, g.FloatOp):
            return Refusal(f"{layer.op_type} is float32 math of the ORT-compatible mode; the "
                           f"torch provider runs integer layers only (torch's float "
                           f"functions do not round as NumPy's do)")
        if type(layer) not in _RUNNERS:
            return Refusal(f"no torch kernel for {layer.op}")
        if isinstance(layer, (g.MaxPool, g.AveragePool)):
            (kh, kw), (top, left, bottom, right) = layer.kernel, layer.padding
            if max(top, bottom) >= kh or max(left, right) >= kw:
                return Refusal(f"padding {layer.padding} not smaller than the kernel "
                               f"{layer.kernel}")
            if isinstance(layer, g.AveragePool) and kh * kw > self._tk.POOL_WINDOW_MAX:
                return Refusal(f"window {layer.kernel} larger than "
                               f"{self._tk.POOL_WINDOW_MAX} elements, the most a float32 "
                               f"window sum holds exactly")
        return None

    def describe(self, layer):
        if isinstance(layer, HOST_LAYERS):
            return ("Softmax is float: run on the host with the CPU provider's code, as "
                    "torch's exp does not round as NumPy's does")
        if isinstance(layer, VIEW_LAYERS):
            return "a shape change: a view of the device tensor"
        what = f"exact int8 on torch {self.device} ({self.kernels.compute})"
        chunks = _static_chunks(layer)
        if chunks:
            what += f"; {chunks}"
        return what

    @property
    def costs(self):
        """The :class:`TorchCostModel` of :meth:`estimate` (see the class parameters)."""
        if self._costs is None:
            if self.device.type == "cpu":
                self._costs = CPU_COSTS
            else:
                key = str(self.device)
                if key not in _MEASURED:
                    _MEASURED[key] = measure_costs(self)
                self._costs = _MEASURED[key]
        return self._costs

    def estimate(self, layer, shape):
        """Seconds from :attr:`costs`: a fixed cost per layer plus MACs (Conv, Dense,
        MatMul) or input elements (pools, Add, Quantize, Dequantize) at its rate. None for
        shape changes (free) and for Softmax (run on the host)."""
        if isinstance(layer, HOST_LAYERS + VIEW_LAYERS):
            return None
        work = _work(layer, shape)
        if work is None:
            return None
        count, unit = work
        costs = self.costs
        rate = costs.macs_per_second if unit == "MACs" else costs.elements_per_second
        return Cost(seconds=costs.layer_seconds + count / rate,
                    note=f"{count:,} {unit} at {rate / 1e9:.3g} G/s + "
                         f"{costs.layer_seconds * 1e6:.1f} us, {costs.source}")

    def prepare(self, placement, outputs):
        """Decide which outputs stay on the device (as :meth:`Provider.prepare`)."""
        keep_on_device(self, placement, outputs, HOST_LAYERS, self._keep)

    def whole_model(self, graph, placement):
        """The whole model as one device function (:func:`graph_runner`), when every layer
        is placed here and has a device kernel: no per-layer dispatch, and on CUDA one CUDA
        graph per input shape, captured on its first run, so that a small batch pays no
        launch cost per layer (see :meth:`Provider.whole_model`). A capture that fails (a
        layer that must read a value back to check its range) leaves that shape to the
        same function run eagerly. None where the model does not qualify."""
        if len(graph.inputs) != 1 or not placement or any(
                provider is not self or type(layer) not in _RUNNERS
                for layer, provider in placement):
            return None
        run = graph_runner(self, graph)
        name = graph.inputs[0].name
        outputs = [o.name for o in graph.outputs]
        captured = {}  # input shape -> (static input, static outputs, CUDA graph) or None

        def whole(feeds):
            x = self.kernels.upload(feeds[name])
            ys = None
            if self.device.type == "cuda":
                key = tuple(x.shape)
                if key not in captured and len(captured) < CAPTURED_SHAPES_MAX:
                    captured[key] = self._capture(run, x)
                entry = captured.get(key)
                if entry is not None:
                    static_x, ys, cuda_graph = entry
                    static_x.copy_(x)
                    cuda_graph.replay()
            if ys is None:
                ys = run(x)
            return {n: y.detach().cpu().numpy() for n, y in zip(outputs, ys, strict=True)}

        return whole

    def _capture(self, run, x):
        """``(static input, static outputs, torch.cuda.CUDAGraph)`` of ``run`` at ``x``'s
        shape, or None when the capture fails."""
        torch = self._torch
        try:
            static_x = x.clone()
            side = torch.cuda.Stream(device=self.device)
            side.wait_stream(torch.cuda.current_stream(self.device))
            with torch.cuda.stream(side):  # warm-up: constants, allocations, cuBLAS
                for _ in range(2):
                    run(static_x)
            torch.cuda.current_stream(self.device).wait_stream(side)
            cuda_graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(cuda_graph):
                static_out = run(static_x)
        except Exception:  # any failure of the capture leaves the eager path
            try:
                torch.cuda.synchronize(self.device)
            except Exception:  # an invalidated capture may report again here
                pass
            return None
        return static_x, static_out, cuda_graph

    def run(self, layer, inputs):
        tk = self._tk
        self._notes.pop(layer.name, None)
        moved = 0
        if isinstance(layer, HOST_LAYERS):
            host = []
            for x in inputs:
                if isinstance(x, tk.DeviceArray):
                    moved += x.nbytes
                    x = x.numpy()
                host.append(x)
            self._moved[layer] = moved
            return self._cpu.run(layer, host)
        if isinstance(layer, VIEW_LAYERS) and not isinstance(inputs[0], tk.DeviceArray):
            self._moved[layer] = 0
            return self._cpu.run(layer, inputs)
        if any(isinstance(x, np.ndarray) and x.dtype != _input_dtype(layer) for x in inputs):
            return self._cpu.run(layer, inputs)  # the golden model raises its error
        tk.exact_settings(self.device)
        tensors = []
        for x in inputs:
            if isinstance(x, tk.DeviceArray) and x.tensor.device == self.device:
                tensors.append(x.tensor)
            else:
                host = np.asarray(x)
                moved += host.nbytes
                tensors.append(self.kernels.upload(host))
        try:
            y = self._split_on_oom(layer, tensors)
        except tk.AccumulatorOverflow:
            # Outside int32: the golden model raises its own error (or, at the exact
            # boundary the bound could not rule out, returns the right answer).
            self._moved[layer] = moved
            return self._cpu.run(layer, [np.asarray(x) for x in inputs])
        if layer not in self._keep:
            out = y.detach().cpu().numpy()
            self._moved[layer] = moved + out.nbytes
            return out
        self._moved[layer] = moved
        return tk.DeviceArray(y)

    def bytes_moved(self, layer, inputs, output):
        """Bytes copied between host and device by the last run of ``layer`` (activations;
        weights are uploaded once, when the layer first runs)."""
        return self._moved.get(layer, 0)

    def finish_profile(self, profile):
        """Add ``chunked`` (a reduction split into exact chunks) and ``batch_split`` (out
        of device memory) to this provider's rows."""
        notes, self._notes = self._notes, {}
        for entry in profile:
            if entry["provider"] == self.name:
                entry.update(notes.get(entry["layer"], {}))

    # ------------------------------------------------------------ helpers

    def _note(self, layer, key, text):
        self._notes.setdefault(layer.name, {})[key] = text

    def _constant(self, layer, key, make):
        per_layer = self._constants.setdefault(layer, {})
        if key not in per_layer:
            per_layer[key] = make()
        return per_layer[key]

    def _split_on_oom(self, layer, tensors):
        torch = self._torch
        try:
            return _RUNNERS[type(layer)](self, layer, tensors)
        except torch.OutOfMemoryError:
            n = tensors[0].shape[0] if tensors[0].dim() else 0
            if n < 2:
                raise
            if self.device.type == "cuda":
                torch.cuda.empty_cache()
            half = n // 2
            split = _splittable(layer, tensors)
            first = [t[:half] if s else t for t, s in zip(tensors, split, strict=True)]
            second = [t[half:] if s else t for t, s in zip(tensors, split, strict=True)]
            self._note(layer, "batch_split", "out of device memory: the batch was split")
            return torch.cat([self._split_on_oom(layer, first),
                              self._split_on_oom(layer, second)], dim=0)


def _work(layer, shape):
    """``(count, unit)`` of ``layer`` on an input of ``shape``: MACs or input elements."""
    if shape is None:
        return None
    shape = tuple(int(d) for d in shape)
    if isinstance(layer, g.Conv) and len(shape) == 4:
        oh, ow = conv_output_hw(layer, shape[2], shape[3])
        return shape[0] * oh * ow * math.prod(layer.weight.shape), "MACs"
    if isinstance(layer, g.Dense):
        return math.prod(shape[:-1]) * math.prod(layer.weight.shape), "MACs"
    if isinstance(layer, g.MatMul) and len(shape) >= 2:
        # The second operand's shape is not known here: taken as (..., K, M), the square
        # score matrix of self-attention (as the accelerators' estimate takes it).
        return math.prod(shape) * shape[-2], "MACs"
    count = math.prod(shape)
    return count * (2 if isinstance(layer, g.Add) and layer.constant is None else 1), \
        "elements"


def _input_dtype(layer):
    return np.float32 if isinstance(layer, g.Quantize) else np.int8


def _splittable(layer, tensors):
    """Which inputs are cut along dimension 0 when the batch is split."""
    first = tensors[0]
    flags = [True]
    for t in tensors[1:]:
        if isinstance(layer, g.MatMul):
            flags.append(t.dim() >= 3 and first.dim() >= 3 and t.shape[0] == first.shape[0])
        else:  # Add: an operand of the same rank and batch is element-wise in dimension 0
            flags.append(t.dim() == first.dim() and t.shape[0] == first.shape[0])
    return flags


def _static_chunks(layer):
    if isinstance(layer, (g.Conv, g.Dense)):
        k = math.prod(layer.weight.shape[1:])
        if k > CHUNK:
            return _chunk_text(k)
    return ""


def _chunk_text(k):
    return (f"chunked: {k} products per output exceed {CHUNK}, summed in "
            f"{-(-k // CHUNK)} exact chunks")


# ---------------------------------------------------------------- one runner per layer kind
# Each takes (provider, layer, input tensors on the device) and returns a tensor there.

def _conv(p, layer, inputs):
    w, rq = p._constant(layer, "w", lambda: p._tk.conv_constants(p.kernels, layer))
    chunks = _static_chunks(layer)
    if chunks:
        p._note(layer, "chunked", chunks)
    return p.kernels.conv(
        inputs[0], w, rq, kernel=tuple(int(k) for k in layer.weight.shape[2:]),
        stride=tuple(layer.stride), padding=tuple(layer.padding),
        dilation=tuple(layer.dilation), groups=int(layer.groups), zx=int(layer.x_zero_point))


def _dense(p, layer, inputs):
    (x,) = inputs
    w_t, rq = p._constant(layer, "w", lambda: p._tk.dense_constants(p.kernels, layer))
    chunks = _static_chunks(layer)
    if chunks:
        p._note(layer, "chunked", chunks)
    y = p.kernels.dense(x.reshape(-1, x.shape[-1]), w_t, rq)
    return y.reshape(*x.shape[:-1], y.shape[-1])


def _matmul(p, layer, inputs):
    tk = p._tk
    a, b = inputs
    if a.dim() < 2 or b.dim() < 2 or a.shape[-1] != b.shape[-2]:
        raise tk.AccumulatorOverflow("shapes the golden model refuses")  # its error
    k = int(a.shape[-1])
    ndim = max(a.dim(), b.dim())
    za, zb = int(layer.a_zero_point), int(layer.b_zero_point)
    per_channel = np.size(layer.multiplier) > 1 or np.size(layer.shift) > 1
    if per_channel:
        channels = int(max(np.size(layer.multiplier), np.size(layer.shift)))
        shape = tuple(channels if i == 1 else 1 for i in range(ndim))
    else:
        shape = ()
    rq = p._constant(layer, ("rq", shape, k), lambda: p.kernels.requant(
        np.asarray(layer.multiplier).reshape(-1 if per_channel else ()),
        np.asarray(layer.shift).reshape(-1 if per_channel else ()), shape,
        zy=layer.y_zero_point, lo=layer.lo, hi=layer.hi,
        check=tk.matmul_bound(k, za, zb) > tk.INT32_MAX))
    if k > CHUNK:
        p._note(layer, "chunked", _chunk_text(k))
    return p.kernels.matmul(a, b, za=za, zb=zb, rq=rq)


def _max_pool(p, layer, inputs):
    return p.kernels.max_pool(inputs[0], kernel=tuple(layer.kernel),
                              stride=tuple(layer.stride), padding=tuple(layer.padding))


def _avg_pool(p, layer, inputs):
    (x,) = inputs
    h, w = int(x.shape[2]), int(x.shape[3])
    rq = p._constant(layer, ("rq", h, w),
                     lambda: p._tk.avg_pool_params(p.kernels, layer, h, w))
    return p.kernels.avg_pool(x, rq, kernel=tuple(layer.kernel), stride=tuple(layer.stride),
                              padding=tuple(layer.padding), zx=int(layer.x_zero_point))


def _global_avg_pool(p, layer, inputs):
    (x,) = inputs
    hw = int(x.shape[2] * x.shape[3])
    rq = p._constant(layer, ("rq", hw),
                     lambda: p._tk.global_pool_params(p.kernels, layer, hw))
    return p.kernels.global_avg_pool(x, rq, zx=int(layer.x_zero_point))


def _add(p, layer, inputs):
    table = p._constant(layer, "table", lambda: p._tk.add_table(p.kernels, layer))
    if layer.constant is None:
        a, b = inputs
    else:
        (a,) = inputs
        b = p._constant(layer, "b", lambda: p.kernels.upload(layer.constant))
    return p.kernels.add(a, b, table)


def _quantize(p, layer, inputs):
    scale = p._constant(layer, "scale", lambda: p.kernels.upload(
        np.asarray(layer.scale, dtype=np.float32).reshape(())))
    return p.kernels.quantize(inputs[0], scale, int(layer.zero_point))


def _dequantize(p, layer, inputs):
    scale = p._constant(layer, "scale", lambda: p.kernels.upload(
        np.asarray(layer.scale, dtype=np.float32).reshape(())))
    return p.kernels.dequantize(inputs[0], scale, int(layer.zero_point))


def _flatten(p, layer, inputs):
    (x,) = inputs
    axis = layer.axis + x.dim() if layer.axis < 0 else layer.axis
    return x.reshape(int(np.prod(x.shape[:axis])), int(np.prod(x.shape[axis:])))


def _reshape(p, layer, inputs):
    (x,) = inputs
    # ONNX Reshape (allowzero=0): 0 copies the input's dimension, one -1 is inferred.
    return x.reshape([x.shape[i] if d == 0 else int(d) for i, d in enumerate(layer.shape)])


def _int_softmax(p, layer, inputs):
    (x,) = inputs
    shape = tuple(x.shape)
    axis = layer.axis + x.dim() if layer.axis < 0 else layer.axis
    if layer.coerce_2d:
        x = x.reshape(math.prod(shape[:axis]), -1)
    else:
        x = x.movedim(axis, -1)
    if x.shape[-1] > intonly.SOFTMAX_MAX_LENGTH or not x.numel():
        raise p._tk.AccumulatorOverflow("an axis the golden model refuses")  # its error
    y = p.kernels.int_softmax(x, layer.params)
    return y.reshape(shape) if layer.coerce_2d else y.movedim(-1, axis)


def _int_gelu(p, layer, inputs):
    return p.kernels.int_gelu(inputs[0], layer.params, int(layer.lo), int(layer.hi))


def _int_layernorm(p, layer, inputs):
    (x,) = inputs
    params = layer.params
    if x.dim() == 0 or x.shape[-1] != params.sign.shape[0]:
        raise p._tk.AccumulatorOverflow("a shape the golden model refuses")  # its error
    consts = p._constant(layer, "ln", lambda: tuple(
        p.kernels.upload(np.asarray(a, dtype=np.int64))
        for a in (params.sign, params.bias, params.multiplier, params.shift)))
    return p.kernels.int_layernorm(x, consts, params, int(layer.lo), int(layer.hi))


_RUNNERS = {
    g.IntSoftmax: _int_softmax,
    g.IntLayerNorm: _int_layernorm,
    g.IntGelu: _int_gelu,
    g.Conv: _conv,
    g.Dense: _dense,
    g.MatMul: _matmul,
    g.MaxPool: _max_pool,
    g.AveragePool: _avg_pool,
    g.GlobalAveragePool: _global_avg_pool,
    g.Add: _add,
    g.Quantize: _quantize,
    g.Dequantize: _dequantize,
    g.Flatten: _flatten,
    g.Reshape: _reshape,
}


def graph_runner(provider, graph):
    """The whole of ``graph`` as one function of a device tensor, every layer on
    ``provider``'s device with no host step: what a CUDA graph can capture once, so that a
    small batch pays no per-layer launch cost from Python (``scripts/gpu_check.py``
    measures it). Returns ``run(x) -> [output tensors]``.

    Raises
    ------
    ValueError
        A layer of ``graph`` has no torch kernel (Softmax and the float operators run on
        the host, so such a model is run by a session instead).
    """
    missing = [f"{layer.name} ({layer.op})" for layer in graph.layers
               if type(layer) not in _RUNNERS]
    if missing:
        raise ValueError(f"layers without a torch kernel cannot run in one device function: "
                         f"{', '.join(missing)}")
    first = graph.inputs[0].name
    outputs = [o.name for o in graph.outputs]

    def run(x):
        provider._tk.exact_settings(provider.device)
        env = {first: x}
        for layer in graph.layers:
            env[layer.output] = _RUNNERS[type(layer)](
                provider, layer, [env[name] for name in layer.inputs])
        return [env[name] for name in outputs]

    return run
