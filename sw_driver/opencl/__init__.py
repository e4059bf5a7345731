"""OpenCL backend: Tessera's integer layers as kernels, bit-exact with ``models/``.

- :mod:`.runtime`: :class:`OpenCLRuntime`, the layer methods and weight upload.
- :mod:`.device`: device discovery and selection.
- :mod:`.program`: building the ``*.cl`` sources once per device.
- :mod:`.buffers`: the device buffer pool and :class:`DeviceTensor`.
- :mod:`.profiling`: which commands a layer enqueued and their device time (events).
- :mod:`.errors`: the exceptions, all subclasses of ``RuntimeError``.
"""

from .buffers import DeviceTensor
from .device import describe_devices, list_devices, select_device
from .errors import (
    DeviceNotFoundError,
    DeviceOutOfMemoryError,
    KernelBuildError,
    NoPlatformError,
    OpenCLError,
    UnsupportedDeviceError,
)
from .runtime import ConvWeights, DepthwiseWeights, OpenCLRuntime

__all__ = [
    "ConvWeights",
    "DepthwiseWeights",
    "DeviceNotFoundError",
    "DeviceOutOfMemoryError",
    "DeviceTensor",
    "KernelBuildError",
    "NoPlatformError",
    "OpenCLError",
    "OpenCLRuntime",
    "UnsupportedDeviceError",
    "describe_devices",
    "list_devices",
    "select_device",
]
