"""XdmaTransport's byte-level behaviour, with ordinary files standing in for the devices."""

import struct

import pytest

from sw_driver.transport import TransportError, TransportTimeout, XdmaTransport


@pytest.fixture
def devices(tmp_path):
    prefix = tmp_path / "xdma0"
    (tmp_path / "xdma0_user").write_bytes(bytes(4096))
    (tmp_path / "xdma0_h2c_0").write_bytes(b"")
    (tmp_path / "xdma0_c2h_0").write_bytes(struct.pack("<3I", 1, 2, 0xDEADBEEF))
    return tmp_path, str(prefix)


def test_csr_little_endian_at_offset(devices):
    folder, prefix = devices
    with XdmaTransport(prefix) as transport:
        transport.csr_write(0x24, 0x01020304)
        assert transport.csr_read(0x24) == 0x01020304
    raw = (folder / "xdma0_user").read_bytes()
    assert raw[0x24:0x28] == bytes([4, 3, 2, 1])


def test_dma_write_and_read(devices):
    folder, prefix = devices
    with XdmaTransport(prefix) as transport:
        transport.dma_write(struct.pack("<2I", 7, 8))
        assert transport.dma_read(12) == struct.pack("<3I", 1, 2, 0xDEADBEEF)
    assert (folder / "xdma0_h2c_0").read_bytes() == struct.pack("<2I", 7, 8)


def test_short_stream_times_out_with_a_count(devices):
    _, prefix = devices
    with XdmaTransport(prefix, timeout=0.05) as transport:
        with pytest.raises(TransportTimeout, match=r"12 of 16 bytes after 0.05 s"):
            transport.dma_read(16)


def test_missing_device_is_named(tmp_path):
    with pytest.raises(TransportError, match=r"cannot open XDMA device .*nope_user.*xdma"):
        XdmaTransport(str(tmp_path / "nope"))


def test_bad_arguments(devices):
    _, prefix = devices
    with XdmaTransport(prefix) as transport:
        with pytest.raises(ValueError, match="multiple of 4"):
            transport.csr_read(0x3)
        with pytest.raises(ValueError, match="unsigned 32-bit"):
            transport.csr_write(0x0, -1)
        with pytest.raises(ValueError, match="whole number of 32-bit words"):
            transport.dma_write(b"abc")
