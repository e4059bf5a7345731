"""Run inferences on the energy twin and turn their switching activity into an energy
ESTIMATE per inference (``tessera energy``, ``bench/bench_energy.py``, docs/energy.md).

The model runs through the ordinary driver (``sw_driver.InferenceSession``) with a device
provider over the energy twin of the board's configuration; layers the device does not
run fall back to the CPU and are listed, since their energy is not in the estimate.
"""

from dataclasses import replace
from pathlib import Path

import numpy as np

from . import model as energy_model

#: Cycles a pass may take on the energy twin before it is reported hung.
CYCLE_BUDGET = 20_000_000


def board_setup(board):
    """``(ConvEngineConfig, clock in MHz)`` of ``board``'s default build
    (``hw.bitstream``), or an :class:`~tessera.energy.model.EnergyModelError` listing the
    boards."""
    from hw.bitstream import DEFAULT_CLOCK_MHZ, KNOWN_BOARDS, default_config

    if board not in KNOWN_BOARDS:
        raise energy_model.EnergyModelError(
            f"unknown board {board!r}; known boards: {', '.join(sorted(KNOWN_BOARDS))}")
    return default_config(board), DEFAULT_CLOCK_MHZ[board]


def read_macs(transport):
    """The array's MAC counter (PERF_MACS), 64 bits."""
    from sw_driver.regs import Reg

    return transport.csr_read(Reg.PERF_MACS_LO) | transport.csr_read(Reg.PERF_MACS_HI) << 32


class EnergyRun:
    """The energy twin of one configuration behind the driver.

    ``measure(work)`` hard-resets the twin, re-initialises it as the driver does when it
    opens a device (so every measurement starts from the same state and is repeatable),
    zeroes the counters, calls ``work()`` and returns the activity with the MACs issued.

    Parameters
    ----------
    config : ConvEngineConfig
    log : callable
        Receives the build messages.
    """

    def __init__(self, config, *, log=print):
        from sw_driver.accelerator import Accelerator
        from sw_driver.transport.sim import SimTransport
        from twin.energy import EnergyTwin

        self.config = config
        # The MACs (the report's ops) are read from PERF_MACS: a configuration built
        # without the counters (the iCEBreaker's) is simulated with them, their switching
        # counted in the host interface, and the report says so (``counters_added``).
        self.counters_added = not config.perf_counters
        simulated = replace(config, perf_counters=True) if self.counters_added else config
        self.twin = EnergyTwin(simulated, log=log)
        self.transport = SimTransport(self.twin, cycle_budget=CYCLE_BUDGET)
        self.accelerator = Accelerator(self.transport)
        self._provider = None

    def measure(self, work):
        """Activity (``Activity.as_dict()`` plus ``macs``) of ``work()``, and its result."""
        from sw_driver.accelerator import Accelerator

        self.twin.reset()
        Accelerator(self.transport)  # what opening the device writes (interrupt enables)
        self.twin.start()
        result = work()
        activity = self.twin.activity().as_dict()
        activity["macs"] = read_macs(self.transport)
        return activity, result

    def provider(self):
        """A device provider named "sim" over this twin, for ``InferenceSession``."""
        if self._provider is None:
            from sw_driver.providers.device import DeviceProvider

            class EnergyTwinProvider(DeviceProvider):
                name = "sim"

            self._provider = EnergyTwinProvider(self.transport, where="Verilator energy twin")
        return self._provider

    def close(self):
        self.transport.close()


def model_inputs(session, batch, seed):
    """Seeded random feeds (uniform in [0, 1)) of ``batch`` samples for every input."""
    rng = np.random.default_rng(seed)
    feeds = {}
    for spec in session.get_inputs():
        shape = [batch if not isinstance(d, int) or i == 0 else d
                 for i, d in enumerate(spec.shape)]
        feeds[spec.name] = rng.random(shape, dtype=np.float32)
    return feeds


def measure_model(run, path, *, batch=1, seed=0):
    """Activity of one ``session.run`` of the model at ``path`` on ``run``'s twin, with the
    layers that ran elsewhere (their energy is not counted)."""
    from sw_driver import InferenceSession

    session = InferenceSession(str(path), providers=[run.provider()])
    feeds = model_inputs(session, batch, seed)
    activity, _ = run.measure(lambda: session.run(None, feeds))
    elsewhere = [f"{entry['layer']} ({entry['op']})" for entry in session.profile()
                 if entry["provider"] != "sim"]
    return activity, elsewhere


def report(activity, board, *, coefficients=energy_model.COEFFICIENTS, clock_mhz=None,
           inferences=1):
    """The ESTIMATE for ``activity`` on ``board``: energy per block and kind, nJ per
    inference, average W, GOP/s and GOP/s/W (ops = 2 x MACs issued by the array)."""
    document = energy_model.load_coefficients(coefficients)
    device_name, device = energy_model.device_for(document, board)
    if clock_mhz is None:
        _, clock_mhz = board_setup(board)
    energy = energy_model.estimate(activity, device, clock_mhz * 1e6)
    figures = energy_model.summary(energy, 2 * activity["macs"], inferences)
    return {"label": energy_model.LABEL, "board": board, "device": device_name,
            "calibrated": "calibration" in device, "clock_mhz": clock_mhz,
            "coefficients": str(Path(coefficients)), **figures,
            "cycles": activity["cycles"], "macs": activity["macs"], "energy": energy}


def resources(board, build_root="build"):
    """``{resource: [used, available]}`` from ``build/<board>/report.json``, or None when the
    board's bitstream has not been built."""
    from hw.bitstream import load_report

    built = load_report(board, build_root)
    if built is None:
        return None
    return {key.removesuffix("_used"): [value, built.get(key.replace("_used", "_available"))]
            for key, value in built.items() if key.endswith("_used")}


def energy_of_model(path, board, *, batch=1, seed=0, coefficients=energy_model.COEFFICIENTS,
                    clock_mhz=None, calibrate=None, write=None, run=None, log=print):
    """``tessera energy``: run ``batch`` seeded inputs of the model at ``path`` on the
    energy twin of ``board``'s configuration and return :func:`report` (plus the layers
    that ran elsewhere and the board's resources when built). The clock is ``clock_mhz``,
    else the one the board's last build made (``report.json``), else the board's default.

    ``calibrate=(idle_w, busy_w)``: readings of the board running this model back to back
    (docs/energy.md); the coefficients are fitted to them and written to ``write`` (default:
    the ``coefficients`` file itself) before the report is made with them. ``run``: an
    :class:`EnergyRun` of the board's configuration to reuse (otherwise one is opened and
    closed here).
    """
    path = Path(path)
    if not path.exists():
        raise energy_model.EnergyModelError(f"{path}: no such model file")
    if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
        raise energy_model.EnergyModelError(f"batch must be a positive integer, not {batch!r}")
    document = energy_model.load_coefficients(coefficients)
    energy_model.device_for(document, board)  # an unknown board fails before any build
    config, default_mhz = board_setup(board)
    if clock_mhz is None:  # the clock the board's last build made, else its default
        from hw.bitstream import load_report

        built = load_report(board) or {}
        clock_mhz = built.get("clock_mhz") or default_mhz
    if run is not None and run.config != config:
        raise energy_model.EnergyModelError(
            f"the energy run simulates {run.config.name}, not {board}'s {config.name}")
    own = run is None
    run = EnergyRun(config, log=log) if own else run
    try:
        activity, elsewhere = measure_model(run, path, batch=batch, seed=seed)
    finally:
        if own:
            run.close()
    if calibrate is not None:
        _, device = energy_model.device_for(document, board)
        idle_w, busy_w = calibrate
        fitted = energy_model.calibrate(device, activity, clock_mhz * 1e6, idle_w=idle_w,
                                        busy_w=busy_w)
        coefficients = energy_model.write_calibrated(coefficients, board, fitted, write)
    result = report(activity, board, coefficients=coefficients, clock_mhz=clock_mhz,
                    inferences=batch)
    result.update(model=str(path), batch=batch, seed=seed, config=config.as_dict(),
                  counters_added=run.counters_added,
                  not_counted=elsewhere, resources=resources(board), activity=activity)
    return result
