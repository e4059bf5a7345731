"""`[devices.X] process = "worker"`: a device's runs in a process of its own. Answers
bit-identical with a direct session run (single and batched), a worker killed or hung
mid-service detected (device unhealthy, the batch answered from the CPU fallback, the
worker restarted by the probe), config errors, and no worker left after shutdown, in
process and through `tessera serve` stopped with SIGTERM. Every wait is bounded."""

import asyncio
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from fastapi.testclient import TestClient

from sw_driver import InferenceSession
from sw_driver.errors import InputError, TesseraError
from tessera.serve import ServeConfigError, load_config
from tessera.serve.app import create_app
from tessera.serve.worker import DeviceWorker, SessionSpec
from tests.serve_helpers import (
    AUTH_A,
    AUTH_B,
    CONFIG,
    DIGITS,
    FakeClock,
    ask_digits,
    digits_input,
    json_request,
    output_array,
    stop_server,
    write_config,
)

INFER = "/v2/models/digits/infer"
TIMEOUT = 30  # seconds, any single wait


def worker_config(tmp_path, extra=""):
    text = CONFIG.format(burst_a=1000, burst_b=1000).replace(
        "[devices.cpu]\nworkers = 2\n",
        f'[devices.cpu]\nworkers = 2\nprocess = "worker"\n{extra}')
    assert 'process = "worker"' in text
    return load_config(write_config(tmp_path, text=text))


def gone(pid, timeout=TIMEOUT):
    """True once no process ``pid`` exists (a zombie counts as alive: not reaped)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as stat:
                if stat.read().split(")")[-1].split()[0] == "Z":
                    time.sleep(0.05)
                    continue
        except FileNotFoundError:
            return True
        time.sleep(0.05)
    return False


@pytest.fixture(scope="module")
def reference():
    return InferenceSession(str(DIGITS))


@pytest.fixture
def worker_app(tmp_path):
    app = create_app(worker_config(tmp_path), clock=FakeClock())
    yield app
    app.state.close()
    for worker in app.state.workers:
        assert worker.pid is None


def test_worker_answers_bit_exact_and_reports_its_process(worker_app, reference, rng):
    client = TestClient(worker_app)
    pids = [w.pid for w in worker_app.state.workers]
    assert len(pids) == 2 and os.getpid() not in pids and all(pids)
    timed = {}  # images -> the seconds the worker reported for that run

    def recording(run):
        def wrapper(*args):
            values, seconds = run(*args)
            timed[len(values[0])] = seconds
            return values, seconds
        return wrapper

    for worker in worker_app.state.workers:
        worker.run = recording(worker.run)
    for images in (1, 3, 7):
        x = digits_input(rng, images)
        response = client.post(INFER, headers=AUTH_A, json=json_request(x))
        assert response.status_code == 200, response.text
        assert output_array(response.json()).tobytes() == \
            reference.run(None, {"input": x})[0].tobytes()
    stats = client.get("/v2/models/digits/stats", headers=AUTH_A).json()
    # The predictor learned the worker's own run times (one run per size: its median).
    assert stats["predictor"]["measured_seconds_by_images"] == {
        str(n): timed[n] for n in (1, 3, 7)}
    device = stats["balancing"]["devices"]["cpu"]
    assert device["process"] == "worker"
    assert sorted(w["pid"] for w in device["workers"]) == sorted(pids)
    assert sum(w["runs"] for w in device["workers"]) == 3
    assert all(w["restarts"] == 0 for w in device["workers"])
    assert stats["predictor"]["runs_measured"] == 3
    # The second model on the device has its session in the same workers.
    response = client.post("/v2/models/digits_b/infer", headers=AUTH_B,
                           json=json_request(digits_input(rng, 2)))
    assert response.status_code == 200, response.text


def test_worker_batches_are_bit_exact(tmp_path, reference, rng):
    text = CONFIG.format(burst_a=1000, burst_b=1000).replace(
        "[devices.cpu]\nworkers = 2\n", '[devices.cpu]\nworkers = 1\nprocess = "worker"\n'
    ).replace('providers = ["cpu"]\n', 'providers = ["cpu"]\nmax_batch = 8\n', 1)
    app = create_app(load_config(write_config(tmp_path, text=text)), clock=FakeClock())
    try:
        # Stop the one worker: the first request's run waits for it, the others queue
        # behind it and join one batch when it goes on.
        (worker,) = app.state.workers
        inputs = [digits_input(rng, n) for n in (1, 2, 3, 1)]

        async def scenario():
            import httpx2

            transport = httpx2.ASGITransport(app=app)
            async with httpx2.AsyncClient(transport=transport, base_url="http://t") as client:
                os.kill(worker.pid, signal.SIGSTOP)
                tasks = [asyncio.create_task(client.post(INFER, headers=AUTH_A,
                                                         json=json_request(x)))
                         for x in inputs]
                await asyncio.sleep(0.5)
                os.kill(worker.pid, signal.SIGCONT)
                return await asyncio.wait_for(asyncio.gather(*tasks), TIMEOUT)

        answers = asyncio.run(scenario())
        for x, response in zip(inputs, answers, strict=True):
            assert response.status_code == 200, response.text
            assert output_array(response.json()).tobytes() == \
                reference.run(None, {"input": x})[0].tobytes()
        stats = worker.stats()
        assert stats["runs"] == 2, stats  # the first alone, then the three waiting as one
    finally:
        app.state.close()


@pytest.mark.parametrize("fault", ["killed", "hung"])
def test_worker_fault_retried_on_cpu_and_probed_back(tmp_path, reference, rng, caplog,
                                                      fault):
    caplog.set_level(logging.INFO, logger="tessera.serve.requests")
    clock = FakeClock()
    extra = "timeout_s = 1.5\n" if fault == "hung" else ""
    app = create_app(worker_config(tmp_path, extra), clock=clock)
    client = TestClient(app)
    try:
        first, second = app.state.workers  # the queue hands out the first one first
        first_pid = first.pid
        pids = {first.pid, second.pid}
        for pid in pids:  # whichever worker the next run takes has failed
            os.kill(pid, signal.SIGKILL if fault == "killed" else signal.SIGSTOP)

        def ask():
            return ask_digits(client, rng, reference, caplog, AUTH_A)

        log = ask()
        assert (log["device"], log["retried"]) == ("cpu-fallback", True)
        health = client.get("/v2/models/digits/stats", headers=AUTH_A).json()["health"]
        assert health["healthy"] is False and health["failures"] == 1
        expected = "exited" if fault == "killed" else "did not answer within 1.5 s"
        assert expected in health["last_error"] and "WorkerError" in health["last_error"]
        assert first.pid is None and gone(first_pid)  # the failed worker, stopped
        log = ask()  # no probe due: the CPU again, the device not tried
        assert (log["device"], log["retried"]) == ("cpu-fallback", False)
        if fault == "hung":  # the other worker goes on; the killed one is restarted later
            os.kill(second.pid, signal.SIGCONT)
        # Probes every 5 s until one passes: a killed worker fails its probe too, and the
        # next probe starts a fresh worker in its place.
        for _ in range(3):
            clock.now += 5.0
            log = ask()
            if log["device"] == "cpu":
                break
        assert (log["device"], log["retried"]) == ("cpu", False)
        assert client.get("/v2/models/digits/stats",
                          headers=AUTH_A).json()["health"]["healthy"] is True
        for _ in range(2):  # one run on each worker (they take turns): both serve again
            assert ask()["device"] == "cpu"
        assert all(w.pid not in pids and w.pid is not None for w in app.state.workers) \
            if fault == "killed" else first.pid not in pids
        assert first.restarts == 1
    finally:
        app.state.close()
    for pid in pids:
        assert gone(pid)


def test_worker_errors_keep_their_class(tmp_path):
    worker = DeviceWorker("cpu", {"m": SessionSpec(str(DIGITS), ("cpu",))}, 10.0)
    try:
        worker.wait_ready()
        with pytest.raises(InputError):  # the request's fault, not the device's
            worker.run("m", None, {"input": np.zeros((1, 1, 8, 9), np.float32)})
        values, seconds = worker.run("m", None, {"input": np.zeros((1, 1, 8, 8), np.float32)})
        assert values[0].shape == (1, 10) and seconds > 0
        assert worker.stats()["runs"] == 1
    finally:
        pid = worker.pid
        worker.close()
    assert worker.pid is None and gone(pid)


def test_worker_that_cannot_load_fails_startup(tmp_path):
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"not onnx")
    worker = DeviceWorker("cpu", {"m": SessionSpec(str(bad), ("cpu",))}, 10.0)
    pid = worker.pid
    with pytest.raises(TesseraError, match="bad.onnx"):
        worker.wait_ready()
    assert gone(pid) and worker.pid is None
    worker.close()


@pytest.mark.parametrize("line, message", [
    ('process = "fork"', "[devices.cpu] process must be one of ['thread', 'worker'], "
                         "not 'fork'"),
    ("timeout_s = 0", "[devices.cpu] timeout_s must be a positive number, not 0"),
])
def test_worker_config_errors(tmp_path, line, message):
    text = CONFIG.format(burst_a=1, burst_b=1).replace("workers = 2\n", f"workers = 2\n{line}\n")
    with pytest.raises(ServeConfigError) as error:
        load_config(write_config(tmp_path, text=text))
    assert message in str(error.value)


def start_cli(tmp_path):
    """``tessera serve`` with two workers on a free loopback port, once ready:
    ``(process, url)``."""
    path = tmp_path / "serve.toml"
    path.write_text(CONFIG.format(burst_a=1000, burst_b=1000).replace(
        "workers = 2\n", 'workers = 2\nprocess = "worker"\n'))
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    process = subprocess.Popen([sys.executable, "-m", "tessera.cli", "serve", "--config",
                                str(path), "--port", str(port)],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            raise AssertionError(f"tessera serve did not become ready: "
                                 f"{process.communicate()[0].decode()}")
        try:
            with urllib.request.urlopen(f"{url}/v2/health/ready", timeout=2):
                return process, url
        except OSError:
            time.sleep(0.1)


def worker_pids(url):
    stats = urllib.request.Request(f"{url}/v2/models/digits/stats", headers=AUTH_A)
    with urllib.request.urlopen(stats, timeout=TIMEOUT) as response:
        workers = json.loads(response.read())["balancing"]["devices"]["cpu"]["workers"]
    return [w["pid"] for w in workers]


def test_cli_serve_killed_leaves_no_worker(tmp_path):
    process, url = start_cli(tmp_path)
    try:
        pids = worker_pids(url)
        assert len(pids) == 2 and all(not gone(pid, 0.1) for pid in pids)
    finally:
        process.kill()  # SIGKILL: no shutdown code runs in the server
        process.communicate(timeout=TIMEOUT)
    for pid in pids:  # each worker sees its pipe close and exits
        assert gone(pid), f"worker {pid} outlived the killed server"


def test_cli_serve_with_workers_drains_then_stops_them(tmp_path, reference, rng):
    process, url = start_cli(tmp_path)
    try:
        x = digits_input(rng, 2)
        request = urllib.request.Request(
            f"{url}{INFER}", data=json.dumps(json_request(x)).encode(), method="POST",
            headers={"Content-Type": "application/json", **AUTH_A})
        with urllib.request.urlopen(request, timeout=TIMEOUT) as response:
            got = output_array(json.loads(response.read()))
        assert got.tobytes() == reference.run(None, {"input": x})[0].tobytes()
        pids = worker_pids(url)
        assert len(pids) == 2 and all(not gone(pid, 0.1) for pid in pids)
        # SIGTERM with a run in flight in a (stopped) worker: the server drains, answering
        # it once the worker goes on, and only then stops its workers and exits.
        for pid in pids:
            os.kill(pid, signal.SIGSTOP)
        x = digits_input(rng, 3)
        request = urllib.request.Request(
            f"{url}{INFER}", data=json.dumps(json_request(x)).encode(), method="POST",
            headers={"Content-Type": "application/json", **AUTH_A})
        with ThreadPoolExecutor(1) as pool:
            answer = pool.submit(lambda: urllib.request.urlopen(request, timeout=TIMEOUT))
            time.sleep(1.0)
            process.send_signal(signal.SIGTERM)
            time.sleep(1.0)
            assert process.poll() is None and not answer.done()  # draining, not gone
            for pid in pids:
                os.kill(pid, signal.SIGCONT)
            with answer.result(TIMEOUT) as response:
                got = output_array(json.loads(response.read()))
        assert got.tobytes() == reference.run(None, {"input": x})[0].tobytes()
    finally:
        output = stop_server(process, TIMEOUT)
    assert process.returncode in (0, -signal.SIGTERM), output
    assert "Application shutdown complete" in output
    for pid in pids:
        assert gone(pid), f"worker {pid} outlived the server"
