"""Exceptions of the OpenCL backend; each message says what to do next.

All subclass :class:`OpenCLError` (itself a ``RuntimeError``), so a provider can catch the
whole family and fall back to another backend.
"""

__all__ = [
    "DeviceNotFoundError",
    "DeviceOutOfMemoryError",
    "KernelBuildError",
    "NoPlatformError",
    "OpenCLError",
    "UnsupportedDeviceError",
]


class OpenCLError(RuntimeError):
    """Base class: the OpenCL backend cannot run here or could not run this layer."""


class NoPlatformError(OpenCLError):
    """No OpenCL platform (ICD) is installed or none has a device."""


class DeviceNotFoundError(OpenCLError):
    """The requested device (the ``device`` argument or option) does not exist.

    The message lists the devices that do, in the ``platform:device`` form accepted back.
    """


class UnsupportedDeviceError(OpenCLError):
    """The device lacks a feature the kernels rely on (e.g. 64-bit integers)."""


class KernelBuildError(OpenCLError):
    """The OpenCL C compiler rejected a program; the message carries its build log."""

    def __init__(self, message, log=""):
        super().__init__(message)
        self.log = log


class DeviceOutOfMemoryError(OpenCLError):
    """A buffer does not fit the device (too large for one allocation, or memory is full)."""
