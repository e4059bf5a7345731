"""Board tops. The whole accelerator behind the UART bridge is
:class:`hw.boards.accelerator.AcceleratorBoardTop`; this module holds the older bare-array
top: the systolic array under an on-chip load, its checksum on the LEDs.

One top serves every board that has ``led`` resources; the board modules (``ulx3s``,
``icebreaker``) only name their platforms and defaults.
"""

from amaranth import Module, Signal
from amaranth.lib import io, wiring

from contract.config import ArrayConfig

from .pattern import CHECKSUM_WIDTH, PatternHarness, fold_bits


class LedChecksumTop(wiring.Component):
    """Top level for a board: :class:`~hw.boards.pattern.PatternHarness` with its checksum
    XOR-folded onto every ``led`` resource of the platform.

    Each checksum bit reaches a pin, and each result bit reaches the checksum, so synthesis
    keeps the whole array. The top has no ports of its own: its pins are requested from
    the platform.

    Parameters
    ----------
    config : ArrayConfig
        Array to build (8x8 by default).
    tile_k : int
        Beats per tile of the operand pattern.
    backpressure : bool
        Whether the result sink stalls the array now and then (see ``PatternHarness``).
    """

    def __init__(self, config=None, *, tile_k=16, backpressure=True):
        if config is None:
            config = ArrayConfig()
        self.harness = PatternHarness(config, tile_k=tile_k, backpressure=backpressure)
        self.config = self.harness.config
        super().__init__({})

    def elaborate(self, platform):
        m = Module()
        m.submodules.harness = harness = self.harness
        if platform is None:
            return m
        numbers = sorted(number for name, number in platform.resources if name == "led")
        if not numbers:
            raise ValueError(f"{type(platform).__name__} has no 'led' resources to drive")
        shown = Signal(len(numbers))
        # Registered, so the LED pads hang off a flip-flop and not off the XOR tree.
        m.d.sync += shown.eq(fold_bits(harness.checksum, len(numbers)))
        for index, number in enumerate(numbers):
            buffer = io.Buffer("o", platform.request("led", number, dir="-"))
            m.submodules[f"led_{number}"] = buffer
            m.d.comb += buffer.o.eq(shown[index])
        return m


__all__ = ["CHECKSUM_WIDTH", "LedChecksumTop", "PatternHarness", "fold_bits"]
