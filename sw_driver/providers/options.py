"""Providers built from ``(name, options)``, as onnxruntime builds its execution providers.

``InferenceSession(path, providers=["sim", ("uart", {"port": "/dev/ttyUSB0"}),
("opencl", {"device": "gpu"}), ("pcie", {"prefix": "/dev/xdma1"})])``: a plain name builds
the provider with its defaults; a ``(name, options)`` pair passes ``options`` to the
provider's constructor as keyword arguments. An option the constructor does not take is
refused with an error naming the provider, the option and the options it takes.

Environment variables are a fallback, read here and nowhere else in the providers: an option
left out is taken from the variable in :data:`ENVIRONMENT` when that is set, so a shell or
``make run`` can pick a board without code. An option given always wins. (The OpenCL runtime
itself, used without a provider by the benchmarks, also honours ``TESSERA_OPENCL_DEVICE``
when it is given no device.)
"""

import inspect
import os

from ..errors import ProviderUnavailableError, UnknownProviderError

__all__ = ["ENVIRONMENT", "UnknownProviderOptionError", "environment_options", "make_provider",
           "option_names"]

#: Provider name -> {option: environment variable read when the option is not given}.
ENVIRONMENT = {
    "uart": {"port": "TESSERA_UART_PORT"},
    "pcie": {"prefix": "TESSERA_XDMA"},
    "opencl": {"device": "TESSERA_OPENCL_DEVICE"},
    "gpu": {"device": "TESSERA_OPENCL_DEVICE"},
}


class UnknownProviderOptionError(UnknownProviderError, TypeError):
    """An option that the named provider's constructor does not take."""


def option_names(cls):
    """The keyword options ``cls``'s constructor takes, in signature order."""
    parameters = inspect.signature(cls.__init__).parameters.values()
    return [p.name for p in parameters if p.name != "self"
            and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]


def environment_options(name, given=()):
    """``{option: (value, variable)}`` for the options of provider ``name`` that are not in
    ``given`` and whose environment variable is set to a non-empty value."""
    found = {}
    for option, variable in ENVIRONMENT.get(name, {}).items():
        value = os.environ.get(variable)
        if option not in given and value:
            found[option] = (value, variable)
    return found


def make_provider(name, cls, options=None):
    """Build provider ``name`` (class ``cls``) from ``options`` plus the environment fallback.

    Parameters
    ----------
    name : str
        The provider's name, as listed (for messages and the environment table).
    cls : type
        Its class, from :data:`sw_driver.providers.PROVIDERS`.
    options : dict, optional
        Keyword arguments for the constructor.

    Raises
    ------
    UnknownProviderOptionError
        ``options`` holds a key the constructor does not take, or is not a dict.
    ProviderUnavailableError
        From the constructor; when an option came from the environment, the message says
        which variable set it.
    """
    options = {} if options is None else options
    if not isinstance(options, dict):
        raise UnknownProviderOptionError(
            f"provider {name!r}: options must be a dict of option names to values, not "
            f"{type(options).__name__} {options!r}")
    takes = option_names(cls)
    unknown = [key for key in options if key not in takes]
    if unknown:
        raise UnknownProviderOptionError(
            f"provider {name!r} has no option {unknown[0]!r}; it takes: "
            f"{', '.join(takes) or 'no options'}")
    from_environment = environment_options(name, options)
    kwargs = {**{key: value for key, (value, _) in from_environment.items()}, **options}
    try:
        return cls(**kwargs)
    except ProviderUnavailableError as exc:
        if not from_environment:
            raise
        where = ", ".join(f"{key}={value!r} from ${variable}"
                          for key, (value, variable) in from_environment.items())
        raise ProviderUnavailableError(f"{exc} ({where})") from (exc.__cause__ or exc)
