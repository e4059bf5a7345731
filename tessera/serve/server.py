"""Run the application with uvicorn on the configured loopback address."""

import logging
import sys

import uvicorn
from threadpoolctl import threadpool_limits

from .app import REQUEST_LOG, create_app

__all__ = ["SWITCH_INTERVAL", "DrainingServer", "run"]

#: Seconds a thread may hold the GIL while another waits for it (see :func:`run`).
SWITCH_INTERVAL = 0.0001


class DrainingServer(uvicorn.Server):
    """uvicorn's server, marking the app as draining when asked to exit (SIGTERM, Ctrl-C):
    ``/v2/health/ready`` then answers 503 so a balancer stops sending, new inference
    requests on open connections get 503, and uvicorn's graceful shutdown waits for the
    admitted ones (queued or running) to be answered before the process exits."""

    def __init__(self, config, app):
        super().__init__(config)
        self.tessera_app = app

    def handle_exit(self, sig, frame):
        self.tessera_app.state.draining = True
        super().handle_exit(sig, frame)


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
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(message)s"))
        REQUEST_LOG.addHandler(handler)
        REQUEST_LOG.setLevel(logging.INFO)
        REQUEST_LOG.propagate = False
    server = DrainingServer(uvicorn.Config(app, host=config.host, port=port,
                                           log_level=log_level), app)
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
    try:
        with threadpool_limits(limits=1, user_api="blas"):
            server.run()
    finally:  # the app's shutdown closed them already, unless uvicorn failed before it
        app.state.close()
