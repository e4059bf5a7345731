"""Run the application with uvicorn on the configured loopback address."""

import uvicorn

from .app import create_app

__all__ = ["run"]


def run(config, *, port=None, log_level="info"):
    """Serve ``config`` until interrupted (Ctrl-C or SIGTERM; uvicorn lets running requests
    finish first). ``port`` overrides the file's."""
    app = create_app(config)
    port = config.port if port is None else port
    uvicorn.run(app, host=config.host, port=port, log_level=log_level)
