"""Execution providers: one file per backend behind :class:`~.base.Provider`.

:data:`PROVIDERS` maps the names accepted by ``InferenceSession(providers=[...])`` to
provider classes; other backends register themselves here (``"opencl"``, ``"sim"``,
``"pcie"``) by adding an entry. A session builds each from its name or from onnxruntime's
``(name, options)`` pair; :mod:`.options` checks the options against the constructor and
holds the one table of environment variables read as a fallback.
"""

from .base import Concurrency, Cost, Provider, Refusal
from .cpu import CPUProvider
from .gpu import GPUProvider, OpenCLGPUProvider
from .opencl import OpenCLProvider
from .options import (
    ENVIRONMENT,
    UnknownProviderOptionError,
    format_providers,
    make_provider,
    parse_providers,
    provider_name,
)
from .pcie import PCIeProvider
from .sim import SimProvider
from .torch_provider import TorchProvider
from .uart import UartProvider, UartTwinProvider

__all__ = ["ALIASES", "ENVIRONMENT", "PROVIDERS", "CPUProvider", "Concurrency", "Cost",
           "GPUProvider", "OpenCLGPUProvider", "OpenCLProvider", "PCIeProvider", "Provider",
           "Refusal", "SimProvider", "TorchProvider", "UartProvider", "UartTwinProvider",
           "UnknownProviderOptionError", "format_providers", "make_provider", "parse_providers",
           "provider_name"]

#: Provider name -> class. Instances are created per session, from the options given with
#: the name (none for a plain name) and the environment fallback (:mod:`.options`).
PROVIDERS = {
    "cpu": CPUProvider,
    "opencl": OpenCLProvider,
    "gpu": GPUProvider,
    "torch": TorchProvider,
    "sim": SimProvider,
    "pcie": PCIeProvider,
    "uart": UartProvider,
    "uart-twin": UartTwinProvider,
}

#: onnxruntime's names, accepted so that code written for onnxruntime runs unchanged.
ALIASES = {
    "CPUExecutionProvider": "cpu",
}
