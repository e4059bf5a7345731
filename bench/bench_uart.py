"""The UART host link's protocol overhead on a digits inference (target: framing,
CRC and acknowledgements at most 10% of the wire at 3 Mbaud).

The digits CNN runs on the serial twin (the bridge RTL inside the Verilator model, bytes
paced as a 3 Mbaud UART on a 50 MHz clock) through ``UartTransport``, exactly as on a
board. Every byte on the wire is counted by the transport: payload is what the layers
move (DMA words, CSR values), the peer figure of this run; overhead is SYNC, header, CRC,
CSR offsets, read requests, acknowledgements and polls. A UART's start and stop bits (2 of
every 10 bits, whatever the protocol) are reported apart from it.
"""

import time

from bench.common import metric, write_results
from contract.config import ArrayConfig, ConvEngineConfig
from models.zoo import DIGITS_QDQ, load_digits_split
from sw_driver import InferenceSession
from sw_driver.providers import UartTwinProvider
from sw_driver.transport.uart import LinkStats

#: The 4x4 engine of the tests: more passes (and so more register traffic) per image than
#: the 8x8 default, so its overhead is the larger of the two.
CONFIG = ConvEngineConfig(array=ArrayConfig(rows=4, cols=4), act_depth=2048,
                          weight_depth=2048, max_col_tiles=8)
BAUD = 3_000_000
TARGET = 0.10


def measure(session, transport, x):
    transport.stats = LinkStats()
    started = time.monotonic()
    session.run(None, {"input": x})
    return transport.stats, time.monotonic() - started


def main():
    _, _, images, _ = load_digits_split()
    provider = UartTwinProvider(CONFIG, baudrate=BAUD)
    transport = provider.transport.inner
    metrics = []
    try:
        session = InferenceSession(DIGITS_QDQ, providers=[provider, "cpu"])
        for batch in (1, 8):
            stats, wall = measure(session, transport, images[:batch])
            share = stats.overhead_bytes / stats.wire_bytes
            wire_s = stats.wire_bytes * 10 / BAUD
            label = f"digits batch {batch}"
            metrics += [
                metric(f"{label}: protocol overhead", round(share, 4), "fraction of wire bytes",
                       peer="payload bytes", peer_value=stats.payload_bytes,
                       target=f"<= {TARGET}",
                       note=f"{stats.overhead_bytes} overhead of {stats.wire_bytes} bytes "
                            f"({stats.frames} frames, {stats.empty_reads} empty polls, "
                            f"{stats.retries} retries)"),
                metric(f"{label}: overhead counting CSR offsets too",
                       round((stats.overhead_bytes + stats.offset_bytes) / stats.wire_bytes, 4),
                       "fraction of wire bytes",
                       note=f"the stricter reading: the {stats.offset_bytes} bytes of register "
                            f"offsets (which AXI4-Lite carries too) as overhead"),
                metric(f"{label}: wire time at 3 Mbaud", round(wire_s * 1e3, 2), "ms",
                       note="10 bits per byte (8N1): start and stop bits are 20% of it, "
                            "not counted as protocol overhead"),
                metric(f"{label}: twin wall time", round(wall, 2), "s",
                       note="simulation speed, not the board's"),
            ]
    finally:
        provider.close()
    return write_results("uart_link", metrics, config=CONFIG.as_dict(), baud=BAUD,
                         clock_hz=50e6)


if __name__ == "__main__":
    main()
