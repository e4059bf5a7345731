"""The cocotb testbenches that `make sim` knows, with the configurations each runs on."""

from dataclasses import dataclass

from hw.config import ArrayConfig
from hw.conv_config import ConvEngineConfig


@dataclass(frozen=True)
class Testbench:
    name: str
    module: str
    configs: tuple
    description: str


TESTBENCHES = {
    tb.name: tb for tb in (
        Testbench("systolic", "sim.tb_systolic",
                  (ArrayConfig(rows=8, cols=8), ArrayConfig(rows=3, cols=5),
                   ArrayConfig(rows=1, cols=1), ArrayConfig(rows=4, cols=2)),
                  "systolic GEMM array vs golden GEMM: random shapes, extremes, "
                  "backpressure, steady-state throughput"),
        Testbench("conv", "sim.tb_conv",
                  tuple(ConvEngineConfig(array=array, act_depth=4096, weight_depth=1024,
                                         max_col_tiles=8)
                        for array in (ArrayConfig(rows=4, cols=4), ArrayConfig(rows=3, cols=5),
                                      ArrayConfig(rows=8, cols=8))),
                  "convolution engine vs golden conv2d + requantize: random layers, "
                  "extremes, backpressure, cycles per layer vs ideal"),
    )
}


def find_testbench(name):
    """The testbench called ``name``, or a ValueError listing the known ones."""
    try:
        return TESTBENCHES[name]
    except KeyError:
        known = ", ".join(sorted(TESTBENCHES))
        raise ValueError(f"unknown testbench {name!r}; known testbenches: {known}") from None
