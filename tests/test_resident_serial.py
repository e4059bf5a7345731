"""Resident execution over the UART host link, on the ULX3S-85F preset's serial twin (the
bridge RTL and the resident block inside the Verilator model, twin/serial.py): the digits
CNN bit-exact with the cpu provider, the image loaded over the link; and the same twin
built with the model in it (as ``tessera build`` builds a bitstream), on which a session's
very first run moves only the input, the output and a few registers."""

import numpy as np
import pytest

from contract.config_file import PRESETS
from models.zoo import DIGITS_QDQ, load_digits_split
from sw_driver import InferenceSession
from sw_driver.providers import UartTwinProvider
from sw_driver.resident import compile_model
from sw_driver.transport.uart import LinkStats, UartTransport
from twin.serial import TwinSerial

CONFIG = PRESETS["ulx3s-85f-resident"]
#: The board's clock: simulated seconds are device time on the ULX3S.
CLOCK_HZ = 62.5e6
#: Bytes of the digits CNN's input (1x8x8 int8) and output (10 int8 logits, 3 words).
MODEL_BYTES = 64 + 12
#: Register traffic of one resident run, whatever the batch: the runner's checksum reads,
#: clearing RES_STATUS, RES_LOOPS, the start and the final RES_STATUS read, and the
#: session's own reads (measured: 144 to 152 payload bytes).
RUN_REGISTER_BYTES = 160
#: The image's load over the link is program and constants, ~7.7 KB (1,936 words); a run
#: without it moves some 300 bytes: a run that moves less than this did not load.
LOAD_BYTES = 4 * 1500

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def digits():
    _, _, images, _ = load_digits_split()
    want = InferenceSession(DIGITS_QDQ, providers=["cpu"]).run(None, {"input": images[:8]})
    return images[:8], want


def boot_image():
    graph = InferenceSession(DIGITS_QDQ, providers=["cpu"]).graph
    return compile_model(graph, CONFIG, data_words=CONFIG.resident_words,
                         program_words=CONFIG.program_words).boot_image()


def session_on(image=None):
    port = TwinSerial(CONFIG, clock_hz=CLOCK_HZ, image=image, log=lambda message: None)
    transport = UartTransport(port, timeout=0.002)
    provider = UartTwinProvider(CONFIG, transport=transport)
    session = InferenceSession(DIGITS_QDQ, providers=[provider, "cpu"])
    assert not provider.resident_notes, provider.resident_notes
    return session, transport, port


def run(session, transport, port, x):
    """``(outputs, LinkStats, device cycles, the segment's profile)`` of one run."""
    transport.stats = LinkStats()
    start = port.cycles
    outputs = session.run(None, {"input": x})
    (segment,) = [row["segment"] for row in session.profile() if "segment" in row]
    return outputs, transport.stats, port.cycles - start, segment


def check(got, want, what):
    for index, (a, b) in enumerate(zip(got, want, strict=True)):
        diff = np.flatnonzero(a != b)
        assert not diff.size, (f"{what}: output {index} differs at flat index {diff[0]}: "
                               f"uart-twin {a.flat[diff[0]]}, cpu {b.flat[diff[0]]}")


def test_digits_resident_over_the_uart_bit_exact(digits):
    x, want = digits
    session, transport, port = session_on()
    got, stats, _, segment = run(session, transport, port, x[:1])
    check(got, [w[:1] for w in want], "first run (with the load)")
    assert segment["loads"] == 1 and stats.payload_bytes > LOAD_BYTES, (segment, stats)
    assert segment["layers"][:3] == ["conv1", "pool1", "conv2"], segment
    for batch in (1, 8):
        got, stats, cycles, segment = run(session, transport, port, x[:batch])
        check(got, [w[:batch] for w in want], f"steady state, batch {batch}")
        assert segment["loads"] == 1, segment  # still the first load
        assert stats.payload_bytes <= MODEL_BYTES * batch + RUN_REGISTER_BYTES, stats
        print(f"batch {batch}: {stats.payload_bytes / batch:.1f} payload and "
              f"{stats.wire_bytes / batch:.1f} wire bytes per image, {cycles / batch:,.0f} "
              f"cycles per image = {CLOCK_HZ * batch / cycles:,.0f} images/s at 3 Mbaud")
    port.close()


def test_digits_built_in_runs_without_a_load(digits):
    x, want = digits
    image = boot_image()
    session, transport, port = session_on(image)
    got, stats, cycles, segment = run(session, transport, port, x[:1])
    check(got, [w[:1] for w in want], f"first run on the twin built with image {image.key}")
    assert segment["loads"] == 0, segment
    assert stats.payload_bytes <= MODEL_BYTES + RUN_REGISTER_BYTES, stats
    print(f"first run, nothing loaded: {stats.payload_bytes} payload and {stats.wire_bytes} "
          f"wire bytes, {cycles:,} cycles")
    port.close()
