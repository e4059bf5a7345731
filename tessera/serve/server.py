"""Run the application with uvicorn on the configured loopback address."""

import logging
import socket
import sys

import uvicorn
from threadpoolctl import threadpool_limits

from .app import REQUEST_LOG, create_app, find_tenant, inference_model
from .http_server import (
    SWITCH_INTERVAL,
    DrainingServer,
    freeze_startup_objects,
    log_requests_to_stderr,
    protocol_factory,
)

__all__ = ["SWITCH_INTERVAL", "DrainingServer", "LanedServer", "protocol_factory", "run"]


def _goes_to_side(config):
    """``(head, token) -> bool``: a connection whose first request is an inference request
    with a side tenant's token goes to the side lane."""
    from .lanes import side_tenants

    side = side_tenants(config)

    def decide(head, token):
        method, _, rest = head.split(b"\r\n", 1)[0].decode("latin-1").partition(" ")
        if inference_model(method, rest.partition(" ")[0]) is None:
            return False
        tenant = find_tenant(config.tenants, token.decode("latin-1"))
        return tenant is not None and tenant.name in side

    return decide


class LanedServer(DrainingServer):
    """The main process with priority lanes (:mod:`tessera.serve.lanes`): it accepts
    connections itself and hands the side tenants' to the side lane's process."""

    def __init__(self, config, app, serve_config, port):
        super().__init__(config, app)
        self.serve_config, self.port = serve_config, port
        self.lane = self.acceptor = self.link = None

    async def startup(self, sockets=None):
        from .lanes import Acceptor, LaneLink, SideLane

        listener = socket.create_server((self.serve_config.host, self.port),
                                        backlog=self.config.backlog)
        self.lane = SideLane(self.serve_config, self.serve_config.lane_nice,
                             REQUEST_LOG.level == logging.INFO)
        state = self.tessera_app.state
        # Held here: the event loop keeps only a weak reference to the link's task.
        self.link = LaneLink(self.lane.link, state.run_request, state.metrics,
                             state.refused_type)
        self.link.start()
        await self.link.wait_ready()
        await super().startup(sockets=[])  # no listener of uvicorn's: the acceptor's
        self.acceptor = Acceptor(listener, protocol_factory(self),
                                 _goes_to_side(self.serve_config), self.lane.channel)
        self.acceptor.start()
        host, port = listener.getsockname()[:2]
        print(f"tessera serve: listening on http://{host}:{port} (priority lanes: side "
              f"lane pid {self.lane.process.pid}, nice +{self.serve_config.lane_nice})",
              file=sys.stderr, flush=True)

    async def shutdown(self, sockets=None):
        if self.acceptor is not None:
            self.acceptor.close()
        if self.lane is not None:  # its requests still run here while it drains
            self.lane.stop()
            await self.lane.wait_exit()
        await super().shutdown(sockets)


def run(config, *, port=None, log_level="info", log_requests=True):
    """Serve ``config`` until SIGTERM or Ctrl-C, then drain (see :class:`DrainingServer`).
    ``port`` overrides the file's; ``log_requests`` writes one JSON line per inference
    request to stderr."""
    app = create_app(config)
    for name, model in app.state.models.items():
        if model.plan is not None:  # the planner's choice, shown where the server starts
            print(f"model {name!r}: {model.plan.describe()}", file=sys.stderr)
    port = config.port if port is None else port
    if log_requests:
        log_requests_to_stderr()
    uvicorn_config = uvicorn.Config(app, host=config.host, port=port, log_level=log_level)
    if config.priority_lanes:
        server = LanedServer(uvicorn_config, app, config, port)
    else:
        server = DrainingServer(uvicorn_config, app)
    # One BLAS thread per run: runs already go in parallel on each device's workers, and
    # OpenBLAS's own threads (it starts them for the CPU provider's matmuls from about 15
    # images on) made a batch of 16 digits 15x slower on a busy 2-core machine (8 ms
    # against 0.52 ms; docs/serving.md), which capped dynamic batching's gain.
    # A run thread that gives up the GIL (numpy does, in every kernel) waits for the event
    # loop to hand it back for up to the switch interval, 5 ms by default: under a flood of
    # HTTP requests a one-image digits run took 3.8 ms instead of 0.5 (median; B's
    # throughput 332 req/s). At 0.5 ms: 0.9 ms and 523 req/s; at 0.1 ms, on the ResNet-8
    # model with the machine loaded by other jobs, B's throughput rose again 1.5-2x and
    # tenant A's server-side SLO attainment from 43-65 % to 77-81 % (docs/serving.md).
    sys.setswitchinterval(SWITCH_INTERVAL)
    freeze_startup_objects()
    try:
        with threadpool_limits(limits=1, user_api="blas"):
            server.run()
    finally:  # the app's shutdown closed them already, unless uvicorn failed before it
        app.state.close()
