"""Connecting to Ray for the long-running commands (``--ray [ADDRESS]``; ``docs/ray.md``).

Ray is an optional extra (``pip install .[ray]``): nothing imports it until
:func:`connect` is called, so ``import bench`` or ``tessera`` without ``--ray`` never
loads it. Without an address :func:`connect` starts a local Ray bound to 127.0.0.1 only;
with one it joins that cluster after checking, within :data:`CONNECT_TIMEOUT` seconds, that
something answers there (``ray.init`` itself retries an unreachable address for minutes).
"""

import contextlib
import os
import socket

__all__ = ["CONNECT_TIMEOUT", "LOCAL", "RayClusterError", "connect", "import_ray"]

#: ``--ray`` with no address: start a local Ray.
LOCAL = "local"
#: Seconds to wait for an ADDRESS to accept a TCP connection before giving up.
CONNECT_TIMEOUT = 10.0
#: Object store of a local Ray: results here are counts and small arrays, and Ray's
#: default (30 % of the memory) would take /dev/shm from the rest of the machine.
LOCAL_OBJECT_STORE_BYTES = 512 * 2**20


class RayClusterError(RuntimeError):
    """Ray is not installed, or the cluster at the given address cannot be reached."""


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
def connect(address=LOCAL, *, num_cpus=None, timeout=CONNECT_TIMEOUT):
    """Start or join Ray for the duration of the ``with`` block, then shut it down.

    Parameters
    ----------
    address : str
        :data:`LOCAL` to start a local Ray, or ``HOST:PORT`` of a cluster's head node.
    num_cpus : int or None
        CPUs of a local Ray (None: all of the machine's); ignored when joining.
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
    if address != LOCAL:
        _check_reachable(address, timeout)
    ray = import_ray(local=address == LOCAL)
    if ray.is_initialized():  # someone (a test fixture) already holds a Ray: use it
        yield ray
        return
    options = {"include_dashboard": False, "log_to_driver": False,
               "configure_logging": False}
    if address == LOCAL:
        ray.init(num_cpus=num_cpus, object_store_memory=LOCAL_OBJECT_STORE_BYTES, **options)
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
