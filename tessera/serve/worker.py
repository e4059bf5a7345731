"""A device's runs in a process of its own (``[devices.X] process = "worker"``).

In the server's process the runs share the GIL with the HTTP front end: under a flood of
requests the event loop parses, refuses and answers in Python while a run waits to get the
GIL back between numpy kernels, so a run's measured time (what the latency predictor
learns) held the front end's work too. A worker process holds the device's sessions and
does nothing else; the server sends it a batch over a pipe and gets back the outputs and
the run's own time, measured in the worker.

Tensors travel pickled through a :func:`multiprocessing.Pipe` (a numpy array pickles as one
copy of its bytes): a one-image request is 256 bytes (digits) to 12 KiB (ResNet-8-like), a
batch of 16 under 200 KiB, and the round trip's cost beyond the run is measured and shown
in ``/v2/models/{name}/stats`` (``worker.transfer_ms_p50``; docs/serving.md gives the
figures), so shared memory would save too little to pay for its bookkeeping.

Faults: a worker that exits, cannot be reached, or does not answer within ``timeout_s`` is
killed and the run raises :class:`WorkerError` (a :class:`~sw_driver.errors.TesseraError`),
which the server's fault handling treats like any device fault: the device is marked
unhealthy, the batch runs again on the model's CPU fallback in the server, and a later
probe restarts the worker. A worker never outlives the server: it exits when the pipe's
other end closes (the server gone, however it ended), is a daemon process (multiprocessing
terminates those at exit), and :meth:`DeviceWorker.close` stops it at shutdown.

No web framework here: this module is imported in the worker, which loads only the runtime.
"""

import gc
import multiprocessing
import os
import signal
import threading
import time
from collections import deque
from dataclasses import dataclass

from sw_driver.errors import InputError, TesseraError

__all__ = ["SessionSpec", "DeviceWorker", "WorkerError", "instance_provider",
           "make_session"]

#: Seconds a worker may take to start and load its sessions (spawn, imports, model import).
START_TIMEOUT = 120.0
#: Seconds :meth:`DeviceWorker.close` waits for a worker to exit before killing it.
CLOSE_TIMEOUT = 5.0
#: Round trips whose transfer time (round trip less the run) ``stats`` summarises.
TRANSFER_WINDOW = 1000


class WorkerError(TesseraError):
    """A device's worker process died, could not be reached or timed out: a device fault."""


class _RunError(Exception):
    """An error raised in the worker that was not the driver's: answered as a failed run."""


@dataclass(frozen=True)
class SessionSpec:
    """How a worker builds one model's session: the QDQ ONNX file (a path, or the bytes of
    a pipeline stage), the providers' names, and for one of N accelerator instances the
    engine configuration its ``"sim"`` provider simulates (None otherwise)."""

    source: object
    providers: tuple
    engine: object = None


def instance_provider(name, engine):
    """An instance device's provider: ``"sim"`` becomes the twin of the instance's engine."""
    if name != "sim":
        return name
    from sw_driver.providers.sim import SimProvider

    return SimProvider(engine, log=lambda message: None)


def make_session(spec, planner=None):
    """The :class:`~sw_driver.InferenceSession` ``spec`` describes (in the server for its
    own sessions, and in a worker: the same construction gives the same placement)."""
    from sw_driver import InferenceSession

    providers = list(spec.providers)
    if spec.engine is not None:
        providers = [instance_provider(p, spec.engine) for p in providers]
    return InferenceSession(spec.source, providers=providers, planner=planner)


def _describe(exc):
    """An exception as plain data that crosses the pipe whatever its class's constructor."""
    kind = "input" if isinstance(exc, InputError) else \
        "tessera" if isinstance(exc, TesseraError) else "other"
    return kind, type(exc).__name__, str(exc)


def _serve(conn, specs):
    """The worker's main loop: build the sessions, say ``ready``, then run each batch
    received and send back its outputs and seconds, until ``None`` or the pipe closes."""
    # Ctrl-C in a terminal reaches the whole process group: the server drains its admitted
    # requests, which needs this worker until the server closes it.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    from threadpoolctl import threadpool_limits

    # One BLAS thread per run, as in the server (server.py says why).
    with threadpool_limits(limits=1, user_api="blas"):
        try:
            sessions = {key: make_session(spec) for key, spec in specs.items()}
        except Exception as exc:  # reported, so the server's startup names the model
            conn.send(("failed", _describe(exc)))
            return
        gc.collect()  # the sessions out of the collector's reach (http_server.py: why)
        gc.freeze()
        conn.send(("ready", os.getpid()))
        while True:
            try:
                message = conn.recv()
            except (EOFError, OSError):  # the server is gone: never left as an orphan
                return
            if message is None:
                return
            key, names, feeds = message
            start = time.perf_counter()
            try:
                values = sessions[key].run(names, feeds)
            except Exception as exc:
                conn.send(("error", _describe(exc)))
            else:
                conn.send(("ok", values, time.perf_counter() - start))


def _raise(described):
    kind, name, message = described
    if kind == "input":
        raise InputError(message)
    if kind == "tessera":
        raise TesseraError(f"{name}: {message}")
    raise _RunError(f"{name}: {message}")


class DeviceWorker:
    """One worker process holding the sessions ``specs`` (model key -> :class:`SessionSpec`)
    of the device ``name``; :meth:`run` is called from one server thread at a time (the
    lock makes a second caller wait rather than interleave on the pipe).

    Parameters
    ----------
    name : str
        The device, for messages.
    specs : dict
    timeout : float
        Seconds a run may take before the worker is killed and the run fails.
    start_timeout : float
        Seconds a (re)started worker may take to load its sessions.
    """

    def __init__(self, name, specs, timeout, *, start_timeout=START_TIMEOUT):
        self.name, self.specs = name, dict(specs)
        self.timeout, self.start_timeout = timeout, start_timeout
        self.restarts = 0
        self._context = multiprocessing.get_context("spawn")  # no fork of a threaded server
        self._lock = threading.Lock()
        self._transfers = deque(maxlen=TRANSFER_WINDOW)
        self._process = self._conn = None
        self._ready = False
        self._start()

    @property
    def pid(self):
        return None if self._process is None else self._process.pid

    def _start(self):
        parent, child = self._context.Pipe()
        process = self._context.Process(target=_serve, args=(child, self.specs), daemon=True,
                                        name=f"tessera-worker-{self.name}")
        process.start()
        child.close()  # only the worker holds its end: the server's exit closes the pipe
        self._process, self._conn, self._ready = process, parent, False

    def wait_ready(self):
        """Block until the worker has loaded its sessions; a load error raises it here (the
        driver's class, message naming the model), a worker that dies or hangs WorkerError."""
        if self._ready:
            return
        message = self._receive(self.start_timeout, "to start")
        if message[0] == "failed":
            self._stop(kill=True)
            _raise(message[1])
        self._ready = True

    def _receive(self, timeout, doing):
        try:
            if self._conn.poll(timeout):
                return self._conn.recv()
        except (EOFError, OSError) as exc:
            code = self._stop(kill=True)
            raise WorkerError(f"device {self.name!r}: its worker process exited (code "
                              f"{code}) {doing}") from exc
        self._stop(kill=True)
        raise WorkerError(f"device {self.name!r}: its worker process did not answer within "
                          f"{timeout:g} s {doing}; killed")

    def run(self, key, names, feeds):
        """``(outputs, seconds the worker spent in the run)``, blocking (a server thread;
        a stopped worker is restarted first); a fault raises WorkerError, the session's own
        errors their class (InputError, TesseraError, other)."""
        with self._lock:
            if self._process is None:
                self.restarts += 1
                try:
                    self._start()
                except OSError as exc:  # no process to be had: a device fault too
                    raise WorkerError(f"device {self.name!r}: its worker process could not "
                                      f"be started: {exc}") from exc
            self.wait_ready()
            sent = time.perf_counter()
            try:
                self._conn.send((key, names, feeds))
            except (OSError, ValueError) as exc:  # a broken pipe: the worker is gone
                code = self._stop(kill=True)
                raise WorkerError(f"device {self.name!r}: its worker process exited (code "
                                  f"{code}) before the run") from exc
            message = self._receive(self.timeout, "during a run")
            if message[0] == "error":
                _raise(message[1])
            _, values, seconds = message
            self._transfers.append(time.perf_counter() - sent - seconds)
            return values, seconds

    def _stop(self, kill):
        """End the worker (at once with ``kill``, else asked to exit); its exit code."""
        process, conn = self._process, self._conn
        self._process = self._conn = None
        self._ready = False
        if process is None:
            return None
        if not kill:
            try:
                conn.send(None)
            except (OSError, ValueError):
                pass
            process.join(CLOSE_TIMEOUT)
        if process.is_alive():
            process.kill()
            process.join(CLOSE_TIMEOUT)
        conn.close()
        return process.exitcode

    def close(self):
        """Stop the worker (asked first, killed if it has not exited in CLOSE_TIMEOUT s)."""
        with self._lock:
            self._stop(kill=False)

    def stats(self):
        """The worker's process id, restarts and the transfer time per run (ms): the
        round trip less the run's own time, over the last TRANSFER_WINDOW runs."""
        transfers = sorted(self._transfers)

        def at(q):
            if not transfers:
                return None
            return round(transfers[min(len(transfers) - 1, int(q * len(transfers)))] * 1e3, 4)

        return {"pid": self.pid, "restarts": self.restarts, "runs": len(transfers),
                "timeout_s": self.timeout, "transfer_ms_p50": at(0.5),
                "transfer_ms_p95": at(0.95)}
