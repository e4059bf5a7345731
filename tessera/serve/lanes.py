"""Priority lanes: the HTTP work of lower-priority tenants in a process of its own.

One event loop parses every request in arrival order, so under a flood from a best-effort
tenant a latency-critical request waits behind hundreds of others before the scheduler even
sees it (docs/serving.md: the front end, not the device, was the bottleneck). With
``[server] priority_lanes = true`` the main process accepts each connection, peeks at its
first request's bearer token and, when the token is a *side* tenant's (a priority below
the highest in the file), hands the connection to the side lane: a second process, run at a
lower CPU priority (``lane_nice``), that parses HTTP, checks tokens and rate limits, and
sends only the decoded tensors to the main process, where the one scheduler admits, batches
and runs them. The operating system then gives the main process the cores first.

The two processes talk over two Unix socket pairs: one carries connections (their file
descriptors), the other length-prefixed pickled messages:

* lane -> main ``("call", id, model, tenant, feeds, names, images, slo, received)``;
  main -> lane ``("ok", id, (values, queued, seconds, info))`` or
  ``("refused", id, status, message, headers)``;
* lane -> main ``("metrics", [(metric, labels, method, value), ...])``: the lane's counts,
  so ``/metrics`` on the main process covers both.
"""

import asyncio
import contextlib
import itertools
import os
import pickle
import signal
import socket
import struct
import sys

from numpy import concatenate as numpy_concatenate

from sw_driver.errors import TesseraError

from .queueing import batch_key

__all__ = ["Acceptor", "LaneError", "LaneLink", "SideLane", "side_tenants"]

#: Bytes of a connection's first request the acceptor looks at for its token.
PEEK_BYTES = 8192
#: Seconds the acceptor waits for a connection's first request headers before it keeps the
#: connection in the main lane.
PEEK_TIMEOUT = 1.0
#: Seconds between two looks at a connection whose first headers are incomplete.
PEEK_RETRY = 0.002
#: Seconds the lane's counts may wait before they are sent to the main process.
METRICS_FLUSH = 0.1
#: Seconds the main process waits for the side lane to drain and exit at shutdown.
LANE_EXIT_TIMEOUT = 30.0
#: Seconds the side lane may take to start (spawn, imports, the models' metadata sessions).
LANE_START_TIMEOUT = 120.0

_LENGTH = struct.Struct("!I")


class LaneError(TesseraError, ValueError):
    """The side lane could not start (the CLI prints it as one line)."""

#: Tasks started here and awaited by nobody: the event loop holds only weak references.
_TASKS = set()


def _spawn(coroutine):
    task = asyncio.get_running_loop().create_task(coroutine)
    _TASKS.add(task)
    task.add_done_callback(_TASKS.discard)
    return task


def side_tenants(config):
    """Names of the tenants whose priority is below the highest any tenant has: their
    connections go to the side lane. Empty when every tenant has the same priority."""
    from .config import PRIORITIES

    ranks = {name: PRIORITIES.index(t.priority) for name, t in config.tenants.items()}
    best = min(ranks.values(), default=0)
    return frozenset(name for name, rank in ranks.items() if rank > best)


def bearer_token(head):
    """The bearer token in a request's header block (bytes up to the blank line), or None."""
    for line in head.split(b"\r\n")[1:]:
        key, _, value = line.partition(b":")
        if key.strip().lower() == b"authorization":
            scheme, _, token = value.strip().partition(b" ")
            return token.strip() if scheme.lower() == b"bearer" else None
    return None


async def _send(writer, message):
    data = pickle.dumps(message, protocol=5)
    writer.write(_LENGTH.pack(len(data)) + data)
    await writer.drain()


async def _receive(reader):
    """The next message, or None at the end of the stream."""
    try:
        head = await reader.readexactly(_LENGTH.size)
        return pickle.loads(await reader.readexactly(_LENGTH.unpack(head)[0]))
    except (asyncio.IncompleteReadError, ConnectionError):
        return None


class Acceptor:
    """The main process's listener: accepts each connection, peeks at its first request and
    gives it to the side lane (when ``to_side(header block, bearer token)`` is true) or to
    the main process's own HTTP protocol (``protocol_factory``). A connection the lane
    cannot take stays in main."""

    def __init__(self, listener, protocol_factory, to_side, channel):
        self.listener, self.protocol_factory = listener, protocol_factory
        self.to_side, self.channel = to_side, channel
        self.loop = None

    def start(self):
        self.loop = asyncio.get_running_loop()
        self.listener.setblocking(False)
        self.loop.add_reader(self.listener.fileno(), self._accept)

    def close(self):
        if self.loop is not None and self.listener.fileno() >= 0:
            self.loop.remove_reader(self.listener.fileno())
        self.listener.close()

    def _accept(self):
        while True:
            try:
                conn, _ = self.listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:  # too many files, a reset before accept: the next one may work
                return
            conn.setblocking(False)
            self._watch(conn, self.loop.time() + PEEK_TIMEOUT)

    def _watch(self, conn, deadline):
        self.loop.add_reader(conn.fileno(), self._look, conn, deadline)

    def _look(self, conn, deadline):
        self.loop.remove_reader(conn.fileno())
        try:
            head = conn.recv(PEEK_BYTES, socket.MSG_PEEK)
        except (BlockingIOError, InterruptedError):
            head = b""
            closed = False
        except OSError:
            conn.close()
            return
        else:
            closed = not head
        if closed:
            conn.close()
            return
        end = head.find(b"\r\n\r\n")
        if end < 0 and len(head) < PEEK_BYTES and self.loop.time() < deadline:
            self.loop.call_later(PEEK_RETRY, self._watch, conn, deadline)
            return
        token = bearer_token(head[:end]) if end >= 0 else None
        if token is not None and self.to_side(head, token) and self._hand(conn):
            return
        self._keep(conn)

    def _hand(self, conn):
        try:
            socket.send_fds(self.channel, [b"c"], [conn.fileno()])
        except OSError:  # the lane is gone or its queue is full: main serves it
            return False
        conn.close()  # the lane holds its own copy now
        return True

    def _keep(self, conn):
        _spawn(self.loop.connect_accepted_socket(self.protocol_factory, conn))


class LaneLink:
    """The main process's end of the message link: runs each call with ``run_request``
    (the app's own path from admission to outputs) and applies the lane's counts to
    ``metrics``."""

    def __init__(self, sock, run_request, metrics, refused_type):
        self.sock, self.run_request, self.metrics = sock, run_request, metrics
        self.refused_type = refused_type
        self.ready = asyncio.Event()  # the lane has started and takes connections
        self.ended = asyncio.Event()  # the link closed: the lane is gone

    def start(self):
        _spawn(self._serve())

    async def wait_ready(self, timeout=LANE_START_TIMEOUT):
        """Return once the lane is up, so the server says ready only then; raises
        :class:`LaneError` if the lane exits or takes longer than ``timeout`` seconds."""
        ready = asyncio.ensure_future(self.ready.wait())
        ended = asyncio.ensure_future(self.ended.wait())
        done, pending = await asyncio.wait({ready, ended}, timeout=timeout,
                                           return_when=asyncio.FIRST_COMPLETED)
        for task in pending:
            task.cancel()
        if ready not in done:
            raise LaneError("the side lane (priority_lanes) did not start: "
                               + ("its process exited" if ended in done else
                                  f"no answer within {timeout:g} s") + "; its output is above")

    async def _serve(self):
        reader, writer = await asyncio.open_unix_connection(sock=self.sock)
        lock = asyncio.Lock()
        while (message := await _receive(reader)) is not None:
            if message[0] == "metrics":
                apply_counts(self.metrics, message[1])
            elif message[0] == "ready":
                self.ready.set()
            else:
                _spawn(self._call(writer, lock, message))
        self.ended.set()
        writer.close()

    async def _call(self, writer, lock, message):
        _, ident, name, tenant, feeds, names, images, slo, received = message
        try:
            result = await self.run_request(name, tenant, feeds, names, images, slo, received)
            reply = ("ok", ident, result)
        except self.refused_type as exc:
            reply = ("refused", ident, exc.status, exc.message, exc.headers)
        except Exception as exc:  # never a lost answer: the lane turns it into a 500
            reply = ("refused", ident, 500, f"model {name!r}: the run failed: "
                                            f"{type(exc).__name__}: {exc}", None)
        async with lock:
            with contextlib.suppress(ConnectionError):
                await _send(writer, reply)


def apply_counts(metrics, records):
    for metric, labels, method, value in records:
        getattr(getattr(metrics, metric).labels(**labels), method)(value)


class _Counting:
    """Stands for one labelled series of the lane's metrics: records what is done to it."""

    def __init__(self, sink, metric, labels):
        self.sink, self.metric, self.labels_ = sink, metric, labels

    def inc(self, value=1):
        self.sink.append((self.metric, self.labels_, "inc", value))

    def observe(self, value):
        self.sink.append((self.metric, self.labels_, "observe", value))


class _CountingMetric:
    def __init__(self, sink, metric):
        self.sink, self.metric = sink, metric

    def labels(self, **labels):
        return _Counting(self.sink, self.metric, labels)


class ForwardedMetrics:
    """The lane's stand-in for :class:`~tessera.serve.metrics.Metrics`: every count is
    kept and sent to the main process, whose ``/metrics`` shows them."""

    def __init__(self):
        self.pending = []

    def __getattr__(self, metric):
        if metric.startswith("_"):
            raise AttributeError(metric)
        return _CountingMetric(self.pending, metric)

    def render(self):
        return b"# the side lane's counts are in the main process's /metrics\n"

    def take(self):
        records, self.pending = self.pending, []
        return records


class _Group:
    """Requests the lane batches into one call: same model, tenant, outputs, SLO and
    per-input shape beyond the batch."""

    def __init__(self):
        self.members = []  # (feeds, images, received, future)
        self.images = 0
        self.timer = None


class Upstream:
    """The lane's end of the message link: ``await call(...)`` runs a request in the main
    process; counts go there every METRICS_FLUSH seconds. At most ``limit`` requests are
    out at once (every device's queue and workers): past it, :meth:`full` and the lane
    refuses before reading the body, so a flood costs the main process nothing.

    ``batching`` maps a model to its ``max_batch``: requests of a model above 1 wait up to
    ``delay`` seconds for others to go with them as one call (up to ``max_batch`` images),
    so the main process admits and answers one message per group, not per request; their
    outputs are split here. ``delay`` 0: every request alone."""

    def __init__(self, sock, refused_type, limit, batching=None, delay=0.0):
        self.sock, self.refused_type, self.limit = sock, refused_type, limit
        self.batching, self.delay = dict(batching or {}), delay
        self.metrics = ForwardedMetrics()
        self.pending, self.ids = {}, itertools.count()
        self.groups = {}
        self.out = 0  # requests between call() and their answer
        self.writer = None
        self.lock = None

    async def start(self):
        reader, self.writer = await asyncio.open_unix_connection(sock=self.sock)
        self.lock = asyncio.Lock()
        _spawn(self._replies(reader))
        _spawn(self._flush_forever())

    async def _replies(self, reader):
        while (message := await _receive(reader)) is not None:
            future = self.pending.pop(message[1], None)
            if future is not None and not future.done():
                future.set_result(message)
        for future in self.pending.values():  # the main process is gone
            if not future.done():
                future.set_result(("refused", None, 503, "the server is shutting down",
                                   {"Retry-After": "1"}))

    async def _flush_forever(self):
        while True:
            await asyncio.sleep(METRICS_FLUSH)
            await self.flush()

    async def say_ready(self):
        async with self.lock:
            await _send(self.writer, ("ready",))

    async def flush(self):
        records = self.metrics.take()
        if records and self.writer is not None:
            async with self.lock:
                with contextlib.suppress(ConnectionError):
                    await _send(self.writer, ("metrics", records))

    def full(self):
        return self.out >= self.limit

    async def call(self, name, tenant, feeds, names, images, slo, received):
        self.out += 1
        try:
            max_batch = self.batching.get(name, 1)
            if self.delay <= 0 or max_batch <= 1 or images >= max_batch:
                return await self._call(name, tenant, feeds, names, images, slo, received)
            return await self._join(name, tenant, feeds, names, images, slo, received,
                                    max_batch)
        finally:
            self.out -= 1

    async def _join(self, name, tenant, feeds, names, images, slo, received, max_batch):
        key = (tenant, slo, batch_key(name, names, feeds))
        group = self.groups.get(key)
        if group is not None and group.images + images > max_batch:
            self._send_group(key)
            group = None
        if group is None:
            group = self.groups[key] = _Group()
            group.timer = asyncio.get_running_loop().call_later(self.delay, self._send_group,
                                                                key)
        future = asyncio.get_running_loop().create_future()
        group.members.append((feeds, images, received, future))
        group.images += images
        if group.images >= max_batch:
            self._send_group(key)
        return await future

    def _send_group(self, key):
        group = self.groups.pop(key, None)
        if group is None:
            return
        group.timer.cancel()
        _spawn(self._run_group(key, group))

    async def _run_group(self, key, group):
        tenant, slo, (name, names, _) = key
        members = group.members
        feeds = members[0][0] if len(members) == 1 else {
            k: numpy_concatenate([m[0][k] for m in members]) for k in members[0][0]}
        try:
            values, queued, seconds, info = await self._call(
                name, tenant, feeds, list(names), group.images, slo,
                min(m[2] for m in members))
        except Exception as exc:  # the refusal (or failure) is every member's
            for *_, future in members:
                if not future.done():
                    future.set_exception(exc)
            return
        if len(members) > 1 and any(v.ndim == 0 or v.shape[0] != group.images
                                    for v in values):
            error = self.refused_type(500, f"model {name!r}: max_batch > 1 needs every "
                                           f"output to lead with the batch dimension; got "
                                           f"shapes {[list(v.shape) for v in values]} for "
                                           f"{group.images} images", None)
            for *_, future in members:
                if not future.done():
                    future.set_exception(error)
            return
        start = 0
        for _, images, _, future in members:
            if not future.done():
                future.set_result(([v[start:start + images] for v in values], queued,
                                   seconds, info))
            start += images

    async def _call(self, name, tenant, feeds, names, images, slo, received):
        ident = next(self.ids)
        future = asyncio.get_running_loop().create_future()
        self.pending[ident] = future
        try:
            async with self.lock:
                await _send(self.writer, ("call", ident, name, tenant, feeds, names, images,
                                          slo, received))
        except ConnectionError:
            self.pending.pop(ident, None)
            raise self.refused_type(503, "the server's main process is gone (shutting "
                                         "down)", {"Retry-After": "1"}) from None
        reply = await future
        if reply[0] == "ok":
            return reply[2]
        _, _, status, message, headers = reply
        raise self.refused_type(status, message, headers)


class SideLane:
    """The side lane's process, seen from the main process: started with the config and
    its ends of the two socket pairs; ``stop()`` asks it to drain (SIGTERM)."""

    def __init__(self, config, nice, log_requests):
        import multiprocessing

        self.channel, lane_channel = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.link, lane_link = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        self.channel.setblocking(False)
        context = multiprocessing.get_context("spawn")  # no fork of a threaded server
        self.process = context.Process(target=_lane_main,
                                       args=(config, lane_channel, lane_link, nice,
                                             log_requests),
                                       name="tessera-side-lane", daemon=True)
        self.process.start()
        lane_channel.close()
        lane_link.close()

    def stop(self):
        if self.process.is_alive():
            os.kill(self.process.pid, signal.SIGTERM)

    async def wait_exit(self, timeout=LANE_EXIT_TIMEOUT):
        """Wait (without blocking the loop: the lane's last calls still need it) for the
        lane to exit; killed after ``timeout`` seconds."""
        await asyncio.get_running_loop().run_in_executor(None, self.process.join, timeout)
        if self.process.is_alive():
            self.process.kill()
            self.process.join(5)
        self.channel.close()


def _lane_main(config, channel, link, nice, log_requests):
    """The side lane's process: the same app, its runs sent to the main process."""
    import uvicorn

    from .app import create_app
    from .http_server import (
        SWITCH_INTERVAL,
        DrainingServer,
        freeze_startup_objects,
        log_requests_to_stderr,
        protocol_factory,
    )

    if nice:
        os.nice(nice)
    if log_requests:
        log_requests_to_stderr()
    sys.setswitchinterval(SWITCH_INTERVAL)
    upstream = Upstream(link, None,
                        sum(d.max_queue + d.workers for d in config.devices.values()),
                        {name: m.max_batch for name, m in config.models.items()
                         if m.parallelism == "data"},
                        config.lane_batch_ms / 1e3)
    app = create_app(config, upstream=upstream)
    upstream.refused_type = app.state.refused_type
    freeze_startup_objects()

    class LaneServer(DrainingServer):
        async def startup(self, sockets=None):
            await upstream.start()
            await super().startup(sockets=[])  # no listener: connections come from main
            factory = protocol_factory(self)
            loop = asyncio.get_running_loop()
            channel.setblocking(False)

            def adopt():
                try:
                    _, fds, _, _ = socket.recv_fds(channel, 16, 16)
                except (BlockingIOError, InterruptedError):
                    return
                for fd in fds:
                    conn = socket.socket(fileno=fd)
                    conn.setblocking(False)
                    _spawn(loop.connect_accepted_socket(factory, conn))

            loop.add_reader(channel.fileno(), adopt)
            await upstream.say_ready()

        async def shutdown(self, sockets=None):
            asyncio.get_running_loop().remove_reader(channel.fileno())
            await super().shutdown(sockets)
            await upstream.flush()

    server = LaneServer(uvicorn.Config(app, log_level="warning", lifespan="off"), app)
    try:
        server.run()
    finally:
        sys.stderr.flush()
