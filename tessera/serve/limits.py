"""Per-tenant rate limits: a token bucket per tenant, refused requests told when to retry."""

import math
import threading

__all__ = ["TokenBucket"]


class TokenBucket:
    """``rate`` requests per second on average, up to ``burst`` at once.

    Parameters
    ----------
    rate : float
        Tokens added per second.
    burst : int
        Capacity; the bucket starts full.
    clock : callable
        Seconds, monotonic (tests pass a fake one).
    """

    def __init__(self, rate, burst, clock):
        self.rate, self.burst, self._clock = float(rate), float(burst), clock
        self._tokens, self._stamp = float(burst), clock()
        self._lock = threading.Lock()

    def take(self):
        """Take one token: ``0.0`` when granted, else the seconds until one is available."""
        with self._lock:
            now = self._clock()
            self._tokens = min(self.burst, self._tokens + (now - self._stamp) * self.rate)
            self._stamp = now
            if self._tokens >= 1.0:
                self._tokens -= 1.0
                return 0.0
            return (1.0 - self._tokens) / self.rate


def retry_after(seconds):
    """``Retry-After`` header value: whole seconds, at least 1 (HTTP has no fractions)."""
    return str(max(1, math.ceil(seconds)))
