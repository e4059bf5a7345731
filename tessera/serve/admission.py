"""SLO-aware admission: predict a request's latency before running it, refuse it early.

Per model, the predicted time of a request of ``N`` images is ``N * per_image``. The
``per_image`` figure starts from the planner's per-layer estimates (at batch 1, the cheapest
timed estimate of each layer, as the planner chooses; layers without one count 0) and is
then calibrated on every measured run (an exponential moving average). Per device, the
*backlog* is the predicted time of every admitted request not yet finished; a request's
predicted latency is ``backlog / workers + its own time``. A tenant with an SLO is refused
(the caller answers 503 with ``Retry-After``) when that exceeds its SLO; a best-effort
tenant (no SLO) is always admitted. Nothing here reorders work: runs start in arrival
order on each device (see ``docs/serving.md`` for what is not done yet).
"""

import threading
from dataclasses import dataclass

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
    """Backlog per device and latency predictor per model; thread-safe.

    Parameters
    ----------
    devices : dict of str -> DeviceConfig
    """

    def __init__(self, devices):
        self._workers = {name: d.workers for name, d in devices.items()}
        self._backlog = dict.fromkeys(devices, 0.0)
        self._predictors = {}
        self._lock = threading.Lock()

    def add_model(self, name, seconds_per_image):
        self._predictors[name] = _Predictor(seconds_per_image)

    def admit(self, model, device, images, slo_seconds):
        """Reserve the request's predicted time on ``device``.

        Returns
        -------
        (float, Refusal or None)
            The predicted seconds of the request's own run (pass it to :meth:`done`), and
            the refusal when the predicted latency exceeds ``slo_seconds`` (then nothing is
            reserved).
        """
        with self._lock:
            own = self._predictors[model].per_image * images
            wait = self._backlog[device] / self._workers[device]
            if slo_seconds is not None and wait + own > slo_seconds:
                if own > slo_seconds:
                    why = (f"its own run is predicted at {own * 1e3:.2f} ms ({images} "
                           f"image(s)), over the SLO of {slo_seconds * 1e3:g} ms: send "
                           f"fewer images per request")
                else:
                    why = (f"predicted latency {(wait + own) * 1e3:.2f} ms ({wait * 1e3:.2f} "
                           f"ms queued ahead on device {device!r}) exceeds the SLO of "
                           f"{slo_seconds * 1e3:g} ms")
                return own, Refusal(why, max(wait + own - slo_seconds, 0.0))
            self._backlog[device] += own
            return own, None

    def done(self, model, device, images, predicted, seconds):
        """Release a reservation and calibrate the model's predictor with the measured time
        (None when the run failed: nothing to learn)."""
        with self._lock:
            self._backlog[device] = max(0.0, self._backlog[device] - predicted)
            if seconds is not None:
                self._predictors[model].observe(images, predicted, seconds)

    def stats(self, model):
        """Predictor figures of ``model``: planner and calibrated seconds per image, runs
        measured, and the p50/p95 relative error of the predictions."""
        with self._lock:
            p = self._predictors[model]
            errors = sorted(p.abs_errors)

            def quantile(q):
                return errors[min(len(errors) - 1, int(q * len(errors)))] if errors else None

            return {"planner_seconds_per_image": p.planner,
                    "calibrated_seconds_per_image": p.per_image, "runs_measured": p.measured,
                    "prediction_error_p50": quantile(0.5),
                    "prediction_error_p95": quantile(0.95)}
