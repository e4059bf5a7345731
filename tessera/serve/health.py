"""Device health: a device whose run failed is unhealthy until a probe run passes.

While a device is unhealthy, its models' batches run on their CPU fallback sessions (every
model has one, created at startup), except that every ``probe_seconds`` one batch tries the
device again: if it passes, the device is healthy again; if it fails, that batch too is
retried on the CPU. A failed batch is never answered with the failure when the CPU can
still run it, and its requests are answered once (the retry happens inside the run).

Used from the run threads; each field is replaced whole under the GIL, and a race between
two threads costs at most one extra probe.
"""

import time

__all__ = ["DeviceHealth", "FALLBACK"]

#: The ``device`` a retried batch reports (logs, metrics): the model's CPU session.
FALLBACK = "cpu-fallback"


class DeviceHealth:
    """One device's state.

    Parameters
    ----------
    name : str
    probe_seconds : float
        Seconds between probes of an unhealthy device.
    clock : callable
        Monotonic seconds (tests pass a fake one).
    """

    def __init__(self, name, probe_seconds=5.0, clock=time.monotonic):
        self.name, self.probe_seconds, self._clock = name, probe_seconds, clock
        self.healthy = True
        self.failures = 0
        self.last_error = None
        self._next_probe = 0.0

    def should_try(self):
        """True when the next batch goes to the device: it is healthy, or a probe is due
        (then the next probe is scheduled, so concurrent batches do not all probe)."""
        if self.healthy:
            return True
        now = self._clock()
        if now >= self._next_probe:
            self._next_probe = now + self.probe_seconds
            return True
        return False

    def failed(self, error):
        self.healthy = False
        self.failures += 1
        self.last_error = f"{type(error).__name__}: {error}"
        self._next_probe = self._clock() + self.probe_seconds

    def passed(self):
        self.healthy = True

    def as_dict(self):
        return {"device": self.name, "healthy": self.healthy, "failures": self.failures,
                "last_error": self.last_error}
