"""Transport over a simulated accelerator (the Verilator twin, ``twin/dma.py``): the same
calls as a board, in-process.

The driver does not import the twin: :class:`SimTransport` drives any object with the twin's
calls (``csr_read``, ``csr_write``, ``dma_write``, ``run``, ``dma_take``, ``dma_flush``,
``irq``, ``close``), built by whoever composes the program (the "sim" provider finds it
through an entry point, :mod:`sw_driver.providers.simulated`).
"""

import time

import numpy as np

from .base import Transport, TransportError, TransportTimeout, check_csr, check_word_multiple

#: Simulated cycles per call into the twin while waiting: short enough that a wall-clock
#: deadline is checked every few tens of milliseconds, long enough that the calls cost
#: nothing (about 60 ms at the 8x8 twin's 1.1 M cycles/s).
SLICE_CYCLES = 1 << 16


class SimTransport(Transport):
    """Drive a simulated accelerator (a ``twin.dma.Twin``) as if it were a board.

    Simulated time only moves inside calls. Waits end at the first of three limits: the
    :class:`~.base.Deadline` the caller gives (cycles and wall-clock seconds, derived from
    the pass's expected cycles by the driver), and the transport's own ``cycle_budget``.
    Without a deadline, the wall-clock limit is ``cycle_budget`` at
    :attr:`min_cycles_per_second`.

    Parameters
    ----------
    twin : object
        The simulated device (``twin.dma.Twin``'s calls).
    cycle_budget : int
        Cycles a DMA read or a wait may simulate before :class:`TransportTimeout`, whatever
        the deadline.
    """

    #: The 8x8 twin simulates about 1.1 M cycles/s on the development machine (docs/twin.md);
    #: a tenth of that leaves room for a machine loaded by other jobs.
    min_cycles_per_second = 1e5

    def __init__(self, twin, *, cycle_budget=20_000_000):
        self.twin = twin
        self.cycle_budget = cycle_budget

    def csr_read(self, offset):
        check_csr(offset)
        return self.twin.csr_read(offset)

    def csr_write(self, offset, value):
        check_csr(offset, value)
        self.twin.csr_write(offset, value)

    def dma_write(self, data):
        data = memoryview(data).cast("B")
        check_word_multiple("dma_write data", len(data))
        self.twin.dma_write(np.frombuffer(data, dtype=np.uint32))

    def dma_read(self, nbytes, *, deadline=None):
        check_word_multiple("dma_read size", nbytes)
        words = nbytes // 4
        cycles, seconds, note = self._limits(deadline)
        give_up = time.monotonic() + seconds
        chunks, received, spent = [], 0, 0
        while True:
            # The interrupt (raised at the end of a layer, or on error) ends a run early.
            spent += self.twin.run(min(SLICE_CYCLES, cycles - spent), words=words - received)
            chunk = self.twin.dma_take(words - received)
            chunks.append(chunk)
            received += chunk.size
            if received == words:
                return np.concatenate(chunks).tobytes()
            if self.twin.irq:
                raise TransportError(f"twin: the device raised its interrupt after "
                                     f"{received * 4} of {nbytes} bytes")
            if spent >= cycles:
                raise TransportTimeout(f"twin: {received * 4} of {nbytes} bytes after "
                                       f"{spent} simulated cycles{note}")
            if time.monotonic() > give_up:
                raise TransportTimeout(f"twin: {received * 4} of {nbytes} bytes after "
                                       f"{seconds:g} s of wall-clock time ({spent} "
                                       f"simulated cycles){note}")

    def _limits(self, deadline):
        """(cycles, seconds, note for messages) of one wait."""
        if deadline is None:
            return (self.cycle_budget, self.cycle_budget / self.min_cycles_per_second, "")
        cycles = min(deadline.cycles, self.cycle_budget)
        return cycles, deadline.seconds, f" ({deadline.note})" if deadline.note else ""

    def abort_dma(self):
        self.twin.dma_flush()

    def wait_interrupt(self):
        """Simulate until the interrupt line rises; False if the budget (cycles, or their
        wall-clock time at :attr:`min_cycles_per_second`) ran out first."""
        cycles, seconds, _ = self._limits(None)
        give_up, spent = time.monotonic() + seconds, 0
        while not self.twin.irq and spent < cycles and time.monotonic() <= give_up:
            spent += self.twin.run(min(SLICE_CYCLES, cycles - spent)) or 1
        return self.twin.irq

    def close(self):
        self.twin.close()
