"""The twin of an engine whose array runs on its own clock at twice the engine's
(``ArrayConfig.pump`` 2, hw/double_pumped.py): the harness drives the second clock
(twin/harness/array_clock.h), the outputs are the CPU provider's bit for bit, and the cycles
are the same array's on one clock but for the crossings' latency, which the cycle model
counts."""

import dataclasses

import numpy as np
import pytest
import qdq_models
from assertions import assert_exact

from contract.config import ArrayConfig, ConvEngineConfig
from models.conv import conv2d
from models.requant import requantize
from models.zoo import DIGITS_QDQ, load_digits_split
from sw_driver import InferenceSession
from sw_driver.accelerator import Accelerator, AcceleratorError
from sw_driver.providers import SimProvider
from sw_driver.providers.costs import device_work
from sw_driver.transport.sim import SimTransport
from twin.dma import Fault, Twin

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


@pytest.mark.slow
@pytest.mark.parametrize("fault", [Fault.DROP_WORD, Fault.STUCK_BUSY])
def test_pumped_twin_recovers_from_an_aborted_layer(fault, rng, seed):
    """A layer that times out mid-pass is aborted by the driver's soft reset; the next
    layer must not read what the aborted one left in the array's crossings or PEs, which
    run on the other clock."""
    x = rng.integers(-128, 128, (1, 4, 6, 6), dtype=np.int8)
    weights = rng.integers(-128, 128, (8, 4, 3, 3), dtype=np.int8)
    bias = rng.integers(-2**14, 2**14, 8).astype(np.int32)
    mult, shift = rng.integers(2**30, 2**31, 8), rng.integers(12, 22, 8)
    want = requantize(conv2d(x, weights, bias, x_zero_point=0, padding=1), mult, shift, 0)
    transport = SimTransport(Twin(PUMPED), cycle_budget=400_000)
    try:
        accelerator = Accelerator(transport)
        accelerator.reset()
        args = (x, weights, bias, mult, shift)
        transport.twin.inject_fault(fault)
        with pytest.raises(AcceleratorError, match="timed out"):
            accelerator.conv2d(*args, x_zero_point=0, y_zero_point=0, padding=1,
                               name="faulty")
        transport.twin.inject_fault(Fault.NONE)
        got = accelerator.conv2d(*args, x_zero_point=0, y_zero_point=0, padding=1)
    finally:
        transport.close()
    assert_exact(got, want, f"seed={seed} after {fault.name}", names=("twin", "golden"))


#: The same engine with its array clock below twice the engine's: 100 MHz beside 62.5
#: (a ratio of 8/5, a beat every 1.25 engine cycles at most) and 50 beside 50 (one beat
#: every two cycles).
SLOWER_ARRAY = [dataclasses.replace(PUMPED, clock_mhz=62.5, array_clock_mhz=100.0),
                dataclasses.replace(PUMPED, clock_mhz=50.0, array_clock_mhz=50.0)]


@pytest.mark.slow
@pytest.mark.parametrize("config", SLOWER_ARRAY, ids=["8-5", "1-1"])
def test_a_slower_array_clock_gives_the_same_results_in_the_modelled_cycles(config,
                                                                             monkeypatch):
    """The harness steps the array clock at the configuration's ratio
    (harness/array_clock.h): the digits CNN stays exact, and each layer's cycles are the
    cycle model's for that ratio within 10 %."""
    _, _, x, _ = load_digits_split()
    provider = SimProvider(config, log=lambda message: None)
    try:
        monkeypatch.setattr(provider, "fuse", False)
        session, got = _run(provider, x[:4])
        layers = {layer.name: layer for layer in session.graph.layers}
        checked = 0
        for entry in session.profile():
            if entry["provider"] == "sim":
                model = device_work(layers[entry["layer"]], DIGITS_SHAPES[entry["layer"]],
                                    config)
                print(entry["layer"], "model", model.cycles, "twin", entry["cycles"])
                assert abs(model.cycles - entry["cycles"]) <= 0.1 * entry["cycles"], \
                    (entry["layer"], model.cycles, entry["cycles"])
                checked += 1
        assert checked >= 3
    finally:
        provider.close()
    _, want = _run("cpu", x[:4])
    assert_exact(got, want, f"digits at array/engine clock {config.array_clock_ratio()}",
                 names=("sim", "cpu"), same_dtype=True)
