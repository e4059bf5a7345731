"""Building the OpenCL C sources: once per device per process.

The kernels live in ``*.cl`` files next to this module; :data:`SOURCES` lists them in the
order they are concatenated (``requant.cl`` first: the others call its functions).
"""

import threading
import warnings
from pathlib import Path

import pyopencl as cl

from .errors import KernelBuildError

__all__ = ["SOURCES", "build_program", "device_context", "load_sources"]

SOURCES = ("requant.cl", "conv.cl", "depthwise.cl", "pool.cl", "eltwise.cl", "sequence.cl")
_HERE = Path(__file__).resolve().parent

# One context and one built program per device, shared by every runtime in the process.
_CACHE = {}
_LOCK = threading.Lock()


def load_sources(names=SOURCES):
    """The concatenated OpenCL C text of ``names`` (files in this package)."""
    return "\n".join((_HERE / name).read_text() for name in names)


def build_program(context, source, options=()):
    """Compile ``source`` for every device of ``context``.

    Raises
    ------
    KernelBuildError
        With the compiler's build log in the message (and in ``.log``).
    """
    program = cl.Program(context, source)
    try:
        with warnings.catch_warnings():
            # PyOpenCL turns any non-empty log into a CompilerWarning; a clean build of
            # ours has nothing to say, and a failing one is reported below with its log.
            warnings.simplefilter("ignore", cl.CompilerWarning)
            return program.build(options=list(options))
    except cl.Error as exc:
        logs = []
        for device in context.devices:
            try:
                log = program.get_build_info(device, cl.program_build_info.LOG)
            except cl.Error:
                log = ""
            if log and log.strip():
                logs.append(f"--- {device.name.strip()} ---\n{log.strip()}")
        log_text = "\n".join(logs) or str(exc)
        raise KernelBuildError(
            f"OpenCL program failed to build; build log:\n{log_text}\n"
            f"If this is Tessera's own source, report it with the device name; on an old "
            f"driver, try another device (TESSERA_OPENCL_DEVICE) or backend",
            log=log_text,
        ) from exc


def device_context(device):
    """``(context, program)`` for ``device``, built on first use and cached."""
    key = device.int_ptr
    with _LOCK:
        if key not in _CACHE:
            context = cl.Context([device])
            _CACHE[key] = (context, build_program(context, load_sources()))
        return _CACHE[key]
