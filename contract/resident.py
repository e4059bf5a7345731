"""Resident execution: the program format the on-chip player runs, and the image checksum.

In resident mode the weights, the requantization parameters and a program live in on-chip
memory, and one start runs a whole model: the player (``hw/resident.py``) replays, for each
engine pass, the register writes and the host-to-device stream that the host sends in
layer-at-a-time mode, reading the stream from its data memory, and writes the pass's
results back into that memory. Per inference only the input (``RECV``) and the output
(``SEND``) cross the host link.

Plain Python, read by the hardware, the driver's compiler (``sw_driver/resident/``) and the
tests: every fact of the format is written here once.

Memories (both of 32-bit words, word-addressed):

- the *data memory* (``resident_words`` deep): weights, parameter entries and the activation
  arena, in whatever layout the compiler chose;
- the *program memory* (``program_words`` deep): records, one after the other from word 0.

A record starts with a header word (:func:`header`): the operation in bits 0-7 and three
8-bit counts. Records:

``PASS`` (counts: ``csr``, ``reads``, ``writes``)
    ``csr`` pairs of words ``(register offset, value)``, written in order to the
    accelerator's registers (the last one is the ``CTRL`` start); then ``reads`` segments,
    streamed from the data memory into the accelerator's host-to-device stream while
    ``writes`` segments take the accelerator's device-to-host stream into the data memory;
    the pass ends when the accelerator reports done and every write segment is full. An
    accelerator error stops the program (``RES_STATUS.error``; ``RES_ERROR`` holds the
    accelerator's ``ERROR_CODE``).
``PASS_ADD`` (counts as ``PASS``; a build with ``CONFIG.resident_add``)
    A ``PASS`` whose device-to-host words are the ``a`` operand of a residual add: each
    word, before the write segment stores it at address ``x``, is added lane by lane to the
    word at ``x + fill`` of that write segment (``fill`` taken modulo 2**32: the offset of
    the ``b`` operand's block), by ``models.eltwise.add``'s arithmetic with the values the
    player last wrote to the accelerator's ``ADD_*`` registers (its own register writes,
    this record's included). The compiler runs a residual block's Add this way in its
    convolution's pass, with no ADD pass and no block for the convolution's output.
``RECV`` (counts: ``writes``)
    ``writes`` segments fill the data memory from the host's stream (the model's input).
``SEND`` (counts: ``reads``)
    ``reads`` segments go from the data memory to the host's stream (the model's output);
    the last word carries ``last``.
``END``
    One iteration is over: with iterations left (``RES_LOOPS``) the player starts again at
    word 0, otherwise it is done.

A *segment* is :data:`SEGMENT_WORDS` words (:data:`SEGMENT_FIELDS`)::

    for o in range(outer_count):
        for i in range(inner_count):
            address = base + o * outer_stride + i * inner_stride
            chunk_words words at address, address + 1, ...
            then gap_words words: a read emits `fill`; a write drops stream words

Strides are signed (two's complement); counts of 0 make an empty segment.

A ``PASS`` read segment whose ``base`` is :data:`HOST_BASE` is a *host segment*: its
stream words (all ``words`` of it, the strides and ``fill`` unused) come from the host's
stream, in order, instead of the data memory. The compiler streams a model's input straight
into the one pass that reads it this way, so that no ``RECV`` copies it into the data
memory first (docs/resident.md). Anywhere else the base is an address past the data memory
(``BAD_ADDRESS``).
"""

from dataclasses import dataclass
from itertools import accumulate

WORD_MASK = 0xFFFF_FFFF
#: The array's columns must be a multiple of this for resident execution: an output beat
#: of C int8 lanes must fill whole 32-bit words of the data memory, or one word would mix
#: channels of two beats (the compiler refuses other arrays).
COLUMN_MULTIPLE = 4

#: Record operations (bits 0-7 of a header word).
OPS = {"END": 0, "PASS": 1, "RECV": 2, "SEND": 3, "PASS_ADD": 4}
#: Header fields after the operation, 8 bits each: (name, lsb).
HEADER_FIELDS = (("csr", 8), ("reads", 16), ("writes", 24))
HEADER_COUNT_MAX = 255

#: A segment's words in order: (name, signed).
SEGMENT_FIELDS = (
    ("base", False),
    ("outer_count", False),
    ("outer_stride", True),
    ("inner_count", False),
    ("inner_stride", True),
    ("chunk_words", False),
    ("gap_words", False),
    ("fill", False),
)
SEGMENT_WORDS = len(SEGMENT_FIELDS)
#: The ``base`` of a host segment (above): no data memory reaches it.
HOST_BASE = WORD_MASK


class ResidentFormatError(ValueError):
    """A record or segment that the player cannot run; the message says which field."""


def header(op, *, csr=0, reads=0, writes=0):
    """The header word of a record of operation ``op`` (a name of :data:`OPS`)."""
    if op not in OPS:
        raise ResidentFormatError(f"record operation must be one of {', '.join(OPS)}, "
                                  f"not {op!r}")
    word = OPS[op]
    for (name, lsb), value in zip(HEADER_FIELDS, (csr, reads, writes), strict=True):
        if not 0 <= value <= HEADER_COUNT_MAX:
            raise ResidentFormatError(f"{op} record: {name} count {value} is outside "
                                      f"0..{HEADER_COUNT_MAX}")
        word |= value << lsb
    return word


def parse_header(word):
    """``(op name, {"csr", "reads", "writes"})`` of a header word."""
    code = word & 0xFF
    names = {v: k for k, v in OPS.items()}
    if code not in names:
        raise ResidentFormatError(f"header word {word:#010x}: unknown operation {code}")
    return names[code], {name: (word >> lsb) & 0xFF for name, lsb in HEADER_FIELDS}


@dataclass(frozen=True)
class Segment:
    """A two-level strided run of data-memory words (see the module's description)."""

    base: int
    outer_count: int = 1
    outer_stride: int = 0
    inner_count: int = 1
    inner_stride: int = 0
    chunk_words: int = 1
    gap_words: int = 0
    fill: int = 0

    def __post_init__(self):
        for name, signed in SEGMENT_FIELDS:
            value = getattr(self, name)
            low, high = (-(1 << 31), (1 << 31) - 1) if signed else (0, WORD_MASK)
            if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
                raise ResidentFormatError(f"segment field {name} must be an integer in "
                                          f"[{low}, {high}], not {value!r}")

    @property
    def from_host(self):
        """Whether this is a host segment (its words come from the host's stream)."""
        return self.base == HOST_BASE

    @property
    def words(self):
        """Stream words the segment covers (chunks and gaps)."""
        return self.outer_count * self.inner_count * (self.chunk_words + self.gap_words)

    def addresses(self):
        """Data-memory word addresses of the chunks, in stream order (gaps left out)."""
        for o in range(self.outer_count):
            for i in range(self.inner_count):
                start = self.base + o * self.outer_stride + i * self.inner_stride
                yield from range(start, start + self.chunk_words)

    def encode(self):
        """The segment's :data:`SEGMENT_WORDS` program words."""
        return [getattr(self, name) & WORD_MASK for name, _ in SEGMENT_FIELDS]

    @classmethod
    def decode(cls, words):
        values = {}
        for (name, signed), word in zip(SEGMENT_FIELDS, words, strict=True):
            word &= WORD_MASK
            values[name] = word - (1 << 32) if signed and word >> 31 else word
        return cls(**values)


def checksum_step(state, word):
    """The checksum after one more loaded word: ``(a, b)`` with ``a`` the sum of the words
    and ``b`` the sum of the running ``a`` (Fletcher's scheme on 32-bit words, so a swap or
    a shift of words changes ``b`` even when ``a`` stays)."""
    a, b = state
    a = (a + (word & WORD_MASK)) & WORD_MASK
    return a, (b + a) & WORD_MASK


def image_checksum(words, state=(0, 0)):
    """``(RES_CHECKSUM_A, RES_CHECKSUM_B)`` after loading ``words`` in order from ``state``
    (the registers' values after ``RES_CTRL.clear_checksum`` are ``(0, 0)``).

    :func:`checksum_step` over every word, summed in one pass: ``a`` after word i is the
    running sum, ``b`` the sum of those, each reduced once at the end (the same values
    modulo 2**32), since a session compares it with the device's on every run."""
    a0, b0 = state
    running = list(accumulate((int(word) & WORD_MASK for word in words), initial=a0))
    return running[-1] & WORD_MASK, (b0 + sum(running) - a0) & WORD_MASK


@dataclass(frozen=True)
class BootImage:
    """What the resident memories hold when the device is configured: a model built into
    the bitstream. The program from program word 0, the data (the image's constants: its
    parameters and weights) from data word 0, and the checksum registers' reset values
    equal to :func:`image_checksum` of the program then the data, the order the host loads
    them in; so a host that reads the checksum sees the image as if it had loaded it.

    Parameters
    ----------
    program, data : sequence of int
        32-bit words (any int type; kept as a tuple of Python ints).
    """

    program: tuple
    data: tuple

    def __post_init__(self):
        for name in ("program", "data"):
            words = tuple(int(word) for word in getattr(self, name))
            bad = next((i for i, word in enumerate(words) if not 0 <= word <= WORD_MASK),
                       None)
            if bad is not None:
                raise ResidentFormatError(f"boot image: {name} word {bad} is {words[bad]}, "
                                          f"not a 32-bit word (0 to {WORD_MASK:#x})")
            if not words:
                raise ResidentFormatError(f"boot image: no {name} words")
            object.__setattr__(self, name, words)

    @property
    def checksum(self):
        """``(RES_CHECKSUM_A, RES_CHECKSUM_B)`` the device reads after reset."""
        return image_checksum(self.data, image_checksum(self.program))

    @property
    def key(self):
        """Eight hex digits of a hash of both memories' words: names the netlist (one per
        configuration and image)."""
        import hashlib

        digest = hashlib.sha256()
        for words in (self.program, self.data):
            digest.update(len(words).to_bytes(4, "little"))
            digest.update(b"".join(word.to_bytes(4, "little") for word in words))
        return digest.hexdigest()[:8]

    def check_fits(self, resident_words, program_words):
        """Refuse an image larger than the memories (``ValueError`` with both sizes)."""
        for name, words, depth in (("data", self.data, resident_words),
                                   ("program", self.program, program_words)):
            if len(words) > depth:
                raise ValueError(f"boot image: {len(words)} {name} words do not fit a "
                                 f"{name} memory of {depth} words")
