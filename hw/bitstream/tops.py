"""The tops a board build elaborates (the whole accelerator, or the bare array under its
pattern load) and Amaranth's build plan for them: files and commands, nothing run."""

from contract.config import ArrayConfig, ConvEngineConfig

from ..boards import icebreaker
from ..boards.accelerator import DEFAULT_BAUD, AcceleratorBoardTop
from .registry import (
    DEFAULT_TARGET_MHZ,
    board_clock_mhz,
    board_platform,
    check_board,
    check_fits,
    default_config,
    design_clock_mhz,
    family_of,
)

DEFAULT_SEED = 1
TOP_NAME = "top"
NEXTPNR_REPORT_NAME = "nextpnr-report.json"

# Every PE on an anti-diagonal sees the same control bits (valid, last, the `fresh` flag) on
# the same cycle, so Yosys's opt_merge folds their registers into one flip-flop that then
# drives up to eight PEs spread over the die: that was the critical path of the 8x8 array
# (fresh -> accumulator carry chain, 2.6 ns of routing). `keep` on the PE registers leaves
# each PE its own copy, next to its accumulator; cost: about 500 flip-flops for 8x8.
KEEP_PE_REGISTERS = "setattr -set keep 1 *.pe_*/t:$dff"
# Registers that copy another one to share its fan-out (named `*_copy*` in hw/: the address
# generator's flags per group of lanes, the pumped array's enables per row) hold the same
# value by design, so opt_merge would fold them back into one; `keep` on the flip-flops
# that drive them leaves each copy beside its users.
KEEP_COPIES = "setattr -set keep 1 w:*_copy* %ci1:+$dff[Q] t:$dff %i"


def board_top(board, config=None, *, clock_mhz=None, baud=DEFAULT_BAUD, image=None):
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
    image : contract.resident.BootImage, optional
        A model built in (the resident memories' initial contents); refused when the
        configuration has no resident memories or they are too small for it.
    """
    config = default_config(board) if config is None else config
    if not isinstance(config, ConvEngineConfig):
        raise TypeError(f"config must be a ConvEngineConfig, not {config!r}")
    check_fits(board, config)
    clock_mhz = design_clock_mhz(board, config, clock_mhz)
    return AcceleratorBoardTop(config, family=family_of(board),
                               board_clock_mhz=board_clock_mhz(board),
                               clock_mhz=clock_mhz, baud=baud, image=image)


def _synthesis_overrides(family, extra_script=""):
    overrides = {"script_after_read": "\n".join(
        line for line in (KEEP_PE_REGISTERS, KEEP_COPIES, extra_script) if line)}
    if family == "iCE40":
        overrides["synth_opts"] = icebreaker.SYNTH_OPTS
    return overrides


def prepare_build(board, config=None, *, clock_mhz=None, baud=DEFAULT_BAUD,
                  seed=DEFAULT_SEED, image=None, router=None):
    """Elaborate the accelerator's board top; return ``(platform, top, plan)``, where
    ``plan`` is Amaranth's :class:`~amaranth.build.run.BuildPlan` (files and commands,
    nothing run). ``router``: nextpnr's ``--router`` (``"router2"``), or its default."""
    platform = board_platform(board, target_mhz=None)
    top = board_top(board, config, clock_mhz=clock_mhz, baud=baud, image=image)
    nextpnr_opts = [f"--report {NEXTPNR_REPORT_NAME}", f"--seed {seed}",
                    "--timing-allow-fail"]
    if router is not None:
        nextpnr_opts.append(f"--router {router}")
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
    from ..boards import LedChecksumTop

    check_board(board)
    if config is None:
        config = icebreaker.ARRAY_CONFIG if board == "icebreaker" else ArrayConfig()
    elif not isinstance(config, ArrayConfig):
        raise TypeError(f"config must be an ArrayConfig, not {config!r}")
    check_fits(board, config)
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
