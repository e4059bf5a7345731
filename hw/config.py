"""One configuration object for the accelerator, read by the hardware generators, the
cycle model, the testbenches and the driver (plain Python: importing it needs no Amaranth)."""

from dataclasses import asdict, dataclass

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
