"""The host protocol of a device with the resident player (its ``RES_DATA_WORDS`` register
reads non-zero): load an image (skipped when the device's checksum already matches), run
a batch, read the outputs, and recover from a fault.

Protocol (``docs/resident.md``):

- load: ``RES_CTRL.clear_checksum``; for the program, then the data: ``RES_ADDR``,
  ``RES_COUNT``, ``RES_CTRL.load_program``/``load_data``, the words on the host stream;
  then ``RES_CHECKSUM_A``/``_B`` must equal the image's.
- run: clear ``RES_STATUS``, ``RES_LOOPS = N``, ``RES_CTRL.run``; the N inputs' words on
  the host stream, the N outputs' words back; ``RES_STATUS`` must read done.
- fault (``RES_STATUS.error``, or the outputs not arriving): read ``RES_ERROR`` and
  ``RES_PC``, soft-reset the accelerator (which aborts the player), reload the image, and
  raise :class:`~sw_driver.errors.ResidentRunError` naming the pass.
"""

import threading
import time

import numpy as np

from .. import regs
from ..errors import ResidentChecksumError, ResidentFitError, ResidentRunError
from ..regs import ERROR_MEANINGS, Reg
from ..transport.base import Deadline, TransportError

__all__ = ["RES", "ResidentRunner"]


def _registers():
    """``{name: offset}`` of the RES_* registers: the generated map's once it has them,
    else the offsets the resident spec gives (the register map of the hardware helper)."""
    names = ("DATA_WORDS", "PROGRAM_WORDS", "CTRL", "STATUS", "ADDR", "COUNT", "LOOPS",
             "CHECKSUM_A", "CHECKSUM_B", "PC", "ERROR")
    spec = dict(zip(names, range(0x200, 0x200 + 4 * len(names), 4), strict=True))
    return {name: int(getattr(Reg, f"RES_{name}", spec[name])) for name in names}


#: Offsets of the resident registers, by name without the ``RES_`` prefix.
RES = _registers()
#: RES_CTRL strobes and RES_STATUS bits.
CTRL_RUN, CTRL_LOAD_DATA, CTRL_LOAD_PROGRAM, CTRL_READ_DATA, CTRL_CLEAR_CHECKSUM = (
    1 << 0, 1 << 1, 1 << 2, 1 << 3, 1 << 4)
STATUS_BUSY, STATUS_DONE, STATUS_ERROR = 1 << 0, 1 << 1, 1 << 2
#: RES_STATUS reads after the last output word before a still-busy player is a fault: its
#: SEND's end and END take a handful of cycles (docs/resident.md, "Cycles").
DONE_POLLS = 16
#: Register accesses of one run besides the streams: the two checksum reads, clearing
#: RES_STATUS, RES_LOOPS, RES_CTRL.run and the final RES_STATUS read (for link models).
RUN_CSR_ACCESSES = 6


def load_steps(image):
    """How ``image`` is loaded, after ``RES_CTRL.clear_checksum``: for each run of words of
    ``image.load_order``, ``(what, writes, data)``: the register writes ``(offset, value)``
    that arm the player, then the bytes to stream. The player takes its next command only
    once idle, so each step waits for ``RES_STATUS`` done before the next."""
    for kind, address, words in image.load_order:
        command = CTRL_LOAD_PROGRAM if kind == "program" else CTRL_LOAD_DATA
        yield (f"{kind} load of {len(words)} words",
               ((RES["STATUS"], STATUS_DONE | STATUS_ERROR), (RES["ADDR"], address),
                (RES["COUNT"], len(words)), (RES["CTRL"], command)),
               np.asarray(words, "<u4").tobytes())


def start_writes(loops):
    """The register writes ``(offset, value)`` that start a run of ``loops`` iterations."""
    return ((RES["STATUS"], STATUS_DONE | STATUS_ERROR), (RES["LOOPS"], loops),
            (RES["CTRL"], CTRL_RUN))


class ResidentRunner:
    """Runs a :class:`~.image.DeviceImage` on a device with the resident player.

    Parameters
    ----------
    transport : sw_driver.transport.Transport
    image : DeviceImage
    reload_retries : int
        Loads retried when the device's checksum differs from the image's.
    """

    def __init__(self, transport, image, *, reload_retries=1):
        self.transport, self.image = transport, image
        self.reload_retries = reload_retries
        self.lock = threading.Lock()
        read = transport.csr_read
        self.data_words = read(RES["DATA_WORDS"])
        self.program_words = read(RES["PROGRAM_WORDS"])
        if not self.data_words:
            raise ResidentFitError("this device has no resident player (RES_DATA_WORDS "
                                   "reads 0): run the model layer at a time", what="device")
        if image.data_words > self.data_words or len(image.program) > self.program_words:
            raise ResidentFitError(
                f"the image needs {image.data_words} data words and {len(image.program)} "
                f"program words; the device has {self.data_words} and {self.program_words}",
                what="device", needed=4 * image.data_words, free=4 * self.data_words)
        #: Loads performed (0 when the device already held the image).
        self.loads = 0

    # ------------------------------------------------------------ load

    def device_checksum(self):
        read = self.transport.csr_read
        return read(RES["CHECKSUM_A"]), read(RES["CHECKSUM_B"])

    def load(self, *, force=False):
        """Load the image unless the device's checksum says it holds it already; returns
        whether it loaded. A checksum mismatch after loading is retried, then raised."""
        if not force and self.device_checksum() == self.image.checksum:
            return False
        for _ in range(self.reload_retries + 1):
            t = self.transport
            t.csr_write(RES["CTRL"], CTRL_CLEAR_CHECKSUM)
            for what, writes, data in load_steps(self.image):
                for offset, value in writes:
                    t.csr_write(offset, value)
                t.dma_write(data)
                # The player takes its commands only when idle: the next load (or a
                # checksum read) must wait until this one has stored its last word.
                self._wait_loaded(what, len(data) // 4)
            self.loads += 1
            got = self.device_checksum()
            if got == self.image.checksum:
                return True
        raise ResidentChecksumError(
            f"the device's checksum of the loaded image is {got[0]:#010x}/{got[1]:#010x}, "
            f"the image's {self.image.checksum[0]:#010x}/{self.image.checksum[1]:#010x} "
            f"after {self.reload_retries + 1} loads: words are lost or corrupted on the link")

    def _wait_loaded(self, what, words):
        """Poll ``RES_STATUS`` until the load is through (a word a cycle on the device; the
        link's own pace on a slow one, which the wall-clock limit allows for)."""
        t = self.transport
        give_up = time.monotonic() + max(1.0, 8 * (words + 1000) / t.min_cycles_per_second)
        while True:
            status = t.csr_read(RES["STATUS"])
            if status & STATUS_ERROR:
                raise ResidentRunError(f"resident {what} failed: RES_ERROR "
                                       f"{t.csr_read(RES['ERROR'])}")
            if status & STATUS_DONE and not status & STATUS_BUSY:
                return
            if time.monotonic() > give_up:
                raise ResidentRunError(f"resident {what}: RES_STATUS still {status:#x} after "
                                       f"{time.monotonic() - give_up + 1:.1f} s")

    def read_data(self, address, count):
        """``count`` data-memory words from ``address`` (``RES_CTRL.read_data``)."""
        t = self.transport
        t.csr_write(RES["ADDR"], address)
        t.csr_write(RES["COUNT"], count)
        t.csr_write(RES["CTRL"], CTRL_READ_DATA)
        return np.frombuffer(t.dma_read(4 * count), "<u4").copy()

    # ------------------------------------------------------------ run

    def run(self, feeds, *, deadline=None):
        """Outputs (``{name: int8 (N, ...)}``) of a batch: ``feeds`` maps each input to
        int8 (N, ...); the program loops N times on one start."""
        with self.lock:
            self.load()
            words, count = self.image.pack_inputs(feeds)
            t = self.transport
            for offset, value in start_writes(count):
                t.csr_write(offset, value)
            if deadline is None:
                cycles = max(100_000, 8 * self.image.expected_cycles * count)
                deadline = Deadline(cycles, max(1.0, cycles / t.min_cycles_per_second),
                                    f"resident run of {count} iteration(s)")
            try:
                t.dma_write(words.astype("<u4").tobytes())
                raw = t.dma_read(4 * self.image.output_words * count, deadline=deadline)
            except TransportError as error:
                self._fail(t.csr_read(RES["STATUS"]), error)
            # The last output word leaves a few cycles before the player's END says done.
            for _ in range(DONE_POLLS):
                status = t.csr_read(RES["STATUS"])
                if not status & STATUS_BUSY:
                    break
            if status & STATUS_ERROR or not status & STATUS_DONE:
                self._fail(status, None)
            return self.image.unpack_outputs(np.frombuffer(raw, "<u4"), count)

    def _fail(self, status, cause):
        t = self.transport
        code, pc = t.csr_read(RES["ERROR"]), t.csr_read(RES["PC"])
        where = next((p for p in reversed(self.image.passes) if p.record <= pc), None)
        at = f"pass {where.name!r} of layer {where.layer!r}" if where else "no pass"
        t.csr_write(Reg.CTRL, regs.CTRL_SOFT_RESET_MASK)
        t.abort_dma()
        t.csr_write(Reg.STATUS, regs.STATUS_DONE_MASK | regs.STATUS_ERROR_MASK)
        t.csr_write(RES["STATUS"], STATUS_DONE | STATUS_ERROR)
        self.load(force=True)
        seen = "error" if status & STATUS_ERROR else f"status {status:#x}"
        raise ResidentRunError(
            f"resident run failed ({seen}{f': {cause}' if cause else ''}): RES_ERROR {code} "
            f"({ERROR_MEANINGS.get(code, 'unknown')}) at program word {pc} ({at}); the "
            f"device has been reset and the image reloaded") from cause
