"""Load generator for ``tessera serve``: open-loop Poisson (or closed-loop) traffic from
several tenants over loopback HTTP, every answer checked, latencies summed up per tenant.

Used by ``tessera loadtest`` and ``bench/bench_serve.py``. It speaks HTTP/1.1 itself over
asyncio streams (keep-alive connections, no client library), so one process can keep a few
hundred requests in flight on a small machine. Every run is bounded twice: it stops issuing
after ``duration`` seconds or ``max_requests`` requests, and waits at most ``drain_timeout``
seconds for the answers still out (those count as lost). It refuses any host that is not a
loopback address. A tenant's rates are over the time its own traffic took, from the start
to its last answer: a tenant that reached ``max_requests`` early is not credited with the
seconds it sent nothing.

Latency is measured from each request's *scheduled* arrival, not from when a connection was
free to send it, so a slow server cannot hide its queueing in the client (coordinated
omission).
"""

import asyncio
import concurrent.futures
import contextlib
import ipaddress
import json
import math
import multiprocessing
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
from dataclasses import dataclass, field

import numpy as np

__all__ = ["TenantLoad", "free_port", "get_json", "get_text", "run_load", "serve_subprocess",
           "server_counts", "summarize"]

def check_loopback(url):
    """``(host, port)`` of ``url``, refused unless the host is a loopback address."""
    parts = urllib.parse.urlsplit(url)
    host = parts.hostname or ""
    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = host == "localhost"
    if parts.scheme != "http" or not loopback:
        raise ValueError(f"load tests go to loopback addresses only (http://127.0.0.1:PORT), "
                         f"not {url!r}")
    return host, parts.port or 80


class _Connection:
    """One keep-alive HTTP/1.1 connection; one request at a time."""

    def __init__(self, reader, writer, host):
        self.reader, self.writer, self.host = reader, writer, host

    @classmethod
    async def open(cls, host, port):
        reader, writer = await asyncio.open_connection(host, port)
        return cls(reader, writer, host)

    async def request(self, method, path, headers, body=b""):
        """``(status, headers, body)``; headers lower-cased."""
        lines = [f"{method} {path} HTTP/1.1", f"Host: {self.host}",
                 f"Content-Length: {len(body)}"]
        lines += [f"{k}: {v}" for k, v in headers.items()]
        self.writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body)
        head = await self.reader.readuntil(b"\r\n\r\n")
        status_line, *header_lines = head[:-4].decode("latin-1").split("\r\n")
        status = int(status_line.split(" ", 2)[1])
        answer = {}
        for line in header_lines:
            key, _, value = line.partition(":")
            answer[key.strip().lower()] = value.strip()
        content = await self.reader.readexactly(int(answer.get("content-length", 0)))
        return status, answer, content

    def close(self):
        self.writer.close()


def encode_binary(input_name, output_name, x):
    """A v2 request with ``x`` as a binary tensor and ``output_name`` asked for in binary:
    ``(body, headers)``."""
    raw = np.ascontiguousarray(x, dtype="<f4").tobytes()
    header = json.dumps({
        "inputs": [{"name": input_name, "shape": list(x.shape), "datatype": "FP32",
                    "parameters": {"binary_data_size": len(raw)}}],
        "outputs": [{"name": output_name, "parameters": {"binary_data": True}}],
    }).encode()
    return header + raw, {"Inference-Header-Content-Length": str(len(header)),
                          "Content-Type": "application/octet-stream"}


def encode_json(input_name, output_name, x):
    body = json.dumps({"inputs": [{"name": input_name, "shape": list(x.shape),
                                   "datatype": "FP32",
                                   "data": x.reshape(-1).tolist()}],
                       "outputs": [{"name": output_name}]}).encode()
    return body, {"Content-Type": "application/json"}


def decode_output(headers, body, output_name):
    """The float32 output ``output_name`` of a 200 answer, binary or JSON."""
    length = int(headers.get("inference-header-content-length", len(body)))
    header = json.loads(body[:length])
    (out,) = [o for o in header["outputs"] if o["name"] == output_name]
    if "data" in out:
        return np.asarray(out["data"], dtype="<f4").reshape(out["shape"])
    return np.frombuffer(body[length:], dtype="<f4").reshape(out["shape"])


@dataclass
class TenantLoad:
    """Traffic of one tenant.

    ``rate`` requests/s arrive as a Poisson process (open loop); with ``concurrency`` set
    instead, that many clients each send the next request when the last is answered (closed
    loop, to find a server's capacity). ``inputs`` is a list of arrays (one request each,
    cycled) and ``expected`` their outputs for a bit-exact check (None: unchecked).
    """

    name: str
    token: str
    model: str
    inputs: list
    expected: list | None = None
    rate: float | None = None
    concurrency: int | None = None
    binary: bool = True
    slo_ms: float | None = None
    input_name: str = "input"
    output_name: str = "logits"
    #: With ``processes=True``: how much lower this tenant's client process runs (``nice``
    #: increment), to stand for clients on other machines that take no server core.
    nice: int = 0
    #: Set by a run: one entry per request sent, in completion order.
    records: list = field(default_factory=list)
    #: Set by a run: seconds from the start to this tenant's last answer.
    seconds: float | None = None
    #: Set by a run: the request cap it ran under, and whether it sent that many (and so
    #: stopped before the duration).
    max_requests: int | None = None
    capped: bool = False


@dataclass
class _Record:
    index: int
    status: int | None  # None: no answer (transport error or drain timeout)
    latency: float
    correct: bool | None = None
    retry_after: str | None = None
    #: ``time.perf_counter()`` when it completed (answered, refused or given up).
    done: float | None = None


class _Pool:
    """At most ``size`` keep-alive connections; a request waits for a free one (its
    latency still counts from its scheduled arrival)."""

    def __init__(self, address, size):
        self.address, self.size, self.opened = address, size, 0
        self.idle = asyncio.Queue()

    async def get(self):
        if self.idle.empty() and self.opened < self.size:
            self.opened += 1
            try:
                return await _Connection.open(*self.address)
            except BaseException:
                self.opened -= 1
                raise
        return await self.idle.get()

    def put(self, conn):
        self.idle.put_nowait(conn)

    def discard(self, conn):
        conn.close()
        self.opened -= 1

    def close(self):
        while not self.idle.empty():
            self.idle.get_nowait().close()


async def _one(tenant, index, pool, scheduled, stop_at):
    x = tenant.inputs[index % len(tenant.inputs)]
    encode = encode_binary if tenant.binary else encode_json
    body, headers = encode(tenant.input_name, tenant.output_name, x)
    headers["Authorization"] = f"Bearer {tenant.token}"
    conn = None
    try:
        async with asyncio.timeout(max(0.1, stop_at - time.perf_counter())):
            conn = await pool.get()
            status, answer, content = await conn.request(
                "POST", f"/v2/models/{tenant.model}/infer", headers, body)
    except (OSError, asyncio.IncompleteReadError, TimeoutError, ValueError):
        if conn is not None:
            pool.discard(conn)
        now = time.perf_counter()
        tenant.records.append(_Record(index, None, now - scheduled, done=now))
        return
    now = time.perf_counter()
    pool.put(conn)
    record = _Record(index, status, now - scheduled, retry_after=answer.get("retry-after"),
                     done=now)
    if status == 200 and tenant.expected is not None:
        got = decode_output(answer, content, tenant.output_name)
        want = tenant.expected[index % len(tenant.expected)]
        record.correct = got.shape == want.shape and got.tobytes() == want.tobytes()
    tenant.records.append(record)


async def _open_loop(tenant, rng, pool, start, duration, max_requests, stop_at, tasks):
    t, index = start, 0
    while index < max_requests:
        t += rng.exponential(1.0 / tenant.rate)
        if t - start >= duration:
            break
        delay = t - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.ensure_future(_one(tenant, index, pool, t, stop_at)))
        index += 1
    return index


async def _closed_loop(tenant, pool, start, duration, max_requests, stop_at):
    counter = iter(range(max_requests))
    sent = 0

    async def client():
        nonlocal sent
        for index in counter:
            now = time.perf_counter()
            if now - start >= duration:
                break
            sent += 1
            await _one(tenant, index, pool, now, stop_at)

    await asyncio.gather(*(client() for _ in range(tenant.concurrency)))
    return sent


async def _run(url, tenants, duration, max_requests, drain_timeout, seed, connections,
               first_stream=0):
    address = check_loopback(url)
    start = time.perf_counter()
    stop_at = start + duration + drain_timeout
    tasks, loops, pools = [], [], []
    for i, tenant in enumerate(tenants):
        tenant.records = []
        if tenant.concurrency:
            pools.append(_Pool(address, tenant.concurrency))
            loops.append(_closed_loop(tenant, pools[-1], start, duration, max_requests,
                                      stop_at))
        else:
            pools.append(_Pool(address, connections))
            rng = np.random.default_rng([seed, first_stream + i])
            loops.append(_open_loop(tenant, rng, pools[-1], start, duration, max_requests,
                                    stop_at, tasks))
    sent = await asyncio.gather(*loops)
    if tasks:
        await asyncio.wait(tasks, timeout=max(0.1, stop_at - time.perf_counter()) + 1)
    for task in tasks:
        task.cancel()
    for pool in pools:
        pool.close()
    end = time.perf_counter()
    for tenant, count in zip(tenants, sent, strict=True):
        done = [r.done for r in tenant.records if r.done is not None]
        tenant.seconds = (max(done) if done else end) - start
        tenant.max_requests, tenant.capped = max_requests, count >= max_requests
    return end - start


def run_load(url, tenants, *, duration, max_requests=100_000, drain_timeout=30.0, seed=0,
             connections=64, processes=False):
    """Send the tenants' traffic to ``url`` (loopback only) and return the seconds it took
    (the longest tenant's, with ``processes``).

    An open-loop tenant uses at most ``connections`` connections (a closed-loop one, one
    per client); requests beyond them wait in the client, their latency counted.

    With ``processes``, each tenant's traffic comes from its own process, started together
    (:func:`_tenant_process`): in one event loop, a flood from one tenant delayed the
    sending and timing of another's requests, and that lag counted as the server's
    latency (tenant A's p50 of 62 ms at 2x load against a server-side 2 ms run). A lone
    tenant gets its own process only when it asks for a lower priority (``nice``).

    Each tenant's ``records`` then hold one entry per request sent, in completion order;
    its ``seconds`` the time from the start to its last answer, and ``capped`` whether it
    stopped because it had sent ``max_requests``.
    """
    if duration <= 0 or max_requests < 1:
        raise ValueError(f"a load needs duration > 0 and max_requests >= 1, not "
                         f"{duration!r} and {max_requests!r}")
    if processes and (len(tenants) > 1 or any(t.nice for t in tenants)):
        return _run_processes(url, tenants, duration, max_requests, drain_timeout, seed,
                              connections)
    return asyncio.run(_run(url, tenants, duration, max_requests, drain_timeout, seed,
                            connections))


#: Seconds the tenants' processes get to start (spawn, imports) before the load begins.
PROCESS_START = 3.0


def _tenant_process(url, tenant, stream, start_at, duration, max_requests, drain_timeout,
                    seed, connections):
    """One tenant's load in a child process, begun at the wall-clock time ``start_at``
    (shared by the tenants' processes); ``(records, tenant's seconds, capped, seconds)``."""
    if tenant.nice:
        os.nice(tenant.nice)
    time.sleep(max(0.0, start_at - time.time()))
    seconds = asyncio.run(_run(url, [tenant], duration, max_requests, drain_timeout, seed,
                               connections, first_stream=stream))
    return tenant.records, tenant.seconds, tenant.capped, seconds


def _run_processes(url, tenants, duration, max_requests, drain_timeout, seed, connections):
    check_loopback(url)
    context = multiprocessing.get_context("spawn")  # no fork of a process with threads
    start_at = time.time() + PROCESS_START
    with concurrent.futures.ProcessPoolExecutor(len(tenants), mp_context=context) as pool:
        futures = [pool.submit(_tenant_process, url, tenant, i, start_at, duration,
                               max_requests, drain_timeout, seed, connections)
                   for i, tenant in enumerate(tenants)]
        results = [f.result() for f in futures]
    for tenant, (records, used, capped, _) in zip(tenants, results, strict=True):
        tenant.records, tenant.seconds, tenant.capped = records, used, capped
        tenant.max_requests = max_requests
    return max(result[-1] for result in results)


def _quantile(values, q):
    if not values:
        return None
    values = sorted(values)
    return values[min(len(values) - 1, math.ceil(q * len(values)) - 1)]


def summarize(tenant, seconds=None):
    """Per-tenant figures of a finished load (milliseconds; rates per second).

    Rates are over the tenant's own ``seconds`` (set by :func:`run_load`: the start to its
    last answer); ``seconds`` here is used only for records that were not made by a run.
    """
    records = tenant.records
    used = tenant.seconds if tenant.seconds is not None else seconds
    if used is None or used <= 0:
        raise ValueError(f"tenant {tenant.name!r}: rates need the seconds its load took "
                         f"(a positive number), not {used!r}")
    counts = {}
    for r in records:
        key = "lost" if r.status is None else str(r.status)
        counts[key] = counts.get(key, 0) + 1
    ok = [r.latency for r in records if r.status == 200]
    slo = None if tenant.slo_ms is None else tenant.slo_ms / 1e3
    within = len(ok) if slo is None else sum(1 for v in ok if v <= slo)
    indices = [r.index for r in records]
    return {
        "tenant": tenant.name, "model": tenant.model,
        "offered_rate": tenant.rate, "concurrency": tenant.concurrency,
        "sent": len(records), "by_status": dict(sorted(counts.items())),
        "answered": len(ok), "lost": counts.get("lost", 0),
        "answered_twice": len(indices) - len(set(indices)),
        "wrong": sum(1 for r in records if r.correct is False),
        "checked": sum(1 for r in records if r.correct is not None),
        "seconds": used, "max_requests": tenant.max_requests, "capped": tenant.capped,
        "throughput": len(ok) / used,
        "goodput": within / used,
        "slo_ms": tenant.slo_ms,
        "slo_attainment": None if slo is None or not records else within / len(records),
        "slo_attainment_answered": None if slo is None or not ok else within / len(ok),
        **{f"latency_{name}_ms": None if _quantile(ok, q) is None else _quantile(ok, q) * 1e3
           for name, q in (("p50", 0.5), ("p95", 0.95), ("p99", 0.99), ("p999", 0.999))},
    }


def get_json(url, path, token=None, timeout=10.0):
    """``GET`` a JSON document from the server (loopback only)."""
    return json.loads(get_text(url, path, token, timeout))


def get_text(url, path, token=None, timeout=10.0):
    """``GET`` a document's bytes from the server (loopback only)."""
    async def fetch():
        conn = await _Connection.open(*check_loopback(url))
        try:
            headers = {} if token is None else {"Authorization": f"Bearer {token}"}
            status, _, content = await asyncio.wait_for(conn.request("GET", path, headers),
                                                        timeout)
        finally:
            conn.close()
        if status != 200:
            raise RuntimeError(f"GET {path}: HTTP {status}: {content[:200]!r}")
        return content

    return asyncio.run(fetch())


def server_counts(url, tenant):
    """The server's own view of ``tenant`` (``/metrics``): answered requests, and those
    slower than its SLO from receipt to response (no client-side queueing in them)."""
    answered = late = 0.0
    for line in get_text(url, "/metrics").decode().splitlines():
        if f'tenant="{tenant}"' not in line:
            continue
        if line.startswith("tessera_requests_total{") and 'code="200"' in line:
            answered += float(line.rsplit(" ", 1)[1])
        elif line.startswith("tessera_slo_violations_total{"):
            late += float(line.rsplit(" ", 1)[1])
    return {"answered": int(answered), "slo_violations": int(late),
            "slo_attainment_answered": None if not answered else 1 - late / answered}


def free_port():
    """A port free on 127.0.0.1 now (closed before the server binds it)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@contextlib.contextmanager
def serve_subprocess(config_path, port, *, log, timeout=60.0, extra=()):
    """``tessera serve`` as a child process on 127.0.0.1:``port`` (with the further
    arguments ``extra``), its output appended to the file ``log`` (a pipe could fill and
    stall the server); yields its URL and stops it with SIGTERM (killed if it has not
    exited ``timeout`` seconds later)."""
    command = [sys.executable, "-m", "tessera.cli", "serve", "--config", str(config_path),
               "--port", str(port), *extra]
    with open(log, "ab") as sink:
        process = subprocess.Popen(command, stdout=sink, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + timeout
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"tessera serve exited with {process.returncode}; its "
                                   f"output is in {log}")
            if time.monotonic() > deadline:
                raise RuntimeError("tessera serve did not become ready")
            try:
                get_json(url, "/v2", timeout=2)
                break
            except (OSError, RuntimeError):  # TimeoutError is an OSError
                time.sleep(0.1)
        yield url
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.communicate()
