"""The cocotb testbenches that `make sim` knows, with the configurations each runs on."""

from dataclasses import dataclass

from contract.config import ArrayConfig, ConvEngineConfig
from twin.blocks import BlockBuild
from twin.system import TopBuild


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
        Testbench("postprocess", "sim.tb_postprocess",
                  (BlockBuild("postprocess", lanes=8), BlockBuild("postprocess", lanes=3)),
                  "the engine's post-processing bank: passes alternating requantization and "
                  "residual add vs golden requantize / add, random idle input and "
                  "backpressure, a protocol monitor on every stream"),
        Testbench("blocks", "sim.tb_blocks", (BlockBuild("maxpool", lanes=2, max_width=12),),
                  "2x2 max pool vs golden max_pool2d: idle input, random backpressure"),
        Testbench("components", "sim.tb_components",
                  (BlockBuild("host_loader", lanes=5), BlockBuild("result_writer", lanes=5)),
                  "the top's host loader and output writer on their own: random idle "
                  "input, random backpressure, a protocol monitor on every stream"),
        Testbench("system", "sim.tb_system",
                  (TopBuild(ConvEngineConfig(array=ArrayConfig(rows=4, cols=4),
                                             act_depth=2048, weight_depth=512,
                                             max_col_tiles=8)),),
                  "accelerator top through its CSR port and DMA streams, running the "
                  "driver's own layer programs (conv, depthwise, dense)"),
    )
}


def find_testbench(name):
    """The testbench called ``name``, or a ValueError listing the known ones."""
    try:
        return TESTBENCHES[name]
    except KeyError:
        known = ", ".join(sorted(TESTBENCHES))
        raise ValueError(f"unknown testbench {name!r}; known testbenches: {known}") from None
