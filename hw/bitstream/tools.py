"""Running the tools of a build plan (Yosys, nextpnr, the packer) one by one, each logged to
its own file with its phase lines echoed as progress, and their versions."""

import json
import re
import shlex
import subprocess
import time
from pathlib import Path

from .cache import REPORT_NAME
from .registry import BITSTREAM_SUFFIX
from .tops import NEXTPNR_REPORT_NAME, TOP_NAME

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

class BitstreamError(RuntimeError):
    """A bitstream build failed; the message names the log to read."""

def tool_command(command, env):
    """One command of Amaranth's ``build_top.json`` (an argument list, or a string in
    older releases), with the tool resolved the way Amaranth's shell script does: an
    environment variable named after the tool."""
    argv = shlex.split(command) if isinstance(command, str) else list(command)
    var = argv[0].upper().replace("-", "_").replace("+", "X")
    argv[0] = env.get(var, argv[0])
    return argv


def run_tool(step, argv, cwd, env, log_path, say):
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
    from ..toolchain import tool_env

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

# Amaranth's build plan runs these three tools, in this order; the report's wall times.
STEPS = {"yosys": "synthesis_s", "nextpnr": "place_and_route_s", "pack": "pack_s"}


def run_plan(platform, plan, build_dir, env, say):
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
    steps = list(STEPS.items())
    if len(commands) != len(steps):
        raise BitstreamError(f"unexpected build plan with {len(commands)} commands: "
                             f"{commands}")
    for (step, key), command in zip(steps, commands, strict=True):
        argv = tool_command(command, env)
        log_path = build_dir / f"{step}.log"
        say(f"  {step}: running {Path(argv[0]).name} (log: {log_path})")
        times[key] = round(run_tool(step, argv, build_dir, env, log_path, say), 2)
        say(f"  {step}: done in {times[key]:.1f} s")
    raw = json.loads((build_dir / NEXTPNR_REPORT_NAME).read_text())
    logs = {step: str(build_dir / f"{step}.log") for step, _ in steps}
    return times, bitstream, raw, logs
