"""The software reference of the resident player: a program run over today's device.

It interprets the program *words* (not the compiler's objects), as the hardware player
does: per ``PASS`` record it writes the record's registers, builds the host-to-device
stream from its data memory through the read segments (a host segment's words from the
host's input), runs that as one layer-at-a-time pass
(:meth:`sw_driver.accelerator.Accelerator.run_program`, so deadlines, status checks and
faults are the driver's own) and scatters the device-to-host words through the write
segments; ``RECV`` takes words of the host's input, ``SEND`` gives words of the output,
``END`` starts the next iteration. Any transport a layer-at-a-time device has runs it, so
a compiled image is tested before the hardware player exists.
"""

from dataclasses import dataclass

import numpy as np

from contract.descriptor import ADD_PARAM_FIELDS
from contract.resident import (
    SEGMENT_WORDS,
    WORD_MASK,
    ResidentFormatError,
    Segment,
    parse_header,
)
from models.eltwise import ADD_LEFT_SHIFT
from models.requant import rounding_shift

from .. import regs
from ..accelerator import Accelerator, PassProgram
from ..transport.base import Transport

__all__ = ["PlayStats", "add_words", "play", "play_memory", "segment_indices"]

#: The ``ADD_*`` registers' offsets -> (field, width, signed).
_ADD_REGISTERS = {int(getattr(regs.Reg, f"ADD_{name.upper()}")): (name, width, signed)
                  for name, width, signed, _ in ADD_PARAM_FIELDS}


def add_words(a, b, params):
    """A ``PASS_ADD``'s sums: ``models.eltwise.add``'s arithmetic on each int8 lane of the
    uint32 words ``a`` and ``b``, with ``params`` the ``ADD_*`` values (field -> int, as
    ``contract.descriptor.ADD_PARAM_FIELDS`` names them); uint32 words."""
    p = params
    x = np.asarray(a, "<u4").view(np.int8).astype(np.int64)
    y = np.asarray(b, "<u4").view(np.int8).astype(np.int64)
    a1 = rounding_shift((x - p["a_zero_point"]) << ADD_LEFT_SHIFT,
                        np.int64(p["a_multiplier"]), np.int64(p["a_shift"]))
    b1 = rounding_shift((y - p["b_zero_point"]) << ADD_LEFT_SHIFT,
                        np.int64(p["b_multiplier"]), np.int64(p["b_shift"]))
    total = rounding_shift(a1 + b1, np.int64(p["y_multiplier"]), np.int64(p["y_shift"]))
    out = np.clip(total + p["y_zero_point"], p["lo"], p["hi"]).astype(np.int8)
    return out.view("<u4")


def _register_value(value, width, signed):
    value &= (1 << width) - 1
    return value - (1 << width) if signed and value >> (width - 1) else value


@dataclass
class PlayStats:
    """What a played run moved.

    ``pass_*``: what the layer-at-a-time device behind the player carried (every pass's
    stream words and register accesses), i.e. what the hardware player keeps on chip;
    ``recv_bytes``/``send_bytes``: what crosses the host link in a resident run.
    """

    iterations: int = 0
    passes: int = 0
    pass_h2c_bytes: int = 0
    pass_c2h_bytes: int = 0
    pass_csr_accesses: int = 0
    recv_bytes: int = 0
    send_bytes: int = 0
    cycles: int | None = 0

    #: Register accesses of one resident run: clear RES_STATUS, RES_LOOPS, RES_CTRL.run,
    #: read RES_STATUS (``docs/resident.md``).
    RUN_CSR_ACCESSES = 4

    def per_inference(self):
        """Bytes per inference: resident (input, output, the run's four register accesses
        of 4 bytes each, shared by the batch) against layer at a time."""
        n = max(1, self.iterations)
        return {"resident_payload": (self.recv_bytes + self.send_bytes) / n,
                "resident_csr_accesses": self.RUN_CSR_ACCESSES / n,
                "layer_at_a_time_payload": (self.pass_h2c_bytes + self.pass_c2h_bytes) / n,
                "layer_at_a_time_csr_accesses": self.pass_csr_accesses / n}


def segment_indices(segment, size, where):
    """Data-memory word index of each stream word of ``segment``, -1 for a gap word;
    an address outside ``[0, size)`` is refused, naming ``where``."""
    o = np.arange(segment.outer_count).reshape(-1, 1, 1) * segment.outer_stride
    i = np.arange(segment.inner_count).reshape(1, -1, 1) * segment.inner_stride
    chunk = segment.base + o + i + np.arange(segment.chunk_words).reshape(1, 1, -1)
    if chunk.size and (chunk.min() < 0 or chunk.max() >= size):
        raise ResidentFormatError(f"{where}: segment {segment} reaches words "
                                  f"{chunk.min()}..{chunk.max()}, outside the data memory's "
                                  f"0..{size - 1}")
    gaps = np.full((*chunk.shape[:2], segment.gap_words), -1, np.int64)
    return np.concatenate([chunk, gaps], axis=2).reshape(-1)


class _Counting(Transport):
    def __init__(self, inner, stats):
        self.inner, self.stats = inner, stats

    def csr_read(self, offset):
        self.stats.pass_csr_accesses += 1
        return self.inner.csr_read(offset)

    def csr_write(self, offset, value):
        self.stats.pass_csr_accesses += 1
        self.inner.csr_write(offset, value)

    def dma_write(self, data):
        self.stats.pass_h2c_bytes += memoryview(data).nbytes
        self.inner.dma_write(data)

    def dma_read(self, nbytes, *, deadline=None):
        self.stats.pass_c2h_bytes += nbytes
        return self.inner.dma_read(nbytes, deadline=deadline)

    def abort_dma(self):
        self.inner.abort_dma()

    @property
    def min_cycles_per_second(self):
        return self.inner.min_cycles_per_second

    @property
    def lock(self):
        return self.inner.lock


def _segments(program, pc, count, where):
    segments = []
    for _ in range(count):
        words = program[pc:pc + SEGMENT_WORDS]
        if len(words) < SEGMENT_WORDS:
            raise ResidentFormatError(f"{where}: the program ends inside a segment")
        segments.append(Segment.decode([int(w) for w in words]))
        pc += SEGMENT_WORDS
    return segments, pc


def play_memory(program, memory, accelerator, host_words, loops=1, *, expected_cycles=None,
                stats=None, after_pass=None):
    """Run program words over ``accelerator``, with ``memory`` (uint32, modified in place)
    as the data memory.

    Parameters
    ----------
    program : array_like of uint32
    memory : numpy.ndarray of uint32
    accelerator : sw_driver.accelerator.Accelerator
    host_words : numpy.ndarray of uint32
        The host's input stream (RECV takes from it in order).
    loops : int
        Iterations (``RES_LOOPS``; 0 counts as 1).
    expected_cycles : list of int, optional
        The cycle model's figure of each PASS in order (deadlines).
    after_pass : callable, optional
        Called as ``after_pass(iteration, ordinal, memory)`` once each PASS's results are in
        ``memory`` (the soak checks every layer's output there before a later pass or the
        next iteration's RECV reuses its words).

    Returns
    -------
    numpy.ndarray of uint32
        The words SEND gave, all iterations.
    """
    program = np.asarray(program, np.uint32)
    stats = PlayStats() if stats is None else stats
    add_params = {}  # the ADD_* values the program last wrote (PASS_ADD's operands)
    host = np.asarray(host_words, np.uint32)
    taken, sent = 0, []
    size = len(memory)
    for iteration in range(max(1, loops)):
        pc, ordinal = 0, 0
        while True:
            if pc >= len(program):
                raise ResidentFormatError(f"program word {pc}: past the program's end "
                                          f"without an END record")
            op, counts = parse_header(int(program[pc]))
            where = f"program word {pc} ({op})"
            start = pc
            pc += 1
            if op == "END":
                break
            if op in ("PASS", "PASS_ADD"):
                pairs = program[pc:pc + 2 * counts["csr"]].reshape(-1, 2)
                for offset, value in pairs:
                    if int(offset) in _ADD_REGISTERS:
                        name, width, signed = _ADD_REGISTERS[int(offset)]
                        add_params[name] = _register_value(int(value), width, signed)
                pc += 2 * counts["csr"]
                reads, pc = _segments(program, pc, counts["reads"], where)
                writes, pc = _segments(program, pc, counts["writes"], where)
                parts = []
                for s in reads:
                    if s.from_host:
                        if taken + s.words > len(host):
                            raise ResidentFormatError(
                                f"{where}: the host sent {len(host)} words, fewer than the "
                                f"RECV records and host segments take")
                        parts.append(host[taken:taken + s.words])
                        taken += s.words
                        stats.recv_bytes += 4 * s.words
                        continue
                    source = segment_indices(s, size, where)
                    parts.append(np.where(source >= 0, memory[np.maximum(source, 0)],
                                          np.uint32(s.fill)))
                h2c = np.concatenate(parts).astype(np.uint32) if parts \
                    else np.zeros(0, np.uint32)
                target = np.concatenate([segment_indices(s, size, where) for s in writes]) \
                    if writes else np.zeros(0, np.int64)
                pass_program = PassProgram(
                    name=f"resident pass {ordinal} (program word {start})",
                    csr_writes=tuple((int(o), int(v)) for o, v in pairs),
                    h2c=h2c.astype("<u4").tobytes(), c2h_bytes=4 * len(target),
                    output_beats=max(1, len(target)), cols=4)
                cycles = None if expected_cycles is None else expected_cycles[ordinal]
                beats, counters = accelerator.run_program(pass_program,
                                                          expected_cycles=cycles)
                words = np.ascontiguousarray(beats).view("<u4").reshape(-1)
                keep = target >= 0
                if op == "PASS_ADD":
                    missing = [n for n, _, _, _ in ADD_PARAM_FIELDS if n not in add_params]
                    if missing:
                        raise ResidentFormatError(f"{where}: a PASS_ADD before the program "
                                                  f"wrote ADD_{missing[0].upper()}")
                    # Each word's operand: ``fill`` words on from its address (mod 2**32).
                    offsets = np.concatenate([np.full(w.words, w.fill, np.int64)
                                              for w in writes])
                    operand = (target + offsets) & WORD_MASK
                    if keep.any() and operand[keep].max() >= size:
                        raise ResidentFormatError(f"{where}: a PASS_ADD operand at word "
                                                  f"{operand[keep].max()}, outside the data "
                                                  f"memory's 0..{size - 1}")
                    words = words.copy()
                    words[keep] = add_words(words[keep], memory[operand[keep]], add_params)
                memory[target[keep]] = words[keep]
                if after_pass is not None:
                    after_pass(iteration, ordinal, memory)
                stats.passes += 1
                if counters is None:
                    stats.cycles = None
                elif stats.cycles is not None:
                    stats.cycles += counters.cycles
                ordinal += 1
            elif op == "RECV":
                writes, pc = _segments(program, pc, counts["writes"], where)
                target = np.concatenate([segment_indices(s, size, where) for s in writes])
                if taken + len(target) > len(host):
                    raise ResidentFormatError(f"{where}: the host sent {len(host)} words, "
                                              f"fewer than the RECV records take")
                words = host[taken:taken + len(target)]
                taken += len(target)
                keep = target >= 0
                memory[target[keep]] = words[keep]
                stats.recv_bytes += 4 * len(target)
            elif op == "SEND":
                reads, pc = _segments(program, pc, counts["reads"], where)
                source = np.concatenate([segment_indices(s, size, where) for s in reads])
                fills = np.concatenate([np.full(s.words, s.fill, np.uint32) for s in reads])
                sent.append(np.where(source >= 0, memory[np.maximum(source, 0)], fills))
                stats.send_bytes += 4 * len(source)
        stats.iterations += 1
    return np.concatenate(sent).astype(np.uint32) if sent else np.zeros(0, np.uint32)


def play(image, target, feeds, *, stats=None):
    """Run ``image`` for a batch of inputs over a layer-at-a-time device.

    Parameters
    ----------
    image : DeviceImage
    target : Accelerator or Transport
    feeds : dict
        Input name -> int8 array (N, ...): N iterations.
    stats : PlayStats, optional
        Filled with what moved.

    Returns
    -------
    dict
        Output name -> int8 array (N, ...).
    """
    stats = PlayStats() if stats is None else stats
    accelerator = target if isinstance(target, Accelerator) else Accelerator(target)
    inner = accelerator.transport
    accelerator.transport = _Counting(inner, stats)
    try:
        memory = np.zeros(image.data_words, np.uint32)
        memory[:image.const_words] = image.data
        words, count = image.pack_inputs(feeds)
        out = play_memory(image.program, memory, accelerator, words, count,
                          expected_cycles=[p.expected_cycles for p in image.passes],
                          stats=stats)
    finally:
        accelerator.transport = inner
    return image.unpack_outputs(out, count)
