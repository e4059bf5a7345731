"""The boards a bitstream is built for: their platforms, default configurations and clocks,
and the checks a configuration must pass before any tool runs."""

import math

from amaranth.build import Clock, Resource

from contract.config import ArrayConfig, ConvEngineConfig
from contract.postprocess import postprocess_multipliers

from ..boards import icebreaker, ulx3s

#: Board name -> amaranth-boards platform class.
KNOWN_BOARDS = {**ulx3s.PLATFORMS, **icebreaker.PLATFORMS}

#: Board name -> the accelerator configuration ``make bitstream BOARD=...`` builds.
DEFAULT_CONFIGS = {**ulx3s.DEFAULT_CONFIGS, **icebreaker.DEFAULT_CONFIGS}

#: Board name -> the design clock (MHz) of the default build.
DEFAULT_CLOCK_MHZ = {**ulx3s.DEFAULT_CLOCK_MHZ, **icebreaker.DEFAULT_CLOCK_MHZ}

#: Board name -> nextpnr's router for a build with the resident block, where the board
#: needs one other than nextpnr's default.
RESIDENT_ROUTER = dict(ulx3s.RESIDENT_ROUTER)
#: Board name -> nextpnr's router for a build with a pumped array (its own clock).
PUMPED_ROUTER = dict(ulx3s.PUMPED_ROUTER)

#: FPGA device -> its hardware multipliers (18x18 or 16x16 DSP blocks).
MULTIPLIERS = {**ulx3s.MULTIPLIERS, **icebreaker.MULTIPLIERS}

#: FPGA device -> its DP16KD block RAMs (18 Kbit each; ECP5 only: the iCE40 builds are not
#: checked for block RAM here).
BLOCK_RAMS = dict(ulx3s.BLOCK_RAMS)

#: Block RAM aspect ratios (depth, width) a memory with one write and one read port (every
#: memory of the design) may take: ECP5 DP16KD (its true dual-port shapes and the 512 x 36
#: simple dual-port one, which synth_ecp5 picks for a shallow, wide memory such as the
#: host bridge's 256 x 32 buffers and the pool's line), iCE40 SB_RAM40_4K.
RAM_SHAPES = {
    "ecp5": ((16384, 1), (8192, 2), (4096, 4), (2048, 9), (1024, 18), (512, 36)),
    "iCE40": ((2048, 2), (1024, 4), (512, 8), (256, 16)),
}

# What the packer writes, per family.
BITSTREAM_SUFFIX = {"ecp5": "bit", "iCE40": "bin"}

DEFAULT_TARGET_MHZ = 200.0  # clock constraint of the bare-array build


def check_board(board):
    if board not in KNOWN_BOARDS:
        known = ", ".join(sorted(KNOWN_BOARDS))
        raise ValueError(f"unknown board {board!r}; known boards: {known}")
    return KNOWN_BOARDS[board]


def default_config(board):
    """The accelerator configuration ``make bitstream BOARD=board`` builds (chosen per board
    so it fits; docs/boards.md gives the figures)."""
    check_board(board)
    return DEFAULT_CONFIGS[board]


def multipliers_needed(config, family="ecp5"):
    """Hardware multipliers (18x18 or 16x16 DSP blocks) of the whole accelerator: one per
    PE and, on the ECP5, four per rescaler of the post-processing bank
    (``contract.postprocess``); what ``synth_ecp5`` produces for the default tops. The
    iCE40 builds map the rest of the arithmetic to logic, so only the array counts there
    (as :func:`check_fits` counts it). A double-pumped array has one multiplier per two
    PEs (``ArrayConfig.multipliers``)."""
    pes = config.array.multipliers
    if family != "ecp5":
        return pes
    return pes + postprocess_multipliers(
        config.cols, residual_add=config.residual_add, pipelined=config.pipelined,
        add_lanes=config.add_lanes)


def ram_blocks(depth, width, family):
    """Block RAMs a ``depth`` x ``width``-bit memory needs in its cheapest aspect ratio."""
    return min(math.ceil(depth / d) * math.ceil(width / w) for d, w in RAM_SHAPES[family])


def block_rams_needed(config, family="ecp5"):
    """``{part: blocks}`` of the whole accelerator's block RAM on ``family``, counted from
    the sizes of its memories, each in its cheapest shape (:func:`ram_blocks`): the
    activation buffer (one copy of ``act_depth`` bytes per row), the weight buffer
    (``weight_depth`` words of C bytes), the engine's parameter table (block RAM on the
    iCE40, which has no LUT RAM; LUT RAM on the ECP5), the resident data and program
    memories (32-bit words), the host bridge's buffers (its receive buffer twice, for its
    two read ports, and its read-back buffer) and the max pool's line (half a line of C
    bytes); ``"total"`` sums them. It is the count nextpnr placed on every recorded build
    (``tessera/explore/board_builds.json`` and the iCE40 runs of the resource model)."""
    from contract.link import MAX_PAYLOAD_WORDS, READ_BUFFER_WORDS
    from contract.requant import BIAS_WIDTH, MULTIPLIER_WIDTH, SHIFT_WIDTH
    from contract.streams import POOL_MAX_WIDTH, WORD_BITS

    cols = config.cols
    param_bits = (BIAS_WIDTH + MULTIPLIER_WIDTH + SHIFT_WIDTH) * cols
    parts = {"activations": config.rows * ram_blocks(config.act_depth, 8, family),
             "weights": ram_blocks(config.weight_depth, 8 * cols, family),
             "parameter table": (ram_blocks(config.max_col_tiles, param_bits, family)
                                 if family == "iCE40" else 0),
             "resident data": ram_blocks(config.resident_words, WORD_BITS, family),
             "resident program": ram_blocks(config.program_words, WORD_BITS, family),
             "host bridge": (2 * ram_blocks(MAX_PAYLOAD_WORDS, WORD_BITS, family)
                             + ram_blocks(READ_BUFFER_WORDS, WORD_BITS, family)),
             "pool": ram_blocks(POOL_MAX_WIDTH // 2, 8 * cols, family)}
    return {**parts, "total": sum(parts.values())}


def check_fits(board, config):
    """Refuse a configuration whose multipliers or block RAMs exceed the board's (before
    any tool runs). The iCE40 builds map part of the arithmetic to logic on purpose, so
    only the array is counted there, and their block RAM is not checked."""
    cls = check_board(board)
    available = MULTIPLIERS.get(cls.device)
    if isinstance(config, ConvEngineConfig) and family_of(board) == "ecp5":
        needed = multipliers_needed(config)
        what = (f"the {config.rows}x{config.cols} accelerator needs {needed} multipliers "
                f"({config.array.multipliers} in the array, the rest in post-processing)")
    else:
        needed = (config if isinstance(config, ArrayConfig) else config.array).multipliers
        what = f"a {config.rows}x{config.cols} array needs {needed} multipliers"
    if available is not None and needed > available:
        raise ValueError(f"{what}; {board} ({cls.device}) has {available}")
    blocks = BLOCK_RAMS.get(cls.device)
    if isinstance(config, ConvEngineConfig) and blocks is not None:
        parts = block_rams_needed(config)
        if parts["total"] > blocks:
            detail = ", ".join(f"{name} {count}" for name, count in parts.items()
                               if name != "total" and count)
            raise ValueError(f"the accelerator needs {parts['total']} DP16KD block RAMs "
                             f"({detail}); {board} ({cls.device}) has {blocks}")


def board_platform(board, *, target_mhz=DEFAULT_TARGET_MHZ):
    """An instance of ``board``'s platform whose default clock is constrained to
    ``target_mhz`` (``None`` keeps the board's oscillator frequency, as the accelerator
    build does: its PLL output is constrained from that).

    Raises
    ------
    ValueError
        ``board`` is not in :data:`KNOWN_BOARDS` (the message lists them).
    """
    cls = check_board(board)
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


def family_of(board):
    """``"ecp5"`` or ``"iCE40"`` (a property of the platform instance, not its class)."""
    return check_board(board)().family


def board_clock_mhz(board):
    """The board oscillator's frequency in MHz."""
    return KNOWN_BOARDS[board]().default_clk_frequency / 1e6


def default_router(board, config):
    """nextpnr's router for ``config`` on ``board`` when none is asked: the board's
    :data:`RESIDENT_ROUTER` for a configuration with the resident block, its
    :data:`PUMPED_ROUTER` for one whose array runs on its own clock, else None (nextpnr's
    own, router1)."""
    check_board(board)
    if config.resident and board in RESIDENT_ROUTER:
        return RESIDENT_ROUTER[board]
    if config.array.pump != 1:
        return PUMPED_ROUTER.get(board)
    return None


def design_clock_mhz(board, config, clock_mhz=None):
    """The clock a build asks the PLL for: ``clock_mhz`` if given, else the configuration's
    own ``clock_mhz``, else the board's :data:`DEFAULT_CLOCK_MHZ`."""
    check_board(board)
    for choice in (clock_mhz, config.clock_mhz):
        if choice is not None:
            return choice
    return DEFAULT_CLOCK_MHZ[board]
