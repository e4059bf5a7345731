"""The "opencl" provider's profile: each layer's own device time from OpenCL event
profiling, and the queue's wait kept apart instead of booked on the layer that reads.

Only structure and accounting are asserted (which rows have device time, which one waits,
how ``seconds`` is made of the measured parts), never a speed.
"""

import threading

import numpy as np
import pytest
import qdq_models

from sw_driver import InferenceSession
from sw_driver.opencl import NoPlatformError, OpenCLRuntime, list_devices
from sw_driver.opencl.profiling import ProfilingUnavailableError
from sw_driver.providers import opencl as opencl_module

try:
    list_devices()
except NoPlatformError as _exc:
    pytest.skip(f"no OpenCL platform with a device: {_exc}", allow_module_level=True)

MODEL_SEED = 202
COMPUTE_OPS = {"Conv", "Dense", "Add", "AveragePool", "MaxPool", "GlobalAveragePool"}


@pytest.fixture(scope="module")
def residual(tmp_path_factory):
    """Conv, Conv, Conv, Add, AveragePool, Flatten, Dense between Quantize and Dequantize."""
    return qdq_models.build("residual", MODEL_SEED, tmp_path_factory.mktemp("qdq"))


def _run(path, shape, seed, runs=2):
    session = InferenceSession(path, providers=["opencl"])
    x = np.random.default_rng(seed).standard_normal((4, *shape)).astype(np.float32)
    for _ in range(runs):  # the first run also uploads the weights
        session.run(None, {"x": x})
    return session.profile()


def test_each_layer_has_its_own_device_time(residual, seed):
    _, path, shape = residual
    profile = _run(path, shape, seed)
    ops = [entry["op"] for entry in profile]
    assert ops == ["Quantize", "Conv", "Conv", "Conv", "Add", "AveragePool", "Flatten",
                   "Dense", "Dequantize"], ops
    for entry in profile:
        what = f"model seed {MODEL_SEED}, input seed {seed}, row {entry}"
        assert entry["provider"] == "opencl" and entry["timing"] == "device", what
        assert entry["seconds"] == pytest.approx(
            entry["host_seconds"] - entry["queue_wait_seconds"] + entry["device_seconds"],
            rel=1e-12, abs=1e-15), what
        assert 0 <= entry["queue_wait_seconds"] <= entry["host_seconds"], what
        if entry["op"] in COMPUTE_OPS:
            assert entry["device_seconds"] > 0, what
        elif entry["op"] in ("Quantize", "Flatten"):
            # Host arithmetic, and a view of the device tensor: no command enqueued.
            assert entry["device_seconds"] == 0, what


def test_the_final_dequantize_is_not_booked_the_queues_wait(residual, seed):
    _, path, shape = residual
    profile = _run(path, shape, seed)
    *chained, last = profile
    # Layers chain on the device without waiting; the one read, before the Dequantize,
    # drains the queue. That wait is reported apart, not in the Dequantize's seconds.
    assert [e["layer"] for e in chained if e["queue_wait_seconds"] > 0] == [], chained
    assert last["op"] == "Dequantize" and last["queue_wait_seconds"] > 0, last
    assert last["seconds"] == pytest.approx(
        last["host_seconds"] - last["queue_wait_seconds"] + last["device_seconds"],
        rel=1e-12, abs=1e-15), last
    # Its own device work is reading the int8 logits back (and the overflow flag).
    assert last["device_seconds"] > 0, last


def test_without_event_times_the_rows_say_queue_inclusive(residual, seed, monkeypatch):
    def unavailable(events):
        raise ProfilingUnavailableError("no device start/end time for a test command")

    monkeypatch.setattr(opencl_module, "device_seconds", unavailable)
    _, path, shape = residual
    for entry in _run(path, shape, seed, runs=1):
        assert entry["timing"] == ("queue-inclusive: no device start/end time for a test "
                                   "command"), entry
        assert "device_seconds" not in entry and "host_seconds" not in entry, entry


def test_a_recording_sees_its_own_commands_and_waits(rng):
    rt = OpenCLRuntime()
    x = rng.integers(-128, 128, (2, 3, 8, 8), dtype=np.int8)
    w = rng.integers(-128, 128, (4, 3, 3, 3), dtype=np.int8)
    weights = rt.upload_conv_weights(w)
    other = []

    def elsewhere():  # another thread's commands belong to that thread's recordings
        with rt.commands.recording() as record:
            rt.read(rt.to_device(x))
        other.append(record)

    with rt.commands.recording() as record:
        rt.conv2d_requant(x, weights, x_zero_point=0, y_zero_point=0)
        thread = threading.Thread(target=elsewhere)
        thread.start()
        thread.join()
    # NumPy in, NumPy out: upload, kernel, overflow-flag read, result read.
    assert len(record.events) == 4 and record.wait_seconds > 0
    assert len(other[0].events) == 3
