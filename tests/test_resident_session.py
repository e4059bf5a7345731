"""Resident segments in a session: the planner's runs of device layers compiled, loaded
once and run whole, bit-exact against the cpu provider, with the layer-at-a-time path as
the fallback for what does not fit and for devices that fail. The device is the golden
layer-at-a-time model behind the resident protocol in software (``tests/resident_device.py``),
so these tests need no RTL; ``tests/test_resident_twin.py`` runs the RTL player."""

import threading

import numpy as np
import pytest

from contract.config_file import PRESETS
from models.zoo import DIGITS_QDQ, random_models
from sw_driver import InferenceSession
from sw_driver.conv_lowering import engine_reference
from sw_driver.providers.device import DeviceProvider
from tests.golden_device import GoldenDevice
from tests.resident_device import ResidentDevice

CONFIG = PRESETS["default"]
DATA_WORDS, PROGRAM_WORDS = 40960, 4096


def device_session(model, **options):
    device = ResidentDevice(GoldenDevice(CONFIG), data_words=options.pop("data_words",
                                                                          DATA_WORDS),
                            program_words=PROGRAM_WORDS)
    provider = DeviceProvider(device, where="golden resident", **options)
    return InferenceSession(str(model), providers=[provider]), device, provider


def inputs(session, rng, batch):
    info = session.get_inputs()[0]
    shape = [batch, *info.shape[1:]]
    return {info.name: rng.random(shape, dtype=np.float32)}


def assert_same(got, want, seed):
    for index, (a, b) in enumerate(zip(got, want, strict=True)):
        assert np.array_equal(a, b), f"output {index} differs (seed {seed})"


@pytest.mark.parametrize("name", ["digits", *random_models.MODELS])
def test_zoo_models_run_resident_bit_exact(zoo, name, rng, seed):
    model = zoo[name]
    session, device, _ = device_session(model)
    reference = InferenceSession(str(model), providers=["cpu"])
    feeds = inputs(session, rng, 3)
    assert_same(session.run(None, feeds), reference.run(None, feeds), seed)
    rows = session.profile()
    segment = next(row["segment"] for row in rows if "segment" in row)
    assert segment["loads"] == 1
    device_rows = [row for row in rows if row["provider"] == "device"]
    assert {row["layer"] for row in device_rows} == set(segment["layers"])
    # Run again: the image is on the device (its checksum matches), so only the inputs
    # and outputs cross, plus a few registers.
    feeds = inputs(session, rng, 2)
    assert_same(session.run(None, feeds), reference.run(None, feeds), seed)
    row = next(row for row in session.profile() if "segment" in row)
    assert row["segment"]["loads"] == 1
    assert row["bytes"] == 2 * row["segment"]["link_bytes_per_inference"]


def test_resident_off_runs_layer_at_a_time(rng, seed):
    session, _, _ = device_session(DIGITS_QDQ, resident=False)
    reference = InferenceSession(str(DIGITS_QDQ), providers=["cpu"])
    feeds = inputs(session, rng, 2)
    assert_same(session.run(None, feeds), reference.run(None, feeds), seed)
    assert not any("segment" in row for row in session.profile())
    conv1 = next(row for row in session.profile() if row["layer"] == "conv1")
    assert conv1["provider"] == "device" and conv1["bytes"] > 0


def test_what_does_not_fit_runs_layer_at_a_time_and_says_why(rng, seed):
    session, _, provider = device_session(DIGITS_QDQ, data_words=256)
    reference = InferenceSession(str(DIGITS_QDQ), providers=["cpu"])
    feeds = inputs(session, rng, 2)
    assert_same(session.run(None, feeds), reference.run(None, feeds), seed)
    assert not any("segment" in row for row in session.profile())
    (note,) = provider.resident_notes
    assert "run layer at a time" in note and "bytes" in note, note


def test_a_device_fault_mid_program_is_retried_after_a_reload(rng, seed):
    session, device, _ = device_session(DIGITS_QDQ)
    reference = InferenceSession(str(DIGITS_QDQ), providers=["cpu"])
    feeds = inputs(session, rng, 2)
    session.run(None, feeds)
    device.fail_next_run = True
    assert_same(session.run(None, feeds), reference.run(None, feeds), seed)
    row = next(row for row in session.profile() if "segment" in row)
    (fault,) = row["faults"]
    assert fault["attempt"] == 1 and "resident run failed" in fault["error"]
    assert row["segment"]["loads"] == 2  # reloaded after the fault


def test_a_corrupted_load_is_caught_by_the_checksum_and_reloaded(rng, seed):
    session, device, _ = device_session(DIGITS_QDQ)
    reference = InferenceSession(str(DIGITS_QDQ), providers=["cpu"])
    device.corrupt_next_load = True
    feeds = inputs(session, rng, 1)
    assert_same(session.run(None, feeds), reference.run(None, feeds), seed)
    row = next(row for row in session.profile() if "segment" in row)
    assert row["segment"]["loads"] == 2


def test_threads_share_a_resident_session(rng, seed):
    session, _, _ = device_session(DIGITS_QDQ)
    reference = InferenceSession(str(DIGITS_QDQ), providers=["cpu"])
    batches = [inputs(session, rng, 1 + i % 3) for i in range(8)]
    want = [reference.run(None, feeds) for feeds in batches]
    got, errors = [None] * len(batches), []

    def work(index):
        try:
            got[index] = session.run(None, batches[index])
        except Exception as exc:  # reported below with the seed
            errors.append(exc)
    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(batches))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, f"seed {seed}: {errors[0]!r}"
    for a, b in zip(got, want, strict=True):
        assert_same(a, b, seed)


def test_dwsep_runs_resident_in_the_depthwise_mode(zoo, rng, seed, monkeypatch):
    # The default preset has the depthwise mode: the compiler traces the driver's own
    # lowering, so the resident program's depthwise passes use it (CONV_DEPTHWISE = 1),
    # and the answer stays bit-exact.
    import tessera.soak.golden_device as golden

    modes = []

    def reference(p):
        modes.append(p.descriptor["depthwise"])
        return engine_reference(p)
    monkeypatch.setattr(golden, "engine_reference", reference)
    session, _, _ = device_session(zoo["dwsep"])
    feeds = inputs(session, rng, 2)
    want = InferenceSession(str(zoo["dwsep"]), providers=["cpu"]).run(None, feeds)
    assert_same(session.run(None, feeds), want, seed)
    # dwsep's two depthwise layers (16 and 32 channels: one pass each, of 2 and 4 column
    # tiles of 8) per image.
    assert modes.count(1) == 2 * 2 and modes.count(0) > 0, modes


@pytest.mark.parametrize("minor", [8, 9])
def test_an_older_player_gets_its_input_by_recv(minor, rng, seed):
    """A device whose register map is older than host segments (0.8) gets the input copied
    in by a RECV; from 0.9 the input goes straight into the first pass. Bit-exact either
    way."""
    from contract.resident import parse_header
    from sw_driver.regs import Reg

    golden = GoldenDevice(CONFIG)
    golden.regs[Reg.VERSION] = minor
    device = ResidentDevice(golden, data_words=DATA_WORDS, program_words=PROGRAM_WORDS)
    session = InferenceSession(str(DIGITS_QDQ),
                               providers=[DeviceProvider(device, where="golden resident")])
    reference = InferenceSession(str(DIGITS_QDQ), providers=["cpu"])
    feeds = inputs(session, rng, 2)
    assert_same(session.run(None, feeds), reference.run(None, feeds), seed)
    (segment,) = session._segments.values()
    first = parse_header(int(segment.image.program[0]))[0]
    assert first == ("RECV" if minor < 9 else "PASS"), (minor, first)
