"""One model on several devices (data parallelism): each request goes to the device predicted
to finish it first, unhealthy ones avoided; with fake (held, counting) device sessions."""

import asyncio
import threading

import httpx2
import pytest
from fastapi.testclient import TestClient

from sw_driver import InferenceSession
from sw_driver.errors import TesseraError
from tessera.serve import ServeConfigError, load_config
from tessera.serve.admission import Admission
from tessera.serve.app import create_app
from tessera.serve.config import DeviceConfig
from tests.serve_helpers import (
    AUTH_A,
    DIGITS,
    TIMEOUT,
    digits_input,
    json_request,
    output_array,
    write_config,
)

INFER = "/v2/models/digits/infer"


def two_device_text(tmp_path):
    return write_config(tmp_path).read_text().replace(
        'providers = ["cpu"]\n', 'providers = ["cpu"]\ndevices = ["fast", "slow"]\n', 1).replace(
        "[devices.cpu]\nworkers = 2",
        "[devices.cpu]\nworkers = 2\n[devices.fast]\nworkers = 1\n"
        "[devices.slow]\nworkers = 1\nproviders = [\"cpu\"]")


def test_least_predicted_finish_time():
    devices = {d: DeviceConfig(d, 1) for d in ("fast", "slow")}
    admission = Admission(devices)
    admission.add_model("m", {"fast": 0.001, "slow": 0.003}, devices=("fast", "slow"))
    chosen = [admission.admit("m", None, 1, None)[0].device for _ in range(6)]
    # Finish times: fast 1, 2, 3 ms (ties go to the first), then slow at 3 beats fast's 4,
    # fast 4, then fast 5 against slow's 6.
    assert chosen == ["fast", "fast", "fast", "slow", "fast", "fast"]
    assert admission.choose("m", 1, avoid=("fast",))[0] == "slow"
    assert admission.choose("m", 1, avoid=("fast", "slow"))[0] == "fast"  # all unhealthy


def test_requests_spread_over_devices_and_avoid_unhealthy_ones(tmp_path, rng):
    app = create_app(load_config(write_config(tmp_path, text=two_device_text(tmp_path))))
    model, release, ran = app.state.models["digits"], threading.Event(), []
    reference = InferenceSession(str(DIGITS))

    class Fake:  # a device session that records where it ran; "fast" waits to be released
        def __init__(self, device, session):
            self.device, self.session = device, session

        def __getattr__(self, name):
            return getattr(self.session, name)

        def run(self, names, feeds):
            ran.append(self.device)
            if self.device == "fast":
                assert release.wait(TIMEOUT)
            return self.session.run(names, feeds)

    model.sessions = {d: Fake(d, s) for d, s in model.sessions.items()}
    inputs = [digits_input(rng, 1), digits_input(rng, 2)]

    async def scenario():
        transport = httpx2.ASGITransport(app=app)
        async with httpx2.AsyncClient(transport=transport, base_url="http://t") as client:
            first = asyncio.create_task(client.post(INFER, headers=AUTH_A,
                                                    json=json_request(inputs[0])))
            while app.state.admission.queues["fast"].running == 0:
                await asyncio.sleep(0.001)
            # fast is busy: the second is predicted to finish first on slow, and does,
            # while the first is still held.
            second = await asyncio.wait_for(client.post(INFER, headers=AUTH_A,
                                                        json=json_request(inputs[1])), TIMEOUT)
            assert not first.done()
            release.set()
            return await asyncio.wait_for(first, TIMEOUT), second

    answers = asyncio.run(scenario())
    assert ran == ["fast", "slow"]
    for x, answer in zip(inputs, answers, strict=True):
        assert answer.status_code == 200
        assert output_array(answer.json()).tobytes() == \
            reference.run(None, {"input": x})[0].tobytes()
    client = TestClient(app)
    balancing = client.get("/v2/models/digits/stats", headers=AUTH_A).json()["balancing"]
    assert balancing["policy"].startswith("data parallel")
    assert {d: v["batches"] for d, v in balancing["devices"].items()} == {"fast": 1, "slow": 1}
    assert balancing["devices"]["slow"]["providers"] == ["cpu"]
    # fast fails once: unhealthy, so the next requests go to slow although fast is idle.
    app.state.health["fast"].failed(TesseraError("injected"))
    for _ in range(2):
        assert client.post(INFER, headers=AUTH_A,
                           json=json_request(inputs[0])).status_code == 200
    assert ran == ["fast", "slow", "slow", "slow"]


@pytest.mark.parametrize("models_line, message", [
    ('device = "cpu"\ndevices = ["cpu"]', "has both device and devices"),
    ('devices = ["cpu", "gpu"]', "device 'gpu' is not declared; devices: ['cpu']"),
    ('devices = ["cpu", "cpu"]', "devices ['cpu', 'cpu'] repeats one"),
    ("devices = []", "devices must be a non-empty list of strings"),
])
def test_devices_config_errors(tmp_path, models_line, message):
    text = write_config(tmp_path).read_text().replace(
        'providers = ["cpu"]\n', f'providers = ["cpu"]\n{models_line}\n', 1)
    with pytest.raises(ServeConfigError, match=r"\[models\.digits\]") as info:
        load_config(write_config(tmp_path, text=text))
    assert message in str(info.value)
