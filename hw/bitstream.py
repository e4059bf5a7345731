"""Bitstreams for the boards, with a machine-readable report of resources and fmax.

``build_bitstream("ulx3s-85f")`` builds the whole accelerator (``AcceleratorTop`` behind the
UART host bridge, :class:`hw.boards.accelerator.AcceleratorBoardTop`) in the board's
default configuration (:data:`DEFAULT_CONFIGS`) at its default clock
(:data:`DEFAULT_CLOCK_MHZ`): Amaranth's platform writes the build files, and Yosys, nextpnr
and the bitstream packer from the pip-installed YoWASP wheels run one by one, with
progress lines, into ``build/<board>/``. ``report.json`` there carries:

- ``fmax_mhz`` (nextpnr's achieved fmax of the design clock), ``target_mhz`` (asked for),
  ``clock_mhz`` (what the PLL makes), ``timing_met``, the PLL dividers and the UART divisor,
- flat ``<resource>_used`` / ``<resource>_available`` entries (``MULT18X18D``, ``LUT4``,
  ``TRELLIS_FF``, ``DP16KD`` on ECP5; ``LC``, ``SB_MAC16``, ``EBR``, ``SPRAM`` on iCE40) and
  the same under ``resources``,
- the configuration (its ``clock_mhz`` the clock asked for, so it rebuilds the same
  design), the critical path, tool versions, wall times and the log paths.

The design clock comes out of a PLL; nextpnr derives its constraint from the oscillator
pin's and the PLL dividers, so the timing it checks is at the frequency the build chose.
``--timing-allow-fail`` keeps a miss from stopping the build: the report says
``timing_met: false`` with the critical path and the log, and ``tessera bitstream`` exits
non-zero.

``build_bitstream(board, ArrayConfig(...))`` still builds the older bare-array top (the
systolic array under an on-chip pattern load, :mod:`hw.boards.pattern`, its clock pin
constrained to ``target_mhz``) into ``build/<board>-array/``; ``bench/bench_fmax.py`` uses it.

Public functions the design-space search builds on (stable): :func:`build_bitstream`,
:func:`default_config`, :func:`prepare_build`, :func:`board_top`, :func:`inputs_key`,
:func:`load_report`, :func:`parse_nextpnr_report`, :func:`multipliers_needed`,
:func:`accelerator_report`.
"""

import hashlib
import json
import re
import shlex
import subprocess
import time
from pathlib import Path

from amaranth.build import Clock, Resource

from contract.config import ArrayConfig, ConvEngineConfig
from contract.postprocess import postprocess_multipliers

from .boards import icebreaker, ulx3s
from .boards.accelerator import DEFAULT_BAUD, AcceleratorBoardTop

#: Board name -> amaranth-boards platform class.
KNOWN_BOARDS = {**ulx3s.PLATFORMS, **icebreaker.PLATFORMS}

#: Board name -> the accelerator configuration ``make bitstream BOARD=...`` builds.
DEFAULT_CONFIGS = {**ulx3s.DEFAULT_CONFIGS, **icebreaker.DEFAULT_CONFIGS}

#: Board name -> the design clock (MHz) of the default build.
DEFAULT_CLOCK_MHZ = {**ulx3s.DEFAULT_CLOCK_MHZ, **icebreaker.DEFAULT_CLOCK_MHZ}

_MULTIPLIERS = {**ulx3s.MULTIPLIERS, **icebreaker.MULTIPLIERS}

# Report name -> nextpnr cell type, per FPGA family. On ECP5 every LUT4 is a TRELLIS_COMB
# cell (half of a carry-chain CCU2C counts as one too), so "LUT4" is the fabric LUT count.
RESOURCE_CELLS = {
    "ecp5": {"LUT4": "TRELLIS_COMB", "TRELLIS_FF": "TRELLIS_FF", "MULT18X18D": "MULT18X18D",
             "DP16KD": "DP16KD"},
    "iCE40": {"LC": "ICESTORM_LC", "SB_MAC16": "ICESTORM_DSP", "EBR": "ICESTORM_RAM",
              "SPRAM": "ICESTORM_SPRAM"},
}

# What the packer writes, per family.
BITSTREAM_SUFFIX = {"ecp5": "bit", "iCE40": "bin"}

DEFAULT_TARGET_MHZ = 200.0  # clock constraint of the bare-array build
DEFAULT_SEED = 1
TOP_NAME = "top"
REPORT_NAME = "report.json"
NEXTPNR_REPORT_NAME = "nextpnr-report.json"
ARRAY_SUFFIX = "-array"  # build folder suffix of the bare-array top

# Every PE on an anti-diagonal sees the same control bits (valid, last, the `fresh` flag) on
# the same cycle, so Yosys's opt_merge folds their registers into one flip-flop that then
# drives up to eight PEs spread over the die: that was the critical path of the 8x8 array
# (fresh -> accumulator carry chain, 2.6 ns of routing). `keep` on the PE registers leaves
# each PE its own copy, next to its accumulator; cost: about 500 flip-flops for 8x8.
KEEP_PE_REGISTERS = "setattr -set keep 1 *.pe_*/t:$dff"

# Lines of the tools' own logs worth echoing as progress (the rest goes to the log file).
_PHASE_PATTERNS = {
    "yosys": re.compile(
        r"^\d+\.\d+\. Executing (FLATTEN|ALUMACC|MEMORY|DFFLEGALIZE|ABC9?) pass|"
        r"^End of script"),
    "nextpnr": re.compile(
        r"^Info: (Packing |Running main analytical placer|Running simulated annealing|"
        r"HeAP Placer Time|Routing\.\.|Router1 time|Router2 time|"
        r"Max frequency for clock|Program finished)|^Warning: Max frequency|"
        r"^Info:\s+(TRELLIS_COMB|TRELLIS_FF|MULT18X18D|DP16KD|ICESTORM_LC|ICESTORM_DSP|"
        r"ICESTORM_RAM|ICESTORM_SPRAM):\s+\d+/"),
}

# nextpnr's placer and router print a progress line every few iterations; on a big design
# that is minutes apart from the phase lines, so one of them is echoed every TICK_SECONDS.
_TICK_PATTERN = re.compile(r"^Info:\s+(at iteration #\d+|\s*\d+ \|)")
TICK_SECONDS = 20.0


def _board_sources(root):
    """The files under ``hw/`` (at ``root``) that a board build reads: all of them, since
    the whole accelerator is in the bitstream."""
    return sorted(root.glob("*.py")) + sorted((root / "boards").glob("*.py"))


class BitstreamError(RuntimeError):
    """A bitstream build failed; the message names the log to read."""


def _check_board(board):
    if board not in KNOWN_BOARDS:
        known = ", ".join(sorted(KNOWN_BOARDS))
        raise ValueError(f"unknown board {board!r}; known boards: {known}")
    return KNOWN_BOARDS[board]


def default_config(board):
    """The accelerator configuration ``make bitstream BOARD=board`` builds (chosen per board
    so it fits; docs/boards.md gives the figures)."""
    _check_board(board)
    return DEFAULT_CONFIGS[board]


def multipliers_needed(config):
    """Hardware multipliers (18x18 or 16x16 DSP blocks) of the whole accelerator: one per
    PE and four per rescaler of the post-processing bank (``contract.postprocess``); what
    ``synth_ecp5`` produces for the default tops."""
    return config.rows * config.cols + postprocess_multipliers(
        config.cols, residual_add=config.residual_add, pipelined=config.pipelined)


def _check_fits(board, config):
    """Refuse a configuration whose multipliers exceed the board's (before any tool runs).
    The iCE40 builds map part of the arithmetic to logic on purpose, so only the array is
    counted there."""
    cls = _check_board(board)
    available = _MULTIPLIERS.get(cls.device)
    if isinstance(config, ConvEngineConfig) and _family(board) == "ecp5":
        needed = multipliers_needed(config)
        what = (f"the {config.rows}x{config.cols} accelerator needs {needed} multipliers "
                f"({config.rows * config.cols} in the array, the rest in post-processing)")
    else:
        needed = config.rows * config.cols
        what = f"a {config.rows}x{config.cols} array needs {needed} multipliers"
    if available is not None and needed > available:
        raise ValueError(f"{what}; {board} ({cls.device}) has {available}")


def board_platform(board, *, target_mhz=DEFAULT_TARGET_MHZ):
    """An instance of ``board``'s platform whose default clock is constrained to
    ``target_mhz`` (``None`` keeps the board's oscillator frequency, as the accelerator
    build does: its PLL output is constrained from that).

    Raises
    ------
    ValueError
        ``board`` is not in :data:`KNOWN_BOARDS` (the message lists them).
    """
    cls = _check_board(board)
    if target_mhz is None:
        return cls()
    if isinstance(target_mhz, bool) or not isinstance(target_mhz, (int, float)) \
            or not 1 <= target_mhz <= 1000:
        raise ValueError(f"target_mhz must be a number in [1, 1000], not {target_mhz!r}")
    # A clock resource carries its constraint; Amaranth refuses a second one on the same
    # pin, so the platform is subclassed with the clock resource re-declared.
    resources = [
        Resource(r.name, r.number, *r.ios, Clock(target_mhz * 1e6), r.attrs)
        if r.name == cls.default_clk and r.number == 0 else r
        for r in cls.resources
    ]
    retimed = type(cls.__name__, (cls,), {"resources": resources,
                                          "__module__": cls.__module__})
    return retimed()


def _family(board):
    """``"ecp5"`` or ``"iCE40"`` (a property of the platform instance, not its class)."""
    return _check_board(board)().family


def _board_clock_mhz(board):
    """The board oscillator's frequency in MHz."""
    return KNOWN_BOARDS[board]().default_clk_frequency / 1e6


def design_clock_mhz(board, config, clock_mhz=None):
    """The clock a build asks the PLL for: ``clock_mhz`` if given, else the configuration's
    own ``clock_mhz``, else the board's :data:`DEFAULT_CLOCK_MHZ`."""
    _check_board(board)
    for choice in (clock_mhz, config.clock_mhz):
        if choice is not None:
            return choice
    return DEFAULT_CLOCK_MHZ[board]


def board_top(board, config=None, *, clock_mhz=None, baud=DEFAULT_BAUD):
    """The whole accelerator's top for ``board``
    (:class:`~hw.boards.accelerator.AcceleratorBoardTop`).

    Parameters
    ----------
    config : ConvEngineConfig, optional
        Default: :func:`default_config`.
    clock_mhz : float, optional
        Design clock; default ``config.clock_mhz``, else :data:`DEFAULT_CLOCK_MHZ`.
        Refused when the board's PLL cannot make it (:class:`~hw.boards.pll.PllError`
        names the range).
    baud : int
        UART rate; refused when the clock does not divide it closely enough.
    """
    config = default_config(board) if config is None else config
    if not isinstance(config, ConvEngineConfig):
        raise TypeError(f"config must be a ConvEngineConfig, not {config!r}")
    _check_fits(board, config)
    clock_mhz = design_clock_mhz(board, config, clock_mhz)
    return AcceleratorBoardTop(config, family=_family(board),
                               board_clock_mhz=_board_clock_mhz(board),
                               clock_mhz=clock_mhz, baud=baud)


def _synthesis_overrides(family, extra_script=""):
    overrides = {"script_after_read": "\n".join(
        line for line in (KEEP_PE_REGISTERS, extra_script) if line)}
    if family == "iCE40":
        overrides["synth_opts"] = icebreaker.SYNTH_OPTS
    return overrides


def prepare_build(board, config=None, *, clock_mhz=None, baud=DEFAULT_BAUD,
                  seed=DEFAULT_SEED):
    """Elaborate the accelerator's board top; return ``(platform, top, plan)``, where
    ``plan`` is Amaranth's :class:`~amaranth.build.run.BuildPlan` (files and commands,
    nothing run)."""
    platform = board_platform(board, target_mhz=None)
    top = board_top(board, config, clock_mhz=clock_mhz, baud=baud)
    nextpnr_opts = [f"--report {NEXTPNR_REPORT_NAME}", f"--seed {seed}",
                    "--timing-allow-fail"]
    extra = icebreaker.SCRIPT_AFTER_READ if platform.family == "iCE40" else ""
    # verbose: the tools write their full logs to stdout, which we stream to a file and
    # filter into progress lines (quiet mode would leave nothing to show progress with).
    # do_build=False: Amaranth writes the files; we run its commands one by one, to time
    # synthesis and place-and-route separately and to log each tool on its own.
    plan = platform.build(top, name=TOP_NAME, do_build=False, do_program=False,
                          verbose=True, nextpnr_opts=" ".join(nextpnr_opts),
                          **_synthesis_overrides(platform.family, extra))
    return platform, top, plan


def array_board_top(board, config=None, *, tile_k=16, backpressure=True):
    """The bare-array top for ``board``: :class:`hw.boards.LedChecksumTop`.

    Checks that the array's multipliers fit the board's device before anything is built.
    """
    from .boards import LedChecksumTop

    _check_board(board)
    if config is None:
        config = icebreaker.ARRAY_CONFIG if board == "icebreaker" else ArrayConfig()
    elif not isinstance(config, ArrayConfig):
        raise TypeError(f"config must be an ArrayConfig, not {config!r}")
    _check_fits(board, config)
    return LedChecksumTop(config, tile_k=tile_k, backpressure=backpressure)


def prepare_array_build(board, config=None, *, target_mhz=DEFAULT_TARGET_MHZ,
                        seed=DEFAULT_SEED, tile_k=16, backpressure=True):
    """Like :func:`prepare_build`, for the bare-array top (its clock pin constrained to
    ``target_mhz``)."""
    platform = board_platform(board, target_mhz=target_mhz)
    top = array_board_top(board, config, tile_k=tile_k, backpressure=backpressure)
    nextpnr_opts = [f"--report {NEXTPNR_REPORT_NAME}", f"--seed {seed}"]
    if target_mhz is not None:
        nextpnr_opts.append("--timing-allow-fail")
    plan = platform.build(top, name=TOP_NAME, do_build=False, do_program=False,
                          verbose=True, nextpnr_opts=" ".join(nextpnr_opts),
                          **_synthesis_overrides(platform.family))
    return platform, top, plan


def _tool_command(command, env):
    """One command of Amaranth's ``build_top.json`` (an argument list, or a string in
    older releases), with the tool resolved the way Amaranth's shell script does: an
    environment variable named after the tool."""
    argv = shlex.split(command) if isinstance(command, str) else list(command)
    var = argv[0].upper().replace("-", "_").replace("+", "X")
    argv[0] = env.get(var, argv[0])
    return argv


def _run_tool(step, argv, cwd, env, log_path, say):
    """Run one tool with its output streamed to ``log_path``; echo its phase lines.

    Returns the wall time in seconds. Raises :class:`BitstreamError` naming the log.
    """
    pattern = _PHASE_PATTERNS.get(step)
    start = time.monotonic()
    with open(log_path, "w") as log:
        log.write(f"$ {shlex.join(argv)}\n")
        log.flush()
        try:
            process = subprocess.Popen(argv, cwd=cwd, env=env, stdout=subprocess.PIPE,
                                       stderr=subprocess.STDOUT, text=True, bufsize=1,
                                       errors="replace")
        except FileNotFoundError as error:
            raise BitstreamError(
                f"{step}: cannot start {argv[0]!r} ({error}); run `make setup`") from error
        last_tick = start
        for line in process.stdout:
            log.write(line)
            stripped = line.rstrip()
            now = time.monotonic()
            if pattern is not None and pattern.search(stripped) or \
                    stripped.startswith("ERROR") or \
                    _TICK_PATTERN.search(stripped) and now - last_tick >= TICK_SECONDS:
                last_tick = now
                say(f"  {step} {now - start:6.1f} s  {stripped[:80]}")
        returncode = process.wait()
    elapsed = time.monotonic() - start
    if returncode != 0:
        lines = log_path.read_text(errors="replace").splitlines()
        # The tool's own reason: its ERROR lines (nextpnr: "Unable to place cell ...",
        # "Design uses N SB_MAC16 ..."), else the end of its log.
        reasons = [line for line in lines if line.startswith("ERROR")][:5] or lines[-5:]
        reasons = [line.strip() for line in lines if _over_capacity(line)] + reasons
        raise BitstreamError(
            f"{step} failed with exit status {returncode} after {elapsed:.1f} s; "
            f"see {log_path}\n" + "\n".join(reasons))
    return elapsed


_UTILISATION = re.compile(r"^Info:\s+(\w+):\s+(\d+)/\s*(\d+)\s+\d+%")


def _over_capacity(line):
    """Whether ``line`` is a nextpnr utilisation line of a resource used beyond the device's
    count (``ICESTORM_LC: 11618/ 5280 220%``): the real reason behind a placement error."""
    match = _UTILISATION.match(line)
    return bool(match) and int(match.group(2)) > int(match.group(3))


def tool_versions(family="ecp5", env=None):
    """Versions of Amaranth, Yosys, nextpnr and the packer for ``family``, as the tools
    report them."""
    from .toolchain import tool_env

    env = tool_env() if env is None else env
    probes = {"yosys": (env["YOSYS"], "-V")}
    if family == "ecp5":
        probes["nextpnr-ecp5"] = (env["NEXTPNR_ECP5"], "--version")
        probes["ecppack"] = (env["ECPPACK"], "--version")
    else:
        probes["nextpnr-ice40"] = (env["NEXTPNR_ICE40"], "--version")
    versions = {}
    for name, argv in probes.items():
        try:
            result = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300)
            text = (result.stdout + result.stderr).strip().splitlines()
            versions[name] = text[-1].strip() if text else "unknown"
        except (OSError, subprocess.SubprocessError) as error:
            versions[name] = f"unavailable ({error})"
    import amaranth
    versions["amaranth"] = amaranth.__version__
    return versions


def parse_nextpnr_report(data, family="ecp5"):
    """Resources and fmax from nextpnr's ``--report`` JSON (a dict, already loaded).

    Returns ``{"resources": {name: {"used", "available", "percent"}}, "fmax": {clock:
    {"achieved_mhz", "constraint_mhz", "met"}}}``. Resources are named as in
    :data:`RESOURCE_CELLS`; cell types the report lacks count as zero used.
    """
    if family not in RESOURCE_CELLS:
        raise ValueError(f"family must be one of {sorted(RESOURCE_CELLS)}, not {family!r}")
    utilization = data.get("utilization")
    fmax = data.get("fmax")
    if not isinstance(utilization, dict) or not isinstance(fmax, dict):
        raise ValueError("not a nextpnr report: 'utilization' and 'fmax' are missing")
    resources = {}
    for name, cell in RESOURCE_CELLS[family].items():
        entry = utilization.get(cell, {"used": 0, "available": None})
        used, available = int(entry["used"]), entry.get("available")
        resources[name] = {
            "used": used,
            "available": None if available is None else int(available),
            "percent": round(100 * used / available, 1) if available else None,
        }
    clocks = {}
    for clock, entry in sorted(fmax.items()):
        achieved = float(entry["achieved"])
        constraint = float(entry["constraint"])
        clocks[_clock_name(clock)] = {
            "net": clock,
            "achieved_mhz": round(achieved, 2),
            "constraint_mhz": round(constraint, 2),
            "met": achieved >= constraint,
        }
    return {"resources": resources, "fmax": clocks}


def _clock_name(net):
    """A readable clock name from a nextpnr global net name (``$glbnet$clk`` -> ``clk``)."""
    name = net.removeprefix("$glbnet$")
    return name.split("$", 1)[0] or net


def critical_path(data, limit=6):
    """The worst register-to-register path of each clock in nextpnr's report.

    Returns ``{clock: {total_ns, logic_ns, routing_ns, start, end, largest_steps}}`` with
    at most ``limit`` of the path's largest steps; cross-domain and I/O paths are left out.
    """
    paths = {}
    for entry in data.get("critical_paths", []):
        source, sink = entry.get("from", ""), entry.get("to", "")
        if source != sink or "<async>" in source:
            continue
        steps = [{
            "type": step.get("type"),
            "from": step.get("from", {}).get("cell"),
            "to": step.get("to", {}).get("cell"),
            "delay_ns": round(float(step.get("delay", 0.0)), 3),
        } for step in entry.get("path", [])]
        total = sum(s["delay_ns"] for s in steps)
        routing = sum(s["delay_ns"] for s in steps if s["type"] == "routing")
        paths[_clock_name(source.split()[-1])] = {
            "total_ns": round(total, 3),
            "logic_ns": round(total - routing, 3),
            "routing_ns": round(routing, 3),
            "start": steps[0]["from"] if steps else None,
            "end": steps[-1]["to"] if steps else None,
            "largest_steps": sorted(steps, key=lambda s: -s["delay_ns"])[:limit],
        }
    return paths


def inputs_key(board, config, **options):
    """Hash of everything a bitstream depends on: the board, the configuration, the build
    options (keyword arguments, e.g. ``clock_mhz``, ``seed``) and the source files under
    ``hw/`` (not the tools; their versions are in the report)."""
    digest = hashlib.sha256()
    digest.update(json.dumps({
        "board": board, "kind": type(config).__name__, "config": config.as_dict(),
        **options,
    }, sort_keys=True, default=str).encode())
    root = Path(__file__).resolve().parent
    for path in _board_sources(root):
        digest.update(str(path.relative_to(root)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def build_dir_for(board, config, build_root="build"):
    """Where a build of ``config`` for ``board`` goes: ``<root>/<board>`` for the
    accelerator, ``<root>/<board>-array`` for the bare array."""
    suffix = ARRAY_SUFFIX if isinstance(config, ArrayConfig) else ""
    return Path(build_root) / f"{board}{suffix}"


def _console_say(console):
    def say(text):
        # Tool output may contain [brackets]: no markup, one line each.
        console.print(text, markup=False, no_wrap=True, overflow="ellipsis")
    return say


# Amaranth's build plan runs these three tools, in this order; the report's wall times.
_STEPS = {"yosys": "synthesis_s", "nextpnr": "place_and_route_s", "pack": "pack_s"}


def _run_plan(platform, plan, build_dir, env, say):
    """Write the plan's files into ``build_dir`` and run synthesis, place and route and
    pack; return ``(times, bitstream_path, raw nextpnr report)``."""
    start = time.monotonic()
    bitstream = build_dir / f"{TOP_NAME}.{BITSTREAM_SUFFIX[platform.family]}"
    for stale in (NEXTPNR_REPORT_NAME, REPORT_NAME, bitstream.name):
        (build_dir / stale).unlink(missing_ok=True)
    plan.extract(build_dir)
    times = {"elaborate_s": round(time.monotonic() - start, 2)}
    say(f"  elaborated and wrote build files in {times['elaborate_s']:.1f} s")
    commands = json.loads((build_dir / f"build_{TOP_NAME}.json").read_text())["commands"]
    steps = list(_STEPS.items())
    if len(commands) != len(steps):
        raise BitstreamError(f"unexpected build plan with {len(commands)} commands: "
                             f"{commands}")
    for (step, key), command in zip(steps, commands, strict=True):
        argv = _tool_command(command, env)
        log_path = build_dir / f"{step}.log"
        say(f"  {step}: running {Path(argv[0]).name} (log: {log_path})")
        times[key] = round(_run_tool(step, argv, build_dir, env, log_path, say), 2)
        say(f"  {step}: done in {times[key]:.1f} s")
    raw = json.loads((build_dir / NEXTPNR_REPORT_NAME).read_text())
    logs = {step: str(build_dir / f"{step}.log") for step, _ in steps}
    return times, bitstream, raw, logs


def source_state(root=None):
    """The git commit the build's sources came from and whether ``hw/`` or ``contract/`` had
    uncommitted changes (a figure from a dirty tree is not that commit's)."""
    root = Path(__file__).resolve().parent.parent if root is None else Path(root)
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True,
                                text=True, timeout=30).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "hw", "contract"],
                               cwd=root, capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return {"commit": None, "dirty": None}
    return {"commit": commit or None, "dirty": bool(dirty.strip())}


def _flat_resources(resources):
    """``{name}_used`` / ``{name}_available`` entries, the flat form the sweep reads."""
    flat = {}
    for name, entry in resources.items():
        flat[f"{name}_used"] = entry["used"]
        flat[f"{name}_available"] = entry["available"]
    return flat


def design_clock(fmax, clock_mhz):
    """The entry of a parsed ``fmax`` dict that is the design clock: the one constrained
    closest to ``clock_mhz`` (the PLL output; the oscillator pin carries no logic)."""
    if not fmax:
        return None, None
    name = min(fmax, key=lambda c: abs(fmax[c]["constraint_mhz"] - clock_mhz))
    return name, fmax[name]


def timing_verdict(parsed, paths, clock_mhz, log_path):
    """Whether the design clock met ``clock_mhz``: ``(clock entry, fmax_mhz, failure)``,
    where ``failure`` is ``None`` or a sentence with nextpnr's fmax, the critical path and
    the log to read."""
    name, clock = design_clock(parsed["fmax"], clock_mhz)
    if clock is None:
        return None, None, (f"nextpnr reported no fmax for the design clock; "
                            f"log: {log_path}")
    fmax_mhz = clock["achieved_mhz"]
    if fmax_mhz >= clock_mhz:
        return clock, fmax_mhz, None
    path = paths.get(name)
    where = (f"{path['total_ns']:.2f} ns, {path['start']} -> {path['end']}" if path
             else "not in the report")
    return clock, fmax_mhz, (
        f"nextpnr reached {fmax_mhz:g} MHz, below the {clock_mhz:g} MHz clock; critical "
        f"path {where}; log: {log_path}")


def build_bitstream(board, config=None, build_root="build", *, clock_mhz=None,
                    baud=DEFAULT_BAUD, seed=DEFAULT_SEED, console=None, summary=True,
                    **array_options):
    """Build ``build_root/<board>/top.bit`` (``top.bin`` on iCE40) and ``report.json`` of
    the whole accelerator; return the report dict.

    Parameters
    ----------
    board : str
        A key of :data:`KNOWN_BOARDS`, e.g. ``"ulx3s-85f"``.
    config : ConvEngineConfig, optional
        The accelerator; default :func:`default_config` of the board. An
        :class:`~contract.config.ArrayConfig` builds the bare-array top instead
        (:func:`build_array_bitstream`, taking ``target_mhz``, ``tile_k``,
        ``backpressure``).
    build_root : str or Path
        The board's folder is created under it.
    clock_mhz : float, optional
        Design clock; default ``config.clock_mhz``, else :data:`DEFAULT_CLOCK_MHZ` of the
        board.
    baud : int
        UART rate of the host link (3 Mbaud).
    seed : int
        nextpnr's placer seed (fixed, so a build is a function of its inputs).
    console : rich.console.Console, optional
        Where progress and the summary go.
    summary : bool
        Print the one-screen summary at the end.

    Returns
    -------
    dict
        The report (see the module docstring); ``timing_met`` is false when nextpnr's fmax
        is below the clock, with ``timing_failure`` saying why and where the log is.

    Raises
    ------
    ValueError
        Unknown board, a configuration that does not fit, a clock the PLL cannot make
        (``PllError``) or a baud rate the clock cannot divide.
    BitstreamError
        A tool failed (synthesis, place and route, pack); the message has the tool's
        ERROR lines and names its log file.
    """
    if isinstance(config, ArrayConfig):
        return build_array_bitstream(board, config, build_root, seed=seed, console=console,
                                     summary=summary, **array_options)
    if array_options:
        raise TypeError(f"options {sorted(array_options)} apply to the bare-array build "
                        f"(an ArrayConfig), not to the accelerator")
    from rich.console import Console

    from .toolchain import apply_tool_env, tool_env

    console = Console(highlight=False) if console is None else console
    config = default_config(board) if config is None else config
    clock_mhz = design_clock_mhz(board, config, clock_mhz)
    platform, top, plan = prepare_build(board, config, clock_mhz=clock_mhz, baud=baud,
                                        seed=seed)
    apply_tool_env()
    env = tool_env()
    build_dir = build_dir_for(board, config, build_root)
    build_dir.mkdir(parents=True, exist_ok=True)
    say = _console_say(console)
    console.print(f"[bold]{board}[/bold]: whole accelerator, {config.rows}x{config.cols} "
                  f"array, act {config.act_depth} B x {config.rows}, weights "
                  f"{config.weight_depth} words; clock {top.clock_mhz:g} MHz (PLL from "
                  f"{_board_clock_mhz(board):g} MHz), UART {baud} baud -> {build_dir}")
    source = source_state()  # before the tools run: what was elaborated
    try:
        times, bitstream, raw, logs = _run_plan(platform, plan, build_dir, env, say)
    except BitstreamError as error:
        # A report saying what failed, so a sweep over many builds can show every reason.
        failed = {"board": board, "kind": "accelerator",
                  "config": _config_with_clock(config, clock_mhz),
                  "config_name": config.name, "target_mhz": float(clock_mhz),
                  "error": str(error),
                  "logs": {step: str(build_dir / f"{step}.log") for step in _STEPS}}
        (build_dir / REPORT_NAME).write_text(json.dumps(failed, indent=2) + "\n")
        raise

    report = accelerator_report(board, config, clock_mhz, platform=platform, top=top, raw=raw,
                                times=times, bitstream=bitstream, logs=logs, baud=baud,
                                seed=seed, tools=tool_versions(platform.family, env),
                                source=source)
    (build_dir / REPORT_NAME).write_text(json.dumps(report, indent=2) + "\n")
    if summary:
        print_summary(report, console=console)
    return report


def _config_with_clock(config, clock_mhz):
    """``config`` as a dict with the clock the build asked for, so the report's
    configuration rebuilds the same design (a configuration left at its board's default
    clock has ``clock_mhz`` None)."""
    return {**config.as_dict(), "clock_mhz": float(clock_mhz)}


def accelerator_report(board, config, clock_mhz, *, platform, top, raw, times, bitstream,
                       logs, baud, seed, tools, source):
    """The ``report.json`` of a whole-accelerator build (see the module docstring) from what
    the build made: ``raw`` is nextpnr's report (a dict), ``top`` the board top (its PLL
    clock, settings and UART divisor), ``platform`` the Amaranth platform (device, package,
    family); ``clock_mhz`` is the clock asked for."""
    parsed = parse_nextpnr_report(raw, platform.family)
    paths = critical_path(raw)
    clock, fmax_mhz, failure = timing_verdict(parsed, paths, top.clock_mhz, logs["nextpnr"])
    report = {
        "board": board,
        "kind": "accelerator",
        "device": platform.device,
        "package": platform.package,
        "family": platform.family,
        "config": _config_with_clock(config, clock_mhz),
        "config_name": config.name,
        "board_clock_mhz": _board_clock_mhz(board),
        "target_mhz": float(clock_mhz),
        "clock_mhz": round(top.clock_mhz, 6),
        "clock_net": None if clock is None else clock["net"],
        "fmax_mhz": fmax_mhz,
        "timing_met": failure is None,
        "pll": top.pll_settings.as_dict(),
        "uart": {"baud": baud, "divisor": top.divisor,
                 "baud_error_percent": round(100 * top.baud_error, 3)},
        "seed": seed,
        "inputs_key": inputs_key(board, config, clock_mhz=clock_mhz, baud=baud, seed=seed),
        **_flat_resources(parsed["resources"]),
        **parsed,
        "critical_path": paths,
        "wall_time_s": times,
        "tools": tools,
        "source": source,
        "bitstream": str(bitstream),
        "logs": logs,
    }
    if failure is not None:
        report["timing_failure"] = failure
    return report


def build_array_bitstream(board, config=None, build_root="build", *,
                          target_mhz=DEFAULT_TARGET_MHZ, seed=DEFAULT_SEED, tile_k=16,
                          backpressure=True, console=None, summary=True):
    """Build the bare systolic array under its on-chip pattern load (no host link) into
    ``build_root/<board>-array/``; return the report dict (``target_mhz`` constrains the
    clock pin, see :func:`board_platform`)."""
    from rich.console import Console

    from .toolchain import apply_tool_env, tool_env

    console = Console(highlight=False) if console is None else console
    if config is None:
        config = icebreaker.ARRAY_CONFIG if board == "icebreaker" else ArrayConfig()
    _check_board(board)
    apply_tool_env()
    env = tool_env()
    build_dir = build_dir_for(board, config, build_root)
    build_dir.mkdir(parents=True, exist_ok=True)
    say = _console_say(console)
    constraint = "the board clock" if target_mhz is None else f"{target_mhz:g} MHz"
    console.print(f"[bold]{board}[/bold]: bare {config.rows}x{config.cols} array, "
                  f"{config.acc_width}-bit accumulators, clock constrained to {constraint} "
                  f"-> {build_dir}")
    platform, _, plan = prepare_array_build(board, config, target_mhz=target_mhz, seed=seed,
                                            tile_k=tile_k, backpressure=backpressure)
    times, bitstream, raw, logs = _run_plan(platform, plan, build_dir, env, say)
    parsed = parse_nextpnr_report(raw, platform.family)
    report = {
        "board": board,
        "kind": "array",
        "device": platform.device,
        "package": platform.package,
        "family": platform.family,
        "config": config.as_dict(),
        "pattern": {"tile_k": tile_k, "backpressure": backpressure},
        "board_clock_mhz": _board_clock_mhz(board),
        "target_mhz": target_mhz,
        "seed": seed,
        "inputs_key": inputs_key(board, config, target_mhz=target_mhz, seed=seed,
                                 tile_k=tile_k, backpressure=backpressure),
        **_flat_resources(parsed["resources"]),
        **parsed,
        "critical_path": critical_path(raw),
        "wall_time_s": times,
        "tools": tool_versions(platform.family, env),
        "bitstream": str(bitstream),
        "logs": logs,
    }
    (build_dir / REPORT_NAME).write_text(json.dumps(report, indent=2) + "\n")
    if summary:
        print_summary(report, console=console)
    return report


def load_report(board, build_root="build", *, array=False):
    """The last ``report.json`` written for ``board`` (the accelerator's, or the bare
    array's with ``array=True``), or ``None``."""
    suffix = ARRAY_SUFFIX if array else ""
    path = Path(build_root) / f"{board}{suffix}" / REPORT_NAME
    return json.loads(path.read_text()) if path.exists() else None


def _config_line(report):
    config = report["config"]
    if report.get("kind") == "accelerator":
        array = config["array"]
        return (f"whole accelerator, {array['rows']}x{array['cols']} array, act "
                f"{config['act_depth']} B/row, weights {config['weight_depth']} words, "
                f"{config['max_col_tiles']} column tiles")
    return f"{config['rows']}x{config['cols']} int8 array"


def print_summary(report, console=None):
    """Print a one-screen summary of a report made by :func:`build_bitstream`."""
    from rich.console import Console
    from rich.table import Table

    console = Console(highlight=False) if console is None else console
    console.print(f"[bold]{report['board']}[/bold] ({report['device']}): "
                  f"{_config_line(report)}")
    table = Table()
    table.add_column("resource")
    table.add_column("used", justify="right")
    table.add_column("available", justify="right")
    table.add_column("%", justify="right")
    for name, entry in report["resources"].items():
        table.add_row(name, str(entry["used"]),
                      "?" if entry["available"] is None else str(entry["available"]),
                      "" if entry["percent"] is None else f"{entry['percent']:.1f}")
    console.print(table)
    if report.get("kind") == "accelerator":
        verdict = "[green]met[/green]" if report["timing_met"] else "[red]NOT met[/red]"
        pll = report["pll"]
        console.print(f"clock: target {report['target_mhz']:g} MHz, PLL makes "
                      f"{report['clock_mhz']:g} MHz from {report['board_clock_mhz']:g} MHz "
                      f"({pll['primitive']}); fmax [bold]{report['fmax_mhz']} MHz[/bold] "
                      f"({verdict})")
        uart = report["uart"]
        console.print(f"host link: UART {uart['baud']} baud, divisor {uart['divisor']} "
                      f"({uart['baud_error_percent']}% off)")
    else:
        for clock, entry in report["fmax"].items():
            verdict = "[green]met[/green]" if entry["met"] else "[yellow]not met[/yellow]"
            console.print(f"fmax {clock}: [bold]{entry['achieved_mhz']:.1f} MHz[/bold] "
                          f"achieved, constrained to {entry['constraint_mhz']:.1f} MHz "
                          f"({verdict}); board clock {report['board_clock_mhz']:g} MHz")
    for clock, path in report.get("critical_path", {}).items():
        console.print(f"critical path ({clock}): {path['total_ns']:.2f} ns = "
                      f"{path['logic_ns']:.2f} logic + {path['routing_ns']:.2f} routing, "
                      f"{path['start']} -> {path['end']}")
    if report.get("timing_failure"):
        console.print(f"[red]timing failure:[/red] {report['timing_failure']}",
                      markup=True)
    times = report["wall_time_s"]
    console.print(f"wall time: synthesis {times['synthesis_s']:.1f} s, place and route "
                  f"{times['place_and_route_s']:.1f} s, pack {times['pack_s']:.1f} s; "
                  f"bitstream {report['bitstream']}")
    if report.get("logs"):
        console.print("logs: " + ", ".join(report["logs"].values()), markup=False)
