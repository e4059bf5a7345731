"""The backends a soak case runs on: every provider of :mod:`sw_driver.providers`.

A :class:`Backend` wraps one provider instance for the whole soak (the twin is built or
loaded once and reused for every case) and asks it the two questions a session's planner
asks: will you run this layer (``supports`` at the real input shape, where a too-small
buffer shows), and what is its output
(``provider.run(layer, inputs)``). A provider that cannot start here (no OpenCL GPU, no
XDMA card) is kept as an unavailable backend with the reason its constructor gave.

Providers from outside the project (a vendor's plugin, a test double) join the soak through
:data:`PLUGINS_VARIABLE`: modules that register themselves in
:data:`sw_driver.providers.PROVIDERS`, as the built-in ones do, and are then named with
``--backends``.
"""

import importlib
import importlib.util
import os
from pathlib import Path

from sw_driver.errors import ProviderUnavailableError
from sw_driver.providers import PROVIDERS
from sw_driver.providers.device import DeviceProvider
from sw_driver.providers.options import make_provider, parse_providers, provider_name

from .runner import PLUGINS_VARIABLE

__all__ = ["BACKENDS", "PLUGINS_VARIABLE", "Backend", "load_plugins", "open_backends",
           "parse_backends"]

#: Every provider, in the order the soak reports them.
BACKENDS = ("cpu", "opencl", "gpu", "sim", "pcie")


# PLUGINS_VARIABLE: comma-separated modules (``package.module``) or ``.py`` files that add
# providers to PROVIDERS when imported; Ray tasks carry it to their workers.
_LOADED = {}  # plugin entry -> the provider names it added


def _import(entry):
    if entry.endswith(".py"):
        path = Path(entry)
        spec = importlib.util.spec_from_file_location(f"tessera_soak_plugin_{path.stem}", path)
        if spec is None or not path.is_file():
            raise FileNotFoundError(f"no file {entry}")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    else:
        importlib.import_module(entry)


def load_plugins():
    """Import the plugins named in :data:`PLUGINS_VARIABLE` (once each); return the names
    of the providers they added, in order.

    Raises
    ------
    ValueError
        A plugin that cannot be imported, or one that registers nothing, naming it.
    """
    names = []
    for entry in (e.strip() for e in os.environ.get(PLUGINS_VARIABLE, "").split(",")):
        if not entry:
            continue
        if entry not in _LOADED:
            before = dict(PROVIDERS)
            try:
                _import(entry)
            except Exception as exc:  # any import failure: named, not a traceback
                raise ValueError(f"{PLUGINS_VARIABLE}: cannot import {entry!r}: "
                                 f"{type(exc).__name__}: {exc}") from exc
            added = [name for name, cls in PROVIDERS.items() if before.get(name) is not cls]
            if not added:
                raise ValueError(f"{PLUGINS_VARIABLE}: {entry!r} added no provider to "
                                 f"sw_driver.providers.PROVIDERS")
            _LOADED[entry] = added
        names += [name for name in _LOADED[entry] if name not in names]
    return names


def _make(name, log, sim_config, options):
    """Provider ``name`` built as a session builds it (options, then the environment
    fallback); the "sim" twin is built for ``sim_config`` and reports to ``log``."""
    if name == "sim":
        options = {"log": log, **({"config": sim_config} if sim_config else {}), **options}
    return make_provider(name, PROVIDERS[name], options)


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
    options : dict, optional
        The provider's options (``--backends uart:port=/dev/ttyUSB0``), as a session takes
        them.
    """

    def __init__(self, name, log=print, sim_config=None, options=None):
        self.name, self._log, self._sim_config = name, log, sim_config
        self._options = dict(options or {})
        self.provider, self.unavailable = None, None
        self._open()

    def _open(self):
        try:
            self.provider = _make(self.name, self._log, self._sim_config, self._options)
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
    """Backends from a comma-separated list (``"all"`` or None: every backend), written as
    ``--providers`` is (``sw_driver.providers.options.parse_providers``): names, and
    ``name:key=value`` where a provider takes options.

    Returns
    -------
    list
        Names, and ``(name, options)`` pairs.

    Raises
    ------
    ValueError
        An unknown or repeated name; the message names ``--backends`` and the known names.
    """
    if text is None or text.strip() == "all":
        return list(BACKENDS)
    known = [*BACKENDS, *load_plugins()]
    entries = parse_providers(text)
    names = [provider_name(entry) for entry in entries]
    unknown = [name for name in names if name not in known]
    if unknown or not names or len(set(names)) != len(names):
        raise ValueError(f"--backends must be 'all' or a comma-separated list of distinct "
                         f"names from {', '.join(known)}, not {text!r}")
    return entries


def open_backends(entries, log=print, sim_config=None):
    """:class:`Backend` for each entry of :func:`parse_backends`, in :data:`BACKENDS` order
    then the plugins' (arguments as for :class:`Backend`)."""
    options = {provider_name(entry): dict(entry[1]) if isinstance(entry, tuple) else {}
               for entry in entries}
    order = [*BACKENDS, *load_plugins()]
    return [Backend(name, log, sim_config, options[name]) for name in order if name in options]
