"""The whole accelerator on a board: PLL, reset synchroniser, UART bridge, LEDs.

:class:`AcceleratorBoardTop` puts :class:`hw.uart_top.UartTop` (``AcceleratorTop`` behind
``HostBridge`` and the 8N1 UART) on the board's ``uart`` resource, which amaranth-boards
wires to the FTDI's serial channel on the ULX3S and the iCEBreaker. The ``sync`` domain
runs from a PLL at the frequency the build chose (:mod:`hw.boards.pll`); it is held in
reset until the PLL locks, through a reset synchroniser so reset leaves on a clock edge.
The UART's clock divisor follows from the achieved clock and the baud rate
(:func:`uart_divisor`). LED 0 blinks at about 1 Hz once the clock runs; LED 1 shows the
interrupt line.
"""

from amaranth import ClockDomain, ClockSignal, Module, Signal
from amaranth.lib import io, wiring
from amaranth.lib.cdc import ResetSynchronizer

from contract.config import ConvEngineConfig

from ..double_pumped import ARRAY_DOMAIN
from ..uart_top import UartTop
from .pll import (
    DEFAULT_TOLERANCE,
    Ecp5Pll,
    Ice40PllPad,
    ecp5_pll_settings,
    ice40_pll_settings,
)

#: The FTDI FT231X (ULX3S) and FT2232H (iCEBreaker) both run 3 Mbaud.
DEFAULT_BAUD = 3_000_000

#: Largest relative baud error a build accepts. An 8N1 receiver samples mid-bit after
#: re-synchronising on each start bit, so both ends together may drift about 5% over 10
#: bits; half of that is left to the host side's own error.
BAUD_TOLERANCE = 0.02

FAMILIES = ("ecp5", "iCE40")


def uart_divisor(clock_mhz, baud=DEFAULT_BAUD, *, tolerance=BAUD_TOLERANCE):
    """Clock cycles per UART bit for ``baud`` at ``clock_mhz``: ``(divisor, error)`` with
    the relative baud error of the rounded divisor.

    Raises ``ValueError`` when the error exceeds ``tolerance`` or the divisor is below 2,
    naming the clocks that divide evenly near the one given.
    """
    if isinstance(baud, bool) or not isinstance(baud, int) or baud <= 0:
        raise ValueError(f"baud must be a positive integer, not {baud!r}")
    cycles = clock_mhz * 1e6 / baud
    divisor = max(1, round(cycles))
    error = abs(clock_mhz * 1e6 / divisor - baud) / baud
    if divisor < 2 or error > tolerance:
        below = max(2, int(cycles)) * baud / 1e6
        above = (int(cycles) + 1) * baud / 1e6
        raise ValueError(
            f"{baud} baud at {clock_mhz:g} MHz needs {cycles:.2f} clock cycles per bit "
            f"(a divisor of at least 2, within {100 * tolerance:g}%); clocks that divide "
            f"evenly nearby: {below:g} or {above:g} MHz, or pick another baud rate")
    return divisor, error


class AcceleratorBoardTop(wiring.Component):
    """Top level of a board build: the whole accelerator behind the UART bridge.

    Its pins are requested from the platform (the top has no ports of its own).

    Parameters
    ----------
    config : ConvEngineConfig
        The accelerator to build.
    family : str
        ``"ecp5"`` (EHXPLLL) or ``"iCE40"`` (SB_PLL40_PAD).
    board_clock_mhz : float
        The oscillator's frequency (the PLL input).
    clock_mhz : float
        The frequency the design runs at; refused (:class:`~hw.boards.pll.PllError`) when
        no PLL setting reaches it within ``tolerance``.
    baud : int
        UART rate; refused (``ValueError``) when the achieved clock does not divide it
        within :data:`BAUD_TOLERANCE`.
    image : contract.resident.BootImage, optional
        A model built in: the resident memories' initial contents and checksum.
    """

    def __init__(self, config, *, family, board_clock_mhz, clock_mhz, baud=DEFAULT_BAUD,
                 tolerance=DEFAULT_TOLERANCE, image=None):
        if not isinstance(config, ConvEngineConfig):
            raise TypeError(f"config must be a ConvEngineConfig, not {config!r}")
        if family not in FAMILIES:
            raise ValueError(f"family must be one of {FAMILIES}, not {family!r}")
        if image is not None and not config.resident:
            self._MustUse__silence = True  # refused: nothing to elaborate
            raise ValueError(f"a boot image needs a configuration with resident memories "
                             f"(resident_words > 0), not {config.name}")
        self.config = config
        self.image = image
        self.family = family
        pump = config.array.pump
        if pump != 1 and family != "ecp5":
            self._MustUse__silence = True  # refused: nothing to elaborate
            raise ValueError(f"an array on its own clock (array.pump {pump}) needs the "
                             f"ECP5's second PLL output; {family} builds take array.pump 1")
        try:
            if family == "ecp5":
                # The array's clock: its own where the configuration sets one, else
                # `pump` times the design clock (one beat per engine cycle).
                array_mhz = (None if pump == 1 else
                             config.array_clock_mhz or pump * clock_mhz)
                self.pll_settings = ecp5_pll_settings(board_clock_mhz, clock_mhz,
                                                      tolerance=tolerance,
                                                      array_mhz=array_mhz)
            else:
                self.pll_settings = ice40_pll_settings(board_clock_mhz, clock_mhz,
                                                       tolerance=tolerance)
            self.clock_mhz = self.pll_settings.f_out_mhz
            #: The clock the array runs at: the design clock, or the PLL's second output.
            self.array_clock_mhz = (self.pll_settings.f_array_mhz if pump != 1
                                    else self.clock_mhz)
            self.divisor, self.baud_error = uart_divisor(self.clock_mhz, baud)
        except ValueError:
            # A refused top is not a forgotten one: no "created but never used" warning.
            self._MustUse__silence = True
            raise
        self.baud = baud
        super().__init__({})

    def elaborate(self, platform):
        m = Module()
        m.domains.sync = ClockDomain("sync")
        pumped = self.config.array.pump != 1
        if pumped:
            m.domains += ClockDomain(ARRAY_DOMAIN)
        m.submodules.link = link = UartTop(self.config, divisor=self.divisor,
                                                image=self.image)
        if platform is None:
            # Elaborated on its own (tests, Verilog of the core): no pins, no PLL.
            return m

        if self.family == "ecp5":
            m.submodules.clk_buffer = clk = io.Buffer(
                "i", platform.request(platform.default_clk, dir="-"))
            m.submodules.pll = pll = Ecp5Pll(self.pll_settings)
            m.d.comb += pll.clk_in.eq(clk.i)
        else:
            pad = platform.request(platform.default_clk, dir="-")
            m.submodules.pll = pll = Ice40PllPad(self.pll_settings, pad.io)
        m.d.comb += ClockSignal("sync").eq(pll.clk_out)
        m.submodules.reset_sync = ResetSynchronizer(~pll.locked, domain="sync")
        if pumped:
            m.d.comb += ClockSignal(ARRAY_DOMAIN).eq(pll.array_clk_out)
            m.submodules.array_reset_sync = ResetSynchronizer(~pll.locked,
                                                              domain=ARRAY_DOMAIN)

        uart = platform.request("uart", 0, dir="-")
        m.submodules.uart_rx_buffer = rx = io.Buffer("i", uart.rx)
        m.submodules.uart_tx_buffer = tx = io.Buffer("o", uart.tx)
        m.d.comb += [link.rx.eq(rx.i), tx.o.eq(link.tx)]

        # Bring-up signs of life: a ~1 Hz heartbeat and the interrupt line.
        numbers = sorted(number for name, number in platform.resources if name == "led")
        heartbeat = Signal(max(1, round(self.clock_mhz * 1e6).bit_length() - 1))
        m.d.sync += heartbeat.eq(heartbeat + 1)
        for number, value in zip(numbers, (heartbeat[-1], link.irq), strict=False):
            buffer = io.Buffer("o", platform.request("led", number, dir="-"))
            m.submodules[f"led_{number}"] = buffer
            m.d.comb += buffer.o.eq(value)
        return m
