"""Transport over a serial link to the UART host bridge (``hw/host_bridge.py``): a board's
FTDI port (``/dev/ttyUSB0``), any pyserial URL (``loop://``, ``socket://host:port``), or
the serial twin (``twin.serial.TwinSerial``), which has pyserial's calls.

Every CSR access and every DMA chunk is one request frame of ``contract/link.py`` and one
response; a request is resent with the same SEQ on a NAK or when no valid response comes
in time, at most :attr:`UartTransport.retries` times, after which :class:`TransportError`
names the port, the frame and what went wrong. The device executes a SEQ once, so a resent
write is never applied twice. ``docs/uart.md`` has the details.
"""

import time
from dataclasses import dataclass

from contract import link
from contract.link import FrameType

from ..regs import ID_VALUE, STATUS_ERROR_MASK, Reg
from .base import Transport, TransportError, TransportTimeout, check_csr, check_word_multiple

#: Bytes of garbage (not part of a valid frame) one wait tolerates before the port is
#: reported as returning garbage: several whole frames' worth.
GARBAGE_LIMIT = 4 * (link.MAX_PAYLOAD + link.FRAME_OVERHEAD)


#: Requests whose payload is the bus's own content (offsets, values, words).
_CARRYING = (FrameType.CSR_WRITE, FrameType.CSR_READ, FrameType.DMA_WRITE,
             FrameType.DMA_WRITE_LAST)


@dataclass
class LinkStats:
    """What crossed the link. ``payload`` bytes are what any bus would carry: register
    offsets and values, DMA words. ``overhead`` is the rest of the wire: SYNC, header and
    CRC of every frame, acknowledgements, DMA read requests, empty polls and resent
    frames."""
    frames: int = 0
    retries: int = 0
    naks: int = 0
    timeouts: int = 0
    empty_reads: int = 0      # DMA reads answered with no words yet (polls)
    offset_bytes: int = 0     # CSR offsets, counted in payload_bytes
    payload_bytes: int = 0
    overhead_bytes: int = 0

    @property
    def wire_bytes(self):
        return self.payload_bytes + self.overhead_bytes


class UartTransport(Transport):
    """Drive an accelerator through its serial host bridge.

    Parameters
    ----------
    port : str or serial-like
        A device or pyserial URL, opened with ``serial.serial_for_url``; or an object
        with pyserial's ``read``/``write``/``timeout`` (a ``TwinSerial``).
    baudrate : int
        Used when opening ``port`` by name; an object's own ``baudrate`` is kept.
    timeout : float
        Seconds a response may take beyond its bytes' time on the wire.
    retries : int
        Resends of one frame before :class:`TransportError`.
    check_id : bool
        Read the ID register on opening, so a port with no Tessera behind it fails now.
    """

    #: The serial twin simulates about a million cycles a second; a tenth leaves room.
    min_cycles_per_second = 1e5

    def __init__(self, port, *, baudrate=3_000_000, timeout=0.05, retries=8, check_id=True):
        if not isinstance(retries, int) or retries < 0:
            raise ValueError(f"retries must be a non-negative integer, not {retries!r}")
        if not timeout > 0:
            raise ValueError(f"timeout must be positive seconds, not {timeout!r}")
        self.timeout_slack = float(timeout)
        self.retries = retries
        self.stats = LinkStats()
        self._seq = 0
        self._posted = []  # queued CSR writes: offset, value, offset, value...
        if isinstance(port, str):
            self.name = port
            self.port = _open(port, baudrate)
        else:
            self.name = str(getattr(port, "port", None) or type(port).__name__)
            self.port = port
        try:
            self.link_reset()
            if check_id:
                found = self.csr_read(Reg.ID)
                if found != ID_VALUE:
                    raise TransportError(
                        f"{self.name}: no Tessera accelerator answers (ID register reads "
                        f"0x{found:08x}, expected 0x{ID_VALUE:08x})")
        except Exception:
            self.close()
            raise

    # --- the Transport interface ---------------------------------------------------------

    def csr_read(self, offset):
        check_csr(offset)
        self.flush_writes()
        payload = self._exchange(FrameType.CSR_READ, link.words([offset]), FrameType.CSR_VALUE,
                                 f"CSR read 0x{offset:03x}")
        if len(payload) != 4:
            raise TransportError(f"{self.name}: CSR read 0x{offset:03x} answered with "
                                 f"{len(payload)} bytes, expected 4")
        return int.from_bytes(payload, "little")

    def csr_write(self, offset, value):
        """Queue the write; queued writes go out, in order, as one frame before anything
        else crosses the link (posted writes, as on PCIe): a layer's 30-odd descriptor
        registers cost one frame and one acknowledgement instead of 30 of each. A write
        the device refuses is reported by the call that sends it."""
        check_csr(offset, value)
        self._posted += [offset, value]
        if len(self._posted) * 4 >= link.MAX_PAYLOAD:
            self.flush_writes()

    def flush_writes(self):
        """Send the queued register writes now."""
        if not self._posted:
            return
        pairs, self._posted = self._posted, []
        first, last = pairs[0], pairs[-2]
        what = (f"CSR write 0x{first:03x}" if len(pairs) == 2 else
                f"{len(pairs) // 2} CSR writes 0x{first:03x}..0x{last:03x}")
        self._exchange(FrameType.CSR_WRITE, link.words(pairs), FrameType.ACK, what)

    def dma_write(self, data):
        data = bytes(memoryview(data).cast("B"))
        check_word_multiple("dma_write data", len(data))
        self.flush_writes()
        for start in range(0, len(data), link.MAX_PAYLOAD):
            chunk = data[start:start + link.MAX_PAYLOAD]
            final = start + link.MAX_PAYLOAD >= len(data)
            kind = FrameType.DMA_WRITE_LAST if final else FrameType.DMA_WRITE
            self._exchange(kind, chunk, FrameType.ACK,
                           f"DMA write of bytes {start}..{start + len(chunk)}")

    def dma_read(self, nbytes, *, deadline=None):
        check_word_multiple("dma_read size", nbytes)
        self.flush_writes()
        seconds = self.timeout if deadline is None else deadline.seconds
        note = f" ({deadline.note})" if deadline is not None and deadline.note else ""
        give_up = time.monotonic() + seconds
        out = bytearray()
        while len(out) < nbytes:
            want = min((nbytes - len(out)) // 4, link.MAX_PAYLOAD_WORDS)
            chunk = self._exchange(FrameType.DMA_READ, link.words([want]), FrameType.DATA,
                                   f"DMA read of {want} words")
            if len(chunk) > 4 * want or len(chunk) % 4:
                raise TransportError(f"{self.name}: DMA read of {want} words answered with "
                                     f"{len(chunk)} bytes")
            out += chunk
            if chunk:
                # Progress: the deadline is for a device that sends nothing (a stuck pass),
                # not for a slow link resending damaged frames (each 1 KB frame is a few
                # ms of wire time, far more on the serial twin).
                give_up = time.monotonic() + seconds
            if chunk or len(out) == nbytes:
                continue
            self.stats.empty_reads += 1
            # Nothing yet: a device that failed will never send the rest.
            if self.csr_read(Reg.STATUS) & STATUS_ERROR_MASK:
                raise TransportError(f"{self.name}: the device flagged an error after "
                                     f"{len(out)} of {nbytes} bytes")
            if time.monotonic() > give_up:
                raise TransportTimeout(f"{self.name}: {len(out)} of {nbytes} bytes after "
                                       f"{seconds:g} s{note}")
        return bytes(out)

    def abort_dma(self):
        self.flush_writes()
        self.link_reset()

    def close(self):
        port = getattr(self, "port", None)
        try:
            if port is not None and getattr(self, "_posted", None):
                self.flush_writes()
        finally:
            self.port = None
            if port is not None:
                port.close()

    # --- the link --------------------------------------------------------------------------

    def link_reset(self):
        """Start afresh: the device forgets the last SEQ and drops buffered results."""
        try:
            self.port.reset_input_buffer()
        except (AttributeError, OSError):
            pass
        self._exchange(FrameType.LINK_RESET, b"", FrameType.ACK, "link reset")

    def _wire_seconds(self, nbytes):
        baudrate = getattr(self.port, "baudrate", None) or 3_000_000
        return nbytes * 10 / baudrate

    def _exchange(self, kind, payload, expect, what):
        """Send one request until its response arrives; returns the response's payload."""
        if self.port is None:
            raise TransportError(f"{self.name}: the port has been closed")
        seq = self._seq
        frame = link.encode(kind, seq, payload)
        longest = link.FRAME_OVERHEAD + link.MAX_PAYLOAD if expect == FrameType.DATA \
            else link.FRAME_OVERHEAD + 4
        wait = self.timeout_slack + self._wire_seconds(len(frame) + longest)
        problems = []
        for attempt in range(self.retries + 1):
            if attempt:
                self.stats.retries += 1
            self.stats.frames += 1
            self.stats.overhead_bytes += len(frame)
            self._write(frame, what)
            reply = self._await(seq, wait, what)
            if reply is None:
                self.stats.timeouts += 1
                problems.append("timeout")
                continue
            reply_type, reply_payload = reply
            self.stats.overhead_bytes += link.FRAME_OVERHEAD + len(reply_payload)
            if reply_type == FrameType.NAK:
                self.stats.naks += 1
                problems.append("NAK")
                continue
            if reply_type == FrameType.ERROR:
                code = int.from_bytes(reply_payload[:4], "little")
                try:
                    meaning = link.LinkError(code).name
                except ValueError:
                    meaning = f"unknown code {code}"
                raise TransportError(f"{self.name}: the device refused {what} "
                                     f"(frame seq {seq}): {meaning}")
            if reply_type != expect:
                raise TransportError(f"{self.name}: {what} (frame seq {seq}) answered with "
                                     f"{_type_name(reply_type)}, expected {expect.name}")
            self._seq = (seq + 1) % 256
            # What a bus carries on any link (register offsets and values, DMA words) is
            # payload; framing, CRC, acknowledgements and read requests are overhead.
            carried = len(reply_payload) + (len(payload) if kind in _CARRYING else 0)
            self.stats.payload_bytes += carried
            if kind in (FrameType.CSR_WRITE, FrameType.CSR_READ):
                self.stats.offset_bytes += len(payload) // (2 if kind == FrameType.CSR_WRITE
                                                            else 1)
            self.stats.overhead_bytes -= carried
            return reply_payload
        raise TransportError(
            f"{self.name}: no valid response to {what} (frame {kind.name}, seq {seq}) after "
            f"{self.retries + 1} attempts ({', '.join(problems)}; {wait * 1e3:.3g} ms each)")

    def _write(self, frame, what):
        try:
            self.port.write(frame)
        except OSError as exc:
            raise TransportError(f"{self.name}: cannot send {what}: {exc}") from exc

    def _await(self, seq, wait, what):
        """The (type, payload) of the response to ``seq``; None after ``wait`` seconds."""
        decoder = link.Decoder()
        self.port.timeout = wait
        while True:
            want = decoder.wanted()
            try:
                data = self.port.read(want)
            except OSError as exc:
                raise TransportError(f"{self.name}: cannot receive the answer to {what}: "
                                     f"{exc}") from exc
            for reply_type, reply_seq, payload in decoder.feed(data):
                if reply_type >= 0x80 and reply_seq == seq:
                    return reply_type, payload
                # A late duplicate of an earlier response: its request was already done.
            if decoder.skipped > GARBAGE_LIMIT:
                raise TransportError(f"{self.name}: the port returns garbage ({decoder.skipped}"
                                     f" bytes that are no frame while waiting for {what}); "
                                     f"is it the accelerator's port, at the right baud rate?")
            if len(data) < want:
                return None


def _type_name(value):
    try:
        return FrameType(value).name
    except ValueError:
        return f"type 0x{value:02x}"


def _open(name, baudrate):
    try:
        import serial
    except ImportError as exc:
        raise TransportError("the UART transport needs pyserial (pip install pyserial, or "
                             "`make setup`)") from exc
    try:
        port = serial.serial_for_url(name, do_not_open=True, baudrate=baudrate, timeout=0.05)
        if not name.startswith(("loop://", "socket://", "rfc2217://", "spy://")):
            port.exclusive = True  # a port another program holds is reported as busy
        port.open()
    except (serial.SerialException, ValueError, OSError) as exc:
        raise TransportError(f"{name}: cannot open the serial port ({exc}); does it exist, "
                             f"and is no other program (a terminal, another session) using "
                             f"it?") from exc
    return port
