"""Execution providers: one file per backend behind :class:`~.base.Provider`.

:data:`PROVIDERS` maps the names accepted by ``InferenceSession(providers=[...])`` to
provider classes; other backends register themselves here (``"opencl"``, ``"sim"``,
``"pcie"``) by adding an entry.
"""

from .base import Concurrency, Cost, Provider, Refusal
from .cpu import CPUProvider
from .gpu import GPUProvider
from .opencl import OpenCLProvider
from .pcie import PCIeProvider
from .sim import SimProvider
from .uart import UartProvider, UartTwinProvider

__all__ = ["ALIASES", "PROVIDERS", "CPUProvider", "Concurrency", "Cost", "GPUProvider",
           "OpenCLProvider", "PCIeProvider", "Provider", "Refusal", "SimProvider", "UartProvider",
           "UartTwinProvider"]

#: Provider name -> class. Instances are created per session, with no arguments.
PROVIDERS = {
    "cpu": CPUProvider,
    "opencl": OpenCLProvider,
    "gpu": GPUProvider,
    "sim": SimProvider,
    "pcie": PCIeProvider,
    "uart": UartProvider,
    "uart-twin": UartTwinProvider,
}

#: onnxruntime's names, accepted so that code written for onnxruntime runs unchanged.
ALIASES = {
    "CPUExecutionProvider": "cpu",
}
