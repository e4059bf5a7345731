"""Shared pieces of the serving tests: a two-tenant config on the shipped digits model."""

import contextlib
import json
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import numpy as np

DIGITS = Path(__file__).resolve().parent.parent / "models" / "zoo" / "digits_qdq.onnx"
TOKEN_A = "tenant-a-token-0123456789"
TOKEN_B = "tenant-b-token-9876543210"
AUTH_A = {"Authorization": f"Bearer {TOKEN_A}"}
AUTH_B = {"Authorization": f"Bearer {TOKEN_B}"}

CONFIG = f"""
[server]
host = "127.0.0.1"
port = 0
max_body_bytes = 65536

[devices.cpu]
workers = 2

[models.digits]
path = "{DIGITS.as_posix()}"
providers = ["cpu"]

[models.digits_b]
path = "{DIGITS.as_posix()}"

[tenants.a]
token = "{TOKEN_A}"
models = ["digits"]
priority = "high"
slo_ms = 2000
rate = 10
burst = {{burst_a}}

[tenants.b]
token = "{TOKEN_B}"
models = ["digits_b"]
priority = "low"
rate = 5
burst = {{burst_b}}
"""


def write_config(tmp_path, *, burst_a=1000, burst_b=1000, text=None):
    """The config file in ``tmp_path`` (or ``text`` instead), its path."""
    path = tmp_path / "serve.toml"
    path.write_text(CONFIG.format(burst_a=burst_a, burst_b=burst_b) if text is None else text)
    return path


def digits_input(rng, n):
    """``n`` random images in the digits model's input range, float32 [n, 1, 8, 8]."""
    return rng.random((n, 1, 8, 8), dtype=np.float32)


def json_request(x, name="input", datatype="FP32", shape=None):
    return {"inputs": [{"name": name, "datatype": datatype,
                        "shape": list(x.shape) if shape is None else shape,
                        "data": x.reshape(-1).tolist()}]}


def output_array(response_json, name="logits"):
    (out,) = [o for o in response_json["outputs"] if o["name"] == name]
    return np.asarray(out["data"], dtype=np.float32).reshape(out["shape"])


def hold_runs(model):
    """Make every run of ``model`` (a served model of ``app.state.models``) wait until the
    returned event is set, so a test can fill queues and act while runs are in flight."""
    release, session = threading.Event(), model.session

    class Held:
        def __getattr__(self, name):
            return getattr(session, name)

        def run(self, names, feeds):
            assert release.wait(TIMEOUT)
            return session.run(names, feeds)

    model.session = Held()
    return release


class FakeClock:
    """A monotonic clock that moves only when told (rate limits without sleeping)."""

    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


#: Seconds any single wait on a live server may take.
TIMEOUT = 30


@contextlib.contextmanager
def running(app):
    """``app`` served by uvicorn in a thread on 127.0.0.1; yields its base URL."""
    import uvicorn  # the serving extra: only the tests that serve import it

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + TIMEOUT
        while not server.started:
            assert thread.is_alive() and time.monotonic() < deadline, "server did not start"
            time.sleep(0.01)
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(TIMEOUT)
        sock.close()
        assert not thread.is_alive(), "server did not stop"


def stop_server(process, timeout):
    """SIGTERM to a ``tessera serve`` process, then its output once it has exited; a
    server still running after ``timeout`` seconds is killed and the timeout re-raised."""
    process.send_signal(signal.SIGTERM)
    try:
        return process.communicate(timeout=timeout)[0].decode()
    except subprocess.TimeoutExpired:
        process.kill()
        raise


@contextlib.contextmanager
def serve_cli(config_path):
    """``tessera serve`` on a free loopback port: yields ``(port, result)``; after the
    block it is stopped (SIGTERM) and ``result["output"]`` holds what it printed."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    command = [sys.executable, "-m", "tessera.cli", "serve", "--config", str(config_path),
               "--port", str(port)]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    result = {}
    try:
        deadline = time.monotonic() + 60
        while True:
            assert process.poll() is None, process.stdout.read().decode()
            assert time.monotonic() < deadline, "tessera serve did not become ready"
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/v2/health/ready",
                                            timeout=2) as response:
                    if response.status == 200:
                        break
            except OSError:
                time.sleep(0.1)
        yield port, result
    finally:
        result["output"] = stop_server(process, TIMEOUT)
        result["returncode"] = process.returncode


def ask_digits(client, rng, reference, caplog, headers):
    """Two seeded digits images through ``client``'s infer route: asserts the answer is
    bit-exact with ``reference`` (an onnxruntime session) and returns the server's last
    structured log line (which device ran it, retries) as a dict."""
    x = digits_input(rng, 2)
    response = client.post("/v2/models/digits/infer", headers=headers, json=json_request(x))
    assert response.status_code == 200, response.text
    assert output_array(response.json()).tobytes() == \
        reference.run(None, {"input": x})[0].tobytes()
    return json.loads(caplog.records[-1].getMessage())
