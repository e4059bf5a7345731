"""Probe tests for tests/test_seeds.py, run in a child pytest (not part of the suite: the
file name does not match ``test_*.py``). Each writes the seeds it saw into
``$TESSERA_SEED_PROBE_DIR``; ``test_fails`` fails on purpose."""

import os

import conftest
import pytest


def _record(request, seed):
    name = request.node.name
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    path = os.path.join(os.environ["TESSERA_SEED_PROBE_DIR"], name)
    with open(path, "w") as f:
        f.write(f"{worker} {conftest.SESSION_SEED} {seed}\n")


@pytest.mark.parametrize("index", range(6))
def test_records(index, request, seed):
    _record(request, seed)


def test_fails(request, rng, seed):
    _record(request, seed)
    assert rng.integers(0, 10) < 0, "fails on purpose"
