"""``tessera serve`` against ``tessera serve --ray``: what Ray Serve's proxy and
replicas cost on one machine; writes ``bench/results/serve_ray.json``.

The same config (the digits CNN on the CPU provider, one device worker, ``max_batch`` 1)
is served three ways, each a child process on 127.0.0.1: plain ``tessera serve``
(uvicorn), and Ray Serve on a local Ray with 1 and 2 replicas. For each, one client
measures the unloaded latency (p50, p99) and 16 closed-loop clients the capacity
(requests/s), every answer checked bit for bit against ``InferenceSession.run``. The
plain server is the peer of each ratio. Client, proxy and replicas share this machine's
cores, so a 2-core machine measures mostly their contention (docs/performance.md).
"""

import contextlib
import os
import tempfile
from pathlib import Path

import numpy as np

from bench.common import metric, write_results
from sw_driver import InferenceSession
from tessera.serve.loadgen import (
    TenantLoad,
    free_port,
    run_load,
    serve_subprocess,
    summarize,
)

ROOT = Path(__file__).resolve().parent.parent
DIGITS = ROOT / "models" / "zoo" / "digits_qdq.onnx"
TOKEN = "bench-serve-ray-token-000000"
SEED = 15
SECONDS = float(os.environ.get("BENCH_SERVE_SECONDS", "5"))
#: A local Ray, its Serve controller, proxy and replicas take 15-30 s to start here.
READY_WITHIN = 120.0

CONFIG = f"""
[server]
host = "127.0.0.1"
[devices.cpu]
workers = 1
[models.m]
path = "{DIGITS.as_posix()}"
providers = ["cpu"]
[tenants.a]
token = "{TOKEN}"
models = ["m"]
priority = "high"
rate = 1000000
burst = 1000000
"""


@contextlib.contextmanager
def _server(folder, tag, extra):
    config, log = Path(folder) / f"{tag}.toml", Path(folder) / f"{tag}.log"
    config.write_text(CONFIG)
    with serve_subprocess(config, free_port(), log=log, timeout=READY_WITHIN,
                          extra=extra) as url:
        yield url


def _load(url, inputs, expected, concurrency, seconds):
    load = TenantLoad("a", TOKEN, "m", inputs, expected, concurrency=concurrency)
    took = run_load(url, [load], duration=seconds, max_requests=100_000, seed=SEED)
    summary = summarize(load, took)
    bad = {k: summary[k] for k in ("lost", "wrong", "answered_twice") if summary[k]}
    if bad or summary["checked"] != summary["answered"] or not summary["answered"]:
        raise AssertionError(f"{url}: {bad}, checked {summary['checked']} of "
                             f"{summary['answered']} answers")
    return summary


def main():
    rng = np.random.default_rng(SEED)
    session = InferenceSession(str(DIGITS))
    inputs = [rng.random((1, 1, 8, 8), dtype=np.float32) for _ in range(64)]
    expected = [session.run(None, {"input": x})[0] for x in inputs]
    ways = (("plain", []), ("ray_1", ["--ray", "--replicas", "1"]),
            ("ray_2", ["--ray", "--replicas", "2"]))
    figures = {}
    with tempfile.TemporaryDirectory() as folder:
        for tag, extra in ways:
            with _server(folder, tag, extra) as url:
                _load(url, inputs, expected, 4, 1.0)  # warm: imports, connections
                one = _load(url, inputs, expected, 1, SECONDS)
                many = _load(url, inputs, expected, 16, SECONDS)
            figures[tag] = {"p50": one["latency_p50_ms"], "p99": one["latency_p99_ms"],
                            "capacity": many["throughput"]}
            print(f"{tag}: {figures[tag]}", flush=True)
    plain = figures["plain"]
    metrics = [metric("serve_plain_p50_ms", round(plain["p50"], 2), "ms"),
               metric("serve_plain_p99_ms", round(plain["p99"], 2), "ms"),
               metric("serve_plain_capacity", round(plain["capacity"], 1), "requests/s")]
    for tag in ("ray_1", "ray_2"):
        got = figures[tag]
        metrics += [
            metric(f"serve_{tag}_p50_ms", round(got["p50"], 2), "ms", peer="plain",
                   peer_value=round(plain["p50"], 2)),
            metric(f"serve_{tag}_p99_ms", round(got["p99"], 2), "ms", peer="plain",
                   peer_value=round(plain["p99"], 2)),
            metric(f"serve_{tag}_capacity", round(got["capacity"], 1), "requests/s",
                   peer="plain", peer_value=round(plain["capacity"], 1)),
        ]
    write_results("serve_ray", metrics, seconds_per_phase=SECONDS, figures=figures,
                  note="one-image binary v2 requests of the digits CNN, CPU provider, all on "
                       "this machine's cores")


if __name__ == "__main__":
    main()
