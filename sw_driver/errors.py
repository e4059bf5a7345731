"""Exceptions raised by the host runtime.

Every error the runtime raises on purpose is a :class:`TesseraError`, so a caller can catch
one class; the subclasses say which stage refused (loading, importing, placing, running) and
their messages name the file, node, layer or input concerned.
"""

__all__ = [
    "DeviceError",
    "InputError",
    "LayerError",
    "LayerFaultError",
    "MissingInitializerError",
    "ModelLoadError",
    "NotQuantizedError",
    "PlacementError",
    "ProviderUnavailableError",
    "QuantizationError",
    "RefusedAtRunError",
    "ResidentChecksumError",
    "ResidentFitError",
    "ResidentRunError",
    "RunTerminatedError",
    "TesseraError",
    "UnknownProviderError",
    "UnsupportedModelError",
    "UnsupportedOperatorError",
]


class TesseraError(Exception):
    """Base class of every error raised on purpose by ``sw_driver``."""


class ModelLoadError(TesseraError):
    """The file or bytes are not a readable, valid ONNX model (missing, truncated, corrupt)."""


class MissingInitializerError(ModelLoadError):
    """A node reads a tensor that no initializer, graph input or node provides."""


class UnsupportedModelError(TesseraError):
    """The model is valid ONNX but outside what the importer can turn into integer layers."""


class UnsupportedOperatorError(UnsupportedModelError):
    """The model uses operators Tessera does not run.

    Attributes
    ----------
    nodes : list of (str, str)
        Every unsupported node as ``(name, op_type)``, in graph order.
    """

    def __init__(self, message, nodes):
        super().__init__(message)
        self.nodes = list(nodes)


class NotQuantizedError(UnsupportedModelError):
    """A float model, or a float region, where a QDQ (QuantizeLinear/DequantizeLinear) one is
    required."""


class QuantizationError(UnsupportedModelError):
    """Quantization parameters that the integer contract cannot represent exactly."""


class UnknownProviderError(TesseraError, ValueError):
    """A provider name that is not in :data:`sw_driver.providers.PROVIDERS`."""


class PlacementError(TesseraError):
    """No provider in the session's list can run a layer."""


class ProviderUnavailableError(TesseraError, RuntimeError):
    """A provider cannot run on this machine at all (no driver, no device, no kernels).

    When the session lists other providers it drops this one with a warning and falls back;
    when none is left the error propagates. The cause (``__cause__``) is the backend's own
    exception.
    """


class InputError(TesseraError, ValueError):
    """A feed with a wrong name, shape, dtype or non-finite values."""


class LayerError(TesseraError):
    """A layer failed while running (e.g. an int32 accumulator overflow)."""


class DeviceError(TesseraError):
    """A device failed while running a layer (a timeout, its error flag, lost data).

    Unlike a :class:`LayerError`, the same layer may succeed after a reset or on another
    provider, so the session retries it (:mod:`sw_driver.dispatch`). The transport's and
    the accelerator's errors are subclasses.
    """


class RefusedAtRunError(TesseraError, ValueError):
    """A provider found, from the actual input shapes, that it cannot run a layer the
    planner gave it (the planner did not know those shapes, e.g. a MatMul's second operand).
    Nothing was sent to the device; the session runs the layer on the next provider and the
    profile gives this message as the reason (:mod:`sw_driver.dispatch`)."""


class LayerFaultError(LayerError):
    """No provider able to run a layer could finish it: each met a device fault.

    Attributes
    ----------
    faults : list of dict
        Every fault in the order met, as in the profile: ``provider``, ``attempt``,
        ``error``, ``seconds``.
    """

    def __init__(self, message, faults):
        super().__init__(message)
        self.faults = list(faults)


class RunTerminatedError(TesseraError):
    """A run stopped because its ``run_options.terminate`` was set."""


class ResidentFitError(TesseraError, ValueError):
    """A model (or segment) that the resident compiler cannot place on the device: a tensor
    or a layer's constants that do not fit the data memory, a program longer than the
    program memory, a record with more than the format's counts, a tensor that no layout
    keeps word-aligned. The caller falls back to layer-at-a-time for that part.

    Attributes
    ----------
    what : str
        The tensor or layer concerned.
    needed, free : int or None
        Bytes (or program words, as the message says) needed and available.
    """

    def __init__(self, message, *, what=None, needed=None, free=None):
        super().__init__(message)
        self.what, self.needed, self.free = what, needed, free


class ResidentChecksumError(DeviceError):
    """The device's checksum of a loaded resident image differs from the image's own:
    words were lost or corrupted on the way; the image is refused (and reloaded)."""


class ResidentRunError(DeviceError):
    """A resident program stopped with an error (``RES_STATUS.error``); the message gives
    ``RES_ERROR``, ``RES_PC`` and the pass it points at. The device has been reset and the
    image reloaded, so a retry can follow."""
