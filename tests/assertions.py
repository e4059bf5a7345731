"""The comparisons the tests share: exact equality, and agreement with onnxruntime within
1 LSB; on failure each names the case, the first offending index and both values."""

import numpy as np
import pytest


def assert_exact(actual, expected, what, *, names=("got", "expected"), same_dtype=False):
    """``actual`` equals ``expected`` element for element (and in dtype if ``same_dtype``)."""
    actual, expected = np.asarray(actual), np.asarray(expected)
    assert actual.shape == expected.shape, f"{what}: shape {actual.shape} != {expected.shape}"
    if same_dtype:
        assert actual.dtype == expected.dtype, f"{what}: dtype {actual.dtype} != {expected.dtype}"
    bad = np.argwhere(actual != expected)
    if bad.size:
        index = tuple(int(i) for i in bad[0])
        pytest.fail(f"{what}: {len(bad)} elements differ; first at index {index}: "
                    f"{names[0]} {actual[index]!r}, {names[1]} {expected[index]!r}")


def assert_within_one_lsb(lsb, ours, reference, what, *, share=0.99):
    """At least ``share`` of the outputs are within 1 LSB of ``reference`` (``lsb`` holds the
    distances), and the reference's outputs vary enough for agreement to mean something."""
    assert len(np.unique(reference)) > 50, f"{what}: the reference barely varies"
    within = float(np.mean(lsb <= 1))
    if within < share:
        first = np.unravel_index(np.argmax(lsb > 1), lsb.shape)
        pytest.fail(f"{what}: {100 * within:.3f}% within 1 LSB (< {100 * share:g}%); first "
                    f"beyond at {first}: ours {ours[first]} onnxruntime {reference[first]}")
