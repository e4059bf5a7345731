"""The cycle model of a resident run (the passes plus the player's overheads,
``sw_driver/cycle_model.py``) against the default twin's ``PERF_CYCLES``, through a session
on the RTL player; this also drives the runner's load and run protocol on the real player
(a load must be through before the next command, and ``done`` comes after the last output
word)."""

import numpy as np
import pytest

from contract.config_file import PRESETS
from models.zoo import DIGITS_QDQ
from sw_driver import InferenceSession
from sw_driver.cycle_model import RESIDENT, resident_pass_cycles, resident_stream_cycles

CONFIG = PRESETS["default"]


def test_player_overheads_follow_the_table():
    """The composition of docs/resident.md's table: a one-segment SEND of L words is
    L + 27 and a RECV L + 22; each register write 2 cycles; each further segment 2."""
    assert resident_stream_cycles("SEND", 10, 1) == 37
    assert resident_stream_cycles("RECV", 10, 1) == 32
    assert resident_stream_cycles("SEND", 10, 2) == 10 + 27 + RESIDENT.SEGMENT
    one = resident_pass_cycles(1000, csr_writes=10, read_segments=1)
    assert resident_pass_cycles(1000, csr_writes=11, read_segments=1) == one + 2 - 2
    assert resident_pass_cycles(1000, csr_writes=10, read_segments=3) == one + 4
    with pytest.raises(KeyError):
        resident_stream_cycles("PASS", 1, 1)


@pytest.mark.slow
def test_resident_cycles_match_the_twin(rng, seed):
    from sw_driver.providers.sim import SimProvider

    provider = SimProvider(CONFIG)
    session = InferenceSession(str(DIGITS_QDQ), providers=[provider, "cpu"])
    reference = InferenceSession(str(DIGITS_QDQ), providers=["cpu"])
    assert session._segments, provider.resident_notes
    for batch in (1, 3):
        x = {"input": rng.random((batch, 1, 8, 8), dtype=np.float32)}
        got, want = session.run(None, x)[0], reference.run(None, x)[0]
        assert np.array_equal(got, want), f"resident output differs (seed {seed})"
    row = next(r for r in session.profile() if "segment" in r)
    assert "fell_back_from" not in row and row["segment"]["loads"] == 1
    image = session._segments[row["layer"]].image
    model, twin = image.run_cycles(3), row["cycles"]
    # The twin's figure also holds the host's few register accesses around the run.
    assert abs(model - twin) / twin < 0.02, f"model {model} against twin {twin} (seed {seed})"
    segment = row["segment"]
    assert segment["link_seconds"] is None and "twin" in segment["link_model"]
    assert segment["compute_seconds"] == pytest.approx(image.run_cycles(1) / 50e6)


@pytest.mark.slow
def test_resnet8_runs_bit_exact_on_the_twin(tmp_path, rng, seed):
    """ResNet-8 resident on the default twin's RTL (its input a host segment, its residual
    Adds done by the player's add in PASS_ADD records, the look-ahead between passes):
    bit-exact with the cpu provider, and the cycle model within 2 %."""
    from models.zoo import random_models
    from sw_driver.providers.sim import SimProvider

    path = str(random_models.built("resnet8", tmp_path))
    session = InferenceSession(path, providers=[SimProvider(CONFIG), "cpu"])
    reference = InferenceSession(path, providers=["cpu"])
    assert session._segments
    for _ in range(2):  # the second run's cycles: the image already loaded
        x = {session.get_inputs()[0].name: rng.random((2, 3, 32, 32), dtype=np.float32)}
        got, want = session.run(None, x)[0], reference.run(None, x)[0]
        assert np.array_equal(got, want), f"resident output differs (seed {seed})"
    row = next(r for r in session.profile() if "segment" in r)
    assert row["segment"]["loads"] == 1, row
    image = session._segments[row["layer"]].image
    assert [p.layer for p in image.passes if p.layer.endswith("_conv2")], image.passes
    model, twin = image.run_cycles(2), row["cycles"]
    assert abs(model - twin) / twin < 0.02, f"model {model} against twin {twin} (seed {seed})"
