"""Build parameters and layer descriptor of the convolution engine (plain Python).

Read by the generator (``hw.conv_engine``), the driver's lowering
(``sw_driver.conv_lowering``) and the testbenches; importing it needs no Amaranth, so the
driver can check a layer against the hardware without the HDL toolchain.
"""

from dataclasses import asdict, dataclass, field

from .config import ArrayConfig, check_positive_int

#: Largest kernel side the address generator supports (kernel_h/kernel_w fields: 3 bits).
KERNEL_MAX = 7
#: Largest padding on any side: k // 2 for the largest kernel.
PAD_MAX = KERNEL_MAX // 2
#: Strides the engine runs.
STRIDES = (1, 2)

#: The layer descriptor, one source for the hardware struct and the driver:
#: ``(name, width, signed, meaning)``. The first group is the layer itself; the second group
#: is address arithmetic the driver derives from it (``conv_lowering.make_descriptor``) so
#: that the hardware only ever adds and compares, with no multiplier or divider.
DESCRIPTOR_FIELDS = (
    ("in_channels", 16, False, "C_in"),
    ("in_height", 16, False, "H"),
    ("in_width", 16, False, "W"),
    ("kernel_h", 3, False, "kh, 1..7"),
    ("kernel_w", 3, False, "kw, 1..7"),
    ("stride", 2, False, "1 or 2 (both axes)"),
    ("pad_top", 2, False, "0..3 (bottom padding follows from the output size)"),
    ("pad_left", 2, False, "0..3 (right padding follows from the output size)"),
    ("col_tiles", 16, False, "ceil(C_out / C): column tiles, the outer loop"),
    ("pixel_groups", 16, False, "ceil(OH*OW / R): groups of R output pixels"),
    ("last_rows", 8, False, "output pixels in the last group, 1..R"),
    ("x_zero_point", 8, True, "fed at padding positions"),
    ("y_zero_point", 8, True, "output zero point"),
    ("lo", 8, True, "clamp low (fused activation)"),
    ("hi", 8, True, "clamp high"),
    # Derived: activation addresses are HWC, addr = (iy*W + ix)*C_in + c.
    ("origin_addr", 32, True, "(-pad_top*W - pad_left)*C_in: window base of pixel 0"),
    ("row_skip", 32, True, "(W - kw)*C_in + 1: address step from the end of a kernel row"),
    ("pixel_daddr", 32, True, "stride*C_in: window base step to the next pixel"),
    ("group_dx", 16, True, "(R mod OW)*stride: ix step to the next pixel group"),
    ("group_dy", 16, True, "(R div OW)*stride: iy step to the next pixel group"),
    ("group_daddr", 32, True, "(group_dy*W + group_dx)*C_in"),
    ("x_end", 16, True, "OW*stride - pad_left: an ix0 at or past it wraps to the next row"),
    ("x_wrap", 16, True, "OW*stride: subtracted from ix0 on a wrap"),
    ("wrap_daddr", 32, True, "(stride*W - OW*stride)*C_in: address step of a wrap"),
)


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
        if self.array.acc_width != 32:
            raise ValueError(f"the engine's requantizer takes 32-bit accumulators; "
                             f"array.acc_width must be 32, not {self.array.acc_width!r}")
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

    #: Verilog module name of the engine.
    top_name = "conv_engine"

    @property
    def name(self):
        """Folder-friendly name: one netlist per configuration."""
        return (f"{self.top_name}-{self.array.name}-x{self.act_depth}-w{self.weight_depth}"
                f"-t{self.max_col_tiles}")

    def make_top(self):
        """The component to convert to Verilog (imports Amaranth)."""
        from .conv_engine import ConvEngine

        return ConvEngine(self)

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
