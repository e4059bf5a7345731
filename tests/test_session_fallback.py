"""Fallback in ``InferenceSession``: the implicit CPU provider, and device faults met in the
middle of a run (retry on the same device after a reset, then the next provider).

Every result is compared bit for bit with the "cpu" provider's (the golden model). The
first tests use stand-in providers on the host (fast, run everywhere); the twin tests inject
the twin's own faults (a dropped word, a stuck output stream, the error flag) just before
the digits CNN's second convolution, and are marked slow.
"""

import re

import pytest
from assertions import assert_exact

from contract.config import ArrayConfig, ConvEngineConfig
from models.zoo import DIGITS_QDQ, load_digits_split
from sw_driver import InferenceSession
from sw_driver import graph as g
from sw_driver.accelerator import DeadlinePolicy
from sw_driver.errors import (
    DeviceError,
    LayerError,
    LayerFaultError,
    PlacementError,
    ProviderUnavailableError,
    RefusedAtRunError,
)
from sw_driver.providers import CPUProvider, Provider, Refusal, SimProvider
from twin.dma import Fault

#: The 4x4 engine of tests/test_providers_sim.py, so the twin's cached build is shared.
CONFIG = ConvEngineConfig(array=ArrayConfig(rows=4, cols=4), act_depth=2048,
                          weight_depth=2048, max_col_tiles=8)
ENGINE_LAYERS = {"conv1", "conv2", "fc"}  # the digits CNN's Conv and Dense layers
#: And its 2x2 max pool and its global average pool: what the twin runs.
DEVICE_LAYERS = ENGINE_LAYERS | {"pool1", "gap"}


@pytest.fixture(scope="module")
def digits():
    """Eight digits test images and the CPU provider's outputs for them."""
    _, _, x, _ = load_digits_split()
    feed = {"input": x[:8]}
    (want,) = InferenceSession(DIGITS_QDQ, providers=["cpu"]).run(None, feed)
    return feed, want


def assert_identical(got, want, what):
    assert_exact(got, want, what, names=("session", "cpu"), same_dtype=True)


class _EngineStandIn(Provider):
    """Runs Conv and Dense layers with the CPU provider's code, failing with a device
    fault on the layers and attempts it is told to."""

    name = "engine"

    def __init__(self, fail=(), times=0):
        self.fail, self.times = set(fail), times
        self.calls, self.resets = [], 0
        self._cpu = CPUProvider()

    def supports(self, layer, shape=None):
        if isinstance(layer, (g.Conv, g.Dense)):
            return None
        return Refusal(f"the stand-in runs Conv and Dense, not {layer.op}")

    def describe(self, layer):
        return "a stand-in engine"

    def run(self, layer, inputs):
        self.calls.append(layer.name)
        if layer.name in self.fail and self.calls.count(layer.name) <= self.times:
            raise DeviceError(f"stand-in fault {self.calls.count(layer.name)} on "
                              f"{layer.name}")
        return self._cpu.run(layer, inputs)

    def reset(self):
        self.resets += 1


class _FaultyCPU(CPUProvider):
    """The CPU provider, but every run of the layers named meets a device fault."""

    def __init__(self, fail):
        super().__init__()
        self.fail = set(fail)

    def run(self, layer, inputs):
        if layer.name in self.fail:
            raise DeviceError(f"stand-in CPU fault on {layer.name}")
        return super().run(layer, inputs)


def _by_layer(session):
    return {entry["layer"]: entry for entry in session.profile()}


# ---------------------------------------------------------------- implicit CPU provider

def test_cpu_is_appended_and_the_profile_says_what_fell_back(digits):
    feed, want = digits
    session = InferenceSession(DIGITS_QDQ, providers=[_EngineStandIn()])
    assert session.get_providers() == ["engine", "cpu"]
    (got,) = session.run(None, feed)
    assert_identical(got, want, "engine stand-in + implicit cpu")
    for name, entry in _by_layer(session).items():
        if name in ENGINE_LAYERS:
            assert entry["provider"] == "engine" and "fell_back_from" not in entry, entry
            continue
        assert entry["provider"] == "cpu", entry
        assert entry["fell_back_from"] == [
            {"provider": "engine",
             "why": f"the stand-in runs Conv and Dense, not {entry['op']}"}], entry
        assert "implicit CPU fallback" in entry["reason"], entry
        assert "faults" not in entry, entry


def test_a_listed_cpu_is_not_appended_again(digits):
    feed, want = digits
    session = InferenceSession(DIGITS_QDQ, providers=[_EngineStandIn(), "cpu"])
    assert session.get_providers() == ["engine", "cpu"]
    assert_identical(session.run(None, feed)[0], want, "engine stand-in + listed cpu")
    assert not any("implicit" in e["reason"] for e in session.profile())


def test_without_cpu_fallback_a_layer_nobody_runs_is_named():
    with pytest.raises(PlacementError, match=r"no provider can run layer "
                       r"'input_QuantizeLinear' \(Quantize\): engine declined: the "
                       r"stand-in runs Conv and Dense, not Quantize"):
        InferenceSession(DIGITS_QDQ, providers=[_EngineStandIn()], cpu_fallback=False)


def test_an_unavailable_sole_provider_still_raises(monkeypatch, tmp_path):
    """The implicit CPU is for layers, not for a missing device: asking for "pcie" alone
    on a machine without the card is an error, as before."""
    monkeypatch.setenv("TESSERA_XDMA", str(tmp_path / "xdma0"))
    with pytest.raises(ProviderUnavailableError, match="no XDMA device"):
        InferenceSession(DIGITS_QDQ, providers=["pcie"])


# ---------------------------------------------------------------- faults, on the host

def test_a_fault_is_retried_once_on_the_same_provider(digits):
    feed, want = digits
    engine = _EngineStandIn(fail={"conv2"}, times=1)
    session = InferenceSession(DIGITS_QDQ, providers=[engine])
    assert_identical(session.run(None, feed)[0], want, "one fault on conv2")
    assert engine.calls == ["conv1", "conv2", "conv2", "fc"] and engine.resets == 1
    conv2 = _by_layer(session)["conv2"]
    assert conv2["provider"] == "engine"
    assert [(f["provider"], f["attempt"], f["error"]) for f in conv2["faults"]] == [
        ("engine", 1, "stand-in fault 1 on conv2")]
    assert "ran again on engine after a reset" in conv2["reason"]


def test_two_faults_fall_back_and_the_device_is_skipped_for_the_run(digits):
    feed, want = digits
    engine = _EngineStandIn(fail={"conv2"}, times=2)
    session = InferenceSession(DIGITS_QDQ, providers=[engine])
    assert_identical(session.run(None, feed)[0], want, "two faults on conv2")
    # conv2 twice, then fc is not tried: the engine failed this run.
    assert engine.calls == ["conv1", "conv2", "conv2"]
    profile = _by_layer(session)
    assert profile["conv2"]["provider"] == "cpu"
    assert [f["attempt"] for f in profile["conv2"]["faults"]] == [1, 2]
    assert profile["conv2"]["fell_back_from"] == [{
        "provider": "engine", "why": "met device faults: engine attempt 1: stand-in fault 1 "
        "on conv2; engine attempt 2: stand-in fault 2 on conv2"}]
    assert "fell back to cpu" in profile["conv2"]["reason"]
    assert profile["fc"]["provider"] == "cpu" and "faults" not in profile["fc"]
    assert profile["fc"]["fell_back_from"] == [{
        "provider": "engine",
        "why": "skipped: it failed layer 'conv2' on all 2 attempts earlier in this run"}]
    # The next run tries the device again (its fault is gone by now).
    assert_identical(session.run(None, feed)[0], want, "the run after")
    assert {e["layer"] for e in session.profile() if e["provider"] == "engine"} == \
        ENGINE_LAYERS


def test_a_layer_no_provider_can_finish_names_the_layer_and_faults(digits):
    feed, _ = digits
    engine = _EngineStandIn(fail={"conv2"}, times=10)
    session = InferenceSession(DIGITS_QDQ, providers=[engine, _FaultyCPU({"conv2"})])
    with pytest.raises(LayerFaultError, match=(
            r"layer 'conv2' \(Conv\): no provider could finish it; engine: met device "
            r"faults: engine attempt 1: stand-in fault 1 on conv2; engine attempt 2: "
            r"stand-in fault 2 on conv2; cpu: met device faults: cpu attempt 1: stand-in "
            r"CPU fault on conv2; cpu attempt 2: stand-in CPU fault on conv2")) as raised:
        session.run(None, feed)
    assert [(f["provider"], f["attempt"]) for f in raised.value.faults] == [
        ("engine", 1), ("engine", 2), ("cpu", 1), ("cpu", 2)]


class _Overflowing(_EngineStandIn):
    def run(self, layer, inputs):
        if layer.name == "conv2":
            raise OverflowError("int32 accumulator overflow")
        return super().run(layer, inputs)


def test_a_layer_error_is_not_a_device_fault(digits):
    """An overflow is the layer's own (the golden model raises it too): no retry, no
    fallback, the run fails naming the layer."""
    feed, _ = digits
    engine = _Overflowing()
    session = InferenceSession(DIGITS_QDQ, providers=[engine])
    with pytest.raises(LayerError, match=r"layer 'conv2' \(Conv\) failed on provider "
                       r"'engine' .*int32 accumulator overflow") as raised:
        session.run(None, feed)
    assert not isinstance(raised.value, LayerFaultError) and engine.resets == 0


class _RefusingAtRun(_EngineStandIn):
    def run(self, layer, inputs):
        if layer.name == "conv2":
            self.calls.append(layer.name)
            raise RefusedAtRunError(f"layer {layer.name!r}: each pass needs more input "
                                    f"columns than the buffer holds")
        return super().run(layer, inputs)


def test_a_refusal_met_at_run_time_falls_back_with_its_reason(digits):
    """A provider that sees from the real shapes that it cannot run a layer (nothing sent
    to the device) declines it: no retry, no reset, the CPU runs it, the profile says why,
    and the provider is not skipped for the other layers."""
    feed, want = digits
    engine = _RefusingAtRun()
    session = InferenceSession(DIGITS_QDQ, providers=[engine, "cpu"])
    (got,) = session.run(None, feed)
    assert_identical(got, want, "conv2 declined at run time")
    rows = _by_layer(session)
    assert rows["conv2"]["provider"] == "cpu"
    assert rows["conv2"]["fell_back_from"] == [
        {"provider": "engine", "why": "layer 'conv2': each pass needs more input columns "
                                      "than the buffer holds"}]
    assert "faults" not in rows["conv2"] and engine.resets == 0
    assert engine.calls.count("conv2") == 1 and rows["fc"]["provider"] == "engine"


# ---------------------------------------------------------------- deadlines

def test_deadline_follows_the_expected_cycles_above_its_floors():
    policy = DeadlinePolicy()
    small = policy.deadline(862, min_cycles_per_second=1e5)
    assert (small.cycles, small.seconds) == (100_000, 1.0)  # both floors
    large = policy.deadline(50_000, min_cycles_per_second=1e5)
    assert (large.cycles, large.seconds) == (400_000, 4.0)  # 8x the expected cycles
    assert "for ~50,000 expected" in large.note


@pytest.mark.parametrize("options, message", [
    ({"margin": 0.5}, "margin must be at least 1"),
    ({"min_seconds": 0}, "min_seconds must be a positive number, not 0"),
    ({"min_cycles": "many"}, "min_cycles must be a positive number, not 'many'"),
])
def test_deadline_policy_checks_its_values(options, message):
    with pytest.raises(ValueError, match=message):
        DeadlinePolicy(**options)


# ---------------------------------------------------------------- faults on the twin

@pytest.fixture(scope="module")
def sim():
    provider = SimProvider(CONFIG, log=lambda message: None)
    yield provider
    provider.close()


@pytest.fixture
def inject_before(sim, monkeypatch):
    """``inject_before(layer, fault)``: the twin gets ``fault`` just before the first run
    of ``layer``; cleared (with the device reset) when the test ends."""
    twin = sim.transport.inner.twin
    run = sim.run

    def arm(name, fault):
        pending = [fault]

        def run_with_fault(layer, inputs):
            if layer.name == name and pending:
                twin.inject_fault(pending.pop())
            return run(layer, inputs)

        monkeypatch.setattr(sim, "run", run_with_fault)

    yield arm
    twin.inject_fault(Fault.NONE)
    sim.reset()


@pytest.mark.slow
def test_sim_alone_gets_the_cpu_for_what_the_engine_cannot_run(sim, digits):
    feed, want = digits
    session = InferenceSession(DIGITS_QDQ, providers=[sim])
    assert session.get_providers() == ["sim", "cpu"]
    assert_identical(session.run(None, feed)[0], want, "sim + implicit cpu")
    profile = _by_layer(session)
    assert {name for name, e in profile.items() if e["provider"] == "sim"} == DEVICE_LAYERS
    assert profile["input_QuantizeLinear"]["fell_back_from"] == [
        {"provider": "sim", "why": "Quantize reads a float operand, not int8; the device runs "
                                   "int8 Conv, Dense, MatMul, 2x2 MaxPool, "
                                   "GlobalAveragePool and Add only"}]


@pytest.mark.slow
@pytest.mark.parametrize("fault, message", [
    # Results of the first column tile may leave before the device misses the dropped
    # word (it computes while loading), so some bytes can arrive before the stall.
    (Fault.DROP_WORD, r"layer pass 'conv2\[image 0\]' timed out: twin: \d+ of \d+ bytes "
                      r"after 100000 simulated cycles \(deadline 100,000 cycles or 1 s for "
                      r"~[\d,]+ expected\); status was busy; the device has been reset"),
    (Fault.ERROR, r"layer pass 'conv2\[image 0\]' failed: status error, error code 238 "
                  r"\(error flag raised\); the device has been reset"),
], ids=["dropped_word", "error_flag"])
def test_one_shot_fault_is_retried_on_the_twin(sim, digits, inject_before, fault, message):
    feed, want = digits
    session = InferenceSession(DIGITS_QDQ, providers=[sim])
    inject_before("conv2", fault)
    assert_identical(session.run(None, feed)[0], want, f"{fault.name} before conv2")
    profile = _by_layer(session)
    assert {name for name, e in profile.items() if e["provider"] == "sim"} == DEVICE_LAYERS
    (only,) = profile["conv2"]["faults"]
    assert (only["provider"], only["attempt"]) == ("sim", 1)
    assert re.fullmatch(message, only["error"]), only["error"]
    assert "ran again on sim after a reset" in profile["conv2"]["reason"]
    assert profile["conv2"]["cycles"] > 0
    assert all("faults" not in e for name, e in profile.items() if name != "conv2")


@pytest.mark.slow
def test_stuck_twin_falls_back_to_the_cpu(sim, digits, inject_before):
    """A stuck output stream survives the soft reset: conv2 fails twice on the twin and
    runs on the CPU; fc, later in the run, goes straight to the CPU."""
    feed, want = digits
    session = InferenceSession(DIGITS_QDQ, providers=[sim])
    inject_before("conv2", Fault.STUCK_BUSY)
    assert_identical(session.run(None, feed)[0], want, "STUCK_BUSY before conv2")
    profile = _by_layer(session)
    assert profile["conv1"]["provider"] == "sim"
    assert profile["conv2"]["provider"] == "cpu" and profile["fc"]["provider"] == "cpu"
    faults = profile["conv2"]["faults"]
    assert [(f["provider"], f["attempt"]) for f in faults] == [("sim", 1), ("sim", 2)]
    for fault in faults:
        assert "timed out: twin: 0 of" in fault["error"]
        assert "after 100000 simulated cycles (deadline 100,000 cycles" in fault["error"]
    assert profile["conv2"]["fell_back_from"][0]["provider"] == "sim"
    assert profile["fc"]["fell_back_from"] == [{
        "provider": "sim",
        "why": "skipped: it failed layer 'conv2' on all 2 attempts earlier in this run"}]


@pytest.mark.slow
def test_wall_clock_deadline_ends_a_wait_the_cycle_limit_would_not(sim, digits,
                                                                    inject_before,
                                                                    monkeypatch):
    """With a cycle limit far away, the wall-clock half of the deadline reports the stuck
    device (messages checked, not times). The twin is declared a 10 G cycles/s device, so
    a limit of 10^9 cycles becomes the 0.2 s wall-clock floor; the real twin simulates a
    few M cycles/s, far from 10^9 cycles (or its own 2 * 10^7 budget) in 0.2 s."""
    feed, want = digits
    monkeypatch.setattr(sim.transport.inner, "min_cycles_per_second", 1e10)
    monkeypatch.setattr(sim.accelerator, "deadlines",
                        DeadlinePolicy(min_cycles=10**9, min_seconds=0.2))
    session = InferenceSession(DIGITS_QDQ, providers=[sim])
    inject_before("conv2", Fault.STUCK_BUSY)
    assert_identical(session.run(None, feed)[0], want, "STUCK_BUSY, wall-clock deadline")
    faults = _by_layer(session)["conv2"]["faults"]
    assert len(faults) == 2
    for fault in faults:
        assert "after 0.2 s of wall-clock time" in fault["error"], fault["error"]


@pytest.mark.slow
def test_stuck_twin_and_no_other_provider_is_a_clear_error(sim, digits, inject_before):
    feed, _ = digits
    session = InferenceSession(DIGITS_QDQ, providers=[sim, _FaultyCPU({"conv2"})])
    inject_before("conv2", Fault.STUCK_BUSY)
    with pytest.raises(LayerFaultError, match=(
            r"layer 'conv2' \(Conv\): no provider could finish it; sim: met device faults: "
            r"sim attempt 1: layer pass 'conv2\[image 0\]' timed out: .*; sim attempt 2: "
            r".*; cpu: met device faults: cpu attempt 1: stand-in CPU fault on conv2")):
        session.run(None, feed)
