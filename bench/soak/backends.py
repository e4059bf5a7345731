"""The backends a soak case runs on: every provider of :mod:`sw_driver.providers`.

A :class:`Backend` wraps one provider instance for the whole soak (the twin is built or
loaded once and reused for every case) and asks it the two questions a session's planner
asks: will you run this layer (``supports`` at the real input shape, where a too-small
buffer shows), and what is its output
(``provider.run(layer, inputs)``). A provider that cannot start here (no OpenCL GPU, no
XDMA card) is kept as an unavailable backend with the reason its constructor gave.
"""

from sw_driver.errors import ProviderUnavailableError
from sw_driver.providers import PROVIDERS
from sw_driver.providers.device import DeviceProvider
from sw_driver.providers.sim import SimProvider

__all__ = ["BACKENDS", "Backend", "open_backends", "parse_backends"]

#: Every provider, in the order the soak reports them.
BACKENDS = ("cpu", "opencl", "gpu", "sim", "pcie")


def _make(name, log, sim_config):
    if name == "sim":
        return SimProvider(sim_config, log=log)
    return PROVIDERS[name]()


class Backend:
    """One provider under test, or the reason it cannot be used here.

    Parameters
    ----------
    name : str
        A provider name from :data:`BACKENDS`.
    log : callable
        Receives build messages (the twin's first build takes a minute or two).
    sim_config : contract.config.ConvEngineConfig or None
        The engine the "sim" backend simulates (None: the provider's default, 8x8).
    """

    def __init__(self, name, log=print, sim_config=None):
        self.name, self._log, self._sim_config = name, log, sim_config
        self.provider, self.unavailable = None, None
        self._open()

    def _open(self):
        try:
            self.provider = _make(self.name, self._log, self._sim_config)
        except ProviderUnavailableError as exc:
            self.provider, self.unavailable = None, " ".join(str(exc).split())

    @property
    def available(self):
        return self.provider is not None

    @property
    def label(self):
        """The provider as its repr shows it (device, engine size) or why it is absent."""
        return repr(self.provider) if self.available else f"unavailable: {self.unavailable}"

    def refusal(self, case):
        """Why the provider will not run ``case``'s layer, or None if it will."""
        refusal = self.provider.supports(case.layer, tuple(case.inputs[0].shape))
        return None if refusal is None else refusal.reason

    def run(self, case):
        """The provider's output for ``case`` (a NumPy array)."""
        return self.provider.run(case.layer, list(case.inputs))

    def reopen(self):
        """A fresh provider after an error, so one failure cannot spoil the next case."""
        if isinstance(self.provider, DeviceProvider):
            self.provider.close()
        self._open()

    def close(self):
        if isinstance(self.provider, DeviceProvider):
            self.provider.close()
        self.provider = None


def parse_backends(text):
    """Backend names from a comma-separated list (``"all"`` or None: every backend).

    Raises
    ------
    ValueError
        An unknown or repeated name; the message names ``--backends`` and the known names.
    """
    if text is None or text.strip() == "all":
        return list(BACKENDS)
    names = [part.strip() for part in text.split(",") if part.strip()]
    unknown = [name for name in names if name not in BACKENDS]
    if unknown or not names or len(set(names)) != len(names):
        raise ValueError(f"--backends must be 'all' or a comma-separated list of distinct "
                         f"names from {', '.join(BACKENDS)}, not {text!r}")
    return names


def open_backends(names, log=print, sim_config=None):
    """:class:`Backend` for each name, in :data:`BACKENDS` order (arguments as for
    :class:`Backend`)."""
    return [Backend(name, log, sim_config) for name in BACKENDS if name in names]
