"""SLO-aware admission: predict a request's latency before running it, refuse it early.

Per model, the predicted time of a request of ``N`` images is ``N * per_image``. The
``per_image`` figure starts from the planner's per-layer estimates (at batch 1, the cheapest
timed estimate of each layer, as the planner chooses; layers without one count 0) and is
then calibrated on every measured run (an exponential moving average). Each device's queue
(:class:`~tessera.serve.queueing.DeviceQueue`) starts waiting runs by priority, so a
request's predicted latency is the predicted work running or waiting at its priority or a
higher one, divided by the device's workers, plus its own time. A tenant with an SLO is
refused (the caller answers 503 with ``Retry-After``) when that exceeds its SLO; a
best-effort tenant (no SLO) is always admitted.
"""

from dataclasses import dataclass

from .config import PRIORITIES
from .queueing import DeviceQueue

__all__ = ["Admission", "Refusal", "planner_seconds_per_image"]

#: Weight of the newest measurement in the moving average of seconds per image.
EWMA_ALPHA = 0.2


def planner_seconds_per_image(graph, planner):
    """Sum over ``graph``'s layers of the planner's cheapest timed estimate (batch 1)."""
    total = 0.0
    for layer in graph.layers:
        timed = [e.seconds for e in planner.estimates.get(layer.name, {}).values()
                 if e is not None and e.seconds is not None]
        total += min(timed, default=0.0)
    return total


@dataclass(frozen=True)
class Refusal:
    """Why a request was not admitted, and when a retry could be."""

    message: str
    retry_after: float


class _Predictor:
    def __init__(self, seconds_per_image):
        self.planner = seconds_per_image
        self.per_image = seconds_per_image
        self.measured = 0
        self.abs_errors = []  # |predicted - measured| / measured, the last 1000 runs

    def observe(self, images, predicted, seconds):
        if seconds > 0:
            self.abs_errors = [*self.abs_errors[-999:], abs(predicted - seconds) / seconds]
        sample = seconds / images
        self.per_image = sample if self.measured == 0 else (
            (1 - EWMA_ALPHA) * self.per_image + EWMA_ALPHA * sample)
        self.measured += 1


class Admission:
    """Latency predictor per model and run queue per device; used from the event loop.

    Parameters
    ----------
    devices : dict of str -> DeviceConfig
    """

    def __init__(self, devices):
        self.queues = {name: DeviceQueue(d.workers, len(PRIORITIES))
                       for name, d in devices.items()}
        self._predictors = {}

    def add_model(self, name, seconds_per_image):
        self._predictors[name] = _Predictor(seconds_per_image)

    def admit(self, model, device, images, slo_seconds, priority="normal"):
        """Queue the request on ``device`` if it can meet ``slo_seconds`` (None: always).

        Returns
        -------
        (Ticket or None, Refusal or None)
            The ticket to :meth:`~DeviceQueue.acquire` and then pass to :meth:`done`, or
            the refusal (nothing queued).
        """
        own = self._predictors[model].per_image * images
        queue = self.queues[device]
        wait = queue.predicted_wait(PRIORITIES.index(priority))
        if slo_seconds is not None and wait + own > slo_seconds:
            if own > slo_seconds:
                why = (f"its own run is predicted at {own * 1e3:.2f} ms ({images} "
                       f"image(s)), over the SLO of {slo_seconds * 1e3:g} ms: send "
                       f"fewer images per request")
            else:
                why = (f"predicted latency {(wait + own) * 1e3:.2f} ms ({wait * 1e3:.2f} "
                       f"ms queued ahead on device {device!r}) exceeds the SLO of "
                       f"{slo_seconds * 1e3:g} ms")
            return None, Refusal(why, max(wait + own - slo_seconds, 0.0))
        return queue.enqueue(PRIORITIES.index(priority), own), None

    def done(self, model, device, ticket, images, seconds):
        """Leave the device's queue and calibrate the model's predictor with the measured
        time (None when the run failed or never ran: nothing to learn)."""
        self.queues[device].finish(ticket)
        if seconds is not None:
            self._predictors[model].observe(images, ticket.work, seconds)

    def stats(self, model):
        """Predictor figures of ``model``: planner and calibrated seconds per image, runs
        measured, and the p50/p95 relative error of the predictions."""
        p = self._predictors[model]
        errors = sorted(p.abs_errors)

        def quantile(q):
            return errors[min(len(errors) - 1, int(q * len(errors)))] if errors else None

        return {"planner_seconds_per_image": p.planner,
                "calibrated_seconds_per_image": p.per_image, "runs_measured": p.measured,
                "prediction_error_p50": quantile(0.5),
                "prediction_error_p95": quantile(0.95)}
