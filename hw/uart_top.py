"""The accelerator behind the serial host bridge: what a board with only a UART to its
host (ULX3S, iCEBreaker: the FTDI's second channel) instantiates.

``AcceleratorTop`` as it is, ``HostBridge`` as its CSR master and DMA peer, and a UART
(``hw/uart.py``) on the pins. With ``byte_port=True`` the UART is left out and the
bridge's byte streams are the ports: the twin (``twin/serial.py``) drives those,
since simulating every bit costs ``divisor`` cycles per bit and tests nothing the UART's
own tests (``tests/test_uart_hw.py``) do not.
"""

from amaranth import Module
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from contract.config import ConvEngineConfig

from .host_bridge import HostBridge
from .pipeline import skid_between
from .resident import accelerator_top
from .uart import UartRx, UartTx


class UartTop(wiring.Component):
    """The whole accelerator with a serial link.

    Parameters
    ----------
    config : ConvEngineConfig
    divisor : int
        Clock cycles per UART bit (ignored with ``byte_port``).
    byte_port : bool
        Expose ``rx``/``tx`` byte streams instead of ``rx``/``tx`` pins.
    image : contract.resident.BootImage, optional
        The resident memories' contents at power-up (:func:`hw.resident.accelerator_top`).
    """

    def __init__(self, config=None, *, divisor=16, byte_port=False, image=None):
        self.config = config or ConvEngineConfig()
        if not isinstance(self.config, ConvEngineConfig):
            raise TypeError(f"config must be a ConvEngineConfig, not {config!r}")
        if image is not None and not self.config.resident:
            self._MustUse__silence = True  # refused: nothing to elaborate
            raise ValueError(f"a boot image needs a configuration with resident memories "
                             f"(resident_words > 0), not {self.config.name}")
        self.image = image
        self.divisor = divisor
        self.byte_port = bool(byte_port)
        if self.byte_port:
            ports = {"rx": In(stream.Signature(8)), "tx": Out(stream.Signature(8))}
        else:
            ports = {"rx": In(1, init=1), "tx": Out(1, init=1)}
        super().__init__({**ports, "irq": Out(1)})
        if not self.byte_port:
            self._uart_rx = UartRx(divisor=divisor)  # checks the divisor now
            self._uart_tx = UartTx(divisor=divisor)

    def elaborate(self, platform):
        m = Module()
        m.submodules.core = core = accelerator_top(self.config, self.image)
        m.submodules.bridge = bridge = HostBridge()
        wiring.connect(m, bridge.csr, core.csr)
        # Both word streams pass a skid buffer: the bridge's framing and retry logic and the
        # core's loader and output writer are far apart on the die, and neither side's
        # ready may wait on the other's (a board build's critical path ran from the core's
        # phase through the h2c ready into the bridge). A word a cycle is far
        # above a serial link's rate, so the extra cycle costs nothing.
        timed = self.config.pipelined
        skid_between(m, "h2c_skid", bridge.h2c, core.h2c, registered=timed)
        skid_between(m, "c2h_skid", core.c2h, bridge.c2h, registered=timed)
        m.d.comb += [core.dbg_force_error.eq(0), self.irq.eq(core.irq)]
        if self.byte_port:
            wiring.connect(m, wiring.flipped(self.rx), bridge.rx)
            wiring.connect(m, bridge.tx, wiring.flipped(self.tx))
        else:
            m.submodules.uart_rx = uart_rx = self._uart_rx
            m.submodules.uart_tx = uart_tx = self._uart_tx
            m.d.comb += [uart_rx.rx.eq(self.rx), self.tx.eq(uart_tx.tx)]
            wiring.connect(m, uart_rx.data, bridge.rx)
            wiring.connect(m, bridge.tx, uart_tx.data)
        return m
