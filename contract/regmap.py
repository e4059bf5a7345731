"""The accelerator's register map, opcodes and error codes: one Python description, from
which the RTL decoder (``hw/csr.py``), the driver's constants (``sw_driver/regs.py``), the C
header (``twin/harness/tessera_regs.h``) and ``docs/register-map.md`` are all generated.

Plain Python (no Amaranth import), so the driver can read it without the HDL.
Run ``python -m contract.regmap`` to regenerate the files; ``tests/test_regmap.py`` fails
when any of them is stale.
"""

import textwrap
from dataclasses import dataclass, field
from pathlib import Path

from .config import ADD_LANES_CHOICES, ADD_LANES_PER_UNIT, ENGINE_FLAGS
from .descriptor import ADD_PARAM_FIELDS, DESCRIPTOR_FIELDS

ID_VALUE = 0x54455353  # "TESS"
# Minor 2: RW registers store only their fields' bits (the rest read 0). Minor 3:
# CONFIG.no_perf. Minor 4: CONFIG.no_readback. Minor 5: CONFIG.no_pipeline. Minor 6: the
# resident block's RES_* registers (reading 0 on a build without it, as on older builds).
# Minor 7: CONFIG.depthwise and CONV_DEPTHWISE (the depthwise mode, on builds with it).
# Minor 8: CONFIG.add_wider (the residual add's datapaths; 0 on older builds, as then).
# Minor 9: CONFIG.resident_add (the resident player's residual add: PASS_ADD records).
MAP_VERSION = (0 << 16) | 9

# Access kinds: RO read-only (hardware drives it), RW read-write (hardware reads it),
# W1P write-1-pulse (a one-cycle strobe per written bit), W1C status bits set by hardware
# and cleared by writing 1.
ACCESS = ("RO", "RW", "W1P", "W1C")


@dataclass(frozen=True)
class Field:
    name: str
    lsb: int
    width: int
    doc: str


@dataclass(frozen=True)
class Register:
    name: str
    offset: int
    access: str
    doc: str
    fields: tuple = field(default=())

    def __post_init__(self):
        if self.access not in ACCESS:
            raise ValueError(f"register {self.name}: access must be one of {ACCESS}, "
                             f"not {self.access!r}")
        if self.offset % 4:
            raise ValueError(f"register {self.name}: offset {self.offset:#x} is not "
                             f"32-bit aligned")
        used = 0
        for f in self.fields:
            mask = ((1 << f.width) - 1) << f.lsb
            if f.lsb + f.width > 32 or used & mask:
                raise ValueError(f"register {self.name}: field {f.name} overlaps or "
                                 f"exceeds 32 bits")
            used |= mask

    @property
    def stored_mask(self):
        """The bits the register's fields declare. An RW register stores these alone (its
        other bits read 0 whatever was written: flip-flops the hardware never reads would
        cost a small FPGA dearly, 48 registers of 32 bits being most of the CSR bank)."""
        mask = 0
        for f in self.fields:
            mask |= ((1 << f.width) - 1) << f.lsb
        return mask


#: The CONFIG bit of the first engine flag; the others follow, one bit each in
#: ``contract.config.ENGINE_FLAGS``' order.
FLAGS_LSB = 24


#: The CONFIG field that says how many lanes a residual-add datapath serves (the index of
#: ``ConvEngineConfig.add_lanes`` in ``contract.config.ADD_LANES_CHOICES``).
ADD_WIDER_LSB = 30


def _whole(doc):
    return (Field("value", 0, 32, doc),)


def _low(width, signed, doc):
    """A value held in the low ``width`` bits (a signed one in two's complement)."""
    coding = ", two's complement" if signed else ""
    return (Field("value", 0, width, f"{doc}{coding}"),)


REGISTERS = (
    Register("ID", 0x000, "RO", f"Identifies a Tessera accelerator: {ID_VALUE:#010x}",
             _whole('"TESS"')),
    Register("VERSION", 0x004, "RO", "Register map version", (
        Field("minor", 0, 16, "minor version"), Field("major", 16, 16, "major version"))),
    Register("CONFIG", 0x008, "RO", "Build parameters of the compute array", (
        Field("rows", 0, 8, "array rows R"), Field("cols", 8, 8, "array columns C"),
        Field("acc_width", 16, 8, "accumulator bits"),
        # Set for a flag whose value is not its default, so a build from before the bit
        # reads 0 (the default, as it was).
        *(Field(flag.bit, FLAGS_LSB + index, 1, flag.bit_doc)
          for index, flag in enumerate(ENGINE_FLAGS.values())),
        Field("add_wider", ADD_WIDER_LSB, 2,
              "lanes a residual-add datapath serves: 0: 8, 1: 4, 2: 2, 3: 1"))),
    Register("ACT_DEPTH", 0x00C, "RO", "Activation buffer depth in int8 elements per copy",
             _whole("elements")),
    Register("WEIGHT_DEPTH", 0x010, "RO", "Weight buffer depth in words of C int8 weights",
             _whole("words")),
    Register("PARAM_DEPTH", 0x014, "RO", "Column tiles of bias/multiplier/shift held",
             _whole("column tiles")),
    Register("POOL_MAX_WIDTH", 0x018, "RO", "Widest feature map the 2x2 max pool takes",
             _whole("pixels")),
    Register("CTRL", 0x020, "W1P", "Control strobes", (
        Field("start", 0, 1, "start the layer in the descriptor registers"),
        Field("soft_reset", 1, 1, "abort and return to idle"))),
    Register("STATUS", 0x024, "W1C", "Layer status (busy is read-only)", (
        Field("busy", 0, 1, "a layer is running"),
        Field("done", 1, 1, "the last layer finished; write 1 to clear"),
        Field("error", 2, 1, "the last layer failed; write 1 to clear"))),
    Register("IRQ_ENABLE", 0x028, "RW", "Raise the interrupt line on these status bits", (
        Field("done", 0, 1, "interrupt when done"), Field("error", 1, 1, "on error"))),
    Register("ERROR_CODE", 0x02C, "RO", "Why the last layer failed (0: no error)",
             _whole("code")),
    # Stored whole: a value past OPCODE_WIDTH must be refused as BAD_OPCODE, not aliased
    # onto a valid operation by dropped high bits.
    Register("OPCODE", 0x040, "RW", "Layer operation (see sw_driver.regs.Opcode)",
             _whole("opcode")),
    Register("LOAD_PARAMS", 0x050, "RW", "Column-tile parameter entries the host-to-device "
             "stream carries first", _whole("entries")),
    Register("LOAD_WEIGHTS", 0x054, "RW", "Weight words (C int8 each) that follow",
             _whole("words")),
    Register("LOAD_ACT", 0x058, "RW", "Activation elements (int8, HWC) that follow, "
             "packed 4 per 32-bit word", _whole("elements")),
    Register("POOL_ENABLE", 0x060, "RW", "CONV: fuse a 2x2 / stride 2 max pool after "
             "requantization", (Field("enable", 0, 1, "1 to pool"),)),
    Register("POOL_WIDTH", 0x064, "RW", "CONV with pool, POOL: feature map width",
             _whole("pixels")),
    Register("POOL_HEIGHT", 0x068, "RW", "CONV with pool, POOL: feature map height",
             _whole("pixels")),
    Register("POOL_FRAMES", 0x06C, "RW", "Feature maps (channel groups of C) pooled in turn",
             _whole("frames")),
    Register("STREAM_BEATS", 0x070, "RW", "POOL, ADD: input beats on the host-to-device "
             "stream (one pixel of C channels, or C pairs for ADD)", _whole("beats")),
    Register("PERF_CYCLES", 0x080, "RO", "Cycles since reset (wraps)", _whole("cycles")),
    Register("PERF_BUSY", 0x084, "RO", "Cycles spent busy", _whole("cycles")),
    Register("PERF_MACS_LO", 0x088, "RO", "Multiply-accumulates issued, low word",
             _whole("MACs")),
    Register("PERF_MACS_HI", 0x08C, "RO", "Multiply-accumulates issued, high word",
             _whole("MACs")),
    Register("PERF_STALLS", 0x090, "RO", "Busy cycles in which the array did not advance",
             _whole("cycles")),
    Register("PERF_COMPUTE", 0x094, "RO", "Busy cycles after loading: the engine computing "
             "and sending results", _whole("cycles")),
    # The convolution descriptor, one register per field of DESCRIPTOR_FIELDS
    # (each field is the low bits of its register; signed fields are two's complement).
    *(Register(f"CONV_{name.upper()}", 0x100 + 4 * index, "RW",
               f"Convolution descriptor: {meaning} ({'signed ' if signed else ''}{width} bits)",
               _low(width, signed, name))
      for index, (name, width, signed, meaning) in enumerate(DESCRIPTOR_FIELDS)),
    # The residual-add parameters, one register per field of ADD_PARAM_FIELDS.
    *(Register(f"ADD_{name.upper()}", 0x180 + 4 * index, "RW",
               f"Residual add: {meaning} ({'signed ' if signed else ''}{width} bits)",
               _low(width, signed, name))
      for index, (name, width, signed, meaning) in enumerate(ADD_PARAM_FIELDS)),
    # The resident block (hw/resident.py, contract/resident.py): on a build without it
    # these words read 0, so RES_DATA_WORDS = 0 says "layer at a time only".
    Register("RES_DATA_WORDS", 0x200, "RO", "Resident data memory depth in 32-bit words "
             "(0: no resident execution)", _whole("words")),
    Register("RES_PROGRAM_WORDS", 0x204, "RO", "Resident program memory depth in 32-bit "
             "words", _whole("words")),
    Register("RES_CTRL", 0x208, "W1P", "Resident control strobes", (
        Field("run", 0, 1, "run the program RES_LOOPS times"),
        Field("load_data", 1, 1, "load RES_COUNT words from the host stream into the data "
              "memory at RES_ADDR"),
        Field("load_program", 2, 1, "the same into the program memory"),
        Field("read_data", 3, 1, "send RES_COUNT data memory words from RES_ADDR to the "
              "host stream"),
        Field("clear_checksum", 4, 1, "set RES_CHECKSUM_A and _B to 0"))),
    Register("RES_STATUS", 0x20C, "W1C", "Resident status (busy is read-only)", (
        Field("busy", 0, 1, "a run, load or read-back is under way; the player owns the "
              "accelerator's registers and streams"),
        Field("done", 1, 1, "the last run, load or read-back finished; write 1 to clear"),
        Field("error", 2, 1, "it failed (RES_ERROR, RES_PC); write 1 to clear"))),
    Register("RES_ADDR", 0x210, "RW", "First word address of a load or read-back",
             _whole("word address")),
    Register("RES_COUNT", 0x214, "RW", "Words of a load or read-back", _whole("words")),
    Register("RES_LOOPS", 0x218, "RW", "Program iterations per run (0 counts as 1)",
             _whole("iterations")),
    Register("RES_CHECKSUM_A", 0x21C, "RO", "Sum of the words loaded since clear_checksum "
             "(contract.resident.checksum_step)", _whole("sum")),
    Register("RES_CHECKSUM_B", 0x220, "RO", "Sum of the running RES_CHECKSUM_A",
             _whole("sum")),
    Register("RES_PC", 0x224, "RO", "Program word address of the record being run",
             _whole("word address")),
    Register("RES_ERROR", 0x228, "RO", "Why the last resident run failed: 0, an ERROR_CODE "
             "of the accelerator's, or a resident one", _whole("code")),
)

#: The name prefix of the resident block's registers (a build without it leaves them out).
RESIDENT_PREFIX = "RES_"

# Layer operations, shared by the hardware's `m.Case`s and the driver's descriptors.
# Depthwise and dense layers are lowered to CONV by the driver (sw_driver.conv_lowering).
OPCODES = {"NOP": 0, "CONV": 1, "POOL": 2, "ADD": 3}
#: Bits the hardware latches of the OPCODE register (a value past them is refused first).
OPCODE_WIDTH = max(OPCODES.values()).bit_length()

# Why a layer failed, as the ERROR_CODE register reports it: name -> (value, meaning).
ERROR_CODES = {
    "NONE": (0, "no error"),
    "BAD_OPCODE": (1, "unknown opcode"),
    "BAD_DESCRIPTOR": (2, "bad descriptor"),
    "FORCED": (0xEE, "error flag raised"),  # the twin's fault injection (dbg_force_error)
    # The resident player's own (RES_ERROR; the accelerator's codes above pass through).
    "BAD_RECORD": (0x10, "resident: unknown record operation"),
    "BAD_ADDRESS": (0x11, "resident: an address past the end of its memory"),
}


def _check_map(registers):
    offsets = {}
    for reg in registers:
        if reg.offset in offsets:
            raise ValueError(f"registers {offsets[reg.offset]} and {reg.name} share offset "
                             f"{reg.offset:#x}")
        offsets[reg.offset] = reg.name


_check_map(REGISTERS)


def by_name():
    return {reg.name: reg for reg in REGISTERS}


def _present(caller, flags):
    """``flags`` (``contract.config.ENGINE_FLAGS`` field -> present) completed with those
    not named, at their defaults: a build has its optional blocks unless named and its
    added features only when named; another name is refused."""
    for name in flags:
        if name not in ENGINE_FLAGS:
            raise TypeError(f"{caller}: {name!r} is not an optional block; expected one of "
                            f"{', '.join(ENGINE_FLAGS)}")
    return {name: flags.get(name, flag.default) for name, flag in ENGINE_FLAGS.items()}


def resident_registers():
    """The resident block's registers (``RES_*``), which its own bank holds."""
    return tuple(reg for reg in REGISTERS if reg.name.startswith(RESIDENT_PREFIX))


def implemented_registers(*, resident=False, **flags):
    """The registers a build implements: all of :data:`REGISTERS`, less those of each
    optional block it leaves out (``flags``: ``contract.config.OPTIONAL_BLOCKS`` field ->
    present, true when not named; ``ConvEngineConfig.features()`` gives them): the
    residual add's parameters (``ADD_*``) on a build without the add (``CONFIG.no_add``),
    the performance counters (``PERF_*``) on one without them (``CONFIG.no_perf``), and the
    descriptor's ``CONV_DEPTHWISE`` and ``CONV_DW_*`` on one without the depthwise mode,
    and the
    resident block's (``RES_*``) unless ``resident`` (``ConvEngineConfig.resident``; the
    accelerator core never holds them: the resident block has its own bank). Those words
    read zero like unmapped ones and writes to them are dropped."""
    present = _present("implemented_registers", flags)
    return tuple(reg for reg in REGISTERS
                 if all(present[name] or not reg.name.startswith(flag.registers)
                        for name, flag in ENGINE_FLAGS.items()
                        if flag.registers)  # a prefix, or a tuple of them
                 and (resident or not reg.name.startswith(RESIDENT_PREFIX)))


def _fields(register_name):
    return {f.name: f for f in by_name()[register_name].fields}


#: The CONFIG fields that describe the array (:class:`contract.config.ArrayConfig`'s).
ARRAY_FIELDS = ("rows", "cols", "acc_width")


def pack_config(*, rows, cols, acc_width, add_lanes=ADD_LANES_PER_UNIT, **flags):
    """The CONFIG register's word for an array of ``rows`` x ``cols`` with ``acc_width``-bit
    accumulators (each must fit its field) and the absence bit of each optional block that
    ``flags`` (``contract.config.OPTIONAL_BLOCKS`` field -> present, true when not named;
    ``ConvEngineConfig.features()`` gives them) says is left out: ``no_add`` unless
    ``residual_add``, ``no_perf`` unless ``perf_counters``, and so on; and the presence
    bit of each added feature ``flags`` names as present (``depthwise``)."""
    word = 0
    for name, value in (("rows", rows), ("cols", cols), ("acc_width", acc_width)):
        f = _fields("CONFIG")[name]
        if not 0 <= value < 1 << f.width:
            raise ValueError(f"CONFIG.{name} holds {f.width} bits, so 0 to "
                             f"{(1 << f.width) - 1}, not {value!r}")
        word |= value << f.lsb
    for name, present in _present("pack_config", flags).items():
        if present != ENGINE_FLAGS[name].default:
            word |= 1 << _fields("CONFIG")[ENGINE_FLAGS[name].bit].lsb
    if add_lanes not in ADD_LANES_CHOICES:
        raise ValueError(f"CONFIG.add_wider: add_lanes must be one of "
                         f"{list(ADD_LANES_CHOICES)}, not {add_lanes!r}")
    return word | ADD_LANES_CHOICES.index(add_lanes) << ADD_WIDER_LSB


def unpack_add_lanes(word):
    """``ConvEngineConfig.add_lanes`` read from a CONFIG register word."""
    return ADD_LANES_CHOICES[(word >> ADD_WIDER_LSB) & 0b11]


def unpack_config(word):
    """``{"rows", "cols", "acc_width"}`` read from a CONFIG register word."""
    return {name: (word >> f.lsb) & ((1 << f.width) - 1)
            for name, f in _fields("CONFIG").items() if name in ARRAY_FIELDS}


def unpack_features(word):
    """The engine's optional features a CONFIG register word advertises, as
    :class:`contract.config.ConvEngineConfig` fields: ``{"residual_add": bool,
    "perf_counters": bool, ...}`` over ``contract.config.ENGINE_FLAGS``."""
    fields = _fields("CONFIG")
    return {name: flag.default != bool((word >> fields[flag.bit].lsb) & 1)
            for name, flag in ENGINE_FLAGS.items()}


def field_constants(register):
    """``(NAME_FIELD, shift, mask)`` of each field narrower than the whole register."""
    return [(f"{register.name}_{f.name.upper()}", f.lsb, ((1 << f.width) - 1) << f.lsb)
            for f in register.fields if f.width < 32]


def python_module():
    """Text of ``sw_driver/regs.py``."""
    lines = ['"""Register offsets and fields of the Tessera accelerator.',
             "", "Generated from contract/regmap.py by `python -m contract.regmap`; do not edit.",
             '"""',
             "", "import enum", "", f"ID_VALUE = {ID_VALUE:#010x}",
             f"MAP_VERSION = {MAP_VERSION:#x}", "", "",
             "class Reg(enum.IntEnum):", '    """Register byte offsets."""', ""]
    for reg in REGISTERS:
        lines += [f"    # {line}" for line in textwrap.wrap(f"{reg.access}: {reg.doc}", 90)]
        lines.append(f"    {reg.name} = {reg.offset:#05x}")
    lines += ["", ""]
    for reg in REGISTERS:
        for prefix, shift, mask in field_constants(reg):
            lines += [f"{prefix}_SHIFT = {shift}", f"{prefix}_MASK = {mask:#x}"]
    lines += ["", "", "class Opcode(enum.IntEnum):", '    """Layer operations."""', ""]
    lines += [f"    {name} = {value}" for name, value in OPCODES.items()]
    lines += ["", "", "class ErrorCode(enum.IntEnum):",
              '    """Values of the ERROR_CODE register."""', ""]
    lines += [f"    {name} = {value:#x}  # {meaning}"
              for name, (value, meaning) in ERROR_CODES.items()]
    lines += ["", "", "ERROR_MEANINGS = {"]
    lines += [f"    ErrorCode.{name}: {meaning!r}," for name, (_, meaning) in ERROR_CODES.items()]
    lines.append("}")
    return "\n".join(lines) + "\n"


def c_header():
    """Text of ``twin/harness/tessera_regs.h``."""
    lines = ["/* Register map of the Tessera accelerator.",
             " * Generated from contract/regmap.py by `python -m contract.regmap`; do not edit. */",
             "#ifndef TESSERA_REGS_H", "#define TESSERA_REGS_H", "",
             f"#define TESSERA_ID_VALUE 0x{ID_VALUE:08x}u",
             f"#define TESSERA_MAP_VERSION 0x{MAP_VERSION:x}u", ""]
    for reg in REGISTERS:
        lines.append(f"#define TESSERA_{reg.name} 0x{reg.offset:03x}u /* {reg.access} */")
        for prefix, shift, mask in field_constants(reg):
            lines += [f"#define TESSERA_{prefix}_SHIFT {shift}",
                      f"#define TESSERA_{prefix}_MASK 0x{mask:x}u"]
    lines.append("")
    for name, value in OPCODES.items():
        lines.append(f"#define TESSERA_OP_{name} {value}")
    lines.append("")
    for name, (value, meaning) in ERROR_CODES.items():
        lines.append(f"#define TESSERA_ERROR_{name} 0x{value:02x}u /* {meaning} */")
    lines += ["", "#endif /* TESSERA_REGS_H */"]
    return "\n".join(lines) + "\n"


def markdown():
    """Text of ``docs/register-map.md``."""
    lines = ["# Register map", "",
             "Generated from `contract/regmap.py` by `python -m contract.regmap`; do not edit.",
             "The same description generates the RTL decoder (`hw/csr.py`), the driver's",
             "constants (`sw_driver/regs.py`) and the C header (`twin/harness/tessera_regs.h`).",
             "",
             "Access: RO read-only; RW read-write; W1P writing 1 to a bit pulses it for one",
             "cycle; W1C bits are set by the hardware and cleared by writing 1.", "",
             "An RW register stores only the bits of its fields (the `bits` column; a",
             "register without field rows is stored whole): its other bits are not",
             "implemented, so they read 0 whatever was written, and a value written there is",
             "lost. A signed field is two's complement in its low bits: write the value",
             "masked to 32 bits (or to the field); it reads back zero-extended.",
             "A build with `CONFIG.no_readback` set reads 0 from every RW register (what",
             "was written still holds and is used). Unmapped words, and the registers a",
             "build leaves out, read 0.", "",
             "Write the RW registers only while `STATUS.busy` is clear: the hardware reads",
             "them throughout a pass (the sequencer its counts and kernel size; a build",
             "with `CONFIG.no_pipeline` set also the descriptor, which the pipelined",
             "engine copies at the start).", "",
             "| offset | name | access | bits | description |",
             "|---|---|---|---|---|"]
    for reg in REGISTERS:
        lines.append(f"| `{reg.offset:#05x}` | `{reg.name}` | {reg.access} | | {reg.doc} |")
        for f in reg.fields:
            if f.width == 32:
                continue
            bits = f"{f.lsb}" if f.width == 1 else f"{f.lsb + f.width - 1}:{f.lsb}"
            lines.append(f"| | `.{f.name}` | | {bits} | {f.doc} |")
    lines += ["", "## Opcodes", "", "| value | operation |", "|---|---|"]
    lines += [f"| {value} | `{name}` |" for name, value in OPCODES.items()]
    lines += ["", "## Error codes (`ERROR_CODE`)", "", "| value | name | meaning |",
              "|---|---|---|"]
    lines += [f"| `{value:#04x}` | `{name}` | {meaning} |"
              for name, (value, meaning) in ERROR_CODES.items()]
    return "\n".join(lines) + "\n"


ROOT = Path(__file__).resolve().parent.parent
GENERATED = {
    "sw_driver/regs.py": python_module,
    "twin/harness/tessera_regs.h": c_header,
    "docs/register-map.md": markdown,
}


def stale_files(root=ROOT):
    """Generated files whose text differs from what the map generates now."""
    stale = []
    for relative, generate in GENERATED.items():
        path = Path(root) / relative
        if not path.exists() or path.read_text() != generate():
            stale.append(relative)
    return stale


def write_all(root=ROOT):
    for relative, generate in GENERATED.items():
        path = Path(root) / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(generate())
        print(f"wrote {relative}")


if __name__ == "__main__":
    write_all()
