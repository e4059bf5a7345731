"""``tessera serve --config FILE --ray [ADDRESS]``: the same server as Ray Serve replicas.

Each replica is a Ray Serve deployment replica that builds, in its own process, exactly the
application ``tessera serve`` runs (:func:`~tessera.serve.app.create_app`: the KServe v2
routes, the tenants' tokens, rate limits, priorities, SLO admission, batching and the CPU
fallback), wrapped with ``@serve.ingress``; Ray Serve's HTTP proxy, on the head node only
and on the configuration's loopback host and port, spreads requests over the replicas.

Replicas are placed by the same Ray resources as ``run-dataset``'s actors
(:data:`tessera.ray_cluster.DEVICE_RESOURCES`): a replica asks for one CPU plus one unit of
the resource of each configured device that drives hardware (``fpga_pcie``, a Ray GPU...),
so it lands only on a node offering them all. A tenant's rate and burst are split evenly
over the replicas (each replica keeps its own token buckets), so the cluster as a whole
admits the configured rate when the proxy spreads a tenant's requests evenly; see
``docs/scale-out.md``. Ray and Ray Serve are imported only here, and this module only by
``--ray``.
"""

import dataclasses
import math
import signal
import threading

from tessera.ray_cluster import DEVICE_RESOURCES, GPU, RayClusterError, require_resources

from .config import ServeConfigError

__all__ = ["APPLICATION", "deploy", "replica_config", "replica_options", "serve_on_ray"]

#: The Ray Serve application (and deployment) name.
APPLICATION = "tessera"
#: Constructor attempts of a replica: a model that fails to load fails the same way again,
#: so Ray Serve's default of 20 attempts only delays the error.
CONSTRUCTOR_RETRIES = 1
#: Starts of Ray Serve's HTTP proxy. On a loaded machine its controller may kill a proxy
#: that is slow to come up (a 5 s ready check) before it ran, and ``serve.start`` then
#: fails with the actor's death; a second start usually finds the machine less busy.
PROXY_START_ATTEMPTS = 3


def _device_providers(config):
    """Device name -> the providers its sessions run (the device's own, or its models')."""
    providers = {name: list(device.providers or ()) for name, device in config.devices.items()}
    for model in config.models.values():
        for name in model.devices:
            if not config.devices[name].providers:
                providers[name] += [p for p in model.providers if p not in providers[name]]
    return providers


def replica_options(config):
    """Ray actor options of one replica: one CPU, and per configured device that drives
    hardware one unit of its resource (``fpga_pcie``, ``fpga_uart``, a Ray GPU)."""
    options, custom = {"num_cpus": 1}, {}
    for providers in _device_providers(config).values():
        wanted = next((DEVICE_RESOURCES[p] for p in providers if p in DEVICE_RESOURCES), None)
        if wanted == GPU:
            options["num_gpus"] = options.get("num_gpus", 0) + 1
        elif wanted is not None:
            custom[wanted] = custom.get(wanted, 0) + 1
    if custom:
        options["resources"] = custom
    return options


def replica_config(config, replicas):
    """``config`` as one of ``replicas`` replicas enforces it: each tenant's rate and burst
    divided among them (a burst of at least 1)."""
    if isinstance(replicas, bool) or not isinstance(replicas, int) or replicas < 1:
        raise ServeConfigError(f"--replicas must be a positive integer, not {replicas!r}")
    tenants = {name: dataclasses.replace(t, rate=t.rate / replicas,
                                         burst=max(1, math.ceil(t.burst / replicas)))
               for name, t in config.tenants.items()}
    return dataclasses.replace(config, tenants=tenants)


def _deployment(serve):
    """The deployment class; built on demand so that importing this module needs no Ray."""

    @serve.ingress()
    class TesseraReplica:
        """One replica: ``tessera serve``'s application over this replica's sessions."""

        def __init__(self, config):
            from threadpoolctl import threadpool_limits

            from .app import create_app

            # One BLAS thread per run, as tessera serve does (tessera/serve/server.py).
            self._limits = threadpool_limits(limits=1, user_api="blas")
            self._app = create_app(config)

        def __serve_build_asgi_app__(self):
            return self._app

    return serve.deployment(TesseraReplica, name=APPLICATION,
                            max_constructor_retry_count=CONSTRUCTOR_RETRIES)


def deploy(ray, config, *, replicas=1, port=None):
    """Start Ray Serve on the initialized ``ray`` and deploy ``config`` on ``replicas``
    replicas; return when every replica is ready. The HTTP proxy listens on the head node
    only, on ``config.host`` (loopback, checked by the config) and ``port`` (default the
    config's).

    Raises
    ------
    tessera.ray_cluster.ResourceUnavailable
        The cluster cannot place that many replicas: refused before anything starts.
    tessera.ray_cluster.RayClusterError
        A replica failed to start (Ray Serve's message, on one line).
    """
    from ray import serve

    shared = replica_config(config, replicas)
    options = replica_options(config)
    require_resources(ray, options, replicas, what="replicas of tessera serve")
    start_proxy(ray, serve, {"host": config.host,
                              "port": config.port if port is None else port})
    # Every request reaches a replica at once, so tessera serve's own admission (priorities,
    # SLOs, per-device queues) decides, not Serve's queue in the proxy (5 by default).
    ongoing = sum(d.workers + d.max_queue for d in config.devices.values())
    app = _deployment(serve).options(num_replicas=replicas, ray_actor_options=options,
                                     max_ongoing_requests=max(ongoing, 5))
    try:
        serve.run(app.bind(shared), name=APPLICATION, route_prefix="/")
    except RuntimeError as exc:  # a replica's constructor raised (a model that cannot load)
        serve.shutdown()
        raise RayClusterError(f"Ray Serve could not start the replicas of {config.source}: "
                              f"{' '.join(str(exc).split())[:2000]}") from None
    return options


def start_proxy(ray, serve, http_options):
    """``serve.start`` with the proxy on the head node, tried up to
    :data:`PROXY_START_ATTEMPTS` times while its proxy actor dies before it runs."""
    for attempt in range(1, PROXY_START_ATTEMPTS + 1):
        try:
            serve.start(proxy_location="HeadOnly", http_options=http_options)
            return
        except ray.exceptions.RayActorError as exc:
            serve.shutdown()
            if attempt == PROXY_START_ATTEMPTS:
                raise RayClusterError(
                    f"Ray Serve's HTTP proxy died before it started, {attempt} times: "
                    f"{' '.join(str(exc).split())[:500]}") from None


def serve_on_ray(config, address, *, replicas=1, port=None, say=print):
    """``tessera serve --ray``: deploy, then serve until SIGTERM or Ctrl-C, then shut Ray
    Serve down (replicas finish their admitted requests) and leave the cluster; 0."""
    from tessera.ray_cluster import connect

    with connect(address) as ray:
        from ray import serve

        # Installed after ray.init, which sets its own SIGTERM handler (a crash report), and
        # before deploying: the proxy may answer before serve.run returns.
        stop = threading.Event()
        previous = {sig: signal.signal(sig, lambda *_: stop.set())
                    for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            options = deploy(ray, config, replicas=replicas, port=port)
            say(f"{replicas} Ray Serve replica(s), each asking for {options}; Ctrl-C to stop")
            while not stop.wait(0.5):  # the signal handlers run between waits
                pass
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            serve.shutdown()
    return 0
