"""Prometheus metrics of the server (``GET /metrics``), in a registry of its own per app."""

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
)
from prometheus_client.exposition import generate_latest

from .config import PRIORITIES

__all__ = ["CONTENT_TYPE_LATEST", "Metrics"]

#: Seconds: from 100 us (a digits run) to 10 s.
_TIME_BUCKETS = (1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 2.5e-2, 5e-2, 0.1, 0.25, 0.5,
                 1.0, 2.5, 5.0, 10.0)


class Metrics:
    """The server's counters and histograms; label values are config names (tenants,
    models, devices) or ``"-"`` where the request named none that exists, so a client
    cannot grow the label sets."""

    def __init__(self):
        self.registry = CollectorRegistry()
        r, tm = self.registry, ("tenant", "model")
        self.requests = Counter("tessera_requests", "Inference requests by HTTP status",
                                (*tm, "code"), registry=r)
        self.queue_seconds = Histogram("tessera_queue_seconds", "Admission to run start",
                                       tm, buckets=_TIME_BUCKETS, registry=r)
        self.compute_seconds = Histogram("tessera_compute_seconds", "Session run time",
                                         tm, buckets=_TIME_BUCKETS, registry=r)
        self.latency_seconds = Histogram("tessera_latency_seconds",
                                         "Request received to response ready (answered "
                                         "requests)", tm, buckets=_TIME_BUCKETS, registry=r)
        self.images = Histogram("tessera_request_images", "Images (batch) per request", tm,
                                buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256), registry=r)
        self.batch_images = Histogram("tessera_batch_images",
                                      "Images per session run (dynamic batches)", ("model",),
                                      buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256), registry=r)
        self.slo_violations = Counter("tessera_slo_violations",
                                      "Answered requests slower than the tenant's SLO", tm,
                                      registry=r)
        self.busy_seconds = Counter("tessera_device_busy_seconds",
                                    "Run time on the device, summed over its workers "
                                    "(busy fraction: rate / workers)", ("device",),
                                    registry=r)
        self.retries = Counter("tessera_retries", "Batches that failed on the device and "
                               "were retried on the CPU fallback", ("device",), registry=r)
        self.prediction_ratio = Histogram("tessera_prediction_ratio",
                                          "Measured / predicted run time", ("device",),
                                          buckets=(0.5, 0.8, 0.9, 0.95, 1.05, 1.1, 1.25, 1.5,
                                                   2.0, 4.0), registry=r)

        self.queue_waiting = Gauge("tessera_queue_waiting", "Requests waiting for a run "
                                   "slot, by priority class", ("device", "priority"),
                                   registry=r)
        self.queue_running = Gauge("tessera_queue_running", "Runs in progress (a batch is "
                                   "one)", ("device",), registry=r)

    def show_queues(self, queues):
        """Set the queue gauges from ``{device: DeviceQueue}`` (read when scraped)."""
        for device, queue in queues.items():
            for rank, priority in enumerate(PRIORITIES):
                self.queue_waiting.labels(device=device, priority=priority).set(
                    queue.waiting_by_rank[rank])
            self.queue_running.labels(device=device).set(queue.running)

    def render(self):
        """The text exposition format."""
        return generate_latest(self.registry)
