"""Register offsets and fields of the Tessera accelerator.

Generated from contract/regmap.py by `python -m contract.regmap`; do not edit.
"""

import enum

ID_VALUE = 0x54455353
MAP_VERSION = 0x9


class Reg(enum.IntEnum):
    """Register byte offsets."""

    # RO: Identifies a Tessera accelerator: 0x54455353
    ID = 0x000
    # RO: Register map version
    VERSION = 0x004
    # RO: Build parameters of the compute array
    CONFIG = 0x008
    # RO: Activation buffer depth in int8 elements per copy
    ACT_DEPTH = 0x00c
    # RO: Weight buffer depth in words of C int8 weights
    WEIGHT_DEPTH = 0x010
    # RO: Column tiles of bias/multiplier/shift held
    PARAM_DEPTH = 0x014
    # RO: Widest feature map the 2x2 max pool takes
    POOL_MAX_WIDTH = 0x018
    # W1P: Control strobes
    CTRL = 0x020
    # W1C: Layer status (busy is read-only)
    STATUS = 0x024
    # RW: Raise the interrupt line on these status bits
    IRQ_ENABLE = 0x028
    # RO: Why the last layer failed (0: no error)
    ERROR_CODE = 0x02c
    # RW: Layer operation (see sw_driver.regs.Opcode)
    OPCODE = 0x040
    # RW: Column-tile parameter entries the host-to-device stream carries first
    LOAD_PARAMS = 0x050
    # RW: Weight words (C int8 each) that follow
    LOAD_WEIGHTS = 0x054
    # RW: Activation elements (int8, HWC) that follow, packed 4 per 32-bit word
    LOAD_ACT = 0x058
    # RW: CONV: fuse a 2x2 / stride 2 max pool after requantization
    POOL_ENABLE = 0x060
    # RW: CONV with pool, POOL: feature map width
    POOL_WIDTH = 0x064
    # RW: CONV with pool, POOL: feature map height
    POOL_HEIGHT = 0x068
    # RW: Feature maps (channel groups of C) pooled in turn
    POOL_FRAMES = 0x06c
    # RW: POOL, ADD: input beats on the host-to-device stream (one pixel of C channels, or C
    # pairs for ADD)
    STREAM_BEATS = 0x070
    # RO: Cycles since reset (wraps)
    PERF_CYCLES = 0x080
    # RO: Cycles spent busy
    PERF_BUSY = 0x084
    # RO: Multiply-accumulates issued, low word
    PERF_MACS_LO = 0x088
    # RO: Multiply-accumulates issued, high word
    PERF_MACS_HI = 0x08c
    # RO: Busy cycles in which the array did not advance
    PERF_STALLS = 0x090
    # RO: Busy cycles after loading: the engine computing and sending results
    PERF_COMPUTE = 0x094
    # RW: Convolution descriptor: C_in (16 bits)
    CONV_IN_CHANNELS = 0x100
    # RW: Convolution descriptor: H (16 bits)
    CONV_IN_HEIGHT = 0x104
    # RW: Convolution descriptor: W (16 bits)
    CONV_IN_WIDTH = 0x108
    # RW: Convolution descriptor: kh, 1..7 (3 bits)
    CONV_KERNEL_H = 0x10c
    # RW: Convolution descriptor: kw, 1..7 (3 bits)
    CONV_KERNEL_W = 0x110
    # RW: Convolution descriptor: 1 or 2 (both axes) (2 bits)
    CONV_STRIDE = 0x114
    # RW: Convolution descriptor: 0..3 (bottom padding follows from the output size) (2 bits)
    CONV_PAD_TOP = 0x118
    # RW: Convolution descriptor: 0..3 (right padding follows from the output size) (2 bits)
    CONV_PAD_LEFT = 0x11c
    # RW: Convolution descriptor: ceil(C_out / C): column tiles, the outer loop (16 bits)
    CONV_COL_TILES = 0x120
    # RW: Convolution descriptor: ceil(OH*OW / R): groups of R output pixels (16 bits)
    CONV_PIXEL_GROUPS = 0x124
    # RW: Convolution descriptor: output pixels in the last group, 1..R (8 bits)
    CONV_LAST_ROWS = 0x128
    # RW: Convolution descriptor: fed at padding positions (signed 8 bits)
    CONV_X_ZERO_POINT = 0x12c
    # RW: Convolution descriptor: output zero point (signed 8 bits)
    CONV_Y_ZERO_POINT = 0x130
    # RW: Convolution descriptor: clamp low (fused activation) (signed 8 bits)
    CONV_LO = 0x134
    # RW: Convolution descriptor: clamp high (signed 8 bits)
    CONV_HI = 0x138
    # RW: Convolution descriptor: (-pad_top*W - pad_left)*C_in: window base of pixel 0 (signed
    # 32 bits)
    CONV_ORIGIN_ADDR = 0x13c
    # RW: Convolution descriptor: (W - kw)*C_in + 1: address step from the end of a kernel row
    # (signed 32 bits)
    CONV_ROW_SKIP = 0x140
    # RW: Convolution descriptor: stride*C_in: window base step to the next pixel (signed 32
    # bits)
    CONV_PIXEL_DADDR = 0x144
    # RW: Convolution descriptor: (R mod OW)*stride: ix step to the next pixel group (signed 16
    # bits)
    CONV_GROUP_DX = 0x148
    # RW: Convolution descriptor: (R div OW)*stride: iy step to the next pixel group (signed 16
    # bits)
    CONV_GROUP_DY = 0x14c
    # RW: Convolution descriptor: (group_dy*W + group_dx)*C_in (signed 32 bits)
    CONV_GROUP_DADDR = 0x150
    # RW: Convolution descriptor: OW*stride - pad_left: an ix0 at or past it wraps to the next
    # row (signed 16 bits)
    CONV_X_END = 0x154
    # RW: Convolution descriptor: OW*stride: subtracted from ix0 on a wrap (signed 16 bits)
    CONV_X_WRAP = 0x158
    # RW: Convolution descriptor: (stride*W - OW*stride)*C_in: address step of a wrap (signed 32
    # bits)
    CONV_WRAP_DADDR = 0x15c
    # RW: Convolution descriptor: 1: column c computes channel t*C+c; K runs over the kernel
    # taps and the words of a pixel (C_in = ceil(C/4)), addresses count 32-bit words (1 bits)
    CONV_DEPTHWISE = 0x160
    # RW: Convolution descriptor: depthwise: word address step from one column tile's
    # activations to the next's (H*W*C_in) (signed 32 bits)
    CONV_DW_TILE_DADDR = 0x164
    # RW: Residual add: zero point of input a (signed 8 bits)
    ADD_A_ZERO_POINT = 0x180
    # RW: Residual add: zero point of input b (signed 8 bits)
    ADD_B_ZERO_POINT = 0x184
    # RW: Residual add: zero point of the output (signed 8 bits)
    ADD_Y_ZERO_POINT = 0x188
    # RW: Residual add: clamp low (fused ReLU) (signed 8 bits)
    ADD_LO = 0x18c
    # RW: Residual add: clamp high (signed 8 bits)
    ADD_HI = 0x190
    # RW: Residual add: M_a in [2^30, 2^31) (31 bits)
    ADD_A_MULTIPLIER = 0x194
    # RW: Residual add: n_a in [1, 62] (6 bits)
    ADD_A_SHIFT = 0x198
    # RW: Residual add: M_b (31 bits)
    ADD_B_MULTIPLIER = 0x19c
    # RW: Residual add: n_b (6 bits)
    ADD_B_SHIFT = 0x1a0
    # RW: Residual add: M_y (31 bits)
    ADD_Y_MULTIPLIER = 0x1a4
    # RW: Residual add: n_y (6 bits)
    ADD_Y_SHIFT = 0x1a8
    # RO: Resident data memory depth in 32-bit words (0: no resident execution)
    RES_DATA_WORDS = 0x200
    # RO: Resident program memory depth in 32-bit words
    RES_PROGRAM_WORDS = 0x204
    # W1P: Resident control strobes
    RES_CTRL = 0x208
    # W1C: Resident status (busy is read-only)
    RES_STATUS = 0x20c
    # RW: First word address of a load or read-back
    RES_ADDR = 0x210
    # RW: Words of a load or read-back
    RES_COUNT = 0x214
    # RW: Program iterations per run (0 counts as 1)
    RES_LOOPS = 0x218
    # RO: Sum of the words loaded since clear_checksum (contract.resident.checksum_step)
    RES_CHECKSUM_A = 0x21c
    # RO: Sum of the running RES_CHECKSUM_A
    RES_CHECKSUM_B = 0x220
    # RO: Program word address of the record being run
    RES_PC = 0x224
    # RO: Why the last resident run failed: 0, an ERROR_CODE of the accelerator's, or a resident
    # one
    RES_ERROR = 0x228


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
CONFIG_NO_ADD_SHIFT = 24
CONFIG_NO_ADD_MASK = 0x1000000
CONFIG_NO_PERF_SHIFT = 25
CONFIG_NO_PERF_MASK = 0x2000000
CONFIG_NO_READBACK_SHIFT = 26
CONFIG_NO_READBACK_MASK = 0x4000000
CONFIG_NO_PIPELINE_SHIFT = 27
CONFIG_NO_PIPELINE_MASK = 0x8000000
CONFIG_DEPTHWISE_SHIFT = 28
CONFIG_DEPTHWISE_MASK = 0x10000000
CONFIG_RESIDENT_ADD_SHIFT = 29
CONFIG_RESIDENT_ADD_MASK = 0x20000000
CONFIG_ADD_WIDER_SHIFT = 30
CONFIG_ADD_WIDER_MASK = 0xc0000000
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
POOL_ENABLE_ENABLE_SHIFT = 0
POOL_ENABLE_ENABLE_MASK = 0x1
CONV_IN_CHANNELS_VALUE_SHIFT = 0
CONV_IN_CHANNELS_VALUE_MASK = 0xffff
CONV_IN_HEIGHT_VALUE_SHIFT = 0
CONV_IN_HEIGHT_VALUE_MASK = 0xffff
CONV_IN_WIDTH_VALUE_SHIFT = 0
CONV_IN_WIDTH_VALUE_MASK = 0xffff
CONV_KERNEL_H_VALUE_SHIFT = 0
CONV_KERNEL_H_VALUE_MASK = 0x7
CONV_KERNEL_W_VALUE_SHIFT = 0
CONV_KERNEL_W_VALUE_MASK = 0x7
CONV_STRIDE_VALUE_SHIFT = 0
CONV_STRIDE_VALUE_MASK = 0x3
CONV_PAD_TOP_VALUE_SHIFT = 0
CONV_PAD_TOP_VALUE_MASK = 0x3
CONV_PAD_LEFT_VALUE_SHIFT = 0
CONV_PAD_LEFT_VALUE_MASK = 0x3
CONV_COL_TILES_VALUE_SHIFT = 0
CONV_COL_TILES_VALUE_MASK = 0xffff
CONV_PIXEL_GROUPS_VALUE_SHIFT = 0
CONV_PIXEL_GROUPS_VALUE_MASK = 0xffff
CONV_LAST_ROWS_VALUE_SHIFT = 0
CONV_LAST_ROWS_VALUE_MASK = 0xff
CONV_X_ZERO_POINT_VALUE_SHIFT = 0
CONV_X_ZERO_POINT_VALUE_MASK = 0xff
CONV_Y_ZERO_POINT_VALUE_SHIFT = 0
CONV_Y_ZERO_POINT_VALUE_MASK = 0xff
CONV_LO_VALUE_SHIFT = 0
CONV_LO_VALUE_MASK = 0xff
CONV_HI_VALUE_SHIFT = 0
CONV_HI_VALUE_MASK = 0xff
CONV_GROUP_DX_VALUE_SHIFT = 0
CONV_GROUP_DX_VALUE_MASK = 0xffff
CONV_GROUP_DY_VALUE_SHIFT = 0
CONV_GROUP_DY_VALUE_MASK = 0xffff
CONV_X_END_VALUE_SHIFT = 0
CONV_X_END_VALUE_MASK = 0xffff
CONV_X_WRAP_VALUE_SHIFT = 0
CONV_X_WRAP_VALUE_MASK = 0xffff
CONV_DEPTHWISE_VALUE_SHIFT = 0
CONV_DEPTHWISE_VALUE_MASK = 0x1
ADD_A_ZERO_POINT_VALUE_SHIFT = 0
ADD_A_ZERO_POINT_VALUE_MASK = 0xff
ADD_B_ZERO_POINT_VALUE_SHIFT = 0
ADD_B_ZERO_POINT_VALUE_MASK = 0xff
ADD_Y_ZERO_POINT_VALUE_SHIFT = 0
ADD_Y_ZERO_POINT_VALUE_MASK = 0xff
ADD_LO_VALUE_SHIFT = 0
ADD_LO_VALUE_MASK = 0xff
ADD_HI_VALUE_SHIFT = 0
ADD_HI_VALUE_MASK = 0xff
ADD_A_MULTIPLIER_VALUE_SHIFT = 0
ADD_A_MULTIPLIER_VALUE_MASK = 0x7fffffff
ADD_A_SHIFT_VALUE_SHIFT = 0
ADD_A_SHIFT_VALUE_MASK = 0x3f
ADD_B_MULTIPLIER_VALUE_SHIFT = 0
ADD_B_MULTIPLIER_VALUE_MASK = 0x7fffffff
ADD_B_SHIFT_VALUE_SHIFT = 0
ADD_B_SHIFT_VALUE_MASK = 0x3f
ADD_Y_MULTIPLIER_VALUE_SHIFT = 0
ADD_Y_MULTIPLIER_VALUE_MASK = 0x7fffffff
ADD_Y_SHIFT_VALUE_SHIFT = 0
ADD_Y_SHIFT_VALUE_MASK = 0x3f
RES_CTRL_RUN_SHIFT = 0
RES_CTRL_RUN_MASK = 0x1
RES_CTRL_LOAD_DATA_SHIFT = 1
RES_CTRL_LOAD_DATA_MASK = 0x2
RES_CTRL_LOAD_PROGRAM_SHIFT = 2
RES_CTRL_LOAD_PROGRAM_MASK = 0x4
RES_CTRL_READ_DATA_SHIFT = 3
RES_CTRL_READ_DATA_MASK = 0x8
RES_CTRL_CLEAR_CHECKSUM_SHIFT = 4
RES_CTRL_CLEAR_CHECKSUM_MASK = 0x10
RES_STATUS_BUSY_SHIFT = 0
RES_STATUS_BUSY_MASK = 0x1
RES_STATUS_DONE_SHIFT = 1
RES_STATUS_DONE_MASK = 0x2
RES_STATUS_ERROR_SHIFT = 2
RES_STATUS_ERROR_MASK = 0x4


class Opcode(enum.IntEnum):
    """Layer operations."""

    NOP = 0
    CONV = 1
    POOL = 2
    ADD = 3


class ErrorCode(enum.IntEnum):
    """Values of the ERROR_CODE register."""

    NONE = 0x0  # no error
    BAD_OPCODE = 0x1  # unknown opcode
    BAD_DESCRIPTOR = 0x2  # bad descriptor
    FORCED = 0xee  # error flag raised
    BAD_RECORD = 0x10  # resident: unknown record operation
    BAD_ADDRESS = 0x11  # resident: an address past the end of its memory


ERROR_MEANINGS = {
    ErrorCode.NONE: 'no error',
    ErrorCode.BAD_OPCODE: 'unknown opcode',
    ErrorCode.BAD_DESCRIPTOR: 'bad descriptor',
    ErrorCode.FORCED: 'error flag raised',
    ErrorCode.BAD_RECORD: 'resident: unknown record operation',
    ErrorCode.BAD_ADDRESS: 'resident: an address past the end of its memory',
}
