"""The "sim" provider: Tessera's layers on the Verilator twin of the accelerator.

The twin (``twin/dma.py``, ``docs/twin.md``) is the whole accelerator compiled by
Verilator, behind the same Transport as a board
(:class:`~sw_driver.transport.sim.SimTransport`), so this provider runs exactly the driver
code a board runs and its outputs are the RTL's. The twin for a configuration is built on
first use (one to two minutes for the default 8x8 engine) and cached under
``build/twin/``; later sessions load it in milliseconds. The driver does not name the twin:
it is found through the ``tessera.twins`` entry point "sim" (:mod:`.simulated`), or passed in
as a ``transport``.

The twin has no time estimate for the planner: its wall time is a simulator's, not the
device's, so when the user lists "sim" every layer it supports runs on it (the placement
reason still shows the modelled cycles). See :mod:`sw_driver.planner`.
"""

from contract.config_file import DEFAULT_PRESET, PRESETS

from ..transport.sim import SimTransport
from .device import DeviceProvider
from .simulated import open_simulated

__all__ = ["DEFAULT_CONFIG", "SimProvider"]

#: The engine the "sim" provider builds by default: the default preset (an 8x8 array with
#: buffers large enough for the zoo's models; docs/config.md).
DEFAULT_CONFIG = PRESETS[DEFAULT_PRESET]


class SimProvider(DeviceProvider):
    """Runs Conv (incl. depthwise), Dense, MatMul, 2x2 MaxPool, GlobalAveragePool and Add
    layers on a Verilator twin, bit-identical to the "cpu" provider; other layers fall back
    to the next provider.

    Parameters
    ----------
    config : ConvEngineConfig, optional
        The engine to simulate (default :data:`DEFAULT_CONFIG`).
    cycle_budget : int, optional
        Simulated cycles a pass may take before it is reported as hung.
    log : callable, optional
        Receives the twin's build messages (default ``print``).
    transport : sw_driver.transport.Transport, optional
        Drive this transport (a twin the caller opened) instead of building the twin of
        ``config``; ``cycle_budget`` and ``log`` are then unused.
    resident : bool, optional
        Run whole runs of the device's layers from on-chip memory when the device has the
        resident player and they fit (``docs/resident.md``); False: always layer at a time.
    """

    name = "sim"

    def __init__(self, config=None, *, cycle_budget=20_000_000, log=print, transport=None,
                 resident=True):
        self.engine = DEFAULT_CONFIG if config is None else config
        if transport is None:
            transport = SimTransport(open_simulated(self.name, self.engine, log=log),
                                     cycle_budget=cycle_budget)
        super().__init__(transport, where="Verilator twin", resident=resident)
