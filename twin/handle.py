"""One simulated model behind a ctypes library: the handle, the lock and closing.

Verilator's models are not reentrant, so every call into one holds its lock; a call after
``close`` raises (instead of touching freed memory), and closing twice is harmless. The
twins (``twin.dma.Twin``, ``twin.serial.TwinSerial``, ``twin.energy.EnergyTwin``) differ in
their C prefix and in the error a closed one raises.
"""

import threading


class LibraryModel:
    """Owns ``_lib`` (a bound ctypes library) and ``_handle`` (its model) for a subclass.

    The subclass sets :attr:`prefix` (``"twin_"``, ``"serial_"``) and calls :meth:`_open`
    with the loaded library once it has everything else it needs.
    """

    prefix = ""

    def _init_lock(self):
        """First thing in ``__init__``: ``close`` from ``__del__`` of a half-made object
        then finds the lock and no handle."""
        self._handle = None
        self._lock = threading.RLock()

    def _open(self, lib):
        self._lib = lib
        self._handle = getattr(lib, f"{self.prefix}new")()

    def _closed_error(self, name):
        return RuntimeError(f"{self.prefix}{name}: the model has been closed")

    def _call(self, name, *args):
        with self._lock:
            if not self._handle:
                raise self._closed_error(name)
            return getattr(self._lib, f"{self.prefix}{name}")(self._handle, *args)

    @property
    def is_open(self):
        return bool(self._handle)

    def close(self):
        lock = getattr(self, "_lock", None)  # None when __init__ failed before making it
        if lock is None:
            return
        with lock:
            if self._handle:
                getattr(self._lib, f"{self.prefix}free")(self._handle)
                self._handle = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        self.close()
