"""`tessera serve` for real: uvicorn on 127.0.0.1 (ephemeral port), a bounded two-tenant
load, and the CLI started and stopped. Every wait is bounded; nothing leaves loopback."""

import json
import signal
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from sw_driver import InferenceSession
from tessera.serve import load_config
from tessera.serve.app import create_app
from tests.serve_helpers import (
    AUTH_A,
    AUTH_B,
    DIGITS,
    FakeClock,
    digits_input,
    json_request,
    output_array,
    running,
    serve_cli,
    write_config,
)

TIMEOUT = 30  # seconds, any single wait


def post(url, body, headers):
    """``(status, json, headers)`` of a POST; HTTP errors are answers, not exceptions."""
    request = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json", **headers})
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT) as response:
            return response.status, json.loads(response.read()), response.headers
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read()), error.headers


@pytest.fixture(scope="module")
def reference():
    return InferenceSession(str(DIGITS))


def test_uvicorn_serves_on_loopback(tmp_path, reference, rng):
    x = digits_input(rng, 4)
    with running(create_app(load_config(write_config(tmp_path)))) as url:
        with urllib.request.urlopen(f"{url}/v2/health/ready", timeout=TIMEOUT) as response:
            assert response.status == 200
        status, got, _ = post(f"{url}/v2/models/digits/infer", json_request(x), AUTH_A)
    assert status == 200
    assert output_array(got).tobytes() == reference.run(None, {"input": x})[0].tobytes()


def test_two_tenant_load_is_correct_and_rate_limited(tmp_path, reference, rng):
    # A frozen clock: the buckets never refill, so exactly `burst` requests per tenant pass
    # however the concurrent requests interleave; the rest are 429s, none dropped.
    per_tenant, bursts = 40, {"a": 30, "b": 10}
    jobs = []
    for i in range(per_tenant):
        for tenant, model, auth in (("a", "digits", AUTH_A), ("b", "digits_b", AUTH_B)):
            jobs.append((tenant, model, auth, digits_input(rng, 1 + i % 3)))
    app = create_app(load_config(write_config(tmp_path, burst_a=bursts["a"],
                                              burst_b=bursts["b"])), clock=FakeClock())
    with running(app) as url, ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(
            lambda job: post(f"{url}/v2/models/{job[1]}/infer", json_request(job[3]), job[2]),
            jobs))
    counts = {(tenant, status): 0 for tenant in bursts for status in (200, 429)}
    for (tenant, _, _, x), (status, body, headers) in zip(jobs, answers, strict=True):
        counts[tenant, status] += 1
        if status == 200:
            expected = reference.run(None, {"input": x})[0]
            assert output_array(body).tobytes() == expected.tobytes()
        else:
            assert status == 429, body
            assert int(headers.get("Retry-After", 0)) >= 1 and "rate limit" in body["error"]
    assert counts == {("a", 200): 30, ("a", 429): 10, ("b", 200): 10, ("b", 429): 30}


def test_cli_serve_starts_answers_and_stops(tmp_path, reference, rng):
    with serve_cli(write_config(tmp_path)) as (port, result):
        x = digits_input(rng, 2)
        status, got, _ = post(f"http://127.0.0.1:{port}/v2/models/digits/infer",
                              json_request(x), AUTH_A)
        assert status == 200
        np.testing.assert_array_equal(output_array(got), reference.run(None, {"input": x})[0])
    output = result["output"]
    # uvicorn shuts down gracefully, then re-raises SIGTERM so the parent sees how it ended.
    assert result["returncode"] in (0, -signal.SIGTERM), output
    assert "Application shutdown complete" in output
    assert f"on http://127.0.0.1:{port}/v2" in output
