"""Build parameters of the accelerator: the systolic array and the convolution engine
around it. Read by the hardware generators, the cycle model, the testbenches and the driver
(which learns them from the device's ID/config registers: ``contract.regmap``).
"""

from dataclasses import asdict, dataclass, field

from .requant import ACC_WIDTH

# Products flow through: DSP input registers, DSP output register, one fabric register.
# The third stage is what lets an ECP5 8x8 array close timing above 150 MHz (the DSP
# output -> accumulator route is otherwise the critical path).
MULTIPLIER_LATENCY = 3


def check_positive_int(name, value, *, maximum=None):
    """Raise ``ValueError`` naming ``name`` unless ``value`` is an int in [1, maximum]."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive integer, not {value!r}")
    if maximum is not None and value > maximum:
        raise ValueError(f"{name} must be at most {maximum}, not {value!r}")
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
    """

    rows: int = 8
    cols: int = 8
    acc_width: int = 32

    def __post_init__(self):
        check_positive_int("rows", self.rows, maximum=64)
        check_positive_int("cols", self.cols, maximum=64)
        check_positive_int("acc_width", self.acc_width, maximum=64)
        if self.acc_width < 16:
            raise ValueError(
                f"acc_width must be at least 16 to hold one int8 x int8 product, "
                f"not {self.acc_width!r}")

    @property
    def name(self):
        """Folder-friendly name, one per netlist (Amaranth Verilog has no HDL parameters)."""
        return f"r{self.rows}c{self.cols}a{self.acc_width}"

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
    """

    array: ArrayConfig = field(default_factory=ArrayConfig)
    act_depth: int = 4096
    weight_depth: int = 1024
    max_col_tiles: int = 16

    def __post_init__(self):
        if not isinstance(self.array, ArrayConfig):
            raise TypeError(f"array must be an ArrayConfig, not {self.array!r}")
        check_positive_int("act_depth", self.act_depth, maximum=1 << 24)
        check_positive_int("weight_depth", self.weight_depth, maximum=1 << 20)
        check_positive_int("max_col_tiles", self.max_col_tiles, maximum=1 << 12)
        if self.array.acc_width != ACC_WIDTH:
            raise ValueError(f"the engine's requantizer takes {ACC_WIDTH}-bit accumulators; "
                             f"array.acc_width must be {ACC_WIDTH}, "
                             f"not {self.array.acc_width!r}")
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

    #: Verilog module name of the engine (``sim.runner`` builds it from ``hw.conv_engine``).
    top_name = "conv_engine"

    @property
    def name(self):
        """Folder-friendly name: one netlist per configuration."""
        return (f"{self.top_name}-{self.array.name}-x{self.act_depth}-w{self.weight_depth}"
                f"-t{self.max_col_tiles}")

    def env(self):
        """Environment a cocotb testbench rebuilds this configuration from."""
        return {"TESSERA_ACT_DEPTH": str(self.act_depth),
                "TESSERA_WEIGHT_DEPTH": str(self.weight_depth),
                "TESSERA_MAX_COL_TILES": str(self.max_col_tiles)}

    @classmethod
    def from_env(cls, environ):
        """Inverse of the runner's environment (``TESSERA_ROWS`` ... and :meth:`env`)."""
        array = ArrayConfig(rows=int(environ["TESSERA_ROWS"]), cols=int(environ["TESSERA_COLS"]),
                            acc_width=int(environ.get("TESSERA_ACC_WIDTH", "32")))
        return cls(array=array, act_depth=int(environ["TESSERA_ACT_DEPTH"]),
                   weight_depth=int(environ["TESSERA_WEIGHT_DEPTH"]),
                   max_col_tiles=int(environ["TESSERA_MAX_COL_TILES"]))

    def as_dict(self):
        return asdict(self)
