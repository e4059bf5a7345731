"""The ``tessera serve`` configuration file: models, devices and tenants, in TOML.

Read with the standard library's :mod:`tomllib` (no dependency) and checked in full before
the server starts: every refusal is a :class:`ServeConfigError` naming the file, the table
and key, and what was expected. See ``docs/serving.md`` for the format.
"""

import ipaddress
import math
import os
import tomllib
from dataclasses import dataclass
from pathlib import Path

from sw_driver.errors import TesseraError

__all__ = ["DeviceConfig", "ModelConfig", "PRIORITIES", "ServeConfig", "ServeConfigError",
           "TenantConfig", "load_config", "parse_config"]

#: Priority classes, most important first.
PRIORITIES = ("high", "normal", "low")
#: Shortest token accepted: a guessable token is no authentication.
MIN_TOKEN_LENGTH = 16

_SERVER_KEYS = {"host", "port", "max_body_bytes", "priority_lanes", "lane_nice",
                "lane_batch_ms"}
#: How much lower the side lane's CPU priority is than the main process's (``nice``
#: increment; tessera/serve/lanes.py).
DEFAULT_LANE_NICE = 10
#: Milliseconds the side lane holds a request for others of its model to go with it to
#: the main process as one message (0: each alone).
DEFAULT_LANE_BATCH_MS = 2.0
_DEVICE_KEYS = {"workers", "max_queue", "providers", "instances", "config", "process",
                "timeout_s", "probe_s"}
#: Seconds between probe runs of a device that failed (tessera/serve/health.py).
DEFAULT_PROBE_S = 5.0
MAX_PROBE_S = 3600.0
#: Where a device's runs execute: in the server's own threads, or in worker processes of
#: their own (``tessera/serve/worker.py``; docs/serving.md compares the two).
PROCESSES = ("thread", "worker")
DEFAULT_PROCESS = "thread"
#: Seconds a run in a worker process may take before it counts as a device fault.
DEFAULT_TIMEOUT_S = 60.0
#: Providers of an instance device when the file names none: its twin, then the CPU.
INSTANCE_PROVIDERS = ("sim", "cpu")
#: Requests that may wait per device when the file does not say.
DEFAULT_MAX_QUEUE = 256
_MODEL_KEYS = {"path", "providers", "device", "devices", "max_batch", "parallelism",
               "max_queue_delay_ms", "preferred_batch_sizes"}
#: The longest a request may be held back for a fuller batch (``max_queue_delay_ms``).
MAX_QUEUE_DELAY_MS = 1000
#: How a model uses several devices: whole requests on each (data), its layers split in two
#: stages over two devices (pipeline), or whichever the planner predicts faster (auto).
PARALLELISMS = ("data", "pipeline", "auto")
_TENANT_KEYS = {"token", "token_env", "models", "priority", "slo_ms", "rate", "burst",
                "quota", "isolation", "instances"}
#: How a tenant's device quota binds: never exceeded, or exceeded only with idle capacity.
ISOLATIONS = ("soft", "hard")
_TOP_KEYS = {"server", "devices", "models", "tenants"}


class ServeConfigError(TesseraError, ValueError):
    """The serve configuration is unreadable or wrong; the message names file, key, value."""


@dataclass(frozen=True)
class DeviceConfig:
    """A device queue: ``workers`` runs may execute on it at once, ``max_queue`` wait;
    ``providers``, when set, are the sessions' providers for every model on it (instead of
    the model's own), so one model can run on, say, the twin and the CPU at once."""

    name: str
    workers: int
    max_queue: int = DEFAULT_MAX_QUEUE
    providers: tuple | None = None
    #: For one of N accelerator instances on one FPGA (``[devices.X] instances = N``): the
    #: group ``X``, this instance's index, and the engine configuration each instance has
    #: (the "sim" provider of this device simulates it). None for an ordinary device.
    group: str | None = None
    index: int | None = None
    engine: object = None
    #: ``"thread"``: runs in the server's threads; ``"worker"``: in ``workers`` processes
    #: of their own, each run bounded by ``timeout_s`` seconds (tessera/serve/worker.py).
    process: str = DEFAULT_PROCESS
    timeout_s: float = DEFAULT_TIMEOUT_S
    probe_s: float = DEFAULT_PROBE_S


@dataclass(frozen=True)
class ModelConfig:
    """A served model: its ONNX file, the session's providers, the device it queues on, and
    the most images one run may merge from waiting requests (1: no batching). With several
    ``devices`` (``device`` is the first), each request goes to the one predicted to finish
    it first. ``max_queue_delay_ms`` and ``preferred_batch_sizes`` shape the batches as
    Triton's dynamic batcher does (docs/serving.md, "Dynamic batching")."""

    name: str
    path: Path
    providers: tuple
    device: str
    max_batch: int = 1
    devices: tuple = ()
    parallelism: str = "data"
    max_queue_delay_ms: float = 0.0
    preferred_batch_sizes: tuple = ()

    def __post_init__(self):
        if not self.devices:
            object.__setattr__(self, "devices", (self.device,))


@dataclass(frozen=True)
class TenantConfig:
    """A tenant: its bearer token, the models it may use, its class, SLO and rate limit.

    ``slo_ms`` is None for a best-effort tenant; ``rate`` is requests per second refilled
    into a bucket of ``burst`` requests. ``quota`` maps device names to the tenant's share
    of that device's time (0 to 1; devices not named: no limit); ``isolation`` ``"hard"``
    never lets it run past its share, ``"soft"`` lets it borrow time nobody under their
    share is waiting for.
    """

    name: str
    token: str
    models: tuple
    priority: str
    slo_ms: float | None
    rate: float
    burst: int
    quota: tuple = ()  # ((device, share), ...)
    isolation: str = "soft"
    #: Instance devices (``"fpga/0"``...) given to this tenant alone: hard isolation.
    instances: tuple = ()


@dataclass(frozen=True)
class ServeConfig:
    """The whole file, checked. ``source`` is the file it came from (for messages)."""

    source: str
    host: str
    port: int
    max_body_bytes: int
    devices: dict
    models: dict
    tenants: dict
    #: Lower-priority tenants' HTTP in a process of its own (tessera/serve/lanes.py).
    priority_lanes: bool = False
    lane_nice: int = DEFAULT_LANE_NICE
    lane_batch_ms: float = DEFAULT_LANE_BATCH_MS

    def devices_for(self, tenant, model):
        """The devices a request of ``tenant`` (a name) to ``model`` may run on: the model's
        devices less the instances given to other tenants, and, in a group where the tenant
        has instances of its own, only those (spatial sharing: each tenant on its own)."""
        own = set(self.tenants[tenant].instances)
        groups = {self.devices[d].group for d in own}
        allowed = []
        for name in self.models[model].devices:
            device = self.devices[name]
            if device.group is None:
                allowed.append(name)
            elif name in own or (device.group not in groups
                                 and self.owner(name) is None):
                allowed.append(name)
        return tuple(allowed)

    def owner(self, device):
        """The tenant an instance device is given to, or None (shared)."""
        for tenant in self.tenants.values():
            if device in tenant.instances:
                return tenant.name
        return None


def load_config(path, environ=None):
    """Read and check a TOML configuration file.

    Parameters
    ----------
    path : str or os.PathLike
        The file; model paths in it are relative to its folder.
    environ : mapping, optional
        Where ``token_env`` names are looked up (default ``os.environ``).

    Raises
    ------
    ServeConfigError
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ServeConfigError(f"cannot read serve config {str(path)!r}: "
                               f"{exc.strerror or exc}") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ServeConfigError(f"{path}: not valid TOML: {exc}") from None
    return parse_config(data, source=str(path), base=path.parent, environ=environ)


def _unknown(source, where, table, allowed):
    unknown = sorted(set(table) - allowed)
    if unknown:
        raise ServeConfigError(f"{source}: unknown key(s) {unknown} in {where}; "
                               f"allowed: {sorted(allowed)}")


def _table(source, where, value):
    if not isinstance(value, dict):
        raise ServeConfigError(f"{source}: {where} must be a table, not "
                               f"{type(value).__name__} {value!r}")
    return value


def _number(source, where, value, *, integer=False, positive=True):
    kinds = (int,) if integer else (int, float)
    ok = isinstance(value, kinds) and not isinstance(value, bool) and math.isfinite(value)
    if not ok or (positive and value <= 0):
        kind = "a positive integer" if integer else "a positive number"
        raise ServeConfigError(f"{source}: {where} must be {kind}, not {value!r}")
    return value


def _finite_in(value, low, high):
    """True for a number (not a bool) from ``low`` to ``high``."""
    return (isinstance(value, (int, float)) and not isinstance(value, bool)
            and math.isfinite(value) and low <= value <= high)


def _string_list(source, where, value):
    if not (isinstance(value, list) and value and all(isinstance(v, str) for v in value)):
        raise ServeConfigError(f"{source}: {where} must be a non-empty list of strings, "
                               f"not {value!r}")
    return tuple(value)


def _server(source, data):
    table = _table(source, "[server]", data.get("server", {}))
    _unknown(source, "[server]", table, _SERVER_KEYS)
    host = table.get("host", "127.0.0.1")
    try:
        loopback = isinstance(host, str) and ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if not loopback:
        # Tenants' tokens travel in clear HTTP: the server stays on this machine.
        raise ServeConfigError(f"{source}: [server] host must be a loopback address such "
                               f"as '127.0.0.1', not {host!r}")
    port = table.get("port", 8000)
    if not (isinstance(port, int) and not isinstance(port, bool) and 0 <= port <= 65535):
        raise ServeConfigError(f"{source}: [server] port must be an integer in 0..65535 "
                               f"(0: any free port), not {port!r}")
    body = _number(source, "[server] max_body_bytes", table.get("max_body_bytes", 64 << 20),
                   integer=True)
    lanes = table.get("priority_lanes", False)
    if not isinstance(lanes, bool):
        raise ServeConfigError(f"{source}: [server] priority_lanes must be true or false, "
                               f"not {lanes!r}")
    nice = table.get("lane_nice", DEFAULT_LANE_NICE)
    if not (isinstance(nice, int) and not isinstance(nice, bool) and 0 <= nice <= 19):
        raise ServeConfigError(f"{source}: [server] lane_nice must be an integer in 0..19 "
                               f"(how much lower the side lane's CPU priority is), not "
                               f"{nice!r}")
    batch_ms = table.get("lane_batch_ms", DEFAULT_LANE_BATCH_MS)
    if not _finite_in(batch_ms, 0, 1000):
        raise ServeConfigError(f"{source}: [server] lane_batch_ms must be a number of "
                               f"milliseconds in 0..1000 (0: each request alone), not "
                               f"{batch_ms!r}")
    return host, port, body, lanes, nice, float(batch_ms)


def _devices(source, data):
    tables = _table(source, "[devices]", data.get("devices", {}))
    devices = {}
    for name, table in tables.items():
        where = f"[devices.{name}]"
        _unknown(source, where, _table(source, where, table), _DEVICE_KEYS)
        workers = _number(source, f"{where} workers", table.get("workers", 1), integer=True)
        max_queue = _number(source, f"{where} max_queue",
                            table.get("max_queue", DEFAULT_MAX_QUEUE), integer=True)
        providers = table.get("providers")
        if providers is not None:
            providers = _string_list(source, f"{where} providers", providers)
        process = table.get("process", DEFAULT_PROCESS)
        if process not in PROCESSES:
            raise ServeConfigError(f"{source}: {where} process must be one of "
                                   f"{list(PROCESSES)}, not {process!r}")
        timeout = _number(source, f"{where} timeout_s",
                          table.get("timeout_s", DEFAULT_TIMEOUT_S))
        probe = _number(source, f"{where} probe_s", table.get("probe_s", DEFAULT_PROBE_S))
        if probe > MAX_PROBE_S:
            raise ServeConfigError(f"{source}: {where} probe_s must be at most {MAX_PROBE_S:g} "
                                   f"seconds (between probes of a failed device), not {probe!r}")
        if "instances" in table or "config" in table:
            devices.update(_instances(source, where, name, table, max_queue, providers,
                                      process, timeout, float(probe)))
            continue
        devices[name] = DeviceConfig(name, workers, max_queue, providers, process=process,
                                     timeout_s=timeout, probe_s=float(probe))
    # Without a [devices] table the CPU is the one device, one run per core.
    devices.setdefault("cpu", DeviceConfig("cpu", os.cpu_count() or 1))
    return devices


def _instances(source, where, name, table, max_queue, providers, process, timeout, probe):
    """``[devices.X] instances = N, config = "preset"``: N accelerator instances of one
    small configuration on one FPGA (``hw/multi_top.py``), each its own device ``X/i`` with
    one worker (an engine runs one pass at a time)."""
    from contract.config_file import ConfigFileError
    from contract.config_file import load_config as load_engine
    from contract.spatial import MAX_INSTANCES

    count = table.get("instances")
    if isinstance(count, bool) or not isinstance(count, int) \
            or not 1 <= count <= MAX_INSTANCES:
        raise ServeConfigError(f"{source}: {where} instances must be an integer from 1 to "
                               f"{MAX_INSTANCES} (accelerator instances on the device), not "
                               f"{count!r}")
    if "workers" in table:
        raise ServeConfigError(f"{source}: {where} has instances; workers does not apply "
                               f"(each instance runs one pass at a time)")
    spec = table.get("config")
    if not isinstance(spec, str):
        raise ServeConfigError(f"{source}: {where} config must name each instance's engine "
                               f"(a preset such as 'ulx3s-25f' or a .toml/.json file), not "
                               f"{spec!r}")
    try:
        engine = load_engine(spec)
    except ConfigFileError as exc:
        raise ServeConfigError(f"{source}: {where} config: {exc}") from None
    providers = providers or INSTANCE_PROVIDERS
    return {f"{name}/{i}": DeviceConfig(f"{name}/{i}", 1, max_queue, providers, name, i,
                                        engine, process, timeout, probe)
            for i in range(count)}


def _expand(devices, names):
    """Device names as a model lists them, with a group of instances standing for all of
    its instances."""
    out = []
    for name in names:
        members = [d for d, c in devices.items() if c.group == name]
        out.extend(members or [name])
    return tuple(out)


def _models(source, data, base, devices):
    tables = _table(source, "[models]", data.get("models", {}))
    if not tables:
        raise ServeConfigError(f"{source}: no models: add a [models.NAME] table with "
                               f"path = \"model.onnx\"")
    models = {}
    for name, table in tables.items():
        where = f"[models.{name}]"
        _unknown(source, where, _table(source, where, table), _MODEL_KEYS)
        if "path" not in table or not isinstance(table["path"], str):
            raise ServeConfigError(f"{source}: {where} path must be the model's ONNX file "
                                   f"(a string), not {table.get('path')!r}")
        path = Path(table["path"])
        path = path if path.is_absolute() else base / path
        if not path.is_file():
            raise ServeConfigError(f"{source}: {where} path: no such file {str(path)!r}")
        providers = _string_list(source, f"{where} providers",
                                 table.get("providers", ["cpu"]))
        if "device" in table and "devices" in table:
            raise ServeConfigError(f"{source}: {where} has both device and devices; give "
                                   f"one (devices = [...] to balance over several)")
        names = _string_list(source, f"{where} devices", table["devices"]) \
            if "devices" in table else (table.get("device", "cpu"),)
        for device in names:
            if device not in devices and not any(c.group == device
                                                 for c in devices.values()):
                raise ServeConfigError(f"{source}: {where} device {device!r} is not "
                                       f"declared; devices: {sorted(devices)}")
        names = _expand(devices, names)
        if len(set(names)) != len(names):
            raise ServeConfigError(f"{source}: {where} devices {list(names)} repeats one")
        max_batch = _number(source, f"{where} max_batch", table.get("max_batch", 1),
                            integer=True)
        parallelism = table.get("parallelism", "data")
        if parallelism not in PARALLELISMS:
            raise ServeConfigError(f"{source}: {where} parallelism must be one of "
                                   f"{list(PARALLELISMS)}, not {parallelism!r}")
        if parallelism != "data" and (len(names) != 2 or any(
                devices[d].group is not None for d in names)):
            raise ServeConfigError(f"{source}: {where} parallelism = {parallelism!r} needs "
                                   f"devices = [first stage, second stage], two devices "
                                   f"without instances; got {list(names)}")
        delay, preferred = _batching(source, where, table, max_batch)
        models[name] = ModelConfig(name, path, providers, names[0], max_batch, tuple(names),
                                   parallelism, delay, preferred)
    return models


def _batching(source, where, table, max_batch):
    """``max_queue_delay_ms`` (0 to ``MAX_QUEUE_DELAY_MS``) and ``preferred_batch_sizes``
    (increasing sizes from 1 to ``max_batch``) of a ``[models.NAME]`` table."""
    delay = table.get("max_queue_delay_ms", 0)
    if not _finite_in(delay, 0, MAX_QUEUE_DELAY_MS):
        raise ServeConfigError(f"{source}: {where} max_queue_delay_ms must be a number of "
                               f"milliseconds from 0 to {MAX_QUEUE_DELAY_MS}, not {delay!r}")
    preferred = table.get("preferred_batch_sizes", [])
    if not (isinstance(preferred, list) and all(
            isinstance(n, int) and not isinstance(n, bool) for n in preferred)
            and all(1 <= n <= max_batch for n in preferred)
            and preferred == sorted(set(preferred))):
        raise ServeConfigError(f"{source}: {where} preferred_batch_sizes must be increasing "
                               f"integers from 1 to max_batch ({max_batch}), not "
                               f"{preferred!r}")
    if (delay or preferred) and max_batch == 1:
        raise ServeConfigError(f"{source}: {where} max_queue_delay_ms and "
                               f"preferred_batch_sizes shape dynamic batches, which need "
                               f"max_batch > 1 (it is 1)")
    return float(delay), tuple(preferred)


def _token(source, where, table, environ):
    if ("token" in table) == ("token_env" in table):
        raise ServeConfigError(f"{source}: {where} needs exactly one of token (the bearer "
                               f"token) or token_env (the environment variable holding it)")
    if "token_env" in table:
        name = table["token_env"]
        if not isinstance(name, str) or name not in environ:
            raise ServeConfigError(f"{source}: {where} token_env: environment variable "
                                   f"{name!r} is not set")
        token, what = environ[name], f"token_env {name!r}"
    else:
        token, what = table["token"], "token"
    if not isinstance(token, str) or len(token) < MIN_TOKEN_LENGTH or not token.isprintable() \
            or any(c.isspace() for c in token):
        raise ServeConfigError(f"{source}: {where} {what} must be a string of at least "
                               f"{MIN_TOKEN_LENGTH} printable characters without spaces")
    return token


def _tenants(source, data, models, environ, devices):
    tables = _table(source, "[tenants]", data.get("tenants", {}))
    if not tables:
        raise ServeConfigError(f"{source}: no tenants: add a [tenants.NAME] table with a "
                               f"token and its models")
    tenants, owners = {}, {}
    for name, table in tables.items():
        where = f"[tenants.{name}]"
        _unknown(source, where, _table(source, where, table), _TENANT_KEYS)
        token = _token(source, where, table, environ)
        if token in owners:
            raise ServeConfigError(f"{source}: {where} has the same token as "
                                   f"[tenants.{owners[token]}]; each tenant needs its own")
        owners[token] = name
        names = _string_list(source, f"{where} models", table.get("models"))
        unknown = [m for m in names if m not in models]
        if unknown:
            raise ServeConfigError(f"{source}: {where} models {unknown} are not declared; "
                                   f"models: {sorted(models)}")
        priority = table.get("priority", "normal")
        if priority not in PRIORITIES:
            raise ServeConfigError(f"{source}: {where} priority must be one of "
                                   f"{list(PRIORITIES)}, not {priority!r}")
        slo = table.get("slo_ms")
        if slo is not None:
            slo = float(_number(source, f"{where} slo_ms", slo))
        rate = float(_number(source, f"{where} rate", table.get("rate", 100.0)))
        burst = _number(source, f"{where} burst", table.get("burst", max(1, math.ceil(rate))),
                        integer=True)
        quota = _quota(source, where, table.get("quota", {}), devices)
        isolation = table.get("isolation", "soft")
        if isolation not in ISOLATIONS:
            raise ServeConfigError(f"{source}: {where} isolation must be one of "
                                   f"{list(ISOLATIONS)}, not {isolation!r}")
        instances = _assigned(source, where, table.get("instances", {}), devices, tenants)
        tenants[name] = TenantConfig(name, token, names, priority, slo, rate, burst, quota,
                                     isolation, instances)
    return tenants


def _assigned(source, where, table, devices, tenants):
    """``instances = { fpga = [0, 1] }``: the instance devices given to this tenant alone."""
    table = _table(source, f"{where} instances", table)
    given = []
    for group, indices in table.items():
        members = {c.index: d for d, c in devices.items() if c.group == group}
        if not members:
            groups = sorted({c.group for c in devices.values() if c.group})
            raise ServeConfigError(f"{source}: {where} instances.{group}: no device {group!r} "
                                   f"with instances is declared; such devices: {groups}")
        ok = isinstance(indices, list) and indices and all(
            isinstance(i, int) and not isinstance(i, bool) for i in indices)
        if not ok or len(set(indices)) != len(indices):
            raise ServeConfigError(f"{source}: {where} instances.{group} must be a non-empty "
                                   f"list of distinct instance numbers, not {indices!r}")
        for index in indices:
            if index not in members:
                raise ServeConfigError(f"{source}: {where} instances.{group}: {group!r} has "
                                       f"instances 0 to {len(members) - 1}, not {index!r}")
            device = members[index]
            for other in tenants.values():
                if device in other.instances:
                    raise ServeConfigError(
                        f"{source}: {where} instances.{group}: instance {index} is already "
                        f"given to [tenants.{other.name}]; an instance serves one tenant")
            given.append(device)
    return tuple(given)


def _quota(source, where, table, devices):
    table = _table(source, f"{where} quota", table)
    quota = []
    for device, share in table.items():
        if device not in devices:
            raise ServeConfigError(f"{source}: {where} quota names device {device!r}, which "
                                   f"is not declared; devices: {sorted(devices)}")
        ok = isinstance(share, (int, float)) and not isinstance(share, bool) \
            and 0 < share <= 1
        if not ok:
            raise ServeConfigError(f"{source}: {where} quota.{device} must be a share of the "
                                   f"device's time in (0, 1], not {share!r}")
        quota.append((device, float(share)))
    return tuple(quota)


def parse_config(data, *, source="<config>", base=".", environ=None):
    """Check a configuration already parsed into a dict (see :func:`load_config`)."""
    environ = os.environ if environ is None else environ
    _table(source, "the file", data)
    _unknown(source, "the top level", data, _TOP_KEYS)
    host, port, body, lanes, nice, batch_ms = _server(source, data)
    devices = _devices(source, data)
    models = _models(source, data, Path(base), devices)
    tenants = _tenants(source, data, models, environ, devices)
    config = ServeConfig(source, host, port, body, devices, models, tenants, lanes, nice,
                         batch_ms)
    for tenant in tenants.values():
        for model in tenant.models:
            if not config.devices_for(tenant.name, model):
                raise ServeConfigError(
                    f"{source}: [tenants.{tenant.name}] model {model!r} runs only on "
                    f"instances given to other tenants ({list(config.models[model].devices)}"
                    f"); give it one with instances = {{ group = [n] }}")
    return config
