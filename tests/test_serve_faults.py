"""`tessera serve` when things go wrong or end: a failing device retried on the CPU and
probed back, draining on SIGTERM, the per-request JSON log; and the queue's order by SLO
deadline. Fake clocks and held sessions: nothing here depends on timing."""

import asyncio
import json
import logging
import signal
import socket
import threading
import time
import urllib.error
import urllib.request

import httpx2
import pytest
import uvicorn
from fastapi.testclient import TestClient

from sw_driver import InferenceSession
from sw_driver.errors import TesseraError
from tessera.serve import load_config
from tessera.serve.app import create_app
from tessera.serve.queueing import DeviceQueue
from tessera.serve.server import DrainingServer
from tests.serve_helpers import (
    AUTH_A,
    DIGITS,
    TIMEOUT,
    FakeClock,
    ask_digits,
    digits_input,
    hold_runs,
    json_request,
    output_array,
    write_config,
)

INFER = "/v2/models/digits/infer"


@pytest.fixture(scope="module")
def reference():
    return InferenceSession(str(DIGITS))


class Flaky:
    """The model's device session, failing while ``broken`` is set; counts its runs."""

    def __init__(self, session):
        self.session, self.broken, self.calls = session, True, 0

    def __getattr__(self, name):
        return getattr(self.session, name)

    def run(self, names, feeds):
        self.calls += 1
        if self.broken:
            raise TesseraError("device 'cpu' timed out after 2.0 s (injected)")
        return self.session.run(names, feeds)


def test_failed_batch_is_retried_on_the_cpu_and_the_device_probed(tmp_path, reference, rng,
                                                                 caplog):
    caplog.set_level(logging.INFO, logger="tessera.serve.requests")
    clock = FakeClock()
    app = create_app(load_config(write_config(tmp_path)), clock=clock)
    device = Flaky(app.state.models["digits"].session)
    app.state.models["digits"].session = device
    client = TestClient(app)

    def ask():
        return ask_digits(client, rng, reference, caplog, AUTH_A)

    log = ask()  # fails on the device, answered from the CPU fallback
    assert device.calls == 1
    assert (log["device"], log["retried"], log["status"]) == ("cpu-fallback", True, 200)
    health = client.get("/v2/models/digits/stats", headers=AUTH_A).json()["health"]
    assert health["healthy"] is False and health["failures"] == 1
    assert "timed out after 2.0 s (injected)" in health["last_error"]
    assert 'tessera_retries_total{device="cpu"} 1.0' in client.get("/metrics").text
    log = ask()  # unhealthy, no probe due: straight to the CPU, not counted as a retry
    assert device.calls == 1 and (log["device"], log["retried"]) == ("cpu-fallback", False)
    clock.now += 5.0  # a probe is due; the device still fails: retried again
    log = ask()
    assert device.calls == 2 and log["retried"] is True
    clock.now += 5.0
    device.broken = False  # the probe passes: healthy again, runs go to the device
    log = ask()
    assert device.calls == 3 and (log["device"], log["retried"]) == ("cpu", False)
    assert client.get("/v2/models/digits/stats", headers=AUTH_A).json()["health"][
        "healthy"] is True
    log = ask()
    assert device.calls == 4 and log["device"] == "cpu"


def test_probe_interval_is_configured_and_ready_reports_device_health(tmp_path, reference,
                                                                     rng, caplog):
    caplog.set_level(logging.INFO, logger="tessera.serve.requests")
    clock = FakeClock()
    text = write_config(tmp_path).read_text().replace("workers = 2",
                                                      "workers = 2\nprobe_s = 30")
    app = create_app(load_config(write_config(tmp_path, text=text)), clock=clock)
    device = Flaky(app.state.models["digits"].session)
    app.state.models["digits"].session = device
    client = TestClient(app)

    def ask():
        return ask_digits(client, rng, reference, caplog, AUTH_A)

    ready = client.get("/v2/health/ready")
    assert ready.status_code == 200 and ready.json()["devices"]["cpu"]["healthy"] is True
    assert ask()["retried"] is True and device.calls == 1
    ready = client.get("/v2/health/ready")  # still ready: the fallback serves the model
    assert ready.status_code == 200
    cpu = ready.json()["devices"]["cpu"]
    assert cpu["healthy"] is False and "(injected)" in cpu["last_error"]
    clock.now += 29.0  # the default 5 s would have probed by now; 30 s has not passed
    assert ask()["device"] == "cpu-fallback" and device.calls == 1
    clock.now += 1.0
    device.broken = False
    assert ask()["device"] == "cpu" and device.calls == 2
    assert client.get("/v2/health/ready").json()["devices"]["cpu"]["healthy"] is True


def test_request_log_is_one_json_object_per_request(tmp_path, rng, caplog):
    caplog.set_level(logging.INFO, logger="tessera.serve.requests")
    client = TestClient(create_app(load_config(write_config(tmp_path))))
    assert client.post(INFER, headers=AUTH_A,
                       json=json_request(digits_input(rng, 3))).status_code == 200
    assert client.post(INFER, json={}).status_code == 401
    ok, refused = (json.loads(r.getMessage()) for r in caplog.records[-2:])
    assert set(ok) == {"tenant", "model", "images", "queue_ms", "device", "batch", "retried",
                       "run_ms", "status"}
    assert (ok["tenant"], ok["model"], ok["device"], ok["batch"], ok["images"]) == (
        "a", "digits", "cpu", 3, 3)
    assert ok["queue_ms"] >= 0 and ok["run_ms"] > 0 and ok["status"] == 200
    assert refused == {"tenant": "-", "model": "digits", "status": 401,
                       "error": "missing bearer token: send 'Authorization: Bearer <token>'"}


def test_draining_server_finishes_admitted_requests_and_refuses_new_ones(tmp_path, reference,
                                                                         rng):
    text = write_config(tmp_path).read_text().replace("workers = 2", "workers = 1")
    app = create_app(load_config(write_config(tmp_path, text=text)))
    release = hold_runs(app.state.models["digits"])
    queue = app.state.admission.queues["cpu"]
    server = DrainingServer(uvicorn.Config(app, host="127.0.0.1", port=0,
                                           log_level="warning"), app)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    url = f"http://127.0.0.1:{sock.getsockname()[1]}{INFER}"
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    inputs, answers = [digits_input(rng, 1), digits_input(rng, 2)], {}

    def post(i):
        request = urllib.request.Request(url, data=json.dumps(json_request(inputs[i])).encode(),
                                         headers={"Content-Type": "application/json",
                                                  **AUTH_A}, method="POST")
        with urllib.request.urlopen(request, timeout=TIMEOUT) as response:
            answers[i] = (response.status, json.loads(response.read()))

    try:
        deadline = time.monotonic() + TIMEOUT
        while not server.started:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        clients = [threading.Thread(target=post, args=(i,)) for i in range(2)]
        clients[0].start()
        while queue.running == 0:  # the first runs (held) ...
            assert time.monotonic() < deadline
            time.sleep(0.01)
        clients[1].start()
        while queue.waiting == 0:  # ... and the second waits behind it
            assert time.monotonic() < deadline
            time.sleep(0.01)
        server.handle_exit(signal.SIGTERM, None)  # what SIGTERM does
        assert app.state.draining
        probe = TestClient(app)  # in process: the listener is closing
        assert probe.get("/v2/health/ready").status_code == 503
        late = probe.post(INFER, headers=AUTH_A, json=json_request(inputs[0]))
        assert late.status_code == 503 and "draining" in late.json()["error"]
        assert thread.is_alive()  # still waiting for the admitted two
        release.set()
        for client in clients:
            client.join(TIMEOUT)
        thread.join(TIMEOUT)
        assert not thread.is_alive(), "the server did not exit after draining"
    finally:
        release.set()
        server.should_exit = True
        sock.close()
    for i, x in enumerate(inputs):
        status, body = answers[i]
        assert status == 200
        assert output_array(body).tobytes() == reference.run(None, {"input": x})[0].tobytes()


def test_queue_orders_by_deadline_within_a_class():
    async def scenario():
        queue = DeviceQueue(workers=1, ranks=3, max_queue=10)
        running = queue.enqueue(1, 1.0)
        tickets = {d: queue.enqueue(1, 1.0, deadline=d) for d in (5.0, 3.0, float("inf"), 1.0)}
        low = queue.enqueue(2, 1.0, deadline=0.0)  # earliest deadline, lower class: last
        order = []
        queue.finish(running)
        for _ in range(5):
            (ticket,) = [t for t in (*tickets.values(), low) if t.started and not t.finished]
            order.append(ticket.deadline if ticket is not low else "low")
            queue.finish(ticket)
        return order

    assert asyncio.run(scenario()) == [1.0, 3.0, 5.0, float("inf"), "low"]


def test_a_batch_counts_once_at_its_predicted_time():
    async def scenario():
        queue = DeviceQueue(workers=1, ranks=3, max_queue=10, clock=FakeClock())
        leader = queue.enqueue(1, 0.5, images=2, key="k")
        riders = [queue.enqueue(1, 0.5, images=3, key="k") for _ in range(2)]
        assert queue.waiting_work[1] == pytest.approx(1.0)
        got = queue.gather(leader, max_images=8, batch_work=lambda n: 0.1 * n)
        assert got == riders and queue.waiting_work[1] == 0.0
        # 8 images at 0.1 s each, not the three requests' 1.5 s summed.
        assert leader.work == pytest.approx(0.8) and queue.running_work == pytest.approx(0.8)
        assert queue.predicted_wait(0) == pytest.approx(0.8)
        for ticket in (*riders, leader):
            queue.finish(ticket)
        return queue

    queue = asyncio.run(scenario())
    assert (queue.running, queue.waiting, queue.running_work) == (0, 0, 0.0)


def test_a_run_that_cannot_start_is_answered_and_frees_its_slot(tmp_path, rng):
    app = create_app(load_config(write_config(tmp_path)))

    def broken_submit(*args, **kwargs):
        raise RuntimeError("cannot schedule new futures after shutdown")

    app.state.executor.submit = broken_submit
    client = TestClient(app)
    for _ in range(3):  # more than the device's 2 workers: each slot came back
        response = client.post(INFER, headers=AUTH_A, json=json_request(digits_input(rng, 1)))
        assert response.status_code == 500
        assert response.json()["error"] == ("model 'digits': the run failed: RuntimeError: "
                                            "cannot schedule new futures after shutdown")
    queue = app.state.admission.queues["cpu"]
    assert (queue.running, queue.waiting, queue.running_work) == (0, 0, 0.0)


def test_full_queue_is_refused_before_the_body_is_read(tmp_path, rng, caplog):
    caplog.set_level(logging.INFO, logger="tessera.serve.requests")
    text = write_config(tmp_path).read_text().replace("workers = 2",
                                                      "workers = 1\nmax_queue = 1")
    app = create_app(load_config(write_config(tmp_path, text=text)))
    release = hold_runs(app.state.models["digits"])
    queue = app.state.admission.queues["cpu"]
    body = json.dumps(json_request(digits_input(rng, 1))).encode()

    async def scenario():
        transport = httpx2.ASGITransport(app=app)
        async with httpx2.AsyncClient(transport=transport, base_url="http://t") as client:
            def post(content):
                return asyncio.create_task(client.post(
                    INFER, headers={**AUTH_A, "Content-Type": "application/json"},
                    content=content))

            running = post(body)
            while queue.running == 0:
                await asyncio.sleep(0.001)
            waiting = post(body)
            while queue.waiting == 0:
                await asyncio.sleep(0.001)
            # Not even JSON: refused from the headers alone, so the body is never read.
            refused = await asyncio.wait_for(post(b"not json at all"), TIMEOUT)
            release.set()
            return refused, await running, await waiting

    refused, *answered = asyncio.run(scenario())
    assert refused.status_code == 503 and int(refused.headers["Retry-After"]) >= 1
    assert refused.json()["error"] == ("model 'digits' for tenant 'a': every device's queue "
                                       "is full (max_queue = 1) of requests of its priority "
                                       "or a higher one")
    assert [a.status_code for a in answered] == [200, 200]
    logged = [json.loads(r.getMessage()) for r in caplog.records]
    assert {"tenant": "a", "model": "digits", "status": 503,
            "error": refused.json()["error"]} in logged
    assert 'tessera_requests_total{code="503",model="digits",tenant="a"} 1.0' in \
        TestClient(app).get("/metrics").text
