"""The resident host protocol (``sw_driver.resident.runner``) against a software device
with the resident player (``tests/resident_device.py``: the spec's registers in front of
the golden device, its program run by the driver's software player): load with the
checksum, skip a load the device already holds, batches bit-exact, a corrupted load
retried or refused, a fault mid-program reset, reloaded and named. And one image played
on the real 8x8 twin."""

import numpy as np
import pytest
from golden_device import GoldenDevice
from resident_device import ResidentDevice

from contract.config_file import PRESETS
from models.zoo import DIGITS_QDQ
from sw_driver import InferenceSession
from sw_driver.errors import ResidentChecksumError, ResidentFitError, ResidentRunError
from sw_driver.providers.cpu import CPUProvider
from sw_driver.resident import ResidentRunner, compile_model, play

CONFIG = PRESETS["default"]
DATA_WORDS, PROGRAM_WORDS = 32768, 4096


@pytest.fixture(scope="module")
def digits():
    graph = InferenceSession(str(DIGITS_QDQ)).graph
    image = compile_model(graph, CONFIG, segment=0, data_words=DATA_WORDS,
                          program_words=PROGRAM_WORDS)
    return graph, image


def golden(graph, x):
    cpu = CPUProvider()
    tensors = {graph.inputs[0].name: x}
    for layer in graph.layers:
        tensors[layer.output] = np.asarray(cpu.run(layer, [tensors[n] for n in layer.inputs]))
    return tensors


def device():
    return ResidentDevice(GoldenDevice(CONFIG), data_words=DATA_WORDS,
                          program_words=PROGRAM_WORDS)


def feeds_and_want(graph, image, rng, count):
    tensors = golden(graph, rng.random((count, 1, 8, 8), dtype=np.float32))
    return ({p.name: tensors[p.name] for p in image.inputs},
            {p.name: tensors[p.name] for p in image.outputs})


def assert_same(got, want, seed):
    for name, array in want.items():
        assert np.array_equal(got[name], array), f"seed={seed}: output {name!r} differs"


def test_load_run_and_skip_a_load_already_there(digits, rng, seed):
    graph, image = digits
    dev = device()
    runner = ResidentRunner(dev, image)
    feeds, want = feeds_and_want(graph, image, rng, 5)
    assert_same(runner.run(feeds), want, seed)
    assert runner.loads == 1 and dev.runs == 1
    assert runner.device_checksum() == image.checksum
    # A new runner (a new session) sees the checksum and does not load again.
    again = ResidentRunner(dev, image)
    assert_same(again.run(feeds), want, seed)
    assert again.loads == 0
    # The loaded words read back as loaded.
    assert np.array_equal(runner.read_data(0, image.const_words), image.data)


def test_a_corrupted_load_is_retried_then_refused(digits, rng, seed):
    graph, image = digits
    dev = device()
    dev.corrupt_next_load = True
    runner = ResidentRunner(dev, image)
    feeds, want = feeds_and_want(graph, image, rng, 2)
    assert_same(runner.run(feeds), want, seed)
    assert runner.loads == 2
    dev = device()
    runner = ResidentRunner(dev, image, reload_retries=0)
    dev.corrupt_next_load = True
    with pytest.raises(ResidentChecksumError, match="after 1 loads: words are lost"):
        runner.load()


def test_a_fault_mid_program_resets_reloads_and_names_the_pass(digits, rng, seed):
    graph, image = digits
    dev = device()
    runner = ResidentRunner(dev, image)
    feeds, want = feeds_and_want(graph, image, rng, 3)
    runner.load()
    dev.fail_next_run = True
    with pytest.raises(ResidentRunError, match=r"RES_ERROR 238 .* at program word 0 .* "
                                               r"reset and the image reloaded"):
        runner.run(feeds)
    assert runner.loads == 2
    assert_same(runner.run(feeds), want, seed)


def test_a_device_too_small_or_without_the_player_is_refused(digits):
    _, image = digits
    small = ResidentDevice(GoldenDevice(CONFIG), data_words=image.data_words - 1,
                           program_words=PROGRAM_WORDS)
    with pytest.raises(ResidentFitError, match=rf"needs {image.data_words} data words"):
        ResidentRunner(small, image)
    with pytest.raises(ResidentFitError, match="RES_DATA_WORDS reads 0"):
        ResidentRunner(GoldenDevice(CONFIG), image)


@pytest.mark.slow
def test_digits_played_on_the_twin(digits, rng, seed):
    """The software player over the real default twin (the RTL), bit-exact."""
    from sw_driver.transport.sim import SimTransport
    from twin.dma import Twin

    graph, image = digits
    transport = SimTransport(Twin(CONFIG), cycle_budget=2_000_000)
    try:
        feeds, want = feeds_and_want(graph, image, rng, 2)
        assert_same(play(image, transport, feeds), want, seed)
    finally:
        transport.close()
