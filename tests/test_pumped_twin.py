"""The twin of an engine whose array runs on its own clock at twice the engine's
(``ArrayConfig.pump`` 2, hw/double_pumped.py): the harness drives the second clock
(twin/harness/array_clock.h), the outputs are the CPU provider's bit for bit, and the cycles
are the same array's on one clock but for the crossings' latency, which the cycle model
counts."""

import numpy as np
import pytest
import qdq_models
from assertions import assert_exact

from contract.config import ArrayConfig, ConvEngineConfig
from models.zoo import DIGITS_QDQ, load_digits_split
from sw_driver import InferenceSession
from sw_driver.providers import SimProvider
from sw_driver.providers.costs import device_work

#: tests/test_providers_sim.py's engine, its array double-pumped: a 4x4 array on 8 DSPs.
PUMPED = ConvEngineConfig(array=ArrayConfig(rows=4, cols=4, pump=2), act_depth=2048,
                          weight_depth=2048, max_col_tiles=8)
ONE_CLOCK = ConvEngineConfig(array=ArrayConfig(rows=4, cols=4), act_depth=2048,
                             weight_depth=2048, max_col_tiles=8)
DIGITS_SHAPES = {"conv1": (4, 1, 8, 8), "pool1": (4, 16, 8, 8), "conv2": (4, 16, 4, 4),
                 "gap": (4, 32, 4, 4), "fc": (4, 32)}


@pytest.fixture(scope="module")
def pumped():
    provider = SimProvider(PUMPED, log=lambda message: None)
    yield provider
    provider.close()


def _run(provider, x):
    session = InferenceSession(DIGITS_QDQ, providers=[provider, "cpu"])
    return session, session.run(None, {"input": x})[0]


@pytest.mark.slow
def test_pumped_twin_runs_the_digits_exactly(pumped):
    _, _, x, _ = load_digits_split()
    session, got = _run(pumped, x[:8])
    on_twin = {layer.name for layer, provider, _ in session._placement
               if provider.name == "sim"}
    assert {"conv1", "conv2", "fc"} <= on_twin, on_twin
    _, want = _run("cpu", x[:8])
    assert_exact(got, want, "digits on the pumped twin", names=("sim", "cpu"),
                 same_dtype=True)


@pytest.mark.slow
@pytest.mark.parametrize("name,seed", [("residual", 202), ("separable", 303)])
def test_pumped_twin_runs_test_models_exactly(pumped, name, seed, tmp_path):
    _, path, shape = qdq_models.build(name, seed, tmp_path)
    x = np.random.default_rng(seed).standard_normal((2, *shape)).astype(np.float32)
    want = InferenceSession(str(path), providers=["cpu"]).run(None, {"x": x})[0]
    got = InferenceSession(str(path), providers=[pumped, "cpu"]).run(None, {"x": x})[0]
    assert_exact(got, want, f"{name} on the pumped twin (seed {seed})", names=("sim", "cpu"),
                 same_dtype=True)


@pytest.mark.slow
def test_pumped_twin_cycles_are_the_cycle_models(pumped, monkeypatch):
    """Layer by layer (a Conv and its MaxPool as two passes), the twin's PERF_CYCLES are
    the cycle model's for the pumped configuration within 10 %, as
    tests/test_providers_sim.py holds the one-clock twin."""
    _, _, x, _ = load_digits_split()
    monkeypatch.setattr(pumped, "fuse", False)
    session = InferenceSession(DIGITS_QDQ, providers=[pumped, "cpu"])
    session.run(None, {"input": x[:4]})
    layers = {layer.name: layer for layer in session.graph.layers}
    checked = 0
    for entry in session.profile():
        if entry["provider"] == "sim":
            model = device_work(layers[entry["layer"]], DIGITS_SHAPES[entry["layer"]], PUMPED)
            print(entry["layer"], "model", model.cycles, "twin", entry["cycles"])
            assert abs(model.cycles - entry["cycles"]) <= 0.1 * entry["cycles"], \
                (entry["layer"], model.cycles, entry["cycles"])
            checked += 1
    assert checked >= 3
