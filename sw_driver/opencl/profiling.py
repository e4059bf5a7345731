"""Which commands a piece of host code enqueued, how long they ran on the device, and how
long the host waited for the queue meanwhile.

Layers are enqueued back to back and only the read before the first host layer waits, so
host wall time books the whole queue on that read. The runtime's queue is created with
``PROFILING_ENABLE``; every command it enqueues is added to a :class:`CommandLog`, and a
:meth:`CommandLog.recording` block collects the events and the waits of one layer. Event
times are only known once a command has run: read them after the queue has drained.
"""

import threading
import time
from contextlib import contextmanager

import pyopencl as cl

__all__ = ["QUEUE_PROPERTIES", "CommandLog", "ProfilingUnavailableError", "Recording",
           "device_seconds"]

#: Properties of the runtime's command queue: event profiling is what times each layer.
QUEUE_PROPERTIES = cl.command_queue_properties.PROFILING_ENABLE


class ProfilingUnavailableError(RuntimeError):
    """The device gives no start/end time for a command (the message says why)."""


class Recording:
    """What was enqueued and waited for inside one :meth:`CommandLog.recording` block.

    Attributes
    ----------
    events : list of pyopencl.Event
        The commands enqueued (kernels, uploads, read-backs), in order.
    wait_seconds : float
        Host time spent blocked until the queue drained (the queue runs in order, so this
        includes commands enqueued before the block).
    """

    def __init__(self):
        self.events = []
        self.wait_seconds = 0.0


class _OpenRecordings(threading.local):
    def __init__(self):
        self.records = []


class CommandLog:
    """Hands each enqueued command and each wait to the recordings open at the time in the
    same thread (a command belongs to the thread that enqueued it)."""

    def __init__(self):
        self._threads = _OpenRecordings()

    @property
    def _open(self):
        return self._threads.records

    @contextmanager
    def recording(self):
        """Collect the commands enqueued and the waits inside the ``with`` block."""
        record = Recording()
        self._open.append(record)
        try:
            yield record
        finally:
            self._open.remove(record)

    def enqueued(self, event):
        """Note ``event`` (a command just enqueued) and return it."""
        for record in self._open:
            record.events.append(event)
        return event

    @contextmanager
    def waiting(self):
        """Time a block that waits for the queue (``queue.finish``, a blocking read)."""
        started = time.perf_counter()
        try:
            yield
        finally:
            waited = time.perf_counter() - started
            for record in self._open:
                record.wait_seconds += waited


def device_seconds(events):
    """Seconds the commands of ``events`` ran on the device (sum of end - start).

    Waits for the events first (at no cost when the queue has drained).

    Raises
    ------
    ProfilingUnavailableError
        When the device reports no profiling information for a command.
    """
    if not events:
        return 0.0
    cl.wait_for_events(events)
    total_ns = 0
    for event in events:
        try:
            total_ns += event.profile.end - event.profile.start
        except cl.Error as exc:
            raise ProfilingUnavailableError(
                f"no device start/end time for a "
                f"{cl.command_type.to_string(event.command_type)} command: {exc}"
            ) from exc
    return total_ns * 1e-9
