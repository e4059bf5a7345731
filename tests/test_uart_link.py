"""The serial link's wire protocol (contract/link.py): CRC, encode/decode, the stream
decoder under corruption (seeded fuzz), and the bridge's constants in the RTL."""

import pytest

from contract import link
from contract.link import FrameType


def test_crc_matches_the_ccitt_false_check_value():
    # The catalogue check value of CRC-16/CCITT-FALSE.
    assert link.crc16(b"123456789") == 0x29B1
    assert link.crc16(b"") == 0xFFFF
    assert link.crc16(b"6789", link.crc16(b"12345")) == 0x29B1


def test_encode_layout():
    frame = link.encode(FrameType.CSR_WRITE, 7, link.words([0x10, 0xDEADBEEF]))
    assert frame[:5] == bytes([0xA5, 0x01, 7, 8, 0])
    assert frame[5:13] == bytes.fromhex("10000000efbeadde")
    assert int.from_bytes(frame[-2:], "big") == link.crc16(frame[1:-2])
    assert len(frame) == 8 + link.FRAME_OVERHEAD
    assert link.decode(frame) == (FrameType.CSR_WRITE, 7, link.words([0x10, 0xDEADBEEF]))


@pytest.mark.parametrize("bad, message", [
    (lambda f: f[:4], "shorter than"),
    (lambda f: b"\x00" + f[1:], "expected SYNC"),
    (lambda f: f[:3] + b"\x09" + f[4:], "LEN field says 9"),
    (lambda f: f[:6] + bytes([f[6] ^ 1]) + f[7:], "CRC 0x"),
])
def test_decode_names_what_is_wrong(bad, message):
    frame = link.encode(FrameType.CSR_READ, 1, link.words([4]))
    with pytest.raises(link.FrameError, match=message):
        link.decode(bad(frame))


def test_encode_checks_its_arguments():
    with pytest.raises(ValueError, match="seq must be in 0..255, not 256"):
        link.encode(FrameType.ACK, 256)
    with pytest.raises(ValueError, match="exceeds MAX_PAYLOAD=1024"):
        link.encode(FrameType.DMA_WRITE, 0, bytes(1028))


def random_frame(rng):
    kind = FrameType(int(rng.choice([int(t) for t in FrameType])))
    payload = rng.integers(0, 256, int(rng.integers(0, 64)) * 4, dtype=int).astype("u1")
    return kind, int(rng.integers(0, 256)), payload.tobytes()


def test_decoder_fuzz_with_corruption(rng, seed):
    """Random frames, some with a flipped bit, with garbage between them: the decoder
    returns exactly the intact frames, in order, and counts the rest as errors."""
    decoder, sent, stream = link.Decoder(), [], bytearray()
    for _ in range(300):
        stream += rng.integers(0, 256, int(rng.integers(0, 4)), dtype=int).astype("u1").tobytes()
        kind, seq, payload = random_frame(rng)
        frame = bytearray(link.encode(kind, seq, payload))
        if rng.random() < 0.2:
            index = int(rng.integers(1, len(frame)))
            frame[index] ^= 1 << int(rng.integers(0, 8))
        else:
            sent.append((kind, seq, payload))
        stream += frame
    got, position = [], 0
    while position < len(stream):  # arbitrary chunking, as a port delivers bytes
        size = int(rng.integers(1, 40))
        got += decoder.feed(stream[position:position + size])
        position += size
    # The decoder rescans from the byte after a false SYNC, so no intact frame is lost;
    # only the last ones may still wait behind a corrupt header's false length.
    assert got == sent[:len(got)], f"seed={seed}: frames differ from those sent"
    assert len(sent) - len(got) <= 2, f"seed={seed}: {len(sent) - len(got)} frames lost"
    assert decoder.errors > 0, f"seed={seed}: no corrupt frame was detected"


def test_decoder_wanted_reads_whole_frames():
    decoder = link.Decoder()
    frame = link.encode(FrameType.DATA, 3, bytes(40))
    assert decoder.wanted() == link.HEADER_BYTES
    assert decoder.feed(frame[:5]) == []
    assert decoder.wanted() == len(frame) - 5
    assert decoder.feed(frame[5:]) == [(FrameType.DATA, 3, bytes(40))]


def test_every_request_type_has_a_length_rule():
    requests = {t for t in FrameType if t < 0x80}
    assert requests == set(link.REQUEST_LENGTHS)
    assert link.MAX_PAYLOAD % 4 == 0 and link.READ_BUFFER_WORDS >= link.MAX_PAYLOAD_WORDS
