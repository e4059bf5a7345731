"""The UART host link end to end, with no board: UartTransport over the serial twin (the
bridge RTL inside the Verilator model, twin/serial.py). Layers and the digits CNN are
compared bit for bit with the golden models / the CPU provider; a seeded fault-injecting
port shows damaged frames are retried and nothing is lost or applied twice."""

import numpy as np
import pytest
from assertions import assert_exact

from contract import link
from contract.config import ArrayConfig, ConvEngineConfig
from models.conv import conv2d
from models.requant import requantize
from models.zoo import DIGITS_QDQ, load_digits_split
from sw_driver import InferenceSession
from sw_driver.accelerator import Accelerator
from sw_driver.providers import UartTwinProvider
from sw_driver.transport.uart import UartTransport
from twin.serial import FaultyPort, PtyBridge, TwinSerial

#: The 4x4 engine of tests/test_providers_sim.py (room for the digits CNN's conv2).
CONFIG = ConvEngineConfig(array=ArrayConfig(rows=4, cols=4), act_depth=2048,
                          weight_depth=2048, max_col_tiles=8)
#: Simulated seconds a response may take beyond its wire time (100 k cycles at 50 MHz).
TIMEOUT = 0.002

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def twin_port():
    port = TwinSerial(CONFIG, baudrate=3_000_000, log=lambda message: None)
    yield port
    port.close()


def conv_case(rng, shape):
    n, c, h, w, o, k, stride, pad, x_zp, y_zp = shape
    x = rng.integers(-128, 128, (n, c, h, w), dtype=np.int8)
    weights = rng.integers(-128, 128, (o, c, k, k), dtype=np.int8)
    bias = rng.integers(-2**14, 2**14, o).astype(np.int32)
    mult, shift = rng.integers(2**30, 2**31, o), rng.integers(12, 22, o)
    args = (x, weights, bias, mult, shift)
    options = dict(x_zero_point=x_zp, y_zero_point=y_zp, lo=y_zp, hi=127, stride=stride,
                   padding=pad)
    want = requantize(conv2d(x, weights, bias, x_zero_point=x_zp, stride=stride,
                             padding=pad), mult, shift, y_zp, y_zp, 127)
    return args, options, want


SHAPES = [
    # (N, C_in, H, W, C_out, k, stride, pad, x_zp, y_zp)
    (1, 3, 9, 7, 6, 3, 1, 1, -128, 5),
    (2, 5, 12, 12, 7, 3, 1, 1, 3, -2),   # several DMA frames each way
]


@pytest.mark.parametrize("shape", SHAPES)
def test_conv_layer_bit_exact_over_uart(twin_port, shape, rng, seed):
    transport = UartTransport(twin_port, timeout=TIMEOUT)
    accelerator = Accelerator(transport)
    accelerator.reset()
    args, options, want = conv_case(rng, shape)
    got = accelerator.conv2d(*args, **options, name="conv")
    assert_exact(got, want, f"seed={seed} conv {shape}", names=("uart twin", "golden"))
    stats = transport.stats
    assert stats.retries == 0 and stats.payload_bytes > 0, f"{stats}"


class DropResponse:
    """Loses the response to the first request of ``kind`` (the device did execute it)."""

    def __init__(self, port, kind):
        self.inner, self.kind, self.armed, self.done = port, kind, False, False

    def write(self, data):
        if not self.done and data[1] == self.kind:
            self.armed = self.done = True
        return self.inner.write(data)

    def read(self, size=1):
        data = self.inner.read(size)
        if self.armed:
            self.armed = False
            return b""
        return data

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def __setattr__(self, name, value):
        if name == "timeout":
            self.inner.timeout = value
        else:
            super().__setattr__(name, value)


@pytest.mark.parametrize("kind", [link.FrameType.DMA_WRITE_LAST, link.FrameType.DMA_READ])
def test_lost_response_is_retried_and_not_applied_twice(twin_port, kind, rng, seed):
    """The ACK of the final DMA write (or the first DATA frame) is lost: the host resends
    the same frame; the device must answer again without pushing the words a second time
    (or dropping the words it sent), or the layer's output would be wrong."""
    transport = UartTransport(DropResponse(twin_port, kind), timeout=TIMEOUT)
    accelerator = Accelerator(transport)
    accelerator.reset()
    args, options, want = conv_case(rng, SHAPES[1])
    got = accelerator.conv2d(*args, **options, name="conv")
    assert_exact(got, want, f"seed={seed} lost {kind.name} response",
                 names=("uart twin", "golden"))
    assert (transport.stats.retries, transport.stats.timeouts) == (1, 1), transport.stats


def test_corrupted_and_dropped_bytes_are_retried(twin_port, rng, seed):
    # About 15 damaged bytes expected; a 1 KB frame is damaged 2 times in 3 at this rate,
    # so the retry budget is generous (0.64^31 = 1e-6: never exhausted in practice).
    faulty = FaultyPort(twin_port, seed=seed, drop=5e-4, flip=5e-4)
    print(f"fault injection seed={seed}")
    transport = UartTransport(faulty, timeout=TIMEOUT, retries=30)
    accelerator = Accelerator(transport)
    accelerator.reset()
    for index, shape in enumerate(SHAPES * 2):
        args, options, want = conv_case(rng, shape)
        got = accelerator.conv2d(*args, **options, name=f"conv{index}")
        assert_exact(got, want, f"seed={seed} conv {shape} with faults",
                     names=("uart twin", "golden"))
    stats = transport.stats
    print(f"seed={seed}: {faulty.dropped} bytes dropped, {faulty.flipped} flipped, "
          f"{faulty.damaged_writes} requests damaged; {stats}")
    assert faulty.dropped + faulty.flipped > 0, f"seed={seed}: no fault was injected"
    # Every damaged request failed and was sent again (damaged responses add more).
    assert stats.retries >= faulty.damaged_writes > 0, f"seed={seed}: {stats}"
    assert stats.retries == stats.naks + stats.timeouts


def test_digits_identical_to_cpu_over_uart():
    _, _, x, _ = load_digits_split()
    x = x[:8]
    (want,) = InferenceSession(DIGITS_QDQ, providers=["cpu"]).run(None, {"input": x})
    provider = UartTwinProvider(CONFIG, log=lambda message: None)
    try:
        session = InferenceSession(DIGITS_QDQ, providers=[provider, "cpu"])
        placed = {layer.name for layer, p, _ in session._placement if p is provider}
        assert placed == {"conv1", "pool1", "conv2", "gap", "fc"}
        (got,) = session.run(None, {"input": x})
    finally:
        provider.close()
    assert_exact(got, want, "digits, 8 images over the serial twin",
                 names=("uart-twin", "cpu"))


def test_conv_layer_through_a_pty_with_pyserial(rng, seed):
    """The board's code path: pyserial opens a terminal device by name (a pty whose other
    end is the serial twin), exactly as it opens /dev/ttyUSB0."""
    port = TwinSerial(CONFIG, baudrate=200_000_000, log=lambda message: None)
    try:
        with PtyBridge(port) as pty:
            transport = UartTransport(pty.path, timeout=1.0)
            try:
                accelerator = Accelerator(transport)
                accelerator.reset()
                args, options, want = conv_case(rng, SHAPES[0])
                got = accelerator.conv2d(*args, **options, name="conv")
            finally:
                transport.close()
    finally:
        port.close()
    assert_exact(got, want, f"seed={seed} conv over {pty.path}", names=("pty twin", "golden"))
