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
- ``block_ram``: the DP16KD placed and what :func:`~.registry.block_rams_needed` counts
  per part, and the resident memories' depths; ``image``: a built-in model's key,
  checksum and sizes (None without one),
- ``array_clock_mhz`` (the clock the array runs at: the design clock, which it shares, or
  for ``array.pump`` 2 the PLL's second output, ``array_clock_mhz`` of the configuration
  or twice the design clock; ``array_fmax_mhz`` is
  nextpnr's fmax of that clock, and ``timing_met`` needs both clocks met)
  and ``peak_gops`` (2 x multipliers x that clock, in GOP/s; None when timing is not
  met, since the build does not run at that clock),
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

Progress lines go to a ``say`` callable (``print`` by default); the one-screen summary of a
report is presentation and lives above the hardware, in :mod:`tessera.board_report`.
"""

import json

from contract.config import ArrayConfig

from ..boards import icebreaker
from ..boards.accelerator import DEFAULT_BAUD
from ..toolchain import apply_tool_env, tool_env
from .cache import REPORT_NAME, build_dir_for, inputs_key, source_state
from .nextpnr import critical_path, flat_resources, parse_nextpnr_report, timing_verdict
from .registry import (
    DEFAULT_TARGET_MHZ,
    block_rams_needed,
    board_clock_mhz,
    check_board,
    default_config,
    default_router,
    design_clock_mhz,
)
from .tools import STEPS, BitstreamError, run_plan, tool_versions
from .tops import DEFAULT_SEED, prepare_array_build, prepare_build


def _say(say):
    """``say``, or ``print`` flushed line by line (a build runs for minutes)."""
    return say if say is not None else (lambda text: print(text, flush=True))


def build_bitstream(board, config=None, build_root="build", *, clock_mhz=None,
                    baud=DEFAULT_BAUD, seed=DEFAULT_SEED, say=None, image=None,
                    router=None, **array_options):
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
    say : callable, optional
        Called with each progress line (plain text); default ``print``.
    image : contract.resident.BootImage, optional
        A model built in: the resident memories' initial contents and checksum
        (``report.json``'s ``image``); the build folder is ``<board>-<image key>``.
    router : str, optional
        nextpnr's router; default :func:`~.registry.default_router` (router2 for the 85F
        with the resident block and for a pumped array, which router1 does not route;
        else nextpnr's own, router1). ``report.json`` says which.

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
        return build_array_bitstream(board, config, build_root, seed=seed, say=say,
                                     **array_options)
    if array_options:
        raise TypeError(f"options {sorted(array_options)} apply to the bare-array build "
                        f"(an ArrayConfig), not to the accelerator")
    say = _say(say)
    config = default_config(board) if config is None else config
    clock_mhz = design_clock_mhz(board, config, clock_mhz)
    router = default_router(board, config) if router is None else router
    platform, top, plan = prepare_build(board, config, clock_mhz=clock_mhz, baud=baud,
                                        seed=seed, image=image, router=router)
    apply_tool_env()
    env = tool_env()
    build_dir = build_dir_for(board, config, build_root, image=image)
    build_dir.mkdir(parents=True, exist_ok=True)
    say(f"{board}: whole accelerator, {config.rows}x{config.cols} array, act "
        f"{config.act_depth} B x {config.rows}, weights {config.weight_depth} words; clock "
        f"{top.clock_mhz:g} MHz (PLL from {board_clock_mhz(board):g} MHz), UART {baud} baud "
        f"-> {build_dir}")
    source = source_state()  # before the tools run: what was elaborated
    try:
        times, bitstream, raw, logs = run_plan(platform, plan, build_dir, env, say)
    except BitstreamError as error:
        # A report saying what failed, so a sweep over many builds can show every reason.
        failed = {"board": board, "kind": "accelerator",
                  "config": _config_with_clock(config, clock_mhz),
                  "config_name": config.name, "target_mhz": float(clock_mhz),
                  "error": str(error),
                  "logs": {step: str(build_dir / f"{step}.log") for step in STEPS}}
        (build_dir / REPORT_NAME).write_text(json.dumps(failed, indent=2) + "\n")
        raise

    report = accelerator_report(board, config, clock_mhz, platform=platform, top=top, raw=raw,
                                times=times, bitstream=bitstream, logs=logs, baud=baud,
                                seed=seed, tools=tool_versions(platform.family, env),
                                source=source, image=image, router=router)
    (build_dir / REPORT_NAME).write_text(json.dumps(report, indent=2) + "\n")
    return report


def _config_with_clock(config, clock_mhz):
    """``config`` as a dict with the clock the build asked for, so the report's
    configuration rebuilds the same design (a configuration left at its board's default
    clock has ``clock_mhz`` None)."""
    return {**config.as_dict(), "clock_mhz": float(clock_mhz)}


def block_ram_use(config, resources, image=None):
    """``report.json``'s ``block_ram``: the DP16KD nextpnr placed (``used``/``available``,
    when the family has them), what :func:`~.registry.block_rams_needed` counts per part
    (ECP5), and the resident memories' words, the boot image's share of them included."""
    use = {}
    if "DP16KD" in resources:
        use.update(resources["DP16KD"])
        use["expected"] = block_rams_needed(config)
    if config.resident:
        use["resident_words"] = config.resident_words
        use["program_words"] = config.program_words
    return use


def image_report(image):
    """``report.json``'s ``image``: the boot image's key, checksum and sizes (or None)."""
    if image is None:
        return None
    a, b = image.checksum
    return {"key": image.key, "checksum": [f"{a:#010x}", f"{b:#010x}"],
            "program_words": len(image.program), "data_words": len(image.data)}


def peak_throughput(config, array_clock_mhz, timing_met, *, clock_mhz=None):
    """``report.json``'s ``array_clock_mhz`` and ``peak_gops``: two operations (a multiply
    and an add) per multiplier a cycle at the clock the array runs at (a double-pumped
    array's multiplier does two PEs' work in two of its cycles), counted only where the
    build meets that clock. Given the design clock, no more than the R x C MACs of one
    operand beat per design cycle (an array clock above ``pump`` times it waits)."""
    macs_per_us = config.array.multipliers * array_clock_mhz
    if clock_mhz is not None:
        macs_per_us = min(macs_per_us, config.rows * config.cols * clock_mhz)
    peak = 2 * macs_per_us / 1e3
    return {"array_clock_mhz": round(array_clock_mhz, 6),
            "peak_gops": round(peak, 3) if timing_met else None}


def accelerator_report(board, config, clock_mhz, *, platform, top, raw, times, bitstream,
                       logs, baud, seed, tools, source, image=None, router=None):
    """The ``report.json`` of a whole-accelerator build (see the module docstring) from what
    the build made: ``raw`` is nextpnr's report (a dict), ``top`` the board top (its PLL
    clock, settings and UART divisor), ``platform`` the Amaranth platform (device, package,
    family); ``clock_mhz`` is the clock asked for."""
    parsed = parse_nextpnr_report(raw, platform.family)
    paths = critical_path(raw)
    clock, fmax_mhz, failure = timing_verdict(parsed, paths, top.clock_mhz, logs["nextpnr"])
    array_fmax_mhz = fmax_mhz
    if config.array.pump != 1:  # the array's own clock must be met too
        _, array_fmax_mhz, array_failure = timing_verdict(parsed, paths, top.array_clock_mhz,
                                                          logs["nextpnr"])
        if array_failure is not None:
            array_failure = f"array clock: {array_failure}"
        failure = failure or array_failure
    report = {
        "board": board,
        "kind": "accelerator",
        "device": platform.device,
        "package": platform.package,
        "family": platform.family,
        "config": _config_with_clock(config, clock_mhz),
        "config_name": config.name,
        "board_clock_mhz": board_clock_mhz(board),
        "target_mhz": float(clock_mhz),
        "clock_mhz": round(top.clock_mhz, 6),
        "clock_net": None if clock is None else clock["net"],
        "fmax_mhz": fmax_mhz,
        "timing_met": failure is None,
        "array_fmax_mhz": array_fmax_mhz,
        **peak_throughput(config, top.array_clock_mhz, failure is None,
                          clock_mhz=top.clock_mhz),
        "pll": top.pll_settings.as_dict(),
        "uart": {"baud": baud, "divisor": top.divisor,
                 "baud_error_percent": round(100 * top.baud_error, 3)},
        "seed": seed,
        "router": router or "router1",
        "inputs_key": inputs_key(board, config, clock_mhz=clock_mhz, baud=baud, seed=seed,
                                 image=None if image is None else image.key,
                                 **({} if router is None else {"router": router})),
        **flat_resources(parsed["resources"]),
        **parsed,
        "block_ram": block_ram_use(config, parsed["resources"], image),
        "image": image_report(image),
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
                          backpressure=True, say=None):
    """Build the bare systolic array under its on-chip pattern load (no host link) into
    ``build_root/<board>-array/``; return the report dict (``target_mhz`` constrains the
    clock pin, see :func:`board_platform`)."""
    say = _say(say)
    if config is None:
        config = icebreaker.ARRAY_CONFIG if board == "icebreaker" else ArrayConfig()
    check_board(board)
    apply_tool_env()
    env = tool_env()
    build_dir = build_dir_for(board, config, build_root)
    build_dir.mkdir(parents=True, exist_ok=True)
    constraint = "the board clock" if target_mhz is None else f"{target_mhz:g} MHz"
    say(f"{board}: bare {config.rows}x{config.cols} array, {config.acc_width}-bit "
        f"accumulators, clock constrained to {constraint} -> {build_dir}")
    platform, _, plan = prepare_array_build(board, config, target_mhz=target_mhz, seed=seed,
                                            tile_k=tile_k, backpressure=backpressure)
    times, bitstream, raw, logs = run_plan(platform, plan, build_dir, env, say)
    parsed = parse_nextpnr_report(raw, platform.family)
    report = {
        "board": board,
        "kind": "array",
        "device": platform.device,
        "package": platform.package,
        "family": platform.family,
        "config": config.as_dict(),
        "pattern": {"tile_k": tile_k, "backpressure": backpressure},
        "board_clock_mhz": board_clock_mhz(board),
        "target_mhz": target_mhz,
        "seed": seed,
        "inputs_key": inputs_key(board, config, target_mhz=target_mhz, seed=seed,
                                 tile_k=tile_k, backpressure=backpressure),
        **flat_resources(parsed["resources"]),
        **parsed,
        "critical_path": critical_path(raw),
        "wall_time_s": times,
        "tools": tool_versions(platform.family, env),
        "bitstream": str(bitstream),
        "logs": logs,
    }
    (build_dir / REPORT_NAME).write_text(json.dumps(report, indent=2) + "\n")
    return report
