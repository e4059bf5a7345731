"""The serial host link's wire protocol, as plain data: read by the bridge's RTL generator
(``hw/host_bridge.py``) for its constants and by the driver (``sw_driver/transport/uart.py``)
to build and parse frames. ``docs/uart.md`` describes it for people.

A frame, in wire order::

    SYNC (0xA5) | TYPE | SEQ | LEN (2 bytes, little-endian) | PAYLOAD (LEN bytes) | CRC (2)

The CRC is CRC-16/CCITT-FALSE (polynomial 0x1021, initial value 0xFFFF, no reflection, no
final XOR; ``crc16(b"123456789") == 0x29B1``) over TYPE, SEQ, LEN and PAYLOAD, sent high
byte first. Payloads are whole little-endian 32-bit words, like the DMA streams, so the
bridge assembles words without byte lanes.

The host sends one request and waits for its response (stop and wait). It resends the
same frame, with the same SEQ, on a NAK or when no valid response arrives in time. The
device executes a request only when its SEQ differs from the last one it executed; a
repeat gets the stored response again, so a retried write is never applied twice. A DATA
response's words leave the device's buffer only when the next new request arrives, so a
lost DATA frame is resent whole. ``LINK_RESET`` is always executed: it forgets the last
SEQ and drops buffered device-to-host words (a new session, or an aborted transfer).
"""

import enum
import struct

#: First byte of every frame; the receiver hunts for it after an error.
SYNC = 0xA5
#: SYNC, TYPE, SEQ and the two LEN bytes.
HEADER_BYTES = 5
CRC_BYTES = 2
#: Bytes around a payload in every frame: the framing cost of one frame.
FRAME_OVERHEAD = HEADER_BYTES + CRC_BYTES
#: Longest payload either side sends (256 words): long enough that framing and the
#: acknowledgement cost about 1.3% of a DMA frame, short enough for one block RAM.
MAX_PAYLOAD = 1024
MAX_PAYLOAD_WORDS = MAX_PAYLOAD // 4
#: Device-to-host words the bridge buffers (its ``c2h`` memory).
READ_BUFFER_WORDS = 256
#: Cycles the bridge waits for the core to take a host-to-device word before it gives up
#: on the frame and answers ERROR(H2C_STALL) (a write sent when no pass runs).
H2C_STALL_CYCLES = 1 << 20

#: Cycles without a byte after which the bridge abandons a frame it is receiving: a
#: corrupt LEN must not make it swallow the host's retries. 1.3 ms at 50 MHz, about 400
#: characters at 3 Mbaud; the host's response timeout must be longer.
RX_GAP_CYCLES = 1 << 16

CRC_POLY = 0x1021
CRC_INIT = 0xFFFF


class FrameType(enum.IntEnum):
    """TYPE byte. Requests (host to device) are below 0x80, responses at or above."""
    CSR_WRITE = 0x01       # payload: 1..128 (offset u32, value u32) pairs, in order -> ACK
    CSR_READ = 0x02        # payload: offset u32                 -> CSR_VALUE
    DMA_WRITE = 0x03       # payload: 1..256 words to h2c        -> ACK
    DMA_WRITE_LAST = 0x04  # as DMA_WRITE, `last` on the final word -> ACK
    DMA_READ = 0x05        # payload: max words u32              -> DATA (0..max words)
    LINK_RESET = 0x06      # payload: none                       -> ACK
    ACK = 0x81             # payload: none
    NAK = 0x82             # payload: none; CRC or length error, resend the frame
    CSR_VALUE = 0x83       # payload: value u32
    DATA = 0x84            # payload: words from c2h
    ERROR = 0x85           # payload: LinkError u32; a valid request the device refuses


class LinkError(enum.IntEnum):
    """Payload of an ERROR response: a request that a retry would not fix."""
    BAD_TYPE = 1       # TYPE is no request
    BAD_LENGTH = 2     # LEN is wrong for TYPE
    H2C_STALL = 3      # the core took no host-to-device word for H2C_STALL_CYCLES


#: Payload length (bytes) of each request type: an exact length, or (low, high, step).
REQUEST_LENGTHS = {
    FrameType.CSR_WRITE: (8, MAX_PAYLOAD, 8),
    FrameType.CSR_READ: 4,
    FrameType.DMA_WRITE: (4, MAX_PAYLOAD, 4),
    FrameType.DMA_WRITE_LAST: (4, MAX_PAYLOAD, 4),
    FrameType.DMA_READ: 4,
    FrameType.LINK_RESET: 0,
}


def _table():
    table = []
    for byte in range(256):
        crc = byte << 8
        for _ in range(8):
            crc = ((crc << 1) ^ CRC_POLY if crc & 0x8000 else crc << 1) & 0xFFFF
        table.append(crc)
    return tuple(table)


_CRC_TABLE = _table()


def crc16(data, crc=CRC_INIT):
    """CRC-16/CCITT-FALSE of ``data`` (bytes-like), continuing from ``crc``."""
    for byte in bytes(data):
        crc = ((crc << 8) & 0xFFFF) ^ _CRC_TABLE[(crc >> 8) ^ byte]
    return crc


class FrameError(ValueError):
    """Bytes that are not a valid frame; the message says which field is wrong."""


def encode(frame_type, seq, payload=b""):
    """The wire bytes of one frame."""
    payload = bytes(payload)
    if not 0 <= seq < 256:
        raise ValueError(f"seq must be in 0..255, not {seq!r}")
    if len(payload) > MAX_PAYLOAD:
        raise ValueError(f"payload of {len(payload)} bytes exceeds MAX_PAYLOAD={MAX_PAYLOAD}")
    body = struct.pack("<BBH", int(frame_type), seq, len(payload)) + payload
    return bytes([SYNC]) + body + crc16(body).to_bytes(2, "big")


def words(values):
    """Little-endian u32 payload of ``values``."""
    return struct.pack(f"<{len(values)}I", *values)


class Decoder:
    """Finds frames in a byte stream: feed bytes, collect ``(type, seq, payload)``.

    Bytes before a SYNC, and frames with a bad length or CRC, are skipped; ``errors``
    counts the bad frames and ``skipped`` the bytes dropped while hunting for SYNC, so a
    caller can tell garbage from silence.
    """

    def __init__(self):
        self.buffer = bytearray()
        self.errors = 0
        self.skipped = 0

    def wanted(self):
        """Bytes still needed to complete the frame being received (at least 1)."""
        if len(self.buffer) < HEADER_BYTES or self.buffer[0] != SYNC:
            return HEADER_BYTES - len(self.buffer) if self.buffer[:1] == bytes([SYNC]) \
                else HEADER_BYTES
        length = int.from_bytes(self.buffer[3:5], "little")
        if length > MAX_PAYLOAD:
            return 1
        return max(1, HEADER_BYTES + length + CRC_BYTES - len(self.buffer))

    def feed(self, data):
        """Add bytes; returns the complete frames now found, in order."""
        self.buffer += data
        frames = []
        while True:
            start = self.buffer.find(SYNC)
            if start < 0:
                self.skipped += len(self.buffer)
                self.buffer.clear()
                return frames
            if start:
                self.skipped += start
                del self.buffer[:start]
            if len(self.buffer) < HEADER_BYTES:
                return frames
            frame_type, seq, length = struct.unpack_from("<BBH", self.buffer, 1)
            if length > MAX_PAYLOAD:
                self.errors += 1
                del self.buffer[:1]  # a false SYNC or a corrupt header: hunt on
                continue
            end = HEADER_BYTES + length + CRC_BYTES
            if len(self.buffer) < end:
                return frames
            body = bytes(self.buffer[1:HEADER_BYTES + length])
            received = int.from_bytes(self.buffer[end - CRC_BYTES:end], "big")
            if crc16(body) != received:
                self.errors += 1
                del self.buffer[:1]
                continue
            del self.buffer[:end]
            frames.append((frame_type, seq, body[HEADER_BYTES - 1:]))


def decode(data):
    """The one frame that is exactly ``data``; :class:`FrameError` naming what is wrong."""
    data = bytes(data)
    if len(data) < FRAME_OVERHEAD:
        raise FrameError(f"frame of {len(data)} bytes is shorter than the "
                         f"{FRAME_OVERHEAD}-byte header and CRC")
    if data[0] != SYNC:
        raise FrameError(f"frame starts with 0x{data[0]:02x}, expected SYNC 0x{SYNC:02x}")
    frame_type, seq, length = struct.unpack_from("<BBH", data, 1)
    if length != len(data) - FRAME_OVERHEAD:
        raise FrameError(f"LEN field says {length} payload bytes, the frame holds "
                         f"{len(data) - FRAME_OVERHEAD}")
    body = data[1:-CRC_BYTES]
    expected, received = crc16(body), int.from_bytes(data[-CRC_BYTES:], "big")
    if expected != received:
        raise FrameError(f"CRC 0x{received:04x} does not match the contents (0x{expected:04x})")
    return frame_type, seq, data[HEADER_BYTES:-CRC_BYTES]
