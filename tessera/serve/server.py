"""Run the application with uvicorn on the configured loopback address."""

import logging
import sys

import uvicorn
from threadpoolctl import threadpool_limits

from .app import REQUEST_LOG, create_app

__all__ = ["DrainingServer", "run"]


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
    with threadpool_limits(limits=1, user_api="blas"):
        server.run()
