"""``tessera serve --ray``: the serve config as Ray Serve replicas on a local Ray (127.0.0.1).

``test_serve_on_ray_end_to_end`` runs the real command in a subprocess (a local Ray with 2
CPUs, two replicas), talks the KServe v2 protocol to it through Ray Serve's HTTP proxy,
checks every output bit for bit against ``InferenceSession.run``, the tenants' rules (401,
403), that the proxy listens on 127.0.0.1 only, and that SIGTERM ends it cleanly. Every
wait is bounded. Seeded by the test's seed (printed).
"""

import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx2
import numpy as np
import pytest

from sw_driver import InferenceSession
from tessera.ray_cluster import (
    LOCAL,
    RayClusterError,
    ResourceUnavailable,
    connect,
    parse_resources,
)
from tessera.serve import load_config
from tessera.serve.on_ray import (
    PROXY_START_ATTEMPTS,
    deploy,
    replica_config,
    replica_options,
    start_proxy,
)
from tests.serve_helpers import (
    AUTH_A,
    AUTH_B,
    DIGITS,
    digits_input,
    json_request,
    output_array,
    write_config,
)

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning:ray.*")

ROOT = Path(__file__).resolve().parent.parent
#: Seconds the server may take to answer ready (a local Ray, the controller, the proxy and
#: two replicas loading the model: about 15 s on the 2-core development machine; over 90 s
#: twice with place and route running beside the suite). A bound on a hang, not a timing.
READY_WITHIN = 180


def _free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _listeners(port):
    """Local addresses listening on TCP ``port`` (IPv4 and IPv6), from /proc/net."""
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            address, hexport = fields[1].rsplit(":", 1)
            if int(hexport, 16) == port and fields[3] == "0A":  # 0A: LISTEN
                found.append(address)
    return found


def _wait_ready(base, process):
    deadline = time.monotonic() + READY_WITHIN
    while time.monotonic() < deadline:
        if process.poll() is not None:
            out, err = process.communicate()
            pytest.fail(f"tessera serve --ray exited with {process.returncode}:\n{out}\n{err}")
        try:
            if httpx2.get(f"{base}/v2/health/ready", timeout=2).status_code == 200:
                return
        except httpx2.TransportError:
            pass
        time.sleep(0.5)
    pytest.fail(f"tessera serve --ray was not ready within {READY_WITHIN} s")


def test_serve_on_ray_end_to_end(tmp_path, rng, seed):
    port = _free_port()
    config = write_config(tmp_path)
    process = subprocess.Popen(
        [sys.executable, "-m", "tessera.cli", "serve", "--config", str(config), "--port",
         str(port), "--ray", "--replicas", "2"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    base = f"http://127.0.0.1:{port}"
    try:
        _wait_ready(base, process)
        assert [a for a in _listeners(port) if a != "0100007F"] == []  # 127.0.0.1 only
        session = InferenceSession(str(DIGITS))
        for n in (1, 3, 8):
            x = digits_input(rng, n)
            answer = httpx2.post(f"{base}/v2/models/digits/infer", json=json_request(x),
                                 headers=AUTH_A, timeout=30)
            assert answer.status_code == 200, answer.text
            got = output_array(answer.json())
            expected = session.run(None, {"input": x})[0]
            assert got.dtype == expected.dtype and got.shape == expected.shape
            assert np.array_equal(got, expected), f"seed {seed}, batch {n}"
        x = digits_input(rng, 2)
        refused = httpx2.post(f"{base}/v2/models/digits/infer", json=json_request(x),
                              timeout=30)
        assert refused.status_code == 401
        assert refused.headers["www-authenticate"] == "Bearer"
        assert "missing bearer token" in refused.json()["error"]
        wrong = httpx2.post(f"{base}/v2/models/digits/infer", json=json_request(x),
                            headers={"Authorization": "Bearer nope"}, timeout=30)
        assert wrong.status_code == 401
        other = httpx2.post(f"{base}/v2/models/digits/infer", json=json_request(x),
                            headers=AUTH_B, timeout=30)
        assert other.status_code == 403  # tenant b may use digits_b only
        meta = httpx2.get(f"{base}/v2/models/digits", headers=AUTH_A, timeout=30).json()
        assert meta["outputs"] == [{"name": "logits", "datatype": "FP32", "shape": [-1, 10]}]
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            out, err = process.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            out, err = process.communicate()
            pytest.fail(f"tessera serve --ray did not stop within 60 s of SIGTERM:\n{err}")
    assert process.returncode == 0, err
    assert "2 Ray Serve replica(s), each asking for {'num_cpus': 1}" in " ".join(out.split())
    assert _listeners(port) == []  # the proxy is gone
    with pytest.raises(httpx2.TransportError):
        httpx2.get(f"{base}/v2/health/live", timeout=2)


def test_replicas_ask_for_their_devices_and_split_the_rates(tmp_path):
    text = f"""
[server]
port = 8000
[devices.board]
workers = 1
providers = ["pcie", "cpu"]
[devices.gpu]
workers = 1
[devices.cpu]
workers = 2
[models.digits]
path = "{DIGITS.as_posix()}"
providers = ["cpu"]
devices = ["board", "cpu"]
[models.on_gpu]
path = "{DIGITS.as_posix()}"
providers = ["gpu", "cpu"]
device = "gpu"
[tenants.a]
token = "a-token-0123456789abcdef"
models = ["digits", "on_gpu"]
priority = "high"
rate = 9
burst = 5
"""
    config = load_config(write_config(tmp_path, text=text))
    assert replica_options(config) == {"num_cpus": 1, "num_gpus": 1,
                                       "resources": {"fpga_pcie": 1}}
    tenant = replica_config(config, 3).tenants["a"]
    assert (tenant.rate, tenant.burst) == (3.0, 2)
    assert replica_config(config, 1) == config
    with pytest.raises(ValueError, match="--replicas must be a positive integer, not 0"):
        replica_config(config, 0)


def test_replicas_no_node_can_hold_are_refused_before_serve_starts(tmp_path):
    text = write_config(tmp_path).read_text().replace(
        'providers = ["cpu"]', 'providers = ["pcie", "cpu"]')
    config = load_config(write_config(tmp_path, text=text))
    started = time.monotonic()
    with connect(LOCAL, resources=parse_resources("CPU=2")) as ray:
        assert [node["NodeManagerAddress"] for node in ray.nodes()] == ["127.0.0.1"]
        with pytest.raises(ResourceUnavailable,
                           match=r"1 replicas of tessera serve need fpga_pcie 1 in all"):
            deploy(ray, config, replicas=1, port=_free_port())
        assert "SERVE_CONTROLLER_ACTOR" not in str(ray.util.list_named_actors(all_namespaces=True))
    assert time.monotonic() - started < 60


class _FlakyServe:
    """Ray Serve's start whose proxy actor dies before it runs, ``deaths`` times."""

    def __init__(self, deaths):
        self.deaths, self.starts, self.shutdowns = deaths, 0, 0

    def start(self, **kwargs):
        import ray.exceptions

        self.starts += 1
        if self.starts <= self.deaths:
            raise ray.exceptions.ActorDiedError()

    def shutdown(self):
        self.shutdowns += 1


def test_a_proxy_killed_before_it_ran_is_started_again():
    import ray

    serve = _FlakyServe(deaths=2)
    start_proxy(ray, serve, {"host": "127.0.0.1", "port": 0})
    assert (serve.starts, serve.shutdowns) == (3, 2)
    serve = _FlakyServe(deaths=PROXY_START_ATTEMPTS)
    with pytest.raises(RayClusterError, match=f"died before it started, "
                                              f"{PROXY_START_ATTEMPTS} times: The actor died"):
        start_proxy(ray, serve, {"host": "127.0.0.1", "port": 0})
    assert serve.starts == PROXY_START_ATTEMPTS
