"""The simulated devices behind the "sim" and "uart-twin" providers, found by name.

The driver names no simulator. The twin layer (``twin/``) declares its models in
``pyproject.toml`` under the entry point group :data:`GROUP`, one per provider name:
"sim" the twin on the CSR port and DMA streams (driven through
:class:`~sw_driver.transport.sim.SimTransport`), "uart-twin" the serial twin (a pyserial-like
port, driven through :class:`~sw_driver.transport.uart.UartTransport`). A provider built by
name loads the model registered under its own name; a composition root that already holds
a device passes its transport in instead (the ``transport`` option), and then nothing is
looked up.
"""

from importlib.metadata import entry_points

from ..errors import ProviderUnavailableError

__all__ = ["GROUP", "open_simulated"]

#: Entry point group of the simulated devices: ``name = "module:factory"``, the factory
#: called with the engine configuration and the provider's keyword options.
GROUP = "tessera.twins"


def open_simulated(name, config, **options):
    """The simulated device registered as ``name``, built for ``config``.

    Raises
    ------
    ProviderUnavailableError
        No package declares ``name`` in :data:`GROUP` (the project is not installed, or
        installed before the group existed).
    """
    found = entry_points(group=GROUP, name=name)
    if not found:
        raise ProviderUnavailableError(
            f"provider {name!r}: no simulated device is registered as {name!r} in the entry "
            f"point group {GROUP!r}; the twin package declares it in pyproject.toml, so "
            f"install the project (make setup, or pip install -e .)")
    factory = next(iter(found)).load()
    return factory(config, **options)
