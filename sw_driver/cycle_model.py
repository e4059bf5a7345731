"""The cycle model of one engine pass: what the device's PERF_CYCLES counter will read.

Used by the planner (a layer's cost) and by the accelerator driver (how long to wait for a
pass). It counts the words the host link carries (``contract.streams``), so it follows the
stream format without importing the hardware.
"""

from contract.postprocess import requant_units
from contract.streams import ACTIVATIONS_PER_WORD, output_words, param_words, weight_words

__all__ = ["PASS_LATENCY_CYCLES", "pass_cycles"]

#: Cycles per engine pass beyond loading and computing: the descriptor writes, lane
#: set-up, the array's skew and drain and the requantizer's stages (fitted on the 8x8
#: twin; docs/conv-engine.md).
PASS_LATENCY_CYCLES = 94


def _group_ready_words(engine_pass, rows):
    """For each pixel group: the activation words written before its last input row is
    complete (the array reads a group's beats only once their words are in)."""
    d = engine_pass.descriptor
    oh, ow = engine_pass.out_size
    row_bytes = d["in_width"] * d["in_channels"]
    total = -(-engine_pass.activations.size // ACTIVATIONS_PER_WORD)
    ready = []
    for group in range(d["pixel_groups"]):
        last_pixel = min(group * rows + rows, oh * ow) - 1
        oy = last_pixel // ow
        row = min(d["in_height"] - 1, oy * d["stride"] - d["pad_top"] + d["kernel_h"] - 1)
        ready.append(min(total, -(-(row + 1) * row_bytes // ACTIVATIONS_PER_WORD)))
    return ready


def pass_cycles(engine_pass, config):
    """Modelled device cycles of one engine pass, as the twin's PERF_CYCLES counts them.

    Parameters and weights load first (a cycle per stream word plus one per entry or
    weight row). The engine then starts and the activations stream in at a word a cycle
    while the array computes the first column tile: each pixel group waits for the words
    of its last input row. A group takes K cycles (a beat per cycle) unless its output
    beats are slower (a beat of C bytes leaves the time-shared requantizer and the output
    stream every ``max(output_words(C) + 1, C / requant_units(C))`` cycles). The other
    column tiles run from the full buffer; plus :data:`PASS_LATENCY_CYCLES`.
    """
    rows, cols = config.rows, config.cols
    d = engine_pass.descriptor
    load = ((weight_words(cols) + 1) * engine_pass.weights.shape[0]
            + (param_words(cols) + 1) * engine_pass.bias.shape[0])
    per_output = max(output_words(cols) + 1, cols // requant_units(cols))
    tiles, groups = d["col_tiles"], d["pixel_groups"]
    k = engine_pass.beats // (tiles * groups)
    costs = [max(k, rows * per_output)] * (groups - 1) + [max(k, d["last_rows"] * per_output)]
    first = 0
    for ready, cost in zip(_group_ready_words(engine_pass, rows), costs, strict=True):
        first = max(first, ready) + cost
    return load + first + (tiles - 1) * sum(costs) + PASS_LATENCY_CYCLES
