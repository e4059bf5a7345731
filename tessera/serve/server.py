"""Run the application with uvicorn on the configured loopback address."""

import uvicorn
from threadpoolctl import threadpool_limits

from .app import create_app

__all__ = ["run"]


def run(config, *, port=None, log_level="info"):
    """Serve ``config`` until interrupted (Ctrl-C or SIGTERM; uvicorn lets running requests
    finish first). ``port`` overrides the file's."""
    app = create_app(config)
    port = config.port if port is None else port
    # One BLAS thread per run: runs already go in parallel on each device's workers, and
    # OpenBLAS's own threads (it starts them for the CPU provider's matmuls from about 15
    # images on) made a batch of 16 digits 15x slower on a busy 2-core machine (8 ms
    # against 0.52 ms; docs/serving.md), which capped dynamic batching's gain.
    with threadpool_limits(limits=1, user_api="blas"):
        uvicorn.run(app, host=config.host, port=port, log_level=log_level)
