"""`tessera serve` in process (FastAPI's TestClient): the v2 protocol, tenants, limits."""

import asyncio
import json
import threading

import httpx2
import numpy as np
import pytest
from fastapi.testclient import TestClient

from sw_driver import InferenceSession
from tessera.serve import load_config
from tessera.serve.admission import Admission
from tessera.serve.app import create_app
from tessera.serve.config import DeviceConfig
from tessera.serve.protocol import HEADER_LENGTH
from tessera.serve.queueing import OVERDUE_LEFT, DeviceQueue, QueueFull, Shed
from tests.serve_helpers import (
    AUTH_A,
    AUTH_B,
    DIGITS,
    FakeClock,
    digits_input,
    json_request,
    output_array,
    write_config,
)

INFER = "/v2/models/digits/infer"


@pytest.fixture(scope="module")
def reference():
    return InferenceSession(str(DIGITS))


def _client(tmp_path, clock=None, **bursts):
    app = create_app(load_config(write_config(tmp_path, **bursts)),
                     **({} if clock is None else {"clock": clock}))
    return TestClient(app)


@pytest.fixture
def client(tmp_path):
    with _client(tmp_path) as c:
        yield c


def test_health_and_metadata(client):
    assert client.get("/v2/health/live").status_code == 200
    assert client.get("/v2/health/ready").status_code == 200
    assert client.get("/v2").json()["extensions"] == ["binary_tensor_data"]
    meta = client.get("/v2/models/digits", headers=AUTH_A).json()
    assert meta["name"] == "digits"
    assert meta["inputs"] == [{"name": "input", "datatype": "FP32", "shape": [-1, 1, 8, 8]}]
    assert meta["outputs"] == [{"name": "logits", "datatype": "FP32", "shape": [-1, 10]}]
    assert client.get("/v2/models/digits/ready", headers=AUTH_A).status_code == 200


@pytest.mark.parametrize("n", [1, 5])
def test_json_infer_is_bit_identical_to_the_session(client, reference, rng, n):
    x = digits_input(rng, n)
    body = json_request(x)
    body["id"] = "req-7"
    response = client.post(INFER, headers=AUTH_A, json=body)
    assert response.status_code == 200, response.text
    got = response.json()
    assert got["id"] == "req-7" and got["model_name"] == "digits"
    (expected,) = reference.run(None, {"input": x})
    assert got["outputs"][0]["shape"] == [n, 10]
    np.testing.assert_array_equal(output_array(got), expected)
    assert output_array(got).tobytes() == expected.tobytes()


def test_nested_json_data(client, reference, rng):
    x = digits_input(rng, 2)
    body = json_request(x)
    body["inputs"][0]["data"] = x.tolist()
    got = client.post(INFER, headers=AUTH_A, json=body).json()
    np.testing.assert_array_equal(output_array(got), reference.run(None, {"input": x})[0])


def test_binary_tensors(client, reference, rng):
    x = digits_input(rng, 3)
    header = json.dumps({"inputs": [{"name": "input", "datatype": "FP32", "shape": [3, 1, 8, 8],
                                     "parameters": {"binary_data_size": x.nbytes}}],
                         "outputs": [{"name": "logits",
                                      "parameters": {"binary_data": True}}]}).encode()
    response = client.post(INFER, headers={**AUTH_A, HEADER_LENGTH: str(len(header)),
                                           "Content-Type": "application/octet-stream"},
                           content=header + x.astype("<f4").tobytes())
    assert response.status_code == 200, response.text
    size = int(response.headers[HEADER_LENGTH])
    meta = json.loads(response.content[:size])
    (out,) = meta["outputs"]
    assert out["parameters"]["binary_data_size"] == 3 * 10 * 4 and "data" not in out
    got = np.frombuffer(response.content[size:], dtype="<f4").reshape(out["shape"])
    assert got.tobytes() == reference.run(None, {"input": x})[0].tobytes()


def test_unauthenticated_and_forbidden(client, rng):
    body = json_request(digits_input(rng, 1))
    for headers in ({}, {"Authorization": "Basic abc"}, {"Authorization": "Bearer nope"}):
        response = client.post(INFER, headers=headers, json=body)
        assert response.status_code == 401, headers
        assert "token" in response.json()["error"]
        assert response.headers["WWW-Authenticate"] == "Bearer"
    assert client.get("/v2/models/digits").status_code == 401
    response = client.post(INFER, headers=AUTH_B, json=body)
    assert response.status_code == 403
    assert response.json() == {"error": "tenant 'b' may not use model 'digits'"}
    assert client.get("/v2/models/digits_b", headers=AUTH_A).status_code == 403
    assert client.post("/v2/models/digits_b/infer", headers=AUTH_B, json=body).status_code == 200


def test_unknown_model_and_endpoint(client):
    response = client.get("/v2/models/resnet", headers=AUTH_A)
    assert response.status_code == 404
    assert response.json() == {"error": "unknown model 'resnet'"}
    assert client.post("/v2/models/resnet/infer", headers=AUTH_A, json={}).status_code == 404
    assert client.get("/v2/nothing").json() == {"error": "no endpoint GET /v2/nothing"}


def _bad(client, body, content=None, headers=AUTH_A):
    response = client.post(INFER, headers=headers,
                           **({"json": body} if body is not None else {"content": content}))
    assert response.status_code == 400, response.text
    return response.json()["error"]


def test_bad_tensors_name_the_field(client, rng):
    x = digits_input(rng, 2)
    assert "inputs[0].name 'image' is not an input of the model; its inputs are ['input']" in \
        _bad(client, json_request(x, name="image"))
    assert "inputs[0] ('input').datatype is 'INT8'; the model expects 'FP32'" in \
        _bad(client, json_request(x, datatype="INT8"))
    assert "inputs[0] ('input').shape is [2, 1, 8, 9]; model input 'input' expects " \
           "[-1, 1, 8, 8]" in _bad(client, json_request(x, shape=[2, 1, 8, 9]))
    assert "shape is [2, 64]" in _bad(client, json_request(x, shape=[2, 64]))
    assert "inputs[0] ('input').data holds 128 values; shape [3, 1, 8, 8] needs 192" in \
        _bad(client, json_request(x, shape=[3, 1, 8, 8]))
    body = json_request(x)
    body["inputs"][0]["data"] = ["a"] * 128
    assert "data must be a list of numbers" in _bad(client, body)
    assert "request needs \"inputs\"" in _bad(client, {"outputs": []})
    body = json_request(x)
    body["outputs"] = [{"name": "probs"}]
    assert "outputs[0].name 'probs' is not an output of the model; its outputs are " \
           "['logits']" in _bad(client, body)
    assert "request body is not valid JSON" in _bad(client, None, content=b"{nope")


def test_bad_binary_sizes(client, rng):
    x = digits_input(rng, 1)
    header = json.dumps({"inputs": [{"name": "input", "datatype": "FP32", "shape": [1, 1, 8, 8],
                                     "parameters": {"binary_data_size": 100}}]}).encode()
    error = _bad(client, None, content=header + x.tobytes(),
                 headers={**AUTH_A, HEADER_LENGTH: str(len(header))})
    assert "binary_data_size is 100; shape [1, 1, 8, 8] of FP32 needs 256 bytes" in error
    error = _bad(client, None, content=header, headers={**AUTH_A, HEADER_LENGTH: "9999"})
    assert f"{HEADER_LENGTH} must be an integer" in error
    # JSON cannot carry NaN; a binary tensor can.
    x[0, 0, 0, 0] = np.nan
    header = header.replace(b"100", b"256")
    error = _bad(client, None, content=header + x.tobytes(),
                 headers={**AUTH_A, HEADER_LENGTH: str(len(header))})
    assert "model 'digits': input 'input' holds a non-finite value (nan at index " \
           "[0, 0, 0, 0])" in error


def test_oversized_body(client):
    response = client.post(INFER, headers=AUTH_A, content=b" " * 70000)
    assert response.status_code == 413
    assert "max_body_bytes of 65536" in response.json()["error"]


def test_rate_limit_429_with_retry_after(tmp_path, rng):
    clock = FakeClock()
    body = json_request(digits_input(rng, 1))
    with _client(tmp_path, clock, burst_a=3, burst_b=1) as client:
        codes = [client.post(INFER, headers=AUTH_A, json=body).status_code for _ in range(5)]
        assert codes == [200, 200, 200, 429, 429]
        response = client.post(INFER, headers=AUTH_A, json=body)
        assert response.headers["Retry-After"] == "1"  # 10/s: a token in 0.1 s, rounded up
        assert "tenant 'a' is over its rate limit of 10 requests/s (burst 3)" in \
            response.json()["error"]
        # Tenant b's bucket is its own (5/s, burst 1): a token in 0.2 s.
        b = "/v2/models/digits_b/infer"
        assert client.post(b, headers=AUTH_B, json=body).status_code == 200
        assert client.post(b, headers=AUTH_B, json=body).status_code == 429
        clock.now += 0.25  # refills a's bucket by 2.5 and b's by 1.25
        codes = [client.post(INFER, headers=AUTH_A, json=body).status_code for _ in range(3)]
        assert codes == [200, 200, 429]
        assert client.post(b, headers=AUTH_B, json=body).status_code == 200


def test_slo_admission_refuses_what_cannot_meet_its_slo(tmp_path, rng):
    text = write_config(tmp_path).read_text().replace("slo_ms = 2000", "slo_ms = 0.001")
    with TestClient(create_app(load_config(write_config(tmp_path, text=text)))) as client:
        response = client.post(INFER, headers=AUTH_A, json=json_request(digits_input(rng, 1)))
        assert response.status_code == 503
        assert "over the SLO of 0.001 ms" in response.json()["error"]
        assert response.headers["Retry-After"] == "1"
        stats = client.get("/v2/models/digits/stats", headers=AUTH_A).json()
        assert stats["predictor"]["planner_seconds_per_image"] > 0
        assert stats["predictor"]["runs_measured"] == 0


def test_admission_counts_the_queue_ahead():
    admission = Admission({"cpu": DeviceConfig("cpu", 2)}, clock=FakeClock())
    admission.add_model("m", 0.010)  # 10 ms per image
    grants = [admission.admit("m", "cpu", 1, 0.030) for _ in range(5)]
    # Predicted latency = work ahead / 2 workers + 10 ms: 10, 15, 20, 25, 30 ms: all <= 30.
    assert [refusal is None for _, refusal in grants] == [True] * 5
    ticket, refusal = admission.admit("m", "cpu", 1, 0.030)
    assert ticket is None and "predicted latency 35.00 ms" in refusal.message
    assert refusal.retry_after == pytest.approx(0.005)
    # A high-priority request waits only behind what runs (2 x 10 ms), not the 3 waiting.
    ticket, refusal = admission.admit("m", "cpu", 1, 0.020, "high")
    assert refusal is None
    admission.done("m", "cpu", ticket, None)
    best_effort, refusal = admission.admit("m", "cpu", 1, None, "low")  # no SLO: admitted
    assert refusal is None
    admission.done("m", "cpu", best_effort, None)
    for ticket, _ in grants:
        admission.done("m", "cpu", ticket, 0.020)  # measured twice the prediction
    queue = admission.queues["cpu"]
    assert (queue.running, queue.running_work, queue.waiting_work) == (0, 0.0, [0.0] * 3)
    stats = admission.stats("m")
    assert stats["runs_measured"] == 5
    assert stats["prediction_error_p50"] == pytest.approx(0.5)
    assert stats["measured_seconds_by_images"] == {"1": pytest.approx(0.020)}


def test_predicted_wait_counts_what_is_left_of_the_running_work():
    clock = FakeClock()
    queue = DeviceQueue(workers=2, ranks=3, max_queue=10, clock=clock)
    first, second = queue.enqueue(1, 2.0), queue.enqueue(1, 0.5)  # both start
    waiting = queue.enqueue(0, 0.4)
    assert queue.predicted_wait(0) == pytest.approx((2.0 + 0.5 + 0.4) / 2)
    clock.now += 0.3  # 1.7 and 0.2 left; the waiting request counts whole
    assert queue.predicted_wait(0) == pytest.approx((1.7 + 0.2 + 0.4) / 2)
    assert queue.predicted_wait(2) == queue.predicted_wait(0)  # nothing waits below
    clock.now += 0.5  # the second overran its prediction: it still counts a quarter of it
    assert queue.predicted_wait(1) == pytest.approx((1.2 + 0.5 * OVERDUE_LEFT + 0.4) / 2)
    queue.finish(first)  # the waiting one starts now, with all its 0.4 s ahead
    assert waiting.started
    assert queue.predicted_wait(0) == pytest.approx((0.5 * OVERDUE_LEFT + 0.4) / 2)
    for ticket in (second, waiting):
        queue.finish(ticket)
    assert queue.predicted_wait(0) == 0.0


def test_predictor_interpolates_between_measured_sizes():
    admission = Admission({"cpu": DeviceConfig("cpu", 1)})
    admission.add_model("m", 0.001)
    predictor = admission._predictors["m", "cpu"]
    assert predictor.predict(4) == pytest.approx(0.004)  # the planner's, nothing measured
    predictor.observe(2, 0.004, 0.010)
    predictor.observe(8, 0.016, 0.022)
    assert predictor.predict(2) == pytest.approx(0.010)
    assert predictor.predict(4) == pytest.approx(0.014)  # on the line through (2, 8)
    assert predictor.predict(1) == pytest.approx(0.010)  # below: the smallest size's time
    assert predictor.predict(16) == pytest.approx(0.044)  # above: scaled by N
    predictor.observe(2, 0.010, 0.020)
    assert predictor.predict(2) == pytest.approx(0.015)  # median of 10 and 20 ms
    predictor.observe(2, 0.015, 0.200)  # one slow run does not move the median far
    assert predictor.predict(2) == pytest.approx(0.020)
    # Runs of 10, 20, 200 ms around their median 20: errors 1.0, 0, 0.9; the p95 is 1.0.
    assert predictor.spread(2) == pytest.approx(1.0)
    for _ in range(20):
        predictor.observe(2, 0.020, 0.012)
    assert predictor.predict(2) == pytest.approx(0.012)  # the last WINDOW runs only
    stats = admission.stats("m")["prediction_error_by_images"]
    assert stats["2"]["runs"] == 23 and stats["8"]["runs"] == 1
    assert stats["8"]["p50"] == pytest.approx((0.022 - 0.016) / 0.022)


def test_device_queue_starts_higher_priority_first():
    async def scenario():
        queue = DeviceQueue(workers=1, ranks=3, max_queue=10, clock=FakeClock())
        first = queue.enqueue(2, 1.0)  # starts at once: the slot is free
        assert first.started and queue.predicted_wait(0) == 1.0
        waiting = {name: queue.enqueue(rank, 1.0) for name, rank in
                   (("low", 2), ("normal", 1), ("high", 0), ("high2", 0))}
        assert queue.predicted_wait(0) == 3.0 and queue.predicted_wait(2) == 5.0
        order = []

        async def run(name):
            await queue.acquire(waiting[name])
            order.append(name)
            await asyncio.sleep(0)
            queue.finish(waiting[name])

        tasks = [asyncio.create_task(run(name)) for name in waiting]
        cancelled = asyncio.create_task(queue.acquire(queue.enqueue(1, 1.0)))
        await asyncio.sleep(0)
        cancelled.cancel()  # a client that went away leaves the queue
        queue.finish(first)
        await asyncio.wait_for(asyncio.gather(*tasks), 5)
        return order, queue

    order, queue = asyncio.run(scenario())
    assert order == ["high", "high2", "normal", "low"]
    assert (queue.running, queue.running_work, queue.waiting_work) == (0, 0.0, [0.0] * 3)


def test_prometheus_metrics(client, rng):
    body = json_request(digits_input(rng, 3))
    assert client.post(INFER, headers=AUTH_A, json=body).status_code == 200
    assert client.post(INFER, headers=AUTH_B, json=body).status_code == 403
    assert client.post(INFER, json=body).status_code == 401
    assert client.post("/v2/models/x" * 3 + "/infer", headers=AUTH_A).status_code == 404
    response = client.get("/metrics")
    assert response.status_code == 200 and response.headers["content-type"].startswith(
        "text/plain")
    text = response.text
    for line in ('tessera_requests_total{code="200",model="digits",tenant="a"} 1.0',
                 'tessera_requests_total{code="403",model="digits",tenant="b"} 1.0',
                 'tessera_requests_total{code="401",model="digits",tenant="-"} 1.0',
                 'tessera_request_images_sum{model="digits",tenant="a"} 3.0',
                 'tessera_compute_seconds_count{model="digits",tenant="a"} 1.0',
                 'tessera_slo_violations_total{model="digits",tenant="a"} 0.0',
                 'tessera_prediction_ratio_count{device="cpu"} 1.0'):
        assert line in text, line
    assert 'tessera_device_busy_seconds_total{device="cpu"}' in text
    assert "/v2/models/x" not in text  # unknown names never become labels


def test_full_queue_sheds_the_newest_lower_priority_request():
    async def scenario():
        queue = DeviceQueue(workers=1, ranks=3, max_queue=2)
        running = queue.enqueue(2, 1.0)
        low_a, low_b = queue.enqueue(2, 1.0), queue.enqueue(2, 1.0)
        high = queue.enqueue(0, 1.0)  # full: takes low_b's place
        assert low_b.shed and not low_a.shed
        with pytest.raises(Shed, match="higher-priority request took its place"):
            await queue.acquire(low_b)
        waiting_a = asyncio.create_task(queue.acquire(low_a))
        await asyncio.sleep(0)
        normal = queue.enqueue(1, 1.0)  # takes low_a's place while low_a awaits
        with pytest.raises(Shed):
            await waiting_a
        with pytest.raises(QueueFull, match=r"max_queue = 2"):
            queue.enqueue(1, 1.0)  # nobody of a lower priority left to shed
        for ticket in (running, high, normal):
            queue.finish(ticket)
        return queue

    queue = asyncio.run(scenario())
    assert (queue.running, queue.waiting, queue.waiting_work) == (0, 0, [0.0] * 3)


def test_shed_request_is_answered_503(tmp_path, rng):
    """Through the app: b's run holds the only worker, b's second request waits in a queue
    of one, a's high-priority request takes its place; b's waiting one gets 503."""
    text = write_config(tmp_path).read_text().replace("workers = 2",
                                                      "workers = 1\nmax_queue = 1")
    app = create_app(load_config(write_config(tmp_path, text=text)))
    release = threading.Event()
    model = app.state.models["digits_b"]
    session = model.session

    class Held:  # the session, but the run waits until released
        def __getattr__(self, name):
            return getattr(session, name)

        def run(self, names, feeds):
            assert release.wait(30)
            return session.run(names, feeds)

    model.session = Held()
    body = json_request(digits_input(rng, 1))
    queue = app.state.admission.queues["cpu"]

    async def scenario():
        transport = httpx2.ASGITransport(app=app)
        async with httpx2.AsyncClient(transport=transport, base_url="http://t") as client:
            def post(model_name, auth):
                return asyncio.create_task(client.post(f"/v2/models/{model_name}/infer",
                                                       headers=auth, json=body))

            first = post("digits_b", AUTH_B)
            while queue.running == 0:
                await asyncio.sleep(0.001)
            second = post("digits_b", AUTH_B)
            while queue.waiting == 0:
                await asyncio.sleep(0.001)
            high = post("digits", AUTH_A)
            shed = await asyncio.wait_for(second, 30)
            release.set()
            return await asyncio.wait_for(first, 30), shed, await asyncio.wait_for(high, 30)

    first, shed, high = asyncio.run(scenario())
    assert (first.status_code, shed.status_code, high.status_code) == (200, 503, 200)
    assert "shed: a higher-priority request took its place" in shed.json()["error"]
    assert int(shed.headers["Retry-After"]) >= 1


def test_gather_takes_waiting_requests_with_the_same_key():
    async def scenario():
        queue = DeviceQueue(workers=1, ranks=3, max_queue=10)
        leader = queue.enqueue(1, 1.0, images=2, key="k")
        other = queue.enqueue(0, 1.0, images=1, key="j")
        same = [queue.enqueue(rank, 1.0, images=n, key="k") for rank, n in
                ((2, 3), (1, 2), (0, 4))]
        riders = queue.gather(leader, max_images=8)
        # Queue order (priority, then arrival): the 4-image high one, then the 2-image one;
        # the 3-image low one would make 11 > 8 images.
        assert riders == [same[2], same[1]] and all(t.rider and t.started for t in riders)
        assert not same[0].started and not other.started
        assert (queue.running, queue.waiting) == (1, 2)
        for ticket in (*riders, leader):
            queue.finish(ticket)
        assert other.started  # the slot went to the next in line
        for ticket in (other, same[0]):
            queue.finish(ticket)
        return queue

    queue = asyncio.run(scenario())
    assert (queue.running, queue.waiting, queue.running_work) == (0, 0, 0.0)


def test_dynamic_batching_is_bit_identical(tmp_path, reference, rng):
    """Requests that wait while the device is busy run as one batch when it frees up;
    each gets exactly what a direct session run gives it."""
    text = write_config(tmp_path).read_text().replace(
        "workers = 2", "workers = 1").replace('providers = ["cpu"]',
                                              'providers = ["cpu"]\nmax_batch = 8')
    app = create_app(load_config(write_config(tmp_path, text=text)))
    release, calls = threading.Event(), []
    model = app.state.models["digits"]
    session = model.session

    class Held:  # the session, counting runs; the first waits until released
        def __getattr__(self, name):
            return getattr(session, name)

        def run(self, names, feeds):
            calls.append(feeds["input"].shape[0])
            assert release.wait(30)
            return session.run(names, feeds)

    model.session = Held()
    inputs = [digits_input(rng, n) for n in (1, 1, 2, 3)]
    queue = app.state.admission.queues["cpu"]

    async def scenario():
        transport = httpx2.ASGITransport(app=app)
        async with httpx2.AsyncClient(transport=transport, base_url="http://t") as client:
            def post(x):
                return asyncio.create_task(client.post(INFER, headers=AUTH_A,
                                                       json=json_request(x)))

            first = post(inputs[0])
            while queue.running == 0:
                await asyncio.sleep(0.001)
            rest = [post(x) for x in inputs[1:]]
            while queue.waiting < 3:
                await asyncio.sleep(0.001)
            release.set()
            return await asyncio.wait_for(asyncio.gather(first, *rest), 30)

    answers = asyncio.run(scenario())
    assert calls == [1, 6]  # the first alone, then the three waiting ones as one run
    for x, answer in zip(inputs, answers, strict=True):
        assert answer.status_code == 200, answer.text
        assert output_array(answer.json()).tobytes() == \
            reference.run(None, {"input": x})[0].tobytes()
    text = TestClient(app).get("/metrics").text
    assert 'tessera_batch_images_sum{model="digits"} 7.0' in text
    assert 'tessera_batch_images_count{model="digits"} 2.0' in text


def test_batches_shrink_while_a_latency_bound_tenant_is_active(tmp_path):
    clock = FakeClock()
    config = load_config(write_config(tmp_path))  # tenant a: SLO 2000 ms on "digits"
    admission = Admission(config.devices, config.tenants, clock=clock)
    admission.add_model("digits", 0.001, max_batch=16)
    admission.add_model("digits_b", 0.001, max_batch=16)
    predictor = admission._predictors["digits_b", "cpu"]
    predictor.observe(1, 0.1, 0.100)
    predictor.observe(16, 1.6, 1.600)  # 100 ms + 100 ms per further image
    admission._predictors["digits", "cpu"].observe(1, 0.1, 0.250)
    assert admission.batch_limit("digits_b", "cpu", 16, 1) == 16  # a not seen: full batches
    ticket, _ = admission.admit("digits", None, 1, 2.0, "high", tenant="a")
    # Budget: a waits for one batch, then runs in its own: each within half of 2000 ms x
    # 0.75 = 750 ms: 7 images (700 ms), not 8.
    assert admission.batch_limit("digits_b", "cpu", 16, 1) == 7
    assert admission.batch_limit("digits_b", "cpu", 16, 14) == 14  # never below the leader
    # Runs measured at twice their prediction: the tail (p90 of the ratios) doubles, and
    # batches shrink to 3 images (600 ms at the tail), not 4.
    for _ in range(8):
        predictor.observe(1, 0.05, 0.100)
    assert predictor.predict(1) == pytest.approx(0.1)
    assert admission.tail("digits_b", 1) == pytest.approx(0.2)
    assert admission.batch_limit("digits_b", "cpu", 16, 1) == 3
    clock.now += 1.01  # a idle for over a second: batches grow again
    assert admission.batch_limit("digits_b", "cpu", 16, 1) == 16
    # A leader with 0.85 s left for its run takes at most 4 images (800 ms at the tail).
    assert admission.batch_limit("digits_b", "cpu", 16, 1, run_budget=0.85) == 4
    admission.done("digits", "cpu", ticket, None)
