"""The soak's resident cases (``tessera soak --resident``): random residual graphs compiled
into resident programs and played on the golden resident device equal the golden models
for a few cases of this session's seed; a corrupted program or data word is reported as a
mismatch naming the seed, the case and the layer."""

import numpy as np
import pytest

from contract.resident import SEGMENT_WORDS, Segment, parse_header
from sw_driver.errors import ResidentFitError
from sw_driver.regs import Reg
from sw_driver.resident.player import segment_indices
from tessera.cli import main
from tessera.soak.resident import (
    compile_case,
    draw_program,
    play_case,
    program_repro,
    run_program_case,
)

CASES = 6


def test_resident_cases_equal_the_golden_models(seed):
    statuses = []
    for index in range(CASES):
        result = run_program_case(draw_program(seed, index))
        assert not result.failed, result.message
        statuses.append(result.status)
    print(f"resident soak seed {seed}, cases 0..{CASES - 1}: {statuses}")
    assert "pass" in statuses, f"seed {seed}: no case of {CASES} played: {statuses}"


def test_a_case_depends_only_on_seed_and_index(seed):
    a, b = draw_program(seed, 5), draw_program(seed, 5)
    assert a.description == b.description and np.array_equal(a.x, b.x)
    assert [layer.name for layer in a.layers] == [layer.name for layer in b.layers]


def _playable(seed):
    """The first case of ``seed`` that compiles at its drawn memories."""
    for index in range(200):
        case = draw_program(seed, index)
        if case.pressure in ("exact", "roomy"):
            try:
                image, figures = compile_case(case)
            except ResidentFitError:  # a layer the engine's buffers cannot take
                continue
            if image is not None:
                return case, image, figures
    raise AssertionError(f"seed {seed}: no playable case in 200")


@pytest.mark.parametrize("where", ["program", "data"])
def test_a_corrupted_word_is_a_mismatch_naming_case_layer_and_seed(seed, where):
    case, image, figures = _playable(seed)
    assert play_case(case, image, figures).status == "pass"
    first = image.passes[0]
    if where == "program":  # the first pass's output zero point, as a register write
        pairs = image.program[first.record + 1:first.record + 1 + 2 * first.csr_writes]
        (offset,) = np.flatnonzero(pairs[0::2] == Reg.CONV_Y_ZERO_POINT)
        image.program[first.record + 2 + 2 * offset] ^= 0x40
        result = play_case(case, image, figures)
    else:  # every byte of one word of the first layer's constants
        for address in _first_pass_constant(image)[:16]:
            image.data[address] ^= 0x80808080
            result = play_case(case, image, figures)
            if result.status == "mismatch":
                break
            # A parameter word (a multiplier out of range) may stop the pass instead.
            assert result.status in ("pass", "error"), result.message
            image.data[address] ^= 0x80808080
    assert result.status == "mismatch", result.message
    assert result.layer == first.layer, result.message
    message = result.message
    assert f"resident case {case.index} of seed {seed}" in message
    assert f"layer {first.layer!r}" in message
    assert program_repro(seed, case.index) in message


def _first_pass_constant(image):
    """The constant words (weights, parameters) the first pass reads,
    from its PASS record's read segments."""
    record = image.passes[0].record
    _, counts = parse_header(int(image.program[record]))
    start = record + 1 + 2 * counts["csr"]
    segments = [Segment.decode([int(w) for w in image.program[at:at + SEGMENT_WORDS]])
                for at in range(start, start + SEGMENT_WORDS * counts["reads"], SEGMENT_WORDS)]
    # A host segment (the input, straight from the host) has no data-memory words.
    addresses = np.concatenate([segment_indices(s, image.data_words, "test")
                                for s in segments if not s.from_host])
    constants = addresses[(addresses >= 0) & (addresses < image.const_words)]
    # From the middle (weights, mostly): a word of padding weights changes nothing.
    return [int(a) for a in np.roll(constants, -(len(constants) // 2))]


def test_the_cli_runs_resident_cases(capsys):
    assert main(["soak", "--resident", "--seed", "3", "--only", "0-2"]) == 0
    out = capsys.readouterr().out
    assert "resident case 0 of seed 3" in out and "0 mismatches" in out
