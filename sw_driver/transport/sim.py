"""Transport over the Verilator twin (sim/twin.py): the same calls as a board, in-process."""

import numpy as np

from .base import Transport, TransportError, TransportTimeout, check_csr, check_word_multiple


class SimTransport(Transport):
    """Drive a :class:`sim.twin.Twin` as if it were a board.

    Simulated time only moves inside calls. Timeouts are counted in simulated cycles, so a
    hung design is reported after the same number of cycles on every machine.

    Parameters
    ----------
    twin : sim.twin.Twin
    cycle_budget : int
        Cycles a DMA read or a wait may simulate before :class:`TransportTimeout`.
    """

    def __init__(self, twin, *, cycle_budget=20_000_000):
        self.twin = twin
        self.cycle_budget = cycle_budget

    @classmethod
    def open(cls, config=None, *, waves=None, **options):
        """Build (or load the cached) twin for ``config`` and connect to it."""
        from sim.twin import Twin

        return cls(Twin(config, waves=waves), **options)

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

    def dma_read(self, nbytes):
        check_word_multiple("dma_read size", nbytes)
        words = nbytes // 4
        chunks, received, spent = [], 0, 0
        while True:
            # The interrupt (raised at the end of a layer, or on error) ends a run early.
            spent += self.twin.run(self.cycle_budget - spent, words=words - received)
            chunk = self.twin.dma_take(words - received)
            chunks.append(chunk)
            received += chunk.size
            if received == words:
                return np.concatenate(chunks).tobytes()
            if self.twin.irq:
                raise TransportError(f"twin: the device raised its interrupt after "
                                     f"{received * 4} of {nbytes} bytes")
            if spent >= self.cycle_budget:
                raise TransportTimeout(f"twin: {received * 4} of {nbytes} bytes after "
                                       f"{self.cycle_budget} simulated cycles")

    def abort_dma(self):
        self.twin.dma_flush()

    def wait_interrupt(self):
        """Simulate until the interrupt line rises; False if the budget ran out first."""
        self.twin.run(self.cycle_budget)
        return self.twin.irq

    def close(self):
        self.twin.close()
