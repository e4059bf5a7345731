"""Resident images of whole engine passes for the player's tests (the RTL under Amaranth's
simulator and the twin): a pass's host-to-device bytes laid out in the data memory, and a
program that runs it and sends its results back (``contract.resident``)."""

import numpy as np

from contract.resident import Segment, header


def words_of(data):
    """Little-endian bytes -> uint32 words."""
    return np.frombuffer(bytes(data), dtype="<u4").astype(np.uint32)


def pass_records(program, *, source, result):
    """A PASS record replaying ``program`` (a ``sw_driver.accelerator.PassProgram``): its
    register writes, its h2c words read from ``source``, its c2h words written to
    ``result`` (data-memory word addresses)."""
    words = [header("PASS", csr=len(program.csr_writes), reads=1, writes=1)]
    for offset, value in program.csr_writes:
        words += [offset, value & 0xFFFF_FFFF]
    words += Segment(base=source, chunk_words=len(program.h2c) // 4).encode()
    words += Segment(base=result, chunk_words=program.c2h_bytes // 4).encode()
    return words


def send_record(base, count):
    return [header("SEND", reads=1), *Segment(base=base, chunk_words=count).encode()]


def recv_record(base, count):
    return [header("RECV", writes=1), *Segment(base=base, chunk_words=count).encode()]


def single_pass_image(program, *, recv=False):
    """``(data words, program words, result words)``: the pass's h2c words from data word
    0, its results after them; the program is [RECV of the h2c words when ``recv``,] PASS,
    SEND of the results, END."""
    h2c = words_of(program.h2c)
    results = program.c2h_bytes // 4
    source, result = 0, len(h2c)
    records = recv_record(source, len(h2c)) if recv else []
    records += pass_records(program, source=source, result=result)
    records += send_record(result, results)
    records.append(header("END"))
    return h2c, np.array(records, dtype=np.uint32), results
