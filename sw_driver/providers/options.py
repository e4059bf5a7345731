"""Providers built from ``(name, options)``, as onnxruntime builds its execution providers.

``InferenceSession(path, providers=["sim", ("uart", {"port": "/dev/ttyUSB0"}),
("opencl", {"device": "gpu"}), ("pcie", {"prefix": "/dev/xdma1"})])``: a plain name builds
the provider with its defaults; a ``(name, options)`` pair passes ``options`` to the
provider's constructor as keyword arguments. An option the constructor does not take is
refused with an error naming the provider, the option and the options it takes.

On a command line (``tessera run --providers``, ``run-dataset``, ``soak``) the same list is
one string, read by :func:`parse_providers`: comma-separated entries, each a name or
``name:key=value;key=value`` (``uart:port=/dev/ttyUSB0,cpu``; a value is read as JSON when
it parses, else kept as text, so ``baudrate=115200`` is a number and
``port=socket://host:5000`` a string), or the whole list as JSON
(``'[["opencl", {"device": "gpu"}], "cpu"]'``) when a value holds a comma or a semicolon.
:func:`format_providers` writes a list back in that form.

Environment variables are a fallback, read here and nowhere else in the providers: an option
left out is taken from the variable in :data:`ENVIRONMENT` when that is set, so a shell or
``make run`` can pick a board without code. An option given always wins. The providers and
the runtimes below them read no environment variable themselves; code that builds one
directly and wants the same fallback asks :func:`environment_option`.
"""

import inspect
import json
import os

from ..errors import ProviderUnavailableError, UnknownProviderError

__all__ = ["ENVIRONMENT", "UnknownProviderOptionError", "environment_options",
           "environment_option", "format_providers", "make_provider", "option_names",
           "parse_providers",
           "provider_name"]

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


def environment_option(name, option):
    """Provider ``name``'s ``option`` from its environment variable, or None when that is
    unset (``OpenCLRuntime(environment_option("opencl", "device"))``)."""
    found = environment_options(name)
    return found[option][0] if option in found else None


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


def provider_name(entry):
    """The name of a providers-list entry: a name, a ``(name, options)`` pair or a provider
    instance."""
    if isinstance(entry, str):
        return entry
    if isinstance(entry, (tuple, list)):
        return entry[0]
    return getattr(entry, "name", type(entry).__name__)


def _option_value(text):
    try:
        return json.loads(text)
    except ValueError:
        return text


def _parse_entry(entry, text):
    name, _, rest = entry.partition(":")
    name = name.strip()
    if not name:
        raise UnknownProviderOptionError(f"--providers {text!r}: an entry has no name")
    if not rest.strip():
        return name
    options = {}
    for part in rest.split(";"):
        key, equals, value = part.partition("=")
        if not equals or not key.strip():
            raise UnknownProviderOptionError(
                f"--providers {text!r}: provider {name!r}: options are key=value separated "
                f"by ';', not {part!r}")
        options[key.strip()] = _option_value(value.strip())
    return (name, options)


def parse_providers(text):
    """The providers list written in ``text`` (see the module's docstring).

    Returns
    -------
    list
        Names, and ``(name, options)`` pairs where options were given.

    Raises
    ------
    UnknownProviderOptionError
        An entry without a name, an option without ``=``, or JSON that is not a list of
        names and ``[name, {options}]`` pairs.
    """
    if text.lstrip().startswith("["):
        try:
            entries = json.loads(text)
        except ValueError as exc:
            raise UnknownProviderOptionError(f"--providers {text!r}: not valid JSON: "
                                             f"{exc}") from None
        result = []
        for entry in entries:
            if isinstance(entry, str):
                result.append(entry)
            elif (isinstance(entry, list) and len(entry) == 2 and isinstance(entry[0], str)
                  and isinstance(entry[1], dict)):
                result.append((entry[0], entry[1]))
            else:
                raise UnknownProviderOptionError(
                    f"--providers {text!r}: each entry must be a name or [name, {{options}}], "
                    f"not {entry!r}")
        return result
    return [_parse_entry(entry, text) for entry in text.split(",") if entry.strip()]


def format_providers(entries):
    """``entries`` written as :func:`parse_providers` reads them (names joined by commas when
    no options are given)."""
    parts = []
    for entry in entries:
        if isinstance(entry, (tuple, list)) and entry[1]:
            options = ";".join(f"{key}={value if isinstance(value, str) else json.dumps(value)}"
                               for key, value in entry[1].items())
            parts.append(f"{entry[0]}:{options}")
        else:
            parts.append(provider_name(entry))
    return ",".join(parts)
