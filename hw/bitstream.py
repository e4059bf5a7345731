"""Bitstreams for the boards, with a machine-readable report of resources and fmax.

``build_bitstream("ulx3s-85f", ArrayConfig())`` elaborates the board top (the array under an
on-chip pattern load, see :mod:`hw.boards`), lets Amaranth's platform write the build
files, runs Yosys, nextpnr and the bitstream packer from the pip-installed YoWASP wheels,
and writes ``build/<board>/report.json``:

- used and available logic, flip-flops, multipliers and block RAMs (from nextpnr's
  ``--report`` JSON),
- per clock the fmax nextpnr achieved and the frequency it was constrained to,
- the array configuration, the tool versions and the wall time of each step.

The board clocks (25 MHz on the ULX3S) are slow; to make nextpnr work for, and report, the
design's real fmax, the clock pin is constrained to ``target_mhz`` instead (200 MHz by
default) and ``--timing-allow-fail`` keeps a miss from being an error. The bitstream still
runs from the board's oscillator: the constraint only steers placement, routing and the
timing analysis.
"""

import hashlib
import json
import re
import shlex
import subprocess
import time
from pathlib import Path

from amaranth.build import Clock, Resource

from contract.config import ArrayConfig

from .boards import icebreaker, ulx3s

#: Board name -> amaranth-boards platform class.
KNOWN_BOARDS = {**ulx3s.PLATFORMS, **icebreaker.PLATFORMS}

_MULTIPLIERS = {**ulx3s.MULTIPLIERS, **icebreaker.MULTIPLIERS}

# Report name -> nextpnr cell type, per FPGA family. On ECP5 every LUT4 is a TRELLIS_COMB
# cell (half of a carry-chain CCU2C counts as one too), so "LUT4" is the fabric LUT count.
RESOURCE_CELLS = {
    "ecp5": {"LUT4": "TRELLIS_COMB", "FF": "TRELLIS_FF", "MULT18X18D": "MULT18X18D",
             "DP16KD": "DP16KD"},
    "iCE40": {"LC": "ICESTORM_LC", "SB_MAC16": "ICESTORM_DSP", "EBR": "ICESTORM_RAM",
              "SPRAM": "ICESTORM_SPRAM"},
}

# What the packer writes, per family.
BITSTREAM_SUFFIX = {"ecp5": "bit", "iCE40": "bin"}

DEFAULT_TARGET_MHZ = 200.0
DEFAULT_SEED = 1
TOP_NAME = "top"
REPORT_NAME = "report.json"
NEXTPNR_REPORT_NAME = "nextpnr-report.json"

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
        r"Max frequency for clock|Program finished)"),
}


def _board_sources(root):
    """The files under ``hw/`` (at ``root``) that a board build reads."""
    names = ["bitstream.py", "config.py", "multiplier.py", "pe.py", "systolic.py"]
    return [root / name for name in names] + list((root / "boards").glob("*.py"))


class BitstreamError(RuntimeError):
    """A bitstream build failed; the message names the log to read."""


def _check_board(board):
    if board not in KNOWN_BOARDS:
        known = ", ".join(sorted(KNOWN_BOARDS))
        raise ValueError(f"unknown board {board!r}; known boards: {known}")
    return KNOWN_BOARDS[board]


def board_platform(board, *, target_mhz=DEFAULT_TARGET_MHZ):
    """An instance of ``board``'s platform whose default clock is constrained to
    ``target_mhz`` (``None`` keeps the board's oscillator frequency).

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


def board_top(board, config=None, *, tile_k=16, backpressure=True):
    """The top-level design for ``board``: :class:`hw.boards.LedChecksumTop`.

    Checks that the array's multipliers fit the board's device before anything is built.
    """
    from .boards import LedChecksumTop

    cls = _check_board(board)
    if config is None:
        config = icebreaker.DEFAULT_CONFIG if board == "icebreaker" else ArrayConfig()
    elif not isinstance(config, ArrayConfig):
        raise TypeError(f"config must be an ArrayConfig, not {config!r}")
    available = _MULTIPLIERS.get(cls.device)
    needed = config.rows * config.cols
    if available is not None and needed > available:
        raise ValueError(
            f"a {config.rows}x{config.cols} array needs {needed} multipliers; {board} "
            f"({cls.device}) has {available}")
    return LedChecksumTop(config, tile_k=tile_k, backpressure=backpressure)


def prepare_build(board, config=None, *, target_mhz=DEFAULT_TARGET_MHZ, seed=DEFAULT_SEED,
                  tile_k=16, backpressure=True):
    """Elaborate the board top and return ``(platform, top, plan)``, where ``plan`` is
    Amaranth's :class:`~amaranth.build.run.BuildPlan` (files and commands, nothing run)."""
    platform = board_platform(board, target_mhz=target_mhz)
    top = board_top(board, config, tile_k=tile_k, backpressure=backpressure)
    nextpnr_opts = [f"--report {NEXTPNR_REPORT_NAME}", f"--seed {seed}"]
    if target_mhz is not None:
        nextpnr_opts.append("--timing-allow-fail")
    overrides = {"nextpnr_opts": " ".join(nextpnr_opts),
                 "script_after_read": KEEP_PE_REGISTERS}
    if platform.family == "iCE40":
        overrides["synth_opts"] = icebreaker.SYNTH_OPTS
    # verbose: the tools write their full logs to stdout, which we stream to a file and
    # filter into progress lines (quiet mode would leave nothing to show progress with).
    # do_build=False: Amaranth writes the files; we run its commands one by one, to time
    # synthesis and place-and-route separately and to log each tool on its own.
    plan = platform.build(top, name=TOP_NAME, do_build=False, do_program=False,
                          verbose=True, **overrides)
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
        for line in process.stdout:
            log.write(line)
            stripped = line.rstrip()
            if pattern is not None and pattern.search(stripped) or \
                    stripped.startswith("ERROR"):
                say(f"  {step} {time.monotonic() - start:6.1f} s  {stripped[:80]}")
        returncode = process.wait()
    elapsed = time.monotonic() - start
    if returncode != 0:
        tail = "".join(log_path.read_text(errors="replace").splitlines(True)[-5:])
        raise BitstreamError(
            f"{step} failed with exit status {returncode} after {elapsed:.1f} s; "
            f"see {log_path}\n{tail}")
    return elapsed


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


def inputs_key(board, config, *, target_mhz, seed, tile_k, backpressure):
    """Hash of everything a bitstream depends on: the board, the build options and the
    source files of the board top (not the tools; their versions are in the report)."""
    digest = hashlib.sha256()
    digest.update(json.dumps({
        "board": board, "config": config.as_dict(), "target_mhz": target_mhz, "seed": seed,
        "tile_k": tile_k, "backpressure": backpressure,
    }, sort_keys=True).encode())
    root = Path(__file__).resolve().parent
    for path in sorted(_board_sources(root)):
        digest.update(str(path.relative_to(root)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def build_bitstream(board, config=None, build_root="build", *,
                    target_mhz=DEFAULT_TARGET_MHZ, seed=DEFAULT_SEED, tile_k=16,
                    backpressure=True, console=None, summary=True):
    """Build ``build_root/<board>/top.bit`` (``top.bin`` on iCE40) and ``report.json``;
    return the report dict.

    Parameters
    ----------
    board : str
        A key of :data:`KNOWN_BOARDS`, e.g. ``"ulx3s-85f"``.
    config : ArrayConfig
        Array to build; 8x8 by default (2x2 on the iCEBreaker).
    build_root : str or Path
        The board's folder is created under it.
    target_mhz : float or None
        Clock constraint for place and route and timing analysis (``None``: the board's
        oscillator). nextpnr reports the achieved fmax either way.
    seed : int
        nextpnr's placer seed (fixed, so a build is a function of its inputs).
    tile_k, backpressure
        Operand pattern of the on-chip load (see :class:`hw.boards.pattern.PatternHarness`).
    console : rich.console.Console, optional
        Where progress and the summary go.
    summary : bool
        Print the summary table at the end.

    Raises
    ------
    ValueError
        Unknown board, or an array that does not fit the device.
    BitstreamError
        A tool failed; the message names its log file.
    """
    from rich.console import Console

    from .toolchain import apply_tool_env, tool_env

    console = Console(highlight=False) if console is None else console
    if config is None:
        config = icebreaker.DEFAULT_CONFIG if board == "icebreaker" else ArrayConfig()
    _check_board(board)
    apply_tool_env()
    env = tool_env()
    build_dir = Path(build_root) / board
    build_dir.mkdir(parents=True, exist_ok=True)

    def say(text):
        # Tool output may contain [brackets]: no markup, one line each.
        console.print(text, markup=False, no_wrap=True, overflow="ellipsis")

    constraint = "the board clock" if target_mhz is None else f"{target_mhz:g} MHz"
    console.print(f"[bold]{board}[/bold]: {config.rows}x{config.cols} array, "
                  f"{config.acc_width}-bit accumulators, clock constrained to {constraint} "
                  f"-> {build_dir}")
    start = time.monotonic()
    platform, top, plan = prepare_build(board, config, target_mhz=target_mhz, seed=seed,
                                        tile_k=tile_k, backpressure=backpressure)
    bitstream = build_dir / f"{TOP_NAME}.{BITSTREAM_SUFFIX[platform.family]}"
    for stale in (NEXTPNR_REPORT_NAME, REPORT_NAME, bitstream.name):
        (build_dir / stale).unlink(missing_ok=True)
    plan.extract(build_dir)
    times = {"elaborate_s": round(time.monotonic() - start, 2)}
    say(f"  elaborated and wrote build files in {times['elaborate_s']:.1f} s")

    commands = json.loads((build_dir / f"build_{TOP_NAME}.json").read_text())["commands"]
    steps = [("yosys", "synthesis_s"), ("nextpnr", "place_and_route_s"),
             ("pack", "pack_s")]
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
    parsed = parse_nextpnr_report(raw, platform.family)
    report = {
        "board": board,
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
        **parsed,
        "critical_path": critical_path(raw),
        "wall_time_s": times,
        "tools": tool_versions(platform.family, env),
        "bitstream": str(bitstream),
        "logs": {step: str(build_dir / f"{step}.log") for step, _ in steps},
    }
    (build_dir / REPORT_NAME).write_text(json.dumps(report, indent=2) + "\n")
    if summary:
        print_summary(report, console=console)
    return report


def _board_clock_mhz(board):
    """The board oscillator's frequency in MHz."""
    return KNOWN_BOARDS[board]().default_clk_frequency / 1e6


def load_report(board, build_root="build"):
    """The last ``report.json`` written for ``board``, or ``None``."""
    path = Path(build_root) / board / REPORT_NAME
    return json.loads(path.read_text()) if path.exists() else None


def print_summary(report, console=None):
    """Print a one-screen summary of a report made by :func:`build_bitstream`."""
    from rich.console import Console
    from rich.table import Table

    console = Console(highlight=False) if console is None else console
    config = report["config"]
    table = Table(title=f"{report['board']} ({report['device']}): "
                        f"{config['rows']}x{config['cols']} int8 array",
                  title_justify="left")
    table.add_column("resource")
    table.add_column("used", justify="right")
    table.add_column("available", justify="right")
    table.add_column("%", justify="right")
    for name, entry in report["resources"].items():
        table.add_row(name, str(entry["used"]),
                      "?" if entry["available"] is None else str(entry["available"]),
                      "" if entry["percent"] is None else f"{entry['percent']:.1f}")
    console.print(table)
    for clock, entry in report["fmax"].items():
        verdict = "[green]met[/green]" if entry["met"] else "[yellow]not met[/yellow]"
        console.print(f"fmax {clock}: [bold]{entry['achieved_mhz']:.1f} MHz[/bold] achieved, "
                      f"constrained to {entry['constraint_mhz']:.1f} MHz ({verdict}); "
                      f"board clock {report['board_clock_mhz']:g} MHz")
    for clock, path in report.get("critical_path", {}).items():
        console.print(f"critical path ({clock}): {path['total_ns']:.2f} ns = "
                      f"{path['logic_ns']:.2f} logic + {path['routing_ns']:.2f} routing, "
                      f"{path['start']} -> {path['end']}")
    times = report["wall_time_s"]
    console.print(f"wall time: synthesis {times['synthesis_s']:.1f} s, place and route "
                  f"{times['place_and_route_s']:.1f} s, pack {times['pack_s']:.1f} s; "
                  f"bitstream {report['bitstream']}")
