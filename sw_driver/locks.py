"""Device locks: what reaches one device runs on one thread at a time.

A session may be run from several threads at once (onnxruntime promises it), but a device
is a single sequence of register writes and DMA transfers: two layers interleaved on it
corrupt each other, and the twin's C library is not reentrant at all. Every provider and
transport therefore carries one :class:`DeviceLock`, created on first use.

The locks are reentrant (a retry after a fault, or a fallback to a provider whose lock the
run already holds, takes it again) and numbered: a run that needs several of them for its
whole length takes them in ascending :attr:`DeviceLock.order`, so two runs can never each
hold one the other waits for.
"""

import itertools
import threading

__all__ = ["DeviceLock", "LazyDeviceLock"]

_numbers = itertools.count()
_creating = threading.Lock()  # two threads touching a fresh object get the same lock


class DeviceLock:
    """A reentrant lock with a global number that fixes the order locks are taken in."""

    def __init__(self):
        self.order = next(_numbers)
        self._lock = threading.RLock()

    def __enter__(self):
        self._lock.acquire()
        return self

    def __exit__(self, *exc):
        self._lock.release()

    def __repr__(self):
        return f"<DeviceLock #{self.order}>"


class LazyDeviceLock:
    """A class attribute giving each instance its own :class:`DeviceLock` on first access
    (providers and transports are often built without calling ``super().__init__``)."""

    def __set_name__(self, owner, name):
        self._attribute = f"_{name}_device_lock"

    def __get__(self, instance, owner=None):
        if instance is None:
            return self
        lock = instance.__dict__.get(self._attribute)
        if lock is None:
            with _creating:
                lock = instance.__dict__.setdefault(self._attribute, DeviceLock())
        return lock
