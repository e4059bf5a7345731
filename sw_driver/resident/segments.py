"""Word-address lists -> two-level strided segments (``contract.resident.Segment``).

The compiler knows, for every word of a pass's stream, which data-memory word it is (or
that it is a gap: a write dropped, a read filled). One generic compressor turns any such
list into few segments, so no operation needs a special case: runs of consecutive
addresses become chunks, equal chunks at a constant step an inner loop, equal inner loops
at a constant step an outer loop.
"""

from contract.resident import Segment

__all__ = ["compress", "expand"]


def _runs(addresses):
    """``[(start, length, gaps_after)]``: maximal runs of consecutive addresses, each with
    the gap words (None entries) after it; a leading gap is a run of length 0."""
    runs = []
    for address in addresses:
        if address is None:
            if not runs:
                runs.append([0, 0, 0])
            runs[-1][2] += 1
        elif runs and runs[-1][2] == 0 and runs[-1][1] and address == runs[-1][0] + runs[-1][1]:
            runs[-1][1] += 1
        else:
            runs.append([address, 1, 0])
    return [tuple(run) for run in runs]


def _inner(runs, p):
    """``(count, stride)`` of the longest inner loop starting at run ``p``."""
    start, length, gaps = runs[p]
    if p + 1 >= len(runs) or runs[p + 1][1:] != (length, gaps):
        return 1, 0
    stride = runs[p + 1][0] - start
    count = 2
    while (p + count < len(runs) and runs[p + count][1:] == (length, gaps)
           and runs[p + count][0] == start + count * stride):
        count += 1
    return count, stride


def compress(addresses, *, fill=0):
    """Segments whose words, in order, are ``addresses`` (None: a gap word).

    Parameters
    ----------
    addresses : sequence of (int or None)
    fill : int
        The word a read emits for a gap (a don't-care: the compiler gives 0).

    Returns
    -------
    list of contract.resident.Segment
    """
    runs = _runs(addresses)
    segments, p = [], 0
    while p < len(runs):
        start, length, gaps = runs[p]
        inner, inner_stride = _inner(runs, p)
        outer, outer_stride = 1, 0
        q = p + inner
        if q < len(runs) and runs[q][1:] == (length, gaps):
            outer_stride = runs[q][0] - start
            while True:
                q = p + outer * inner
                block = runs[q:q + inner]
                if len(block) < inner or any(
                        run != (start + outer * outer_stride + i * inner_stride, length, gaps)
                        for i, run in enumerate(block)):
                    break
                outer += 1
            if outer == 1:
                outer_stride = 0
        segments.append(Segment(base=start, outer_count=outer, outer_stride=outer_stride,
                                inner_count=inner, inner_stride=inner_stride,
                                chunk_words=length, gap_words=gaps, fill=fill))
        p += outer * inner
    return segments


def expand(segments):
    """The inverse of :func:`compress`: each stream word's address, None for a gap."""
    out = []
    for segment in segments:
        for o in range(segment.outer_count):
            for i in range(segment.inner_count):
                start = segment.base + o * segment.outer_stride + i * segment.inner_stride
                out.extend(range(start, start + segment.chunk_words))
                out.extend([None] * segment.gap_words)
    return out
