"""Connecting to Ray for the long-running commands (``--ray [ADDRESS]``; ``docs/ray.md``).

Ray is an optional extra (``pip install .[ray]``): nothing imports it until
:func:`connect` is called, so importing ``tessera`` or running it without ``--ray`` never
loads it. Without an address :func:`connect` starts a local Ray bound to 127.0.0.1 only;
with one it joins that cluster after checking, within :data:`CONNECT_TIMEOUT` seconds, that
something answers there (``ray.init`` itself retries an unreachable address for minutes).
"""

import contextlib
import os
import re
import socket

__all__ = ["CONNECT_TIMEOUT", "DEVICE_RESOURCES", "LOCAL", "RayClusterError",
           "ResourceUnavailable", "actor_resources", "connect", "import_ray",
           "parse_resources", "require_resources"]

#: ``--ray`` with no address: start a local Ray.
LOCAL = "local"
#: Seconds to wait for an ADDRESS to accept a TCP connection before giving up.
CONNECT_TIMEOUT = 10.0
#: Object store of a local Ray: results here are counts and small arrays, and Ray's
#: default (30 % of the memory) would take /dev/shm from the rest of the machine.
LOCAL_OBJECT_STORE_BYTES = 512 * 2**20


#: The Ray resource an actor asks for, per unit, when its session may run a provider that
#: drives a device: a node offers it only where that device is (``--ray-resources`` on a
#: local start, ``ray start --resources`` or ``--num-gpus`` on a cluster node). The twin
#: (``sim``, ``uart-twin``) and ``cpu`` need only the CPU every actor asks for.
DEVICE_RESOURCES = {"gpu": "GPU", "pcie": "fpga_pcie", "uart": "fpga_uart"}
#: Ray's own names for the resources it counts itself (``ray.init`` takes them as
#: ``num_cpus``/``num_gpus``, not in ``resources``).
CPU, GPU = "CPU", "GPU"


class RayClusterError(RuntimeError):
    """Ray is not installed, or the cluster at the given address cannot be reached."""


class ResourceUnavailable(RayClusterError):
    """A job asks for more of a resource than the whole cluster has (it would wait forever)."""


def parse_resources(text):
    """``NAME=COUNT[,NAME=COUNT...]`` (``--ray-resources``) as a dict of floats.

    ``CPU`` and ``GPU`` are Ray's CPUs and GPUs; any other name is a custom resource, e.g.
    ``fpga_ulx3s=1`` on a host with one board.

    Raises
    ------
    ValueError
        A malformed entry, a bad name or a negative count, naming it.
    """
    resources = {}
    for entry in (part.strip() for part in text.split(",")):
        if not entry:
            continue
        name, sep, count = (part.strip() for part in entry.partition("="))
        if not sep or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
            raise ValueError(f"--ray-resources entries are NAME=COUNT (NAME a letter or _ "
                             f"then letters, digits, _), not {entry!r}")
        try:
            value = float(count)
        except ValueError:
            value = -1.0
        if not value >= 0 or value != value:
            raise ValueError(f"--ray-resources {name}: the count must be a number >= 0, "
                             f"not {count!r}")
        resources[name] = value
    return resources


def actor_resources(providers, resource=None):
    """Ray options of one actor whose session runs ``providers``.

    Parameters
    ----------
    providers : list
        Names or ``(name, options)`` pairs.
    resource : str or None
        A custom resource to ask for instead of :data:`DEVICE_RESOURCES`' (one board's
        name, e.g. ``fpga_ulx3s``); ``GPU`` means a Ray GPU.

    Returns
    -------
    dict
        ``num_cpus`` and, where a device is needed, ``num_gpus`` or ``resources``.
    """
    from sw_driver.providers.options import provider_name

    wanted = [provider_name(p) for p in providers]
    names = [resource] if resource else [DEVICE_RESOURCES[p] for p in wanted
                                         if p in DEVICE_RESOURCES]
    options = {"num_cpus": 1}
    custom = {name: 1 for name in names if name != GPU}
    if GPU in names:
        options["num_gpus"] = 1
    if custom:
        options["resources"] = custom
    return options


def _demand(options):
    demand = {CPU: options.get("num_cpus", 1)}
    if options.get("num_gpus"):
        demand[GPU] = options["num_gpus"]
    demand.update(options.get("resources", {}))
    return demand


def require_resources(ray, options, count, what="actors"):
    """Refuse now a job of ``count`` ``what`` (each asking for ``options``) the cluster
    cannot place all at once: Ray would queue them forever, waiting for such a node.

    Raises
    ------
    ResourceUnavailable
        Naming what is short and listing what the cluster has.
    """
    have = ray.cluster_resources()
    short = {name: per * count for name, per in _demand(options).items()
             if have.get(name, 0) < per * count}
    if short:
        listing = ", ".join(f"{name} {_count(value)}" for name, value in sorted(have.items())
                            if not name.startswith("node:") and "memory" not in name)
        asked = ", ".join(f"{name} {_count(value)}" for name, value in short.items())
        raise ResourceUnavailable(f"{count} {what} need {asked} in all, more than the Ray "
                                  f"cluster has ({listing}); declare the device on the "
                                  f"nodes that have it (docs/scale-out.md) or ask for fewer")


def _count(value):
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


def import_ray(local=True):
    """The ``ray`` module (loopback-only when ``local``).

    Ray maps 127.0.0.1 to the machine's outward address (its processes would listen
    there) unless ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER`` is 0, which Ray reads when it is
    first imported. Set for a local start only (a driver joining a cluster must be found
    at its node's address), so that every process of a local Ray listens on 127.0.0.1.

    Raises
    ------
    RayClusterError
        Ray is not installed; the message says how to install it.
    """
    if local:
        os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    # No usage statistics unless the user asks: Ray Data's poller for them also queries a
    # metrics endpoint a loopback Ray does not run, logging a failure every few seconds.
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    try:
        import ray
    except ImportError as exc:
        raise RayClusterError("--ray needs Ray, an optional extra: pip install .[ray] "
                              f"(or `make setup`); importing it failed: {exc}") from None
    return ray


def _check_reachable(address, timeout):
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise RayClusterError(f"--ray ADDRESS must be HOST:PORT of a Ray head node "
                              f"(its GCS port, 6379 by default), not {address!r}")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout):
            pass
    except OSError as exc:
        raise RayClusterError(f"no Ray cluster answers at {address} (tried for "
                              f"{timeout:.0f} s): {exc}") from None


@contextlib.contextmanager
def connect(address=LOCAL, *, num_cpus=None, resources=None, timeout=CONNECT_TIMEOUT):
    """Start or join Ray for the duration of the ``with`` block, then shut it down.

    Parameters
    ----------
    address : str
        :data:`LOCAL` to start a local Ray, or ``HOST:PORT`` of a cluster's head node.
    num_cpus : int or None
        CPUs of a local Ray (None: all of the machine's); ignored when joining.
    resources : dict or None
        What this machine offers a local Ray (:func:`parse_resources`): ``CPU``, ``GPU``
        and custom resources such as ``{"fpga_ulx3s": 1}``. Joining a cluster, the nodes
        declare theirs with ``ray start`` (docs/scale-out.md), so this must be None.
    timeout : float
        Seconds to wait for ``address`` to answer.

    Yields
    ------
    module
        ``ray``, initialized.

    Raises
    ------
    RayClusterError
        Ray is missing, or ``address`` is malformed or unreachable (naming it).
    """
    resources = dict(resources or {})
    if address != LOCAL:
        if resources:
            raise RayClusterError("--ray-resources declares this machine's devices to a "
                                  "local Ray; a cluster's nodes declare theirs with "
                                  "`ray start --resources` (docs/scale-out.md)")
        _check_reachable(address, timeout)
    ray = import_ray(local=address == LOCAL)
    if ray.is_initialized():  # someone (a test fixture) already holds a Ray: use it
        yield ray
        return
    options = {"include_dashboard": False, "log_to_driver": False,
               "configure_logging": False}
    if address == LOCAL:
        num_cpus = resources.pop(CPU, num_cpus)
        num_gpus = resources.pop(GPU, None)
        # "local": always a new Ray of our own. With no address Ray would join the latest
        # cluster started on this machine (/tmp/ray/ray_current_cluster), e.g. another
        # job's or a test's, and refuse our object-store size.
        ray.init(address="local", num_cpus=None if num_cpus is None else int(num_cpus),
                 num_gpus=None if num_gpus is None else int(num_gpus),
                 resources=resources or None, object_store_memory=LOCAL_OBJECT_STORE_BYTES,
                 **options)
    else:
        try:
            ray.init(address=address, **options)
        except (ConnectionError, RuntimeError) as exc:
            raise RayClusterError(f"cannot join the Ray cluster at {address}: "
                                  f"{' '.join(str(exc).split())}") from None
    try:
        yield ray
    finally:
        ray.shutdown()
