"""The Transport interface: 32-bit CSRs and two DMA streams, with timeouts."""

from abc import ABC, abstractmethod
from dataclasses import dataclass

from sw_driver.errors import DeviceError
from sw_driver.locks import LazyDeviceLock


class TransportError(DeviceError):
    """The device could not be reached or answered wrongly; the message names it."""


class TransportTimeout(TransportError):
    """The device did not answer within the timeout (reported, never waited on forever)."""


@dataclass(frozen=True)
class Deadline:
    """How long one wait for the device may last; whichever limit is reached first ends it.

    Attributes
    ----------
    cycles : int
        Device cycles, where the transport counts them (the twin's simulated cycles); a
        deadline that holds on every machine.
    seconds : float
        Wall-clock seconds: what a user waits, and the only limit a board's link knows.
    note : str
        Where the limits come from, for the timeout's message.
    """

    cycles: int
    seconds: float
    note: str = ""


class Transport(ABC):
    """Register and stream access to one accelerator.

    Offsets are byte offsets of 32-bit registers (``sw_driver.regs.Reg``). DMA moves whole
    32-bit words: host-to-device transfers end with ``last`` on their final word.
    """

    #: seconds a DMA transfer may take before :class:`TransportTimeout` when the caller
    #: gives no :class:`Deadline`
    timeout = 1.0
    #: The slowest rate at which the device's cycles pass in wall-clock time: a deadline
    #: derived from a pass's expected cycles divides by it. 1 MHz is far below the clock of
    #: any FPGA build; the twin, a simulator, sets its own.
    min_cycles_per_second = 1e6
    #: Held by whoever drives the device for a whole layer (``sw_driver.locks``): a
    #: pass's register writes and transfers must not interleave with another thread's.
    lock = LazyDeviceLock()

    @abstractmethod
    def csr_read(self, offset):
        """Read the 32-bit register at byte ``offset``."""

    @abstractmethod
    def csr_write(self, offset, value):
        """Write the 32-bit register at byte ``offset``."""

    @abstractmethod
    def dma_write(self, data):
        """Send ``data`` (bytes-like, a multiple of 4 bytes) to the device."""

    @abstractmethod
    def dma_read(self, nbytes, *, deadline=None):
        """Receive exactly ``nbytes`` (a multiple of 4) from the device.

        ``deadline`` (a :class:`Deadline`) bounds the wait; None uses the transport's
        defaults. Raises :class:`TransportTimeout` when it passes first.
        """

    def abort_dma(self):  # noqa: B027 - optional: most transports have nothing queued
        """Drop data of transfers abandoned after a timeout, in both directions."""

    def close(self):  # noqa: B027 - optional: not every transport holds a resource
        """Release the device."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def check_word_multiple(what, nbytes):
    if nbytes % 4:
        raise ValueError(f"{what} must be a whole number of 32-bit words, got {nbytes} bytes")


def check_csr(offset, value=0):
    if not isinstance(offset, int) or offset < 0 or offset % 4:
        raise ValueError(f"CSR offset must be a non-negative multiple of 4, not {offset!r}")
    if not isinstance(value, int) or not 0 <= value < 2**32:
        raise ValueError(f"CSR value must be an unsigned 32-bit integer, not {value!r}")
