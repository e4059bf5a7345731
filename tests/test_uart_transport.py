"""UartTransport's error paths, with no twin: a port that does not exist, is busy, stays
silent (loop:// echoes the requests) or returns garbage; a device that refuses a request
or is not a Tessera. Each ends in a TransportError naming the port, within its timeout."""

import os
import random
import time

import pytest
import serial

from contract import link
from contract.link import FrameType, LinkError
from sw_driver.errors import ProviderUnavailableError
from sw_driver.providers import UartProvider
from sw_driver.regs import ID_VALUE
from sw_driver.transport.base import TransportError
from sw_driver.transport.uart import UartTransport


class FakeDevice:
    """A pyserial-like port answering each request with ``answer(type, seq, payload)``."""

    baudrate = 3_000_000
    port = "fake"

    def __init__(self, answer):
        self.answer, self.out, self.timeout = answer, bytearray(), None

    def write(self, data):
        kind, seq, payload = link.decode(data)
        self.out += self.answer(kind, seq, payload)
        return len(data)

    def read(self, size=1):
        data, self.out = bytes(self.out[:size]), self.out[size:]
        return data

    def close(self):
        pass


def tessera(kind, seq, payload):
    if kind == FrameType.CSR_READ:
        return link.encode(FrameType.CSR_VALUE, seq, link.words([ID_VALUE]))
    if kind == FrameType.CSR_WRITE and int.from_bytes(payload[:4], "little") == 0x40:
        return link.encode(FrameType.ERROR, seq, link.words([LinkError.H2C_STALL]))
    return link.encode(FrameType.ACK, seq)


def test_missing_port():
    with pytest.raises(TransportError, match="/dev/ttyTESSERA_MISSING: cannot open the serial "
                                             "port .*does it exist"):
        UartTransport("/dev/ttyTESSERA_MISSING")


def test_busy_port():
    controller, device = os.openpty()
    name = os.ttyname(device)
    holder = serial.Serial(name, exclusive=True)
    try:
        with pytest.raises(TransportError, match=f"{name}: cannot open the serial port.*"
                                                 f"no other program"):
            UartTransport(name)
    finally:
        holder.close()
        os.close(controller)
        os.close(device)


def test_silent_port_gives_up_after_its_retries():
    started = time.monotonic()
    with pytest.raises(TransportError, match=r"loop://: no valid response to link reset "
                                             r"\(frame LINK_RESET, seq 0\) after 3 attempts "
                                             r"\(timeout, timeout, timeout"):
        UartTransport("loop://", timeout=0.02, retries=2)
    assert time.monotonic() - started < 5


def test_garbage_is_reported_as_garbage():
    noise = random.Random(5)

    class Noise(FakeDevice):
        def read(self, size=1):
            return bytes(noise.randrange(256) for _ in range(size))

    with pytest.raises(TransportError, match="fake: the port returns garbage .*baud rate"):
        UartTransport(Noise(lambda kind, seq, payload: b""))


def test_not_a_tessera():
    def other(kind, seq, payload):
        if kind == FrameType.CSR_READ:
            return link.encode(FrameType.CSR_VALUE, seq, link.words([0x1234]))
        return link.encode(FrameType.ACK, seq)

    with pytest.raises(TransportError, match="fake: no Tessera accelerator answers .*0x00001234"):
        UartTransport(FakeDevice(other))


def test_refused_request_and_session_stays_usable():
    transport = UartTransport(FakeDevice(tessera))
    transport.csr_write(0x40, 1)  # posted: sent by the next call that needs the link
    with pytest.raises(TransportError, match=r"fake: the device refused CSR write 0x040 "
                                             r"\(frame seq 2\): H2C_STALL"):
        transport.csr_read(0)
    transport.csr_write(0x44, 1)  # the link still works
    assert transport.csr_read(0) == ID_VALUE


def test_uart_provider_unavailable_names_the_port(monkeypatch):
    monkeypatch.delenv("TESSERA_UART_PORT", raising=False)
    with pytest.raises(ProviderUnavailableError, match="no serial port given; pass --port"):
        UartProvider()
    with pytest.raises(ProviderUnavailableError, match="provider 'uart': /dev/ttyTESSERA_NO"):
        UartProvider("/dev/ttyTESSERA_NO")


def test_cli_run_with_a_missing_port_names_it(capsys, monkeypatch):
    from tessera import cli

    # --port must be what names the port, not a variable left in the environment.
    monkeypatch.delenv("TESSERA_UART_PORT", raising=False)
    code = cli.main(["run", "models/zoo/digits_qdq.onnx", "--providers", "uart",
                     "--port", "/dev/ttyTESSERA_NO", "--samples", "2"])
    out = capsys.readouterr()
    assert code != 0
    assert "/dev/ttyTESSERA_NO: cannot open the serial port" in out.out + out.err
    assert "Traceback" not in out.out + out.err
