"""Register offsets and fields of the Tessera accelerator.

Generated from hw/regmap.py by `python -m hw.regmap`; do not edit.
"""

import enum

ID_VALUE = 0x54455353
MAP_VERSION = 0x1


class Reg(enum.IntEnum):
    """Register byte offsets."""

    ID = 0x000  # RO: Identifies a Tessera accelerator: 0x54455353
    VERSION = 0x004  # RO: Register map version
    CONFIG = 0x008  # RO: Build parameters of the compute array
    ACT_DEPTH = 0x00c  # RO: Activation buffer depth in bytes per copy
    WEIGHT_DEPTH = 0x010  # RO: Weight buffer depth in words of C bytes
    CTRL = 0x020  # W1P: Control strobes
    STATUS = 0x024  # W1C: Layer status (busy is read-only)
    IRQ_ENABLE = 0x028  # RW: Raise the interrupt line on these status bits
    ERROR_CODE = 0x02c  # RO: Why the last layer failed (0: no error)
    OPCODE = 0x040  # RW: Layer operation (see sw_driver.regs.Opcode)
    GEMM_K = 0x044  # RW: GEMM: operand beats per output tile (K >= 1)
    GEMM_TILES = 0x048  # RW: GEMM: output tiles in the layer
    PERF_CYCLES = 0x080  # RO: Cycles since reset (wraps)
    PERF_BUSY = 0x084  # RO: Cycles spent busy
    PERF_MACS_LO = 0x088  # RO: Multiply-accumulates issued, low word
    PERF_MACS_HI = 0x08c  # RO: Multiply-accumulates issued, high word
    PERF_STALLS = 0x090  # RO: Busy cycles in which the array did not advance


VERSION_MINOR_SHIFT = 0
VERSION_MINOR_MASK = 0xffff
VERSION_MAJOR_SHIFT = 16
VERSION_MAJOR_MASK = 0xffff0000
CONFIG_ROWS_SHIFT = 0
CONFIG_ROWS_MASK = 0xff
CONFIG_COLS_SHIFT = 8
CONFIG_COLS_MASK = 0xff00
CONFIG_ACC_WIDTH_SHIFT = 16
CONFIG_ACC_WIDTH_MASK = 0xff0000
CTRL_START_SHIFT = 0
CTRL_START_MASK = 0x1
CTRL_SOFT_RESET_SHIFT = 1
CTRL_SOFT_RESET_MASK = 0x2
STATUS_BUSY_SHIFT = 0
STATUS_BUSY_MASK = 0x1
STATUS_DONE_SHIFT = 1
STATUS_DONE_MASK = 0x2
STATUS_ERROR_SHIFT = 2
STATUS_ERROR_MASK = 0x4
IRQ_ENABLE_DONE_SHIFT = 0
IRQ_ENABLE_DONE_MASK = 0x1
IRQ_ENABLE_ERROR_SHIFT = 1
IRQ_ENABLE_ERROR_MASK = 0x2


class Opcode(enum.IntEnum):
    """Layer operations."""

    NOP = 0
    GEMM = 1
    CONV = 2
    DEPTHWISE = 3
    DENSE = 4
    POOL = 5
    ADD = 6
