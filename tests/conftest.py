"""Shared fixtures: a session seed printed once, and seeded RNGs per test."""

import os
import random

import numpy as np
import pytest

from hw.toolchain import apply_tool_env

apply_tool_env()


def _session_seed():
    # TESSERA_SEED reproduces a run; otherwise a fresh seed each session, printed.
    value = os.environ.get("TESSERA_SEED")
    return int(value) if value else random.SystemRandom().randrange(2**31)


SESSION_SEED = _session_seed()


def pytest_report_header(config):
    return f"tessera seed: {SESSION_SEED} (rerun with TESSERA_SEED={SESSION_SEED})"


@pytest.fixture
def seed(request):
    """Per-test seed derived from the session seed and the test's name."""
    return (SESSION_SEED + sum(request.node.nodeid.encode())) % 2**31


@pytest.fixture
def rng(seed):
    return np.random.default_rng(seed)
