"""The exact comparison every test uses: on failure it names the case, how many elements
differ, the first differing index and both values."""

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
