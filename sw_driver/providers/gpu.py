"""The "gpu" provider: PyTorch on CUDA where it can, else OpenCL on a GPU.

Built without a ``device`` option, "gpu" is the "torch" provider on CUDA
(:mod:`.torch_provider`, named "gpu" in profiles) when PyTorch is installed and sees a CUDA
device. Otherwise, or when an OpenCL ``device`` is given (the option, or
``TESSERA_OPENCL_DEVICE``), it is the OpenCL path below, which stays for GPUs without
PyTorch. ``("torch", {"device": "cpu"})`` runs the PyTorch path on any machine.

The OpenCL path: the "opencl" provider restricted to an OpenCL GPU device. Same kernels,
caching and bit-identical results as :mod:`.opencl`; the only difference is the device: a
GPU, or nothing. Where no OpenCL GPU exists, constructing it raises
:class:`~sw_driver.errors.ProviderUnavailableError` saying so, and a session that lists other
providers falls back to them with a warning. ``("opencl", {"device": "gpu"})`` in
a session's providers builds this provider. (CuPy, which ``design.md`` names as an
alternative, is not implemented: its integer kernels would need their own proof of
exactness.)
"""

from .opencl import OpenCLProvider, cl, unavailable
from .torch_provider import torch_cuda_provider, torch_cuda_status

__all__ = ["GPUProvider", "OpenCLGPUProvider"]


class GPUProvider(OpenCLProvider):
    """Tessera's layers on an OpenCL GPU, bit-identical to the "cpu" provider.

    Parameters
    ----------
    device : str, pyopencl.Device or None
        As for :class:`~.opencl.OpenCLProvider`, else the first GPU (built by name, the
        session takes it from ``TESSERA_OPENCL_DEVICE`` when not given, :mod:`.options`);
        the device chosen must be a GPU.

    Raises
    ------
    ProviderUnavailableError
        No OpenCL GPU on this machine (the message starts "no GPU" and lists the devices
        there are), the chosen device is not a GPU, or OpenCL cannot be used at all.
    """

    name = "gpu"

    def __new__(cls, device=None):
        # PyTorch on CUDA first; then __init__ is not called (the object is not a cls).
        if cls is GPUProvider and device is None:
            provider = torch_cuda_provider()
            if provider is not None:
                return provider
        return super().__new__(cls)

    def _without_pyopencl(self, why):
        _, no_torch = torch_cuda_status()
        return f"no GPU: {no_torch}; and OpenCL: {why}"

    def _make_runtime(self, device):
        # Imported here: this module must import (and say why not) without pyopencl.
        from ..opencl import (
            NoPlatformError,
            OpenCLRuntime,
            describe_devices,
            list_devices,
            select_device,
        )
        _, no_torch = torch_cuda_status()
        try:
            devices = list_devices()
        except NoPlatformError as exc:
            raise unavailable(self.name, f"no GPU: {no_torch}; and OpenCL: {exc}") from exc
        gpus = [dev for _, dev in devices if dev.type & cl.device_type.GPU]
        if not gpus:
            raise unavailable(
                self.name, f"no GPU: {no_torch}, and this machine has no OpenCL GPU device; "
                f"providers=['opencl'] runs on the OpenCL devices present, "
                f"('torch', {{'device': 'cpu'}}) on PyTorch's CPU:\n"
                f"{describe_devices(devices)}")
        if device is None:
            device = gpus[0]
        chosen = select_device(device)
        if not chosen.type & cl.device_type.GPU:
            raise unavailable(
                self.name, f"the selected device {chosen.name.strip()!r} (the device "
                f"option) is not a GPU; GPUs present: "
                f"{', '.join(repr(d.name.strip()) for d in gpus)}")
        return OpenCLRuntime(chosen)


class OpenCLGPUProvider(GPUProvider):
    """The "gpu" provider's OpenCL path, even where PyTorch sees a CUDA device (where
    ``GPUProvider()`` is the torch provider): for code that means OpenCL on a GPU.

    Parameters and errors are :class:`GPUProvider`'s.
    """
