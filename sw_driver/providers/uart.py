"""The "uart" and "uart-twin" providers: Tessera's layers on an accelerator reached over
its serial host link (``docs/uart.md``).

"uart" opens the port given (the CLI's ``--port``; by name, ``$TESSERA_UART_PORT`` is the
fallback, :mod:`.options`), with
:class:`~sw_driver.transport.uart.UartTransport`: a board's FTDI port such as
``/dev/ttyUSB0`` at 3 Mbaud. "uart-twin" runs the same transport over the serial twin
(``twin/serial.py``, found through the ``tessera.twins`` entry point "uart-twin",
:mod:`.simulated`): the bridge RTL inside the Verilator model, so the whole link is
exercised with no board. Like "sim", neither gives the planner a time estimate, so every
layer the engine supports runs on it.
"""

from ..errors import ProviderUnavailableError
from ..transport.base import TransportError
from .device import DeviceProvider
from .simulated import open_simulated

__all__ = ["UartProvider", "UartTwinProvider"]


class UartProvider(DeviceProvider):
    """Conv, Dense, MatMul, MaxPool and Add layers on a board behind a serial port,
    bit-identical to "cpu" (see :mod:`.device`).

    Parameters
    ----------
    port : str, optional
        Device or pyserial URL. Required; built by name, the session takes it from
        ``$TESSERA_UART_PORT`` when not given (:mod:`.options`).
    baudrate : int
    timeout : float
        Seconds a response may take beyond its wire time.
    retries : int
        Resends of a frame before the link is reported broken.

    Raises
    ------
    ProviderUnavailableError
        No port given, the port cannot be opened, or no Tessera accelerator answers.
    """

    name = "uart"

    def __init__(self, port=None, *, baudrate=3_000_000, timeout=0.05, retries=8,
                 resident=True):
        from ..transport.uart import UartTransport

        if not port:
            raise ProviderUnavailableError(
                "provider 'uart': no serial port given; pass --port /dev/ttyUSB0 (make run "
                "BACKEND=uart PORT=/dev/ttyUSB0), ('uart', {'port': ...}) or set "
                "TESSERA_UART_PORT")
        try:
            transport = UartTransport(port, baudrate=baudrate, timeout=timeout,
                                      retries=retries)
        except TransportError as exc:
            raise ProviderUnavailableError(f"provider 'uart': {exc}") from exc
        super().__init__(transport, where=f"UART {port}", resident=resident)


class UartTwinProvider(DeviceProvider):
    """The "uart" provider's code over the serial twin of ``config``.

    Parameters
    ----------
    config : ConvEngineConfig, optional
        Default: the "sim" provider's engine.
    baudrate : int
        Simulated line rate (bytes are paced as a UART at this rate would send them).
    log : callable
        Receives the twin's build messages.
    transport : sw_driver.transport.Transport, optional
        Drive this transport (for example a ``UartTransport`` over a serial twin the caller
        opened) instead of building the serial twin of ``config``.
    """

    name = "uart-twin"

    def __init__(self, config=None, *, baudrate=3_000_000, log=print, transport=None,
                 resident=True):
        if transport is None:
            from ..transport.uart import UartTransport
            from .sim import DEFAULT_CONFIG

            port = open_simulated(self.name, DEFAULT_CONFIG if config is None else config,
                                  baudrate=baudrate, log=log)
            # Simulated seconds: 2 ms is 100 k cycles at the twin's 50 MHz, beyond the
            # bridge's 65 k-cycle gap timeout, so a retry always finds it hunting for SYNC.
            transport = UartTransport(port, timeout=0.002)
        super().__init__(transport, where="serial twin", resident=resident)
