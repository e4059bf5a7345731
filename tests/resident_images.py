"""Resident images of whole engine passes for the player's tests (the RTL under Amaranth's
simulator and the twin): a pass's host-to-device bytes laid out in the data memory, and a
program that runs it and sends its results back (``contract.resident``)."""

import numpy as np

from contract.resident import HOST_BASE, Segment, header


def words_of(data):
    """Little-endian bytes -> uint32 words."""
    return np.frombuffer(bytes(data), dtype="<u4").astype(np.uint32)


def pass_records(program, *, source, result, host=None):
    """A PASS record replaying ``program`` (a ``sw_driver.accelerator.PassProgram``): its
    register writes, its h2c words read from ``source``, its c2h words written to
    ``result`` (data-memory word addresses). ``host``, a ``(start, stop)`` range of the h2c
    words, takes those from the host's stream instead (a host segment between two runs
    read from ``source``)."""
    count = len(program.h2c) // 4
    if host is None:
        reads = [Segment(base=source, chunk_words=count)]
    else:
        start, stop = host
        reads = [Segment(base=source, chunk_words=start),
                 Segment(base=HOST_BASE, chunk_words=stop - start),
                 Segment(base=source + stop, chunk_words=count - stop)]
    words = [header("PASS", csr=len(program.csr_writes), reads=len(reads), writes=1)]
    for offset, value in program.csr_writes:
        words += [offset, value & 0xFFFF_FFFF]
    for segment in reads:
        words += segment.encode()
    words += Segment(base=result, chunk_words=program.c2h_bytes // 4).encode()
    return words


def send_record(base, count):
    return [header("SEND", reads=1), *Segment(base=base, chunk_words=count).encode()]


def recv_record(base, count):
    return [header("RECV", writes=1), *Segment(base=base, chunk_words=count).encode()]


def single_pass_image(program, *, recv=False, host=None):
    """``(data words, program words, result words)``: the pass's h2c words from data word
    0, its results after them; the program is [RECV of the h2c words when ``recv``,] PASS,
    SEND of the results, END. With ``host`` (a ``(start, stop)`` range of the h2c words),
    the PASS takes those words from the host (a host segment) and the data memory holds
    zeros in their place."""
    h2c = words_of(program.h2c)
    results = program.c2h_bytes // 4
    source, result = 0, len(h2c)
    records = recv_record(source, len(h2c)) if recv else []
    records += pass_records(program, source=source, result=result, host=host)
    if host is not None:
        h2c = h2c.copy()
        h2c[host[0]:host[1]] = 0
    records += send_record(result, results)
    records.append(header("END"))
    return h2c, np.array(records, dtype=np.uint32), results
