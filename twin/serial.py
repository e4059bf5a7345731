"""The serial twin: the accelerator behind its UART host bridge (``hw/uart_top.py``),
compiled by Verilator with ``twin/harness/serial_harness.cpp``, seen from Python as a serial
port with pyserial's calls (``write``, ``read(n)``, ``timeout``), so that
``sw_driver.transport.uart.UartTransport`` drives it exactly as it drives a board's
``/dev/ttyUSB0``.

The twin exchanges bytes with the bridge directly (``UartTop(byte_port=True)``): the
bit-level UART is tested on its own (``tests/test_uart_hw.py``). Bytes are paced at the
rate of a UART at :attr:`TwinSerial.baudrate` on a :attr:`TwinSerial.clock_hz` clock, and
timeouts are simulated seconds at that clock, so runs are repeatable whatever the load of
the machine. Builds are cached like the twin's (``twin/dma.py``): under
``build/twin-serial/``, keyed by the sources, configuration, flags and tool versions.
"""

import ctypes
import threading
from pathlib import Path

from amaranth import Module, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from contract.config import ConvEngineConfig

from .dma import ARRAY_CLOCK_HEADER, FLAGS, clock_flags, config_folder_name, source_key, verilate
from .handle import LibraryModel
from .runner import BUILD_ROOT
from .top import add_clock_domains, clock_ports

HERE = Path(__file__).resolve().parent
HARNESS = HERE / "harness" / "serial_harness.cpp"


class SerialTwinTop(wiring.Component):
    """``UartTop(byte_port=True)`` with registered inputs (the reason is in
    ``twin/top.py``) and ports ``clock``/``reset``. ``tx.valid`` is qualified by the
    registered ready: the harness takes every byte it shows."""

    def __init__(self, config, image=None):
        from hw.uart_top import UartTop

        self.inner = UartTop(config, byte_port=True, image=image)
        self.config = config
        super().__init__({"rx": In(stream.Signature(8)), "tx": Out(stream.Signature(8)),
                          "irq": Out(1), **clock_ports(config)})

    def elaborate(self, platform):
        m = Module()
        add_clock_domains(m, self, self.config)
        m.submodules.inner = inner = self.inner

        rx_valid, rx_payload = Signal(), Signal(8)
        m.d.comb += [self.rx.ready.eq(~rx_valid | inner.rx.ready),
                     inner.rx.valid.eq(rx_valid), inner.rx.payload.eq(rx_payload)]
        with m.If(self.rx.ready):
            m.d.sync += [rx_valid.eq(self.rx.valid), rx_payload.eq(self.rx.payload)]
        tx_ready = Signal()
        m.d.sync += tx_ready.eq(self.tx.ready)
        m.d.comb += [inner.tx.ready.eq(tx_ready), self.tx.valid.eq(inner.tx.valid & tx_ready),
                     self.tx.payload.eq(inner.tx.payload), self.irq.eq(inner.irq)]
        return m


def build_serial_twin(config, *, image=None, build_root=BUILD_ROOT, log=print):
    """Path of the serial twin's library for ``config``, built when not cached.

    ``image`` (a :class:`contract.resident.BootImage`) builds the model in, as a board's
    bitstream does (``tessera build``): the netlist's name and folder then carry the
    image's key, one netlist per configuration and image."""
    if not isinstance(config, ConvEngineConfig):
        raise TypeError(f"config must be a ConvEngineConfig, not {config!r}")
    if image is not None:
        image.check_fits(config.resident_words, config.program_words)
    tag = "" if image is None else f"-{image.key}"
    flags = FLAGS + clock_flags(config)
    sources = (Path(__file__), HARNESS, ARRAY_CLOCK_HEADER, Path(__file__).parent / "top.py")
    folder = (Path(build_root).resolve() / "twin-serial" / f"{config_folder_name(config)}"
              f"{tag}-{source_key(config, flags, sources)}")
    return verilate(folder, lambda: SerialTwinTop(config, image), flags=flags,
                    harness=HARNESS, what="serial twin", label=config.name + tag, log=log)


_u8_p = ctypes.POINTER(ctypes.c_uint8)


def _bind(lib):
    handle, u64 = ctypes.c_void_p, ctypes.c_uint64
    sig = {
        "serial_new": (handle, []),
        "serial_free": (None, [handle]),
        "serial_reset": (None, [handle, ctypes.c_int]),
        "serial_set_pace": (None, [handle, u64]),
        "serial_push": (None, [handle, _u8_p, u64]),
        "serial_take": (u64, [handle, _u8_p, u64]),
        "serial_available": (u64, [handle]),
        "serial_pending": (u64, [handle]),
        "serial_flush_input": (None, [handle]),
        "serial_run": (u64, [handle, u64, u64]),
        "serial_cycles": (u64, [handle]),
        "serial_irq": (ctypes.c_int, [handle]),
    }
    for name, (restype, argtypes) in sig.items():
        function = getattr(lib, name)
        function.restype, function.argtypes = restype, argtypes
    return lib


class TwinSerial(LibraryModel):
    """A pyserial-like port whose far end is the serial twin.

    Implements what ``UartTransport`` uses of ``serial.Serial``: ``write``, ``read``,
    ``timeout`` (simulated seconds), ``baudrate``, ``port``, ``in_waiting``,
    ``reset_input_buffer``, ``reset_output_buffer``, ``close``. Simulated time only moves
    inside ``read``.

    Parameters
    ----------
    config : ConvEngineConfig
    baudrate : float
        Paces bytes as a UART at this rate would (10 bits per byte, 8N1).
    clock_hz : float
        The simulated device clock, which turns ``timeout`` into cycles.
    timeout : float
        Seconds (simulated) a ``read`` waits for its bytes.
    image : contract.resident.BootImage, optional
        A model built in (:func:`build_serial_twin`).
    """

    def __init__(self, config=None, *, baudrate=3_000_000, clock_hz=50e6, timeout=0.01,
                 build_root=BUILD_ROOT, log=print, image=None):
        self._init_lock()
        self.config = config or ConvEngineConfig()
        self.port = f"twin-serial:{self.config.name}"
        self.clock_hz = float(clock_hz)
        self.baudrate = baudrate
        self.timeout = timeout
        library = build_serial_twin(self.config, image=image, build_root=build_root,
                                    log=log)
        self._open(_bind(ctypes.CDLL(str(library))))
        self._lib.serial_set_pace(self._handle, self.cycles_per_byte)
        self._lib.serial_reset(self._handle, 4)

    @property
    def cycles_per_byte(self):
        """Device cycles per byte on the wire: 10 bits (8N1) at :attr:`baudrate`."""
        return max(1, round(self.clock_hz * 10 / self.baudrate))

    prefix = "serial_"

    def _closed_error(self, name):
        return OSError(f"{self.port}: the port has been closed")

    def write(self, data):
        data = bytes(data)
        buffer = (ctypes.c_uint8 * len(data)).from_buffer_copy(data)
        self._call("push", buffer, len(data))
        return len(data)

    def flush(self):
        """Nothing to do: written bytes are queued for the device at once."""

    def read(self, size=1):
        """Up to ``size`` bytes: fewer only when :attr:`timeout` (simulated) passed."""
        budget = (1 << 62) if self.timeout is None else int(self.timeout * self.clock_hz)
        self._call("run", budget, size)
        out = (ctypes.c_uint8 * size)()
        count = self._call("take", out, size)
        return bytes(out[:count])

    @property
    def in_waiting(self):
        return int(self._call("available"))

    @property
    def cycles(self):
        return int(self._call("cycles"))

    @property
    def irq(self):
        return bool(self._call("irq"))

    def reset_input_buffer(self):
        count = self.in_waiting
        if count:
            self._call("take", (ctypes.c_uint8 * count)(), count)

    def reset_output_buffer(self):
        self._call("flush_input")


class FaultyPort:
    """A serial port wrapper that damages the link, for the retry tests: each byte in
    either direction is dropped with probability ``drop`` or has one bit flipped with
    probability ``flip``, from a seeded generator.

    ``damaged_writes`` counts frames (``write`` calls) that lost or changed a byte, and
    ``dropped``/``flipped`` the bytes, so a test can match them against the transport's
    retries.
    """

    def __init__(self, port, *, seed, drop=0.0, flip=0.0):
        import random

        self.inner = port
        self.seed = seed
        self.random = random.Random(seed)
        self.drop, self.flip = drop, flip
        self.dropped = self.flipped = self.damaged_writes = 0

    def _damage(self, data):
        out = bytearray()
        for byte in data:
            roll = self.random.random()
            if roll < self.drop:
                self.dropped += 1
                continue
            if roll < self.drop + self.flip:
                self.flipped += 1
                byte ^= 1 << self.random.randrange(8)
            out.append(byte)
        return bytes(out)

    def write(self, data):
        damaged = self._damage(data)
        if damaged != bytes(data):
            self.damaged_writes += 1
        self.inner.write(damaged)
        return len(data)

    def read(self, size=1):
        return self._damage(self.inner.read(size))

    def __getattr__(self, name):  # timeout, baudrate, port, close, ...: the inner port's
        return getattr(self.inner, name)

    def __setattr__(self, name, value):
        if name == "timeout":
            self.inner.timeout = value
        else:
            super().__setattr__(name, value)


class PtyBridge:
    """The serial twin behind a pseudo-terminal: a program opens :attr:`path` as it would
    ``/dev/ttyUSB0`` (pyserial's real ``Serial`` class, termios and all) and talks to the
    twin. A thread moves bytes between the pty and the twin, simulating ``slice_cycles``
    at a time; the twin runs at wall-clock speed, so give it a fast ``baudrate``.

    Use as a context manager; the thread and the pty end on exit.
    """

    def __init__(self, port, *, slice_cycles=2000):
        import os

        self.port = port
        self.slice = slice_cycles / port.clock_hz
        self.master, self._slave = os.openpty()
        self.path = os.ttyname(self._slave)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._pump, name="pty-twin", daemon=True)

    def _pump(self):
        import os
        import select

        while not self._stop.is_set():
            readable, _, _ = select.select([self.master], [], [], 0.001)
            if readable:
                try:
                    self.port.write(os.read(self.master, 4096))
                except OSError:
                    return
            self.port.timeout = self.slice
            out = self.port.read(4096)  # runs the slice, takes what the device sent
            if out:
                os.write(self.master, out)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        import os

        self._stop.set()
        self._thread.join()
        os.close(self.master)
        os.close(self._slave)
