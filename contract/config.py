"""Build parameters of the accelerator: the systolic array and the convolution engine
around it. Read by the hardware generators, the cycle model, the testbenches and the driver
(which learns them from the device's ID/config registers: ``contract.regmap``).
"""

from dataclasses import asdict, dataclass, field
from fractions import Fraction

from .requant import ACC_WIDTH
from .streams import WORD_BITS

# Products flow through: DSP input registers, DSP output register, one fabric register.
# The third stage is what lets an ECP5 8x8 array close timing above 150 MHz (the DSP
# output -> accumulator route is otherwise the critical path).
MULTIPLIER_LATENCY = 3

#: Largest array side: the CONFIG register has 8-bit fields, and beyond 64 the array's
#: drain (one row per cycle) outweighs its compute on every layer of the zoo.
MAX_ARRAY_SIDE = 64
#: Upper bounds of the buffer sizes: sanity limits well past any FPGA's block RAM, so a
#: typo (an extra zero or two) is refused instead of running Yosys out of memory.
MAX_ACT_DEPTH = 1 << 24
MAX_WEIGHT_DEPTH = 1 << 20
MAX_COL_TILES = 1 << 12
#: Upper bounds of the resident block's memories (32-bit words): the data memory (weights,
#: parameters, activation arena) and the program memory (``contract.resident``). 4 MiB and
#: 256 KiB: past any FPGA's block RAM, so a typo is refused before Yosys runs out of memory.
MAX_RESIDENT_WORDS = 1 << 20
MAX_PROGRAM_WORDS = 1 << 16
#: Bits per beat the host link's DMA streams carry (h2c/c2h of ``hw/top.py``). Only the
#: width the top is built with is accepted: the generators do not yet take another, and a
#: configuration that claims one would describe a netlist that does not exist.
STREAM_WIDTHS = (WORD_BITS,)
#: Design clock range (MHz) a configuration may ask for; the board's PLL refuses what it
#: cannot make within it.
MIN_CLOCK_MHZ, MAX_CLOCK_MHZ = 1.0, 1000.0
#: The design clock of a configuration without ``clock_mhz`` where one is needed anyway:
#: the twin's nominal clock (what profiles price its cycles at, and the base of the array
#: clock's ratio).
NOMINAL_CLOCK_MHZ = 50.0
#: The largest term of the array clock's ratio to the design clock (the twin's harness
#: steps the two clocks by it: ``harness/array_clock.h``).
MAX_CLOCK_RATIO_TERM = 16
#: The values ``ArrayConfig.pump`` may take: logical rows per multiplier, and the array
#: clock's multiple of the engine's (``hw/double_pumped.py``).
PUMP_CHOICES = (1, 2)


def check_positive_int(name, value, *, maximum=None):
    """Raise ``ValueError`` naming ``name`` unless ``value`` is an int in [1, maximum]."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive integer, not {value!r}")
    if maximum is not None and value > maximum:
        raise ValueError(f"{name} must be at most {maximum}, not {value!r}")
    return value


@dataclass(frozen=True)
class EngineFlag:
    """One switchable part of the engine: a bool field of :class:`ConvEngineConfig`. The
    configuration, the netlist's name, the register map (``contract.regmap``: the ``CONFIG``
    bit and the registers left out), the hardware top and the driver all read it from
    :data:`ENGINE_FLAGS`. A build from before the flag existed had its ``default``, so both
    the name's suffix and the ``CONFIG`` bit mark the other value (a build from before the
    bit reads 0: the default, as it was).

    Parameters
    ----------
    meaning : str
        What the flag switches (put in the error for a value that is not a bool).
    suffix : str
        The netlist name's suffix on a build whose value is not the default.
    bit : str
        The ``CONFIG`` register field set on such a build.
    bit_doc : str
        That field's description in the register map.
    registers : str or tuple of str, optional
        The name prefix (or prefixes) of the registers a build without the part leaves out
        (they read 0).
    default : bool
        The value of a configuration that does not name the flag.
    """

    meaning: str
    suffix: str
    bit: str
    bit_doc: str
    registers: str | tuple | None = None
    default: bool = True


#: The engine's optional blocks, present by default: :class:`ConvEngineConfig` field ->
#: :class:`EngineFlag`. The order is that of the netlist name's suffixes and of the
#: ``CONFIG`` absence bits (``contract.regmap`` gives them consecutive bits in this order):
#: append, never reorder.
OPTIONAL_BLOCKS = {
    "residual_add": EngineFlag(
        "whether the engine has the residual add", "-noadd", "no_add",
        "1: built without the residual add; an ADD start is refused with BAD_OPCODE",
        registers="ADD_"),
    "perf_counters": EngineFlag(
        "whether the device has its performance counters", "-noperf", "no_perf",
        "1: built without the performance counters; the PERF_* registers read 0",
        registers="PERF_"),
    "csr_readback": EngineFlag(
        "whether the RW registers read back", "-wo", "no_readback",
        "1: the RW registers read 0 (written values still hold and are used)"),
    "pipelined": EngineFlag(
        "whether the engine has the registers that only buy clock speed", "-lean",
        "no_pipeline",
        "1: built for a slow clock without the registers that only buy clock speed; a layer "
        "takes more cycles than the cycle model counts"),
}


#: Features a build may add, absent by default (so a configuration from before one names
#: the netlist it always did): :class:`ConvEngineConfig` field -> :class:`EngineFlag`.
#: Their ``CONFIG`` bits follow the optional blocks' in this order (append, never reorder).
ADDED_FEATURES = {
    "depthwise": EngineFlag(
        "whether the engine has the depthwise mode", "-dw", "depthwise",
        "1: built with the depthwise mode (CONV_DEPTHWISE: each column its own channel)",
        registers=("CONV_DEPTHWISE", "CONV_DW_"), default=False),
    "resident_add": EngineFlag(
        "whether the resident player has its residual add", "-ra", "resident_add",
        "1: the resident player adds a skip operand to a pass's results as it stores them "
        "(PASS_ADD records)", default=False),
    # (Without the resident block there is no player, and the flag changes nothing.)
}

#: Every flag, in the order of their ``CONFIG`` bits.
ENGINE_FLAGS = {**OPTIONAL_BLOCKS, **ADDED_FEATURES}

#: Lanes one residual-add datapath of the post-processing bank serves
#: (``contract.postprocess.add_units``) unless a configuration's ``add_lanes`` says fewer.
ADD_LANES_PER_UNIT = 8
#: The values ``ConvEngineConfig.add_lanes`` may take, in the order of the ``CONFIG``
#: register's ``add_wider`` field (0: 8, as every build before the field): 8 lanes a
#: datapath, or 4 (two datapaths on 8 lanes: a beat every 4 cycles, the pace at which the
#: host stream brings an ADD's operands), 2, 1.
ADD_LANES_CHOICES = (8, 4, 2, 1)


def check_count(name, value, *, maximum):
    """Raise ``ValueError`` naming ``name`` unless ``value`` is an int in [0, maximum]."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= maximum:
        raise ValueError(f"{name} must be an integer from 0 to {maximum}, not {value!r}")
    return value


def check_clock_mhz(name, value):
    """Raise ``ValueError`` naming ``name`` unless ``value`` is None or a number of MHz in
    [MIN_CLOCK_MHZ, MAX_CLOCK_MHZ]."""
    if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                              or not MIN_CLOCK_MHZ <= value <= MAX_CLOCK_MHZ):
        raise ValueError(f"{name} must be a number from {MIN_CLOCK_MHZ:g} to "
                         f"{MAX_CLOCK_MHZ:g}, not {value!r}")
    return value


def check_bool(name, value, *, meaning=None):
    """Raise ``ValueError`` naming ``name`` unless ``value`` is ``True`` or ``False``.

    ``meaning`` (what the flag switches, e.g. "whether the engine has the residual add") is
    put in the message. An int is refused too: ``1`` is what a typo or a C-style flag gives,
    and a configuration field that is not a bool would hash and print differently.
    """
    if not isinstance(value, bool):
        said = f" ({meaning})" if meaning else ""
        raise ValueError(f"{name} must be true or false{said}, not {value!r}")
    return value


@dataclass(frozen=True)
class ArrayConfig:
    """Build parameters of the systolic GEMM array.

    Parameters
    ----------
    rows, cols : int
        R x C processing elements; one output tile is R rows of A by C columns of B.
    acc_width : int
        Accumulator width in bits (two's complement, wraps like the golden model).
    pump : int
        Logical rows one DSP block serves (one of :data:`PUMP_CHOICES`): 1, one processing
        element a multiplier, all in the engine's clock; 2, the processing elements in
        their own clock domain at twice the engine's clock, each multiplier doing two
        rows' MACs (``hw/double_pumped.py``; rows must be even). The results are the same.
    """

    rows: int = 8
    cols: int = 8
    acc_width: int = 32
    pump: int = 1

    def __post_init__(self):
        check_positive_int("rows", self.rows, maximum=MAX_ARRAY_SIDE)
        check_positive_int("cols", self.cols, maximum=MAX_ARRAY_SIDE)
        check_positive_int("acc_width", self.acc_width, maximum=64)
        if self.acc_width < 16:
            raise ValueError(
                f"acc_width must be at least 16 to hold one int8 x int8 product, "
                f"not {self.acc_width!r}")
        if self.pump not in PUMP_CHOICES or isinstance(self.pump, bool):
            raise ValueError(f"pump must be one of {list(PUMP_CHOICES)} (logical rows a DSP "
                             f"block serves), not {self.pump!r}")
        if self.rows % self.pump:
            raise ValueError(f"a double-pumped array (pump={self.pump}) pairs its rows on "
                             f"its multipliers: rows must be a multiple of {self.pump}, "
                             f"not {self.rows!r}")

    @property
    def name(self):
        """Folder-friendly name, one per netlist (Amaranth Verilog has no HDL parameters)."""
        return (f"r{self.rows}c{self.cols}a{self.acc_width}"
                + (f"p{self.pump}" if self.pump != 1 else ""))

    @property
    def multipliers(self):
        """DSP blocks (multipliers) the array uses."""
        return self.rows * self.cols // self.pump

    def as_dict(self):
        return asdict(self)

@dataclass(frozen=True)
class ConvEngineConfig:
    """Build parameters of the convolution engine around an R x C systolic array.

    Parameters
    ----------
    array : ArrayConfig
        The systolic array (R output pixels by C output channels per tile).
    act_depth : int
        Activation buffer size in int8 elements (C_in * H * W of one layer must fit). The
        buffer is replicated R times, one copy per array row (see docs/conv-engine.md).
    weight_depth : int
        Weight buffer size in words of C int8 weights (col_tiles * C_in * kh * kw must fit).
    max_col_tiles : int
        Column tiles whose bias/multiplier/shift the engine holds (C_out <= C * this).
    stream_width : int
        Bits per beat of the host link's DMA streams; one of :data:`STREAM_WIDTHS`.
    clock_mhz : float or None
        Design clock; None means the target's own (a board's default PLL output, the
        twin's nominal 50 MHz). Not part of the netlist's name: the clock is a constraint.
    array_clock_mhz : float or None
        The array's own clock, with ``array.pump`` 2 only; None means ``pump`` times the
        design clock, where the array keeps up with one operand beat per engine cycle.
        Slower, the array takes a beat every ``2 * clock / array_clock`` engine cycles
        (its crossings are asynchronous FIFOs, so any ratio is correct). Not part of the
        netlist's name either.
    residual_add : bool
        Whether the post-processing bank has the residual add's datapath (ADD passes).
        Without it the bank keeps only the requantizer's rescalers (``contract.postprocess``:
        4 multipliers instead of 12 on a 2-lane bank), the device refuses an ADD start
        with ``BAD_OPCODE`` and says so in its ``CONFIG`` register, and the driver runs Add
        layers elsewhere. False only where the multipliers are scarce (the iCEBreaker).
    perf_counters : bool
        Whether the device has its performance counters (the ``PERF_*`` registers: cycles,
        busy, MACs, stalls, compute). Without them those words read 0 like unmapped ones,
        the ``CONFIG`` register's ``no_perf`` bit is set, and the driver reports no cycle
        counts rather than zeros. False only where logic cells are scarce (the iCEBreaker,
        docs/boards.md).
    csr_readback : bool
        Whether the RW registers (the layer's descriptor, counts and options) read back
        what was written. Without it they read 0 (the hardware still holds and uses them;
        the driver never reads them back), which leaves their bits out of the CSR bank's
        read multiplexer, and the ``CONFIG`` register's ``no_readback`` bit is set. False
        only where logic cells are scarce (the iCEBreaker).
    add_lanes : int
        Lanes each residual-add datapath of the post-processing bank serves (one of
        :data:`ADD_LANES_CHOICES`): 8 by default (one datapath, three rescalers, on 8
        lanes: an ADD beat every 8 cycles); 4 gives the 8-lane bank two datapaths (six
        rescalers, 8 more MULT18X18D) and a beat every 4 cycles, as fast as the host
        stream brings the operands. The ``CONFIG`` register says which.
    pipelined : bool
        Whether the engine has the registers that only buy clock speed: the address
        generator's derived registers and per-lane copies (``hw/addrgen.py``) and the skid
        buffers between the blocks (``hw/pipeline.py``). Without them the address
        generator is ``hw/addrgen_lean.py`` (the same beats, R idle cycles per pixel
        group), the blocks hand over directly, and the ``CONFIG`` register's
        ``no_pipeline`` bit is set: a layer then takes more cycles than the driver's
        cycle model counts. False only for a slow clock on a small FPGA (the iCEBreaker).
    """

    array: ArrayConfig = field(default_factory=ArrayConfig)
    act_depth: int = 4096
    weight_depth: int = 1024
    max_col_tiles: int = 16
    stream_width: int = WORD_BITS
    clock_mhz: float | None = None
    array_clock_mhz: float | None = None
    residual_add: bool = True
    perf_counters: bool = True
    csr_readback: bool = True
    pipelined: bool = True
    depthwise: bool = False
    resident_add: bool = False
    resident_words: int = 0
    add_lanes: int = ADD_LANES_PER_UNIT
    program_words: int = 0

    def __post_init__(self):
        if not isinstance(self.array, ArrayConfig):
            raise TypeError(f"array must be an ArrayConfig, not {self.array!r}")
        check_positive_int("act_depth", self.act_depth, maximum=MAX_ACT_DEPTH)
        check_positive_int("weight_depth", self.weight_depth, maximum=MAX_WEIGHT_DEPTH)
        check_positive_int("max_col_tiles", self.max_col_tiles, maximum=MAX_COL_TILES)
        if self.stream_width not in STREAM_WIDTHS or isinstance(self.stream_width, bool):
            raise ValueError(f"stream_width must be one of {list(STREAM_WIDTHS)} (bits per "
                             f"beat the host link carries), not {self.stream_width!r}")
        check_clock_mhz("clock_mhz", self.clock_mhz)
        check_clock_mhz("array_clock_mhz", self.array_clock_mhz)
        if self.array_clock_mhz is not None and self.array.pump == 1:
            raise ValueError("array_clock_mhz is the clock of an array on its own clock "
                             "(array.pump 2); with array.pump 1 the array runs at clock_mhz")
        for name, flag in ENGINE_FLAGS.items():
            check_bool(name, getattr(self, name), meaning=flag.meaning)
        if self.add_lanes not in ADD_LANES_CHOICES or isinstance(self.add_lanes, bool):
            raise ValueError(f"add_lanes must be one of {list(ADD_LANES_CHOICES)} (lanes a "
                             f"residual-add datapath serves), not {self.add_lanes!r}")
        check_count("resident_words", self.resident_words, maximum=MAX_RESIDENT_WORDS)
        check_count("program_words", self.program_words, maximum=MAX_PROGRAM_WORDS)
        if bool(self.resident_words) != bool(self.program_words):
            raise ValueError(
                f"resident_words and program_words are both 0 (no resident execution) or "
                f"both positive (a data memory and a program memory), not "
                f"{self.resident_words!r} and {self.program_words!r}")
        if self.array.acc_width != ACC_WIDTH:
            raise ValueError(f"the engine's requantizer takes {ACC_WIDTH}-bit accumulators; "
                             f"array.acc_width must be {ACC_WIDTH}, "
                             f"not {self.array.acc_width!r}")
        if self.array.pump != 1 and self.depthwise:
            raise ValueError("the double-pumped array (array.pump 2) has no depthwise mode: "
                             "build it with depthwise false, or with array.pump 1")
        if self.array.rows > 255:
            raise ValueError(f"array.rows must fit the 8-bit last_rows field, "
                             f"not {self.array.rows!r}")

    @property
    def rows(self):
        return self.array.rows

    @property
    def cols(self):
        return self.array.cols

    @property
    def acc_width(self):
        return self.array.acc_width

    #: Verilog module name of the engine (``twin.runner`` builds it from ``hw.conv_engine``).
    top_name = "conv_engine"

    @property
    def name(self):
        """Folder-friendly name: one netlist per configuration."""
        return (f"{self.top_name}-{self.array.name}-x{self.act_depth}-w{self.weight_depth}"
                f"-t{self.max_col_tiles}"
                + "".join(flag.suffix for name, flag in ENGINE_FLAGS.items()
                          if getattr(self, name) != flag.default)
                + (f"-al{self.add_lanes}" if self.add_lanes != ADD_LANES_PER_UNIT else "")
                + (f"-m{self.resident_words}p{self.program_words}" if self.resident else ""))

    def array_clock_ratio(self):
        """The array's clock over the design clock, a fraction of small terms (the twin's
        harness runs the two clocks at it, the cycle model counts with it): ``pump``
        unless ``array_clock_mhz`` is set; without ``clock_mhz``, the design clock is
        :data:`NOMINAL_CLOCK_MHZ`."""
        if self.array_clock_mhz is None:
            return Fraction(self.array.pump)
        clock = self.clock_mhz if self.clock_mhz is not None else NOMINAL_CLOCK_MHZ
        return Fraction(self.array_clock_mhz / clock).limit_denominator(MAX_CLOCK_RATIO_TERM)

    @property
    def resident(self):
        """Whether the build has the resident block (its memories and player)."""
        return self.resident_words > 0

    def features(self):
        """Which optional blocks and added features this build has: ``{field: bool}`` over
        :data:`OPTIONAL_BLOCKS` and :data:`ADDED_FEATURES`, the keywords of
        ``contract.regmap.pack_config`` and ``implemented_registers`` and what
        ``unpack_features`` reads back."""
        return {name: getattr(self, name) for name in ENGINE_FLAGS}

    def env(self):
        """Environment a cocotb testbench rebuilds this configuration from."""
        # The resident depths only when there is a resident block, and the add's lanes only
        # when not the default: the environment of a build without them stays what it was.
        extra = ({"TESSERA_RESIDENT_WORDS": str(self.resident_words),
                  "TESSERA_PROGRAM_WORDS": str(self.program_words)}
                 if self.resident else {})
        if self.add_lanes != ADD_LANES_PER_UNIT:
            extra["TESSERA_ADD_LANES"] = str(self.add_lanes)
        return {"TESSERA_ACT_DEPTH": str(self.act_depth),
                "TESSERA_WEIGHT_DEPTH": str(self.weight_depth),
                "TESSERA_MAX_COL_TILES": str(self.max_col_tiles),
                **{f"TESSERA_{block.upper()}": str(int(getattr(self, block)))
                   for block in OPTIONAL_BLOCKS}, **extra,
                # Only when on: the environment of a build without it stays what it was.
                **{f"TESSERA_{name.upper()}": "1" for name in ADDED_FEATURES
                   if getattr(self, name)}}

    @classmethod
    def from_env(cls, environ):
        """Inverse of the runner's environment (``TESSERA_ROWS`` ... and :meth:`env`)."""
        array = ArrayConfig(rows=int(environ["TESSERA_ROWS"]), cols=int(environ["TESSERA_COLS"]),
                            acc_width=int(environ.get("TESSERA_ACC_WIDTH", "32")),
                            pump=int(environ.get("TESSERA_PUMP", "1")))
        return cls(array=array, act_depth=int(environ["TESSERA_ACT_DEPTH"]),
                   weight_depth=int(environ["TESSERA_WEIGHT_DEPTH"]),
                   max_col_tiles=int(environ["TESSERA_MAX_COL_TILES"]),
                   resident_words=int(environ.get("TESSERA_RESIDENT_WORDS", "0")),
                   program_words=int(environ.get("TESSERA_PROGRAM_WORDS", "0")),
                   add_lanes=int(environ.get("TESSERA_ADD_LANES", str(ADD_LANES_PER_UNIT))),
                   **{name: environ.get(f"TESSERA_{name.upper()}",
                                        str(int(flag.default))) == "1"
                      for name, flag in ENGINE_FLAGS.items()})

    def as_dict(self):
        return asdict(self)
