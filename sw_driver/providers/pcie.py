"""The "pcie" provider: Tessera's layers on a Tessera accelerator behind Xilinx XDMA.

The card is found at the device prefix given (built by name, the session takes it from
``$TESSERA_XDMA`` when not given, :mod:`.options`), else ``/dev/xdma0``
(``<prefix>_user``, ``<prefix>_h2c_0``, ``<prefix>_c2h_0``). When the device files do not
exist, cannot be opened, or no Tessera accelerator answers, constructing the provider
raises :class:`~sw_driver.errors.ProviderUnavailableError`, so
``providers=["pcie", "cpu"]`` runs on the CPU with a warning.

Unlike the twin, the card has a time model for the planner (:mod:`sw_driver.providers.costs`):
modelled cycles at ``clock_hz`` plus the link's cost, so a layer whose transfers cost more
than the CPU's time for it stays on the CPU.
"""

import os

from ..errors import ProviderUnavailableError
from ..transport.base import TransportError
from ..transport.xdma import XdmaTransport
from . import costs
from .base import Cost
from .device import DeviceProvider

__all__ = ["DEFAULT_CLOCK_HZ", "DEFAULT_PREFIX", "PCIeProvider"]

DEFAULT_PREFIX = "/dev/xdma0"
#: The engine's clock on the card when nothing else is known.
DEFAULT_CLOCK_HZ = 150e6


class PCIeProvider(DeviceProvider):
    """Runs Conv (incl. depthwise), Dense, MatMul, 2x2 MaxPool, GlobalAveragePool and Add
    layers on the card, bit-identical to "cpu" (see :mod:`.device`).

    Parameters
    ----------
    prefix : str, optional
        XDMA device prefix; default ``/dev/xdma0`` (by name: ``$TESSERA_XDMA`` first).
    channel : int, optional
        DMA channel.
    timeout : float, optional
        Seconds a DMA read may wait.
    clock_hz : float, optional
        The engine's clock, for the planner's estimate (default 150 MHz).
    link : sw_driver.providers.costs.LinkModel, optional
        Costs of the host link (default: XDMA on PCIe Gen3 x8).
    transport : sw_driver.transport.Transport, optional
        Use this transport instead of opening the devices (tests, other bridges).

    Raises
    ------
    ProviderUnavailableError
        The devices are missing or unusable, or no Tessera accelerator answers.
    """

    name = "pcie"

    def __init__(self, prefix=None, *, channel=0, timeout=1.0, clock_hz=DEFAULT_CLOCK_HZ,
                 link=None, transport=None, resident=True):
        if not clock_hz > 0:
            raise ValueError(f"clock_hz must be positive, not {clock_hz!r}")
        self.clock_hz = float(clock_hz)
        self.link = costs.LinkModel() if link is None else link
        if transport is None:
            prefix = prefix or DEFAULT_PREFIX
            transport = _open(prefix, channel, timeout)
            where = prefix
        else:
            where = prefix or type(transport).__name__
        super().__init__(transport, where=where, resident=resident)

    def link_seconds(self, nbytes, *, transfers, csr_accesses):
        """The link's time on :attr:`link` (XDMA's figures by default)."""
        link = self.link
        return (transfers * link.transfer_seconds + nbytes / link.bytes_per_second
                + csr_accesses * link.csr_seconds,
                f"XDMA link model ({link.transfer_seconds * 1e6:g} us a transfer, "
                f"{link.bytes_per_second / 1e9:g} GB/s)")

    def estimate(self, layer, shape):
        """Seconds on the card: modelled cycles at :attr:`clock_hz` plus the link's cost."""
        work = self.device_work(layer, shape)
        compute = work.cycles / self.clock_hz
        link = self.link.seconds(work)
        return Cost(
            seconds=compute + link, cycles=work.cycles, bytes=work.bytes,
            note=f"{work.cycles:,} cycles at {self.clock_hz / 1e6:g} MHz = "
                 f"{costs.format_seconds(compute)} + link {costs.format_seconds(link)} for "
                 f"{work.passes} pass(es), {work.bytes:,} bytes")


def _open(prefix, channel, timeout):
    paths = [f"{prefix}_user", f"{prefix}_h2c_{channel}", f"{prefix}_c2h_{channel}"]
    missing = [path for path in paths if not os.path.exists(path)]
    if missing:
        raise ProviderUnavailableError(
            f"provider 'pcie': no XDMA device at {prefix} ({', '.join(missing)} "
            f"{'does' if len(missing) == 1 else 'do'} not exist); is the card present and "
            f"the xdma driver loaded (lsmod | grep xdma)? Another card: "
            f"('pcie', {{'prefix': '/dev/xdmaN'}}) or TESSERA_XDMA=/dev/xdmaN")
    try:
        return XdmaTransport(prefix, channel=channel, timeout=timeout)
    except TransportError as exc:
        raise ProviderUnavailableError(f"provider 'pcie': {exc}") from exc
