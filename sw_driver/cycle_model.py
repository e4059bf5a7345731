"""The cycle model of one engine pass: what the device's PERF_CYCLES counter will read.

Used by the planner (a layer's cost) and by the accelerator driver (how long to wait for a
pass). It counts the words the host link carries (``contract.streams``), so it follows the
stream format without importing the hardware.
"""

from contract.postprocess import requant_units
from contract.streams import ACTIVATIONS_PER_WORD, output_words, param_words, weight_words

__all__ = ["PASS_LATENCY_CYCLES", "pass_cycles"]

#: Cycles per engine pass beyond loading and computing: the descriptor writes, lane
#: set-up, the array's skew and drain and the requantizer's stages (about 94 on the 8x8
#: twin; docs/conv-engine.md).
PASS_LATENCY_CYCLES = 94


def pass_cycles(engine_pass, config):
    """Modelled device cycles of one engine pass, as the twin's PERF_CYCLES counts them.

    The engine does not overlap loading with computing (docs/conv-engine.md). Loading
    takes a cycle per stream word plus one per activation byte written (the buffer takes a
    byte a cycle), one per weight row and one per parameter entry. The array then takes a
    beat per cycle, unless the output stream is the bottleneck (a beat of C bytes leaves in
    ``output_words(C) + 1`` cycles); plus :data:`PASS_LATENCY_CYCLES`. Fitted to and
    within 10 % of the twin's counters (tests/test_planner.py).
    """
    cols = config.cols
    act_words = -(-engine_pass.activations.size // ACTIVATIONS_PER_WORD)
    load = (5 * act_words + (weight_words(cols) + 1) * engine_pass.weights.shape[0]
            + (param_words(cols) + 1) * engine_pass.bias.shape[0])
    per_output = max(output_words(cols) + 1, cols // requant_units(cols))
    compute = max(engine_pass.beats, engine_pass.output_beats * per_output)
    return load + compute + PASS_LATENCY_CYCLES
