"""Transport over the Xilinx XDMA Linux driver's character devices.

CSRs live on the AXI4-Lite user BAR, reached by ``pread``/``pwrite`` of 4 bytes at the
register's offset on ``<prefix>_user``; the streams are ``<prefix>_h2c_<n>`` (host to card)
and ``<prefix>_c2h_<n>`` (card to host) in AXI4-Stream mode, where each ``write`` is one
transfer ending in ``tlast`` and a ``read`` returns at most what the card sent. The
stream devices are used with plain ``read``/``write`` (in stream mode the file position is
ignored), so ordinary files can stand in for them in tests.
"""

import errno
import os
import struct
import time

from .base import Transport, TransportError, TransportTimeout, check_csr, check_word_multiple


class XdmaTransport(Transport):
    """The XDMA devices ``<prefix>_user``, ``<prefix>_h2c_<channel>``, ``<prefix>_c2h_<channel>``.

    Parameters
    ----------
    prefix : str
        Device path prefix, ``/dev/xdma0`` for the first card.
    channel : int
        DMA channel number.
    timeout : float
        Seconds a DMA read may wait for data before :class:`TransportTimeout` when the
        caller gives no :class:`~.base.Deadline`.
    """

    def __init__(self, prefix="/dev/xdma0", *, channel=0, timeout=1.0):
        self.timeout = timeout
        self.paths = {
            "user": f"{prefix}_user",
            "h2c": f"{prefix}_h2c_{channel}",
            "c2h": f"{prefix}_c2h_{channel}",
        }
        self._fds = {}
        try:
            for role, path in self.paths.items():
                self._fds[role] = os.open(path, os.O_RDWR)
        except OSError as error:
            self.close()
            raise TransportError(
                f"cannot open XDMA device {error.filename}: {error.strerror}; is the card "
                f"present and the xdma driver loaded (lsmod | grep xdma)?") from error

    def csr_read(self, offset):
        check_csr(offset)
        data = self._io("user", os.pread, 4, offset)
        if len(data) != 4:
            raise TransportError(f"{self.paths['user']}: short CSR read at {offset:#x} "
                                 f"({len(data)} of 4 bytes)")
        return struct.unpack("<I", data)[0]

    def csr_write(self, offset, value):
        check_csr(offset, value)
        written = self._io("user", os.pwrite, struct.pack("<I", value), offset)
        if written != 4:
            raise TransportError(f"{self.paths['user']}: short CSR write at {offset:#x}")

    def dma_write(self, data):
        data = memoryview(data).cast("B")
        check_word_multiple("dma_write data", len(data))
        sent = 0
        while sent < len(data):
            sent += self._io("h2c", os.write, data[sent:])

    def dma_read(self, nbytes, *, deadline=None):
        check_word_multiple("dma_read size", nbytes)
        chunks, received = [], 0
        # The card counts no cycles the host can see: only the deadline's seconds apply.
        seconds = self.timeout if deadline is None else deadline.seconds
        note = f" ({deadline.note})" if deadline is not None and deadline.note else ""
        give_up = time.monotonic() + seconds
        while received < nbytes:
            chunk = self._io("c2h", os.read, nbytes - received)
            if chunk:
                chunks.append(chunk)
                received += len(chunk)
            elif time.monotonic() > give_up:
                raise TransportTimeout(
                    f"{self.paths['c2h']}: {received} of {nbytes} bytes after "
                    f"{seconds:g} s{note}")
            else:
                time.sleep(0.001)
        return b"".join(chunks)

    def _io(self, role, call, *args):
        try:
            return call(self._fds[role], *args)
        except OSError as error:
            if error.errno == errno.ETIMEDOUT:  # the xdma driver's own transfer timeout
                raise TransportTimeout(f"{self.paths[role]}: transfer timed out") from error
            raise TransportError(f"{self.paths[role]}: {error.strerror}") from error

    def close(self):
        for fd in self._fds.values():
            os.close(fd)
        self._fds = {}
