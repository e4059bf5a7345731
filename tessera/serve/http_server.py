"""The uvicorn pieces that both processes of ``tessera serve`` use: the main one
(:mod:`tessera.serve.server`) and, with priority lanes, the side lane
(:mod:`tessera.serve.lanes`)."""

import contextlib
import gc
import logging
import sys

import uvicorn

from .app import REQUEST_LOG

__all__ = ["SWITCH_INTERVAL", "DrainingServer", "freeze_startup_objects",
           "log_requests_to_stderr", "protocol_factory"]

#: Seconds a thread may hold the GIL while another waits for it (why:
#: :func:`tessera.serve.server.run`).
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

    @contextlib.contextmanager
    def capture_signals(self):
        """uvicorn's signal handlers, minus its last step after a complete drain.

        uvicorn raises the stopping signal again once it has restored the previous handlers,
        so that the process ends as the signal asked: SIGTERM then kills it (status 143,
        which ``make serve`` reports as an error) and SIGINT becomes a KeyboardInterrupt
        traceback. After a drain in which every admitted request was answered, the stop
        was what the signal asked for, so the process ends with status 0. A forced exit
        (a second Ctrl-C during the drain) or a failure still ends as before.
        """
        with super().capture_signals():
            yield
            if not self.force_exit:
                self._captured_signals.clear()


def protocol_factory(server):
    """A callable making uvicorn's HTTP protocol for one connection of ``server`` (what its
    own listener does), for connections accepted by :mod:`tessera.serve.lanes` instead."""
    config = server.config
    return lambda: config.http_protocol_class(config=config,
                                              server_state=server.server_state,
                                              app_state=server.lifespan.state)


def freeze_startup_objects():
    """Move everything built so far (sessions, graphs, the app) out of the collector's
    reach: a full collection then scans only what requests allocate. Measured under a 2x
    flood on digits: the one full collection of an 8 s phase paused the event loop 81 ms
    before, 3.4 ms after (docs/serving.md)."""
    gc.collect()
    gc.freeze()


def log_requests_to_stderr():
    """One JSON line per inference request on stderr (the side lane's too)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(message)s"))
    REQUEST_LOG.addHandler(handler)
    REQUEST_LOG.setLevel(logging.INFO)
    REQUEST_LOG.propagate = False
