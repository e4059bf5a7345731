"""Hardware parameters are checked at construction, with errors that name the value."""

import pytest

from contract.config import ArrayConfig
from hw.pe import ProcessingElement
from hw.systolic import SystolicArray


@pytest.mark.parametrize("field, value, message", [
    ("rows", 0, "rows must be a positive integer, not 0"),
    ("rows", -3, "rows must be a positive integer, not -3"),
    ("cols", 2.5, "cols must be a positive integer, not 2.5"),
    ("cols", True, "cols must be a positive integer, not True"),
    ("rows", 65, "rows must be at most 64, not 65"),
    ("acc_width", -1, "acc_width must be a positive integer, not -1"),
    ("acc_width", 8, "acc_width must be at least 16"),
])
def test_bad_array_config_is_refused(field, value, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        ArrayConfig(**{field: value})


def test_array_keyword_parameters_are_checked():
    with pytest.raises(ValueError, match="rows must be a positive integer, not 0"):
        SystolicArray(rows=0, cols=4)
    with pytest.raises(TypeError, match="config must be an ArrayConfig"):
        SystolicArray({"rows": 2})


def test_pe_width_is_checked():
    with pytest.raises(ValueError, match="acc_width must be a positive integer, not 0"):
        ProcessingElement(acc_width=0)


def test_stream_payload_shapes_follow_config():
    signature = SystolicArray(ArrayConfig(rows=3, cols=5, acc_width=24))
    signature._MustUse__silence = True  # only its ports are inspected, never elaborated
    assert signature.operands.payload.shape().size == 3 * 8 + 5 * 8 + 1
    assert signature.results.payload.shape().size == 5 * 24 + 1
