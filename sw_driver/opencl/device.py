"""Finding and vetting an OpenCL device.

Selection order: the ``device`` argument, else the first GPU, else the first device of any
kind. No environment variable is read here: a session fills in the providers' ``device``
option from ``TESSERA_OPENCL_DEVICE`` (``sw_driver/providers/options.py``, the one table of
such fallbacks), and code that builds a runtime itself passes what it wants. A selection is either
``"platform:device"`` indices (as printed by :func:`describe_devices`) or a case-insensitive
substring of the device name (``"pthread"``, ``"NVIDIA"``).
"""

import re

import pyopencl as cl

from .errors import DeviceNotFoundError, NoPlatformError, UnsupportedDeviceError

__all__ = [
    "check_device",
    "describe_devices",
    "list_devices",
    "select_device",
]

#: Work-group size of the tiled convolution kernel.
MIN_WORK_GROUP_SIZE = 64
#: Local memory the tiled convolution needs: one 32 x 32 int weight tile.
MIN_LOCAL_MEMORY = 4 * 1024


def list_devices():
    """All OpenCL devices as ``[((platform_index, device_index), device), ...]``.

    Raises
    ------
    NoPlatformError
        If no OpenCL platform is installed or no platform has a device.
    """
    try:
        platforms = cl.get_platforms()
    except cl.Error as exc:
        # The ICD loader reports "no platform" as an error (CL_PLATFORM_NOT_FOUND_KHR).
        raise NoPlatformError(
            f"no OpenCL platform is installed ({exc}); install an OpenCL driver, e.g. "
            f"PoCL for the CPU (`apt-get install pocl-opencl-icd`, or `make setup`), or "
            f"use another Tessera backend"
        ) from exc
    found = []
    for p_index, platform in enumerate(platforms):
        try:
            devices = platform.get_devices()
        except cl.Error:
            # A platform without devices raises CL_DEVICE_NOT_FOUND; it just offers none.
            continue
        found.extend(((p_index, d_index), device) for d_index, device in enumerate(devices))
    if not found:
        raise NoPlatformError(
            "OpenCL platforms are installed but none has a device; check the driver "
            "(`clinfo` lists what the ICD loader sees) or use another Tessera backend"
        )
    return found


def _type_name(device):
    kinds = [name for name, bit in (("GPU", cl.device_type.GPU), ("CPU", cl.device_type.CPU),
                                    ("accelerator", cl.device_type.ACCELERATOR))
             if device.type & bit]
    return "/".join(kinds) or "other"


def describe_devices(devices=None):
    """One line per device, ``"p:d  device name (type) on platform name"``."""
    devices = list_devices() if devices is None else devices
    return "\n".join(
        f"  {p}:{d}  {device.name.strip()} ({_type_name(device)}) on "
        f"{device.platform.name.strip()}"
        for (p, d), device in devices
    )


def select_device(selection=None):
    """Pick a device; see the module docstring for the order and the selection syntax.

    Parameters
    ----------
    selection : str, pyopencl.Device or None
        A device object is returned as is (after :func:`check_device`).

    Returns
    -------
    pyopencl.Device

    Raises
    ------
    NoPlatformError, DeviceNotFoundError, UnsupportedDeviceError
    """
    if isinstance(selection, cl.Device):
        check_device(selection)
        return selection
    source = "device argument"
    devices = list_devices()
    if selection is None:
        gpus = [dev for _, dev in devices if dev.type & cl.device_type.GPU]
        device = gpus[0] if gpus else devices[0][1]
    else:
        device = _match(str(selection), devices, source)
    check_device(device)
    return device


def _match(selection, devices, source):
    text = selection.strip()
    indices = re.fullmatch(r"(\d+):(\d+)", text)
    if indices:
        wanted = (int(indices[1]), int(indices[2]))
        matches = [dev for key, dev in devices if key == wanted]
    else:
        matches = [dev for _, dev in devices if text.lower() in dev.name.lower()]
    if not matches:
        raise DeviceNotFoundError(
            f"no OpenCL device matches {selection!r} (from the {source}); give "
            f"'platform:device' indices or part of a device name. Available:\n"
            f"{describe_devices(devices)}"
        )
    return matches[0]


def _version(text):
    """``(major, minor)`` from an ``"OpenCL 1.2 ..."`` version string."""
    found = re.search(r"OpenCL (\d+)\.(\d+)", text)
    return (int(found[1]), int(found[2])) if found else (0, 0)


def check_device(device):
    """Raise :class:`UnsupportedDeviceError` if the kernels cannot run on ``device``.

    What the kernels rely on: 64-bit integers (``long``, for the requantization product;
    optional only in the embedded profile, via ``cles_khr_int64``), byte stores to global
    memory (core since OpenCL 1.1, an extension before), a work-group of 64 work-items and
    4 KiB of local memory for the tiled convolution.
    """
    name = device.name.strip()
    extensions = device.extensions.split()
    problems = []
    if device.profile.strip() == "EMBEDDED_PROFILE" and "cles_khr_int64" not in extensions:
        problems.append("no 64-bit integer support (embedded profile without cles_khr_int64)")
    if _version(device.version) < (1, 1) and "cl_khr_byte_addressable_store" not in extensions:
        problems.append("no byte-addressable stores (OpenCL 1.0 without "
                        "cl_khr_byte_addressable_store)")
    if device.max_work_group_size < MIN_WORK_GROUP_SIZE:
        problems.append(f"work-groups of at most {device.max_work_group_size} work-items "
                        f"(need {MIN_WORK_GROUP_SIZE})")
    if device.local_mem_size < MIN_LOCAL_MEMORY:
        problems.append(f"{device.local_mem_size} bytes of local memory "
                        f"(need {MIN_LOCAL_MEMORY})")
    if problems:
        raise UnsupportedDeviceError(
            f"OpenCL device {name!r} cannot run Tessera's kernels: " + "; ".join(problems)
            + ". Choose another device (the provider's device option, e.g. "
            "('opencl', {'device': 'p:d'}), or TESSERA_OPENCL_DEVICE) or use another "
            "Tessera backend"
        )
