"""Bitstreams for the boards, with a machine-readable report of resources and fmax.

One job per module: :mod:`.registry` (the boards, their default configurations and
clocks, what fits), :mod:`.tops` (the tops a build elaborates and Amaranth's build plan),
:mod:`.tools` (running Yosys, nextpnr and the packer, logged), :mod:`.nextpnr` (reading
nextpnr's report), :mod:`.cache` (the inputs key, the build folder, the last report) and
:mod:`.flow` (a build from start to ``report.json``). The names below are the stable ones
the design-space search, the CLI and the benchmarks build on.
"""

from .cache import ARRAY_SUFFIX, REPORT_NAME, build_dir_for, inputs_key, load_report, source_state
from .flow import accelerator_report, build_array_bitstream, build_bitstream, peak_throughput
from .nextpnr import RESOURCE_CELLS, critical_path, parse_nextpnr_report, timing_verdict
from .registry import (
    BITSTREAM_SUFFIX,
    DEFAULT_CLOCK_MHZ,
    DEFAULT_CONFIGS,
    DEFAULT_TARGET_MHZ,
    KNOWN_BOARDS,
    MULTIPLIERS,
    board_platform,
    default_config,
    default_router,
    design_clock_mhz,
    multipliers_needed,
)
from .tools import BitstreamError, tool_versions
from .tops import (
    DEFAULT_SEED,
    KEEP_COPIES,
    KEEP_PE_REGISTERS,
    NEXTPNR_REPORT_NAME,
    TOP_NAME,
    array_board_top,
    board_top,
    prepare_array_build,
    prepare_build,
)

__all__ = [
    "ARRAY_SUFFIX", "BITSTREAM_SUFFIX", "DEFAULT_CLOCK_MHZ", "DEFAULT_CONFIGS", "DEFAULT_SEED",
    "DEFAULT_TARGET_MHZ", "KEEP_COPIES", "KEEP_PE_REGISTERS", "KNOWN_BOARDS", "MULTIPLIERS",
    "NEXTPNR_REPORT_NAME", "REPORT_NAME", "RESOURCE_CELLS", "TOP_NAME", "BitstreamError",
    "accelerator_report", "array_board_top", "board_platform", "board_top",
    "build_array_bitstream", "build_bitstream", "build_dir_for", "critical_path",
    "default_config", "default_router", "design_clock_mhz", "inputs_key", "load_report",
    "multipliers_needed", "parse_nextpnr_report", "peak_throughput", "prepare_array_build",
    "prepare_build", "source_state",
    "timing_verdict", "tool_versions",
]
