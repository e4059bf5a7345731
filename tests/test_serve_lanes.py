"""Priority lanes (`[server] priority_lanes = true`): the low-priority tenant's connections
are handed to a second process that parses their HTTP and sends the tensors to the main
process's scheduler. Live server on 127.0.0.1 only; every wait bounded."""

import http.client
import json
import os
import re
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import pytest

from sw_driver import InferenceSession
from tessera.serve import ServeConfigError, load_config
from tessera.serve.lanes import bearer_token, side_tenants
from tests.serve_helpers import (
    AUTH_A,
    AUTH_B,
    CONFIG,
    DIGITS,
    TOKEN_A,
    TOKEN_B,
    digits_input,
    json_request,
    output_array,
    serve_cli,
    write_config,
)

TIMEOUT = 30  # seconds, any single wait


def lanes_config(tmp_path, extra="priority_lanes = true"):
    text = CONFIG.format(burst_a=1000, burst_b=1000).replace(
        "max_body_bytes = 65536", f"max_body_bytes = 65536\n{extra}")
    return write_config(tmp_path, text=text)


def test_side_tenants_are_those_below_the_best_priority(tmp_path):
    assert side_tenants(load_config(lanes_config(tmp_path))) == {"b"}
    same = CONFIG.format(burst_a=5, burst_b=5).replace('priority = "low"',
                                                       'priority = "high"')
    assert side_tenants(load_config(write_config(tmp_path, text=same))) == set()


def test_bearer_token_is_read_from_the_first_header_block():
    head = (b"POST /v2/models/m/infer HTTP/1.1\r\nHost: x\r\n"
            b"authorization:  Bearer  abc123 \r\nContent-Length: 2")
    assert bearer_token(head) == b"abc123"
    assert bearer_token(b"GET / HTTP/1.1\r\nAuthorization: Basic xyz") is None
    assert bearer_token(b"GET / HTTP/1.1\r\nHost: x") is None


@pytest.mark.parametrize(("extra", "field"), [("priority_lanes = 1", "priority_lanes"),
                                              ("lane_nice = 25", "lane_nice"),
                                              ("lane_nice = true", "lane_nice"),
                                              ("lane_batch_ms = -1", "lane_batch_ms")])
def test_bad_lane_settings_name_the_field(tmp_path, extra, field):
    with pytest.raises(ServeConfigError, match=rf"serve\.toml: \[server\] {field} must be"):
        load_config(lanes_config(tmp_path, extra))


def post(port, model, body, headers):
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=TIMEOUT)
    try:
        connection.request("POST", f"/v2/models/{model}/infer", json.dumps(body).encode(),
                           {"Content-Type": "application/json", **headers})
        response = connection.getresponse()
        return response.status, json.loads(response.read())
    finally:
        connection.close()


def request_lines(output):
    return [json.loads(line) for line in output.splitlines() if line.startswith("{\"")]


def test_side_lane_serves_the_low_priority_tenant_bit_exact(tmp_path, rng):
    """Both tenants answered bit-exact; B's requests carry the side lane's mark in the
    request log; /metrics (main process) counts both; SIGTERM stops both processes."""
    reference = InferenceSession(str(DIGITS))
    jobs = [("digits", AUTH_A, digits_input(rng, 1 + i % 3)) for i in range(12)]
    jobs += [("digits_b", AUTH_B, digits_input(rng, 1 + i % 2)) for i in range(12)]
    with serve_cli(lanes_config(tmp_path)) as (port, result):
        with ThreadPoolExecutor(6) as pool:
            answers = list(pool.map(lambda job: post(port, job[0], json_request(job[2]),
                                                     job[1]), jobs))
        for (_, _, x), (status, body) in zip(jobs, answers, strict=True):
            assert status == 200, body
            assert output_array(body).tobytes() == \
                reference.run(None, {"input": x})[0].tobytes()
        time.sleep(0.5)  # the lane sends its counts every 0.1 s
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics",
                                    timeout=TIMEOUT) as response:
            metrics = response.read().decode()
        for tenant, model in (("a", "digits"), ("b", "digits_b")):
            line = (f'tessera_requests_total{{code="200",model="{model}",'
                    f'tenant="{tenant}"}} 12.0')
            assert line in metrics, metrics
    output = result["output"]
    assert result["returncode"] == 0, output  # a clean drain is a clean exit
    lines = request_lines(output)
    assert sorted(r["tenant"] for r in lines if r.get("lane") == "side") == ["b"] * 12
    assert sorted(r["tenant"] for r in lines if "lane" not in r) == ["a"] * 12
    (pid,) = re.findall(r"side lane pid (\d+)", output)
    deadline = time.monotonic() + TIMEOUT
    while _alive(int(pid)):
        assert time.monotonic() < deadline, "the side lane outlived the server"
        time.sleep(0.05)
    assert TOKEN_A not in output and TOKEN_B not in output


def test_side_lane_groups_requests_and_splits_their_answers(tmp_path, rng):
    """With lane_batch_ms, concurrent requests of B's model go to the main process as one
    call: the runs are batches of several requests, every answer still its own, bit-exact.
    Fails if the lane sends each alone (no run above the request's own images) or splits
    the outputs wrongly."""
    text = CONFIG.format(burst_a=1000, burst_b=1000).replace(
        "max_body_bytes = 65536", "max_body_bytes = 65536\npriority_lanes = true\n"
        "lane_batch_ms = 200").replace(
        '[models.digits_b]\npath', '[models.digits_b]\nmax_batch = 8\npath')
    reference = InferenceSession(str(DIGITS))
    inputs = [digits_input(rng, 1 + i % 2) for i in range(8)]
    with serve_cli(write_config(tmp_path, text=text)) as (port, result):
        with ThreadPoolExecutor(8) as pool:
            answers = list(pool.map(lambda x: post(port, "digits_b", json_request(x),
                                                   AUTH_B), inputs))
    for x, (status, body) in zip(inputs, answers, strict=True):
        assert status == 200, body
        assert output_array(body).tobytes() == reference.run(None, {"input": x})[0].tobytes()
    lines = [r for r in request_lines(result["output"]) if r.get("lane") == "side"]
    assert len(lines) == 8
    assert max(r["batch"] - r["images"] for r in lines) > 0, lines


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as stat:  # a zombie has exited
        return stat.read().split(")")[-1].split()[0] != "Z"


def test_only_the_side_tenants_inference_requests_change_lanes(tmp_path):
    from tessera.serve.server import _goes_to_side

    decide = _goes_to_side(load_config(lanes_config(tmp_path)))
    infer = b"POST /v2/models/digits_b/infer HTTP/1.1\r\nHost: x"
    assert decide(infer, TOKEN_B.encode())
    assert not decide(infer, TOKEN_A.encode())  # the high-priority tenant stays in main
    assert not decide(infer, b"not-a-token")
    assert not decide(b"GET /v2/models/digits_b HTTP/1.1\r\nHost: x", TOKEN_B.encode())
    assert not decide(b"GET /metrics HTTP/1.1", TOKEN_B.encode())


@pytest.mark.parametrize(("close_lane_end", "expected"),
                         [(True, "its process exited"), (False, "no answer within 0.2 s")])
def test_a_lane_that_does_not_start_is_a_clear_error(close_lane_end, expected):
    import asyncio
    import socket

    from tessera.serve.lanes import LaneError, LaneLink

    async def start():
        main_end, lane_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        link = LaneLink(main_end, None, None, Exception)
        link.start()
        if close_lane_end:
            lane_end.close()
        try:
            with pytest.raises(LaneError, match=expected):
                await link.wait_ready(timeout=0.2)
        finally:
            lane_end.close()

    asyncio.run(start())
