"""The "opencl" provider: Tessera's integer layers as OpenCL kernels, identical to "cpu".

Integer layers (Conv, Dense, pools, Add, Flatten, Reshape; of sequence models the
activation x activation MatMul and, in ``sequence_mode="integer"``, IntSoftmax,
IntLayerNorm and IntGelu) run on the device through :class:`sw_driver.opencl.OpenCLRuntime`
and :mod:`sw_driver.opencl.sequence_kernels`, whose kernels are bit-exact with the golden
models (``tests/test_opencl_kernels.py``, ``tests/test_opencl_sequence_kernels.py``).
The float layers Quantize, Dequantize and Softmax (every Softmax the importer meets, at a
CNN's output or inside an attention block) are accepted and run on the host with the CPU
provider's own code, for two reasons: int8 crosses the bus instead of float32 (4x fewer
bytes), and float division and ``exp`` in OpenCL C are not required to round as NumPy does,
so a kernel could not promise identical outputs; the profile's reason says so. The float32
operators of the ORT-compatible sequence mode that hang on ``exp``/``tanh``/``erf``
(:data:`FLOAT_MATH_OPS`, ``FloatOp`` layers) are refused for the same reason, with it, and
run on the next provider.

What is kept between runs (per provider instance, so per session):

- each layer's weights, bias and requantization tables, uploaded on its first run
  (keyed by the layer object) and the int8 constant of an Add;
- device buffers: tensors return to the runtime's pool when dropped and are reused.

Within a run, when the session calls :meth:`OpenCLProvider.prepare`, a layer whose every
consumer also runs on this provider (and whose output is not a model output) keeps its
output on the device as a :class:`~sw_driver.opencl.DeviceTensor`: consecutive layers are
enqueued back to back on one in-order queue, with no wait between them, and the data is
read back only where the next layer runs elsewhere or the model ends.

Profile: because layers do not wait for each other, host wall time would book the whole
queue on the layer that reads (the final Dequantize). :meth:`OpenCLProvider.finish_profile`
therefore rewrites this provider's rows of the session's profile from OpenCL event profiling:

- ``device_seconds``: device time of the commands the layer enqueued (kernels, uploads,
  read-backs);
- ``queue_wait_seconds``: host time the layer spent blocked while the queue drained, that
  is, mostly waiting for earlier layers;
- ``host_seconds``: the host wall time the session measured around the layer;
- ``seconds``: the layer's own time, ``host_seconds - queue_wait_seconds + device_seconds``;
- ``timing``: ``"device"``, or ``"queue-inclusive: <why>"`` where the device gave no event
  times: then ``seconds`` stays the host wall time, waits included.
"""

import threading
import weakref

import numpy as np

from models.conv import K_MAX_WRAP_FREE
from models.pool import WINDOW_MAX

from .. import graph as g
from ..errors import ProviderUnavailableError
from .base import Provider, Refusal, keep_on_device
from .cpu import CPUProvider

try:
    import pyopencl as cl

    from ..opencl import DeviceTensor, OpenCLError, OpenCLRuntime, sequence_kernels
    from ..opencl.profiling import ProfilingUnavailableError, device_seconds
except ImportError as _exc:  # pyopencl is a dependency, but a broken install must not
    _IMPORT_ERROR = _exc     # take the CPU provider down with it: report it on use.
    cl = DeviceTensor = OpenCLError = OpenCLRuntime = sequence_kernels = None
    ProfilingUnavailableError = device_seconds = None
else:
    _IMPORT_ERROR = None

__all__ = ["OpenCLProvider"]

#: Layers computed on the host by the CPU provider's code (see the module docstring).
HOST_LAYERS = (g.Quantize, g.Dequantize, g.Softmax)
#: ORT-compatible float operators whose results hang on transcendental functions or on
#: NumPy's order of float32 sums (``docs/opencl.md``, "Sequence layers"): refused with
#: that reason rather than the generic one.
FLOAT_MATH_OPS = frozenset({"LayerNormalization", "Erf", "Gelu", "Tanh", "Sqrt", "Pow",
                            "ReduceMean", "GRU", "LSTM"})
#: Layers that only change a tensor's shape: a view on the device, no launch.
VIEW_LAYERS = (g.Flatten, g.Reshape)


def unavailable(name, exc):
    """The :class:`ProviderUnavailableError` for a provider that cannot start here."""
    return ProviderUnavailableError(f"provider {name!r} cannot use OpenCL here: {exc}")


def _is_depthwise(layer):
    o, cg = layer.weight.shape[:2]
    return cg == 1 and layer.groups == o


def _limits(layer):
    """Why the kernels cannot run ``layer`` (a layer the CPU may still run), or None."""
    if isinstance(layer, (g.Conv, g.Dense)):
        k = int(np.prod(layer.weight.shape[1:]))
        if k > K_MAX_WRAP_FREE:
            return (f"{k} products per output exceed {K_MAX_WRAP_FREE}, the most the "
                    f"kernels' int32 partial sums always hold")
    if isinstance(layer, (g.MaxPool, g.AveragePool)):
        (kh, kw), (top, left, bottom, right) = layer.kernel, layer.padding
        if max(top, bottom) >= kh or max(left, right) >= kw:
            return f"padding {layer.padding} not smaller than the kernel {layer.kernel}"
        if kh * kw > WINDOW_MAX:
            return f"window {layer.kernel} larger than {WINDOW_MAX} elements"
    return None


class OpenCLProvider(Provider):
    """Runs Tessera's layers on one OpenCL device, bit-identical to the "cpu" provider.

    Parameters
    ----------
    device : str, pyopencl.Device or None
        ``"platform:device"`` indices or part of a device name. None takes the first GPU,
        else the first device (:func:`sw_driver.opencl.select_device`); built by name, the
        session takes it from ``TESSERA_OPENCL_DEVICE`` when not given (:mod:`.options`). In a
        session,
        ``("opencl", {"device": "gpu"})`` is the "gpu" provider instead.

    Raises
    ------
    ProviderUnavailableError
        OpenCL cannot be used at all: pyopencl missing, no platform, the requested device
        missing or unsuitable, the kernels fail to build, or the device is out of memory.
        The message carries the backend's (which lists the devices that exist), and
        ``__cause__`` the backend's exception.
    """

    name = "opencl"

    def __init__(self, device=None):
        if _IMPORT_ERROR is not None:
            raise unavailable(self.name, self._without_pyopencl(
                f"pyopencl does not import ({_IMPORT_ERROR})"))
        try:
            self.runtime = self._make_runtime(device)
        except (OpenCLError, cl.Error) as exc:
            raise unavailable(self.name, exc) from exc
        self._cpu = CPUProvider()
        # Keyed by layer object: dropped with the session's graph, never shared across
        # models, and a second session on the same provider uploads its own layers.
        self._weights = weakref.WeakKeyDictionary()
        self._constants = weakref.WeakKeyDictionary()
        self._moved = weakref.WeakKeyDictionary()
        self._keep = weakref.WeakSet()
        self._pending = []  # layers enqueued since the last read, for overflow messages
        # Per thread: layer name -> profiling.Recording of its last run, until the session
        # asks for the figures at the end of the run (finish_profile).
        self._recordings = _ThreadRecordings()

    def _without_pyopencl(self, why):
        """The refusal when pyopencl does not import (the "gpu" provider adds CUDA's)."""
        return why

    def _make_runtime(self, device):
        return OpenCLRuntime(device)

    @property
    def device_name(self):
        """The OpenCL device's name."""
        return self.runtime.device_name

    def __repr__(self):
        return f"<{type(self).__name__} {self.name!r} on {self.device_name!r}>"

    # ------------------------------------------------------------ the Provider interface

    def supports(self, layer, shape=None):
        if isinstance(layer, HOST_LAYERS):
            return None
        if isinstance(layer, g.FloatOp) and layer.op_type in FLOAT_MATH_OPS:
            return Refusal(f"{layer.op_type} is float32 math of the ORT-compatible mode; "
                           f"OpenCL's exp/tanh/erf do not round as NumPy's do (up to 2 ulp "
                           f"apart on PoCL), so no kernel could be bit-exact")
        if type(layer) not in _DEVICE_RUNNERS and not isinstance(layer, VIEW_LAYERS):
            return Refusal(f"no OpenCL kernel for {layer.op}")
        problem = _limits(layer)
        return None if problem is None else Refusal(problem)

    def describe(self, layer):
        if isinstance(layer, g.Softmax):
            return ("Softmax is float: run on the host with the CPU provider's code, as "
                    "OpenCL's exp does not round as NumPy's does")
        if isinstance(layer, HOST_LAYERS):
            return (f"{layer.op} is float: run on the host with the CPU provider's code, so "
                    f"int8 rather than float crosses the bus")
        if isinstance(layer, VIEW_LAYERS):
            return "a shape change: a view of the device tensor, no launch"
        return f"OpenCL kernel on {self.device_name}"

    def prepare(self, placement, outputs):
        """Decide which outputs stay on the device (called once by the session; arguments
        as for :meth:`Provider.prepare`)."""
        keep_on_device(self, placement, outputs, HOST_LAYERS, self._keep)

    def run(self, layer, inputs):
        with self.runtime.commands.recording() as record:
            y = self._run(layer, inputs)
        self._recordings.by_layer[layer.name] = record
        return y

    def _run(self, layer, inputs):
        moved = 0
        if isinstance(layer, HOST_LAYERS):
            host = []
            for x in inputs:
                if isinstance(x, DeviceTensor):
                    moved += x.nbytes
                    x = self._read(x)
                host.append(x)
            self._moved[layer] = moved
            return self._cpu.run(layer, host)
        if isinstance(layer, VIEW_LAYERS) and not isinstance(inputs[0], DeviceTensor):
            y = self._cpu.run(layer, inputs)  # already on the host: a NumPy reshape
        else:
            on_device = []
            for x in inputs:
                x, uploaded = self._on_device(x)
                moved += uploaded
                on_device.append(x)
            y, uploaded = _DEVICE_RUNNERS[type(layer)](self, layer, on_device)
            moved += uploaded
            self._pending.append(layer.name)
            if isinstance(y, DeviceTensor) and layer not in self._keep:
                moved += y.nbytes
                y = self._read(y)
        self._moved[layer] = moved
        return y

    def bytes_moved(self, layer, inputs, output):
        """Bytes copied between host and device by the last run of ``layer``.

        Counts activations uploaded or read back and, on a layer's first run, its weights.
        """
        return self._moved.get(layer, 0)

    def finish_profile(self, profile):
        """Book device time per layer in this provider's rows of a finished run's profile.

        Called by the session once every output is on the host, so the queue has drained
        and every event has its times. The fields are described in the module docstring.
        """
        recordings, self._recordings.by_layer = self._recordings.by_layer, {}
        for entry in profile:
            record = recordings.get(entry["layer"]) if entry["provider"] == self.name else None
            if record is None:
                continue
            try:
                device = device_seconds(record.events)
            except ProfilingUnavailableError as exc:
                entry["timing"] = f"queue-inclusive: {exc}"
                continue
            host = entry["seconds"]
            entry.update(seconds=host - record.wait_seconds + device, host_seconds=host,
                         queue_wait_seconds=record.wait_seconds, device_seconds=device,
                         timing="device")

    # ------------------------------------------------------------ helpers

    def _on_device(self, x):
        """``(DeviceTensor, bytes uploaded)`` for an input."""
        if isinstance(x, DeviceTensor):
            if x.runtime is self.runtime:
                return x, 0
            x = x.get()  # another device's tensor: through the host
        tensor = self.runtime.to_device(x)
        return tensor, x.nbytes

    def _read(self, tensor):
        pending, self._pending = self._pending, []
        try:
            return self.runtime.read(tensor)
        except OverflowError as exc:
            # Layers run asynchronously: the flag is only seen at this read.
            raise OverflowError(f"{exc} (layers enqueued since the last read: "
                                f"{pending})") from exc

    def _cached(self, cache, layer, make):
        """``(value, bytes uploaded)``: ``make()`` on the first call for ``layer``."""
        if layer in cache:
            return cache[layer], 0
        value, nbytes = make()
        cache[layer] = value
        return value, nbytes

    def _conv_weights(self, layer):
        rt = self.runtime

        def upload():
            tables = layer.weight.nbytes + 3 * 4 * layer.weight.shape[0]
            if isinstance(layer, g.Dense):
                return rt.upload_dense_weights(layer.weight, layer.bias, layer.multiplier,
                                               layer.shift), tables
            if _is_depthwise(layer):
                return rt.upload_depthwise_weights(layer.weight, layer.bias, layer.multiplier,
                                                   layer.shift), tables
            return rt.upload_conv_weights(layer.weight, layer.bias, layer.multiplier,
                                          layer.shift, groups=layer.groups), tables

        return self._cached(self._weights, layer, upload)

    def _constant(self, layer, shape):
        """``(DeviceTensor or None, bytes uploaded)``: an Add's constant at ``shape``.

        None when the constant does not broadcast to exactly ``shape``.
        """
        if np.broadcast_shapes(shape, layer.constant.shape) != tuple(shape):
            return None, 0
        per_shape = self._constants.setdefault(layer, {})
        if shape in per_shape:
            return per_shape[shape], 0
        # Broadcast once on the host per input shape: batch sizes in use are few.
        tensor = self.runtime.to_device(np.broadcast_to(layer.constant, shape))
        per_shape[shape] = tensor
        return tensor, tensor.nbytes


class _ThreadRecordings(threading.local):
    def __init__(self):
        self.by_layer = {}


# ---------------------------------------------------------------- one runner per layer kind
# Each takes (provider, layer, inputs as DeviceTensors) and returns (output, bytes uploaded).

def _conv(p, layer, inputs):
    weights, nbytes = p._conv_weights(layer)
    method = (p.runtime.depthwise_conv2d_requant if _is_depthwise(layer)
              else p.runtime.conv2d_requant)
    y = method(inputs[0], weights, x_zero_point=layer.x_zero_point,
               y_zero_point=layer.y_zero_point, stride=layer.stride, padding=layer.padding,
               dilation=layer.dilation, lo=layer.lo, hi=layer.hi)
    return y, nbytes


def _dense(p, layer, inputs):
    (x,) = inputs
    weights, nbytes = p._conv_weights(layer)
    # Every leading dimension is batch, as in the CPU provider.
    flat = x.reshape((int(np.prod(x.shape[:-1])), x.shape[-1]))
    y = p.runtime.dense_requant(flat, weights, x_zero_point=layer.x_zero_point,
                                y_zero_point=layer.y_zero_point, lo=layer.lo, hi=layer.hi)
    return y.reshape((*x.shape[:-1], y.shape[-1])), nbytes


def _max_pool(p, layer, inputs):
    return p.runtime.max_pool2d(inputs[0], layer.kernel, layer.stride, layer.padding), 0


def _avg_pool(p, layer, inputs):
    y = p.runtime.avg_pool2d(
        inputs[0], layer.kernel, layer.stride, layer.padding, x_scale=layer.x_scale,
        x_zero_point=layer.x_zero_point, y_scale=layer.y_scale,
        y_zero_point=layer.y_zero_point, count_include_pad=layer.count_include_pad,
        lo=layer.lo, hi=layer.hi)
    return y, 0


def _global_avg_pool(p, layer, inputs):
    y = p.runtime.global_avg_pool(inputs[0], layer.x_scale, layer.x_zero_point,
                                  layer.y_scale, layer.y_zero_point, layer.lo, layer.hi)
    return y, 0


def _add(p, layer, inputs):
    a, nbytes = inputs[0], 0
    if layer.constant is None:
        b = inputs[1]
    else:
        b, nbytes = p._constant(layer, a.shape)
    args = (layer.a_scale, layer.a_zero_point, layer.b_scale, layer.b_zero_point,
            layer.y_scale, layer.y_zero_point, layer.lo, layer.hi)
    sa, za, sb, zb, sy, zy, lo, hi = args
    if b is not None and b.shape == a.shape:
        return p.runtime.add(a, sa, za, b, sb, zb, sy, zy, lo, hi), nbytes
    # Broadcasting that grows ``a`` (rare in CNNs): the runtime broadcasts NumPy operands
    # on the host, uploads both and reads the sum back.
    host_a = p._read(a)
    host_b = layer.constant if b is None else p._read(b)
    y = p.runtime.add(host_a, sa, za, host_b, sb, zb, sy, zy, lo, hi)
    read = host_a.nbytes + (0 if b is None else host_b.nbytes)
    return y, nbytes + read + 3 * y.nbytes


def _matmul(p, layer, inputs):
    # Two activations (attention Q @ K^T, attention @ V), batched over heads and sequences.
    a, b = inputs
    y = sequence_kernels.batched_matmul_requant(
        p.runtime, a, b, a_zero_point=layer.a_zero_point, b_zero_point=layer.b_zero_point,
        multiplier=layer.multiplier, shift=layer.shift, y_zero_point=layer.y_zero_point,
        lo=layer.lo, hi=layer.hi)
    return y, 0


def _int_softmax(p, layer, inputs):
    # models.intonly.softmax normalizes the last axis, as the kernel does; the CPU
    # provider's runner moves ``axis`` last or views the tensor as 2-D (opset < 13).
    (x,) = inputs
    rt, params = p.runtime, layer.params
    axis = layer.axis + len(x.shape) if layer.axis < 0 else layer.axis
    if layer.coerce_2d:
        flat = x.reshape((int(np.prod(x.shape[:axis])), int(np.prod(x.shape[axis:]))))
        return sequence_kernels.intonly_softmax(rt, flat, params).reshape(x.shape), 0
    if axis == len(x.shape) - 1:
        return sequence_kernels.intonly_softmax(rt, x, params), 0
    # Another axis (rare): transposed on the host, the kernel on NumPy arrays.
    moved = np.ascontiguousarray(np.moveaxis(p._read(x), axis, -1))
    y = sequence_kernels.intonly_softmax(rt, moved, params)
    return np.ascontiguousarray(np.moveaxis(y, -1, axis)), 3 * x.nbytes


def _int_layernorm(p, layer, inputs):
    y = sequence_kernels.intonly_layernorm(p.runtime, inputs[0], layer.params, layer.lo,
                                           layer.hi)
    return y, 0


def _int_gelu(p, layer, inputs):
    return sequence_kernels.intonly_gelu(p.runtime, inputs[0], layer.params, layer.lo,
                                         layer.hi), 0


def _flatten(p, layer, inputs):
    (x,) = inputs
    axis = layer.axis + x.ndim if layer.axis < 0 else layer.axis
    return x.reshape((int(np.prod(x.shape[:axis])), int(np.prod(x.shape[axis:])))), 0


def _reshape(p, layer, inputs):
    (x,) = inputs
    # ONNX Reshape (allowzero=0): 0 copies the input's dimension, one -1 is inferred.
    shape = [x.shape[i] if d == 0 else int(d) for i, d in enumerate(layer.shape)]
    if -1 in shape:
        known = int(np.prod([d for d in shape if d != -1]))
        shape[shape.index(-1)] = x.size // known if known else 0
    return x.reshape(tuple(shape)), 0


_DEVICE_RUNNERS = {
    g.Conv: _conv,
    g.Dense: _dense,
    g.MatMul: _matmul,
    g.IntSoftmax: _int_softmax,
    g.IntLayerNorm: _int_layernorm,
    g.IntGelu: _int_gelu,
    g.MaxPool: _max_pool,
    g.AveragePool: _avg_pool,
    g.GlobalAveragePool: _global_avg_pool,
    g.Add: _add,
    g.Flatten: _flatten,
    g.Reshape: _reshape,
}
