"""SLO-aware admission: predict a request's latency before running it, refuse it early.

Per model, the predicted time of a request of ``N`` images starts as ``N`` times the
planner's per-layer estimates at batch 1 (the cheapest timed estimate of each layer, as the
planner chooses; layers without one count 0); once runs are measured, it is the median of
the last measured times at that ``N``, interpolated between the sizes seen (see
:class:`_Predictor`). Each device's queue
(:class:`~tessera.serve.queueing.DeviceQueue`) starts waiting runs by priority, so a
request's predicted latency is the predicted work running or waiting at its priority or a
higher one, divided by the device's workers, plus its own time. A tenant with an SLO is
refused (the caller answers 503 with ``Retry-After``) when that exceeds its SLO; a
best-effort tenant (no SLO) is always admitted. An admitted request's deadline (the latest
start that still meets its SLO) orders it within its priority class.

With dynamic batching a waiting request is counted at its share of a full batch
(``predict(max_batch) / max_batch`` per image), and a batch that starts counts once, at the
predicted time of all its images: counting each request's time alone overstated the work
ahead of a request, and the prediction of a batch, by up to ``max_batch`` times.

Runs are not preempted, so while a tenant with an SLO is active on a device every batch
there is bounded (:meth:`Admission.batch_limit`): a request of that tenant may wait for
one whole batch and then run in one of its own, so each batch's *tail* time (the median
prediction times the ``TAIL_QUANTILE`` of recent measured/predicted ratios, the online
calibration) is kept within half the SLO less ``SLO_MARGIN``.

A model's ``max_queue_delay`` lets a new request wait for a fuller batch (see
``queueing``'s "batch shaping"), but a tenant with an SLO only as long as its SLO, less
``SLO_MARGIN``, its predicted wait and its own run, allow (:meth:`Admission._hold`).
"""

import statistics
import time
from dataclasses import dataclass

from .config import PRIORITIES
from .queueing import DeviceQueue, QueueFull

__all__ = ["Admission", "Refusal", "planner_seconds_per_image"]

#: Measured runs per size whose median is the prediction: a median, not a moving average,
#: because on a shared machine a run now and then takes 10x its usual time, and an average
#: carried each such outlier into the next predictions (bench/bench_serve.py).
WINDOW = 15
#: Runs kept per size for the error figures.
HISTORY = 1000
#: A tenant with an SLO counts as active for this many seconds after its last request.
ACTIVE_SECONDS = 1.0
#: Part of an SLO kept for what the predictor does not see (HTTP, decoding, jitter) when
#: bounding batches for it (see :meth:`Admission.batch_limit`).
SLO_MARGIN = 0.25
#: Request sizes (images) with their own average; others are interpolated.
MAX_SIZES = 64
#: Runs whose measured/predicted ratio calibrates the tail prediction, and the quantile
#: of those ratios taken: on a shared 2-core machine a run's time varies by 40-70 % around
#: its median (p95, bench/results/serve.json), so bounding a batch by its median alone let
#: one run in ten block a latency-bound request past its SLO.
RATIO_WINDOW = 200
TAIL_QUANTILE = 0.9


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
    """Seconds of a run of ``N`` images: the measured median at each ``N`` seen, between
    two seen sizes a straight line, below the smallest its time, above the largest its
    time scaled by ``N`` (runs have a fixed part, so both err on the long side); before
    any measurement, the planner's seconds per image times ``N``."""

    def __init__(self, seconds_per_image):
        self.planner = seconds_per_image
        self.by_images = {}  # N -> median of the last WINDOW measured seconds
        self.seconds_by_images = {}  # N -> the last HISTORY measured seconds
        self.measured = 0
        self.abs_errors = []  # |predicted - measured| / measured, the last HISTORY runs
        self.errors_by_images = {}  # N -> the same, the last HISTORY runs of N images
        self.ratios = []  # measured / predicted seconds, the last RATIO_WINDOW runs

    def predict(self, images):
        seen = self.by_images
        if images in seen:
            return seen[images]
        if not seen:
            return self.planner * images
        below = max((n for n in seen if n < images), default=None)
        above = min((n for n in seen if n > images), default=None)
        if above is None:
            return seen[below] * images / below
        if below is None:
            return seen[above]
        return seen[below] + (seen[above] - seen[below]) * (images - below) / (above - below)

    def tail(self, images):
        """A high estimate of a run of ``images``: :meth:`predict` times the
        ``TAIL_QUANTILE`` of the recent measured/predicted ratios (at least 1)."""
        ratios = sorted(self.ratios)
        factor = ratios[min(len(ratios) - 1, int(TAIL_QUANTILE * len(ratios)))] \
            if ratios else 1.0
        return self.predict(images) * max(1.0, factor)

    def observe(self, images, predicted, seconds):
        if predicted > 0 and seconds > 0:
            self.ratios = [*self.ratios[-(RATIO_WINDOW - 1):], seconds / predicted]
        if images not in self.by_images and len(self.by_images) >= MAX_SIZES:
            return  # enough sizes tracked: interpolate the rest
        if seconds > 0:
            error = abs(predicted - seconds) / seconds
            self.abs_errors = [*self.abs_errors[-(HISTORY - 1):], error]
            self.errors_by_images[images] = [
                *self.errors_by_images.get(images, [])[-(HISTORY - 1):], error]
        history = [*self.seconds_by_images.get(images, [])[-(HISTORY - 1):], seconds]
        self.seconds_by_images[images] = history
        self.by_images[images] = float(statistics.median(history[-WINDOW:]))
        self.measured += 1

    def spread(self, images):
        """p95 of ``|median - measured| / measured`` over the runs of ``images`` kept: the
        error even a predictor that knew the median exactly would make, i.e. how much of
        the error is the runs' own jitter."""
        history = self.seconds_by_images.get(images, [])
        if not history:
            return None
        middle = statistics.median(history)
        errors = sorted(abs(middle - s) / s for s in history if s > 0)
        return errors[min(len(errors) - 1, int(0.95 * len(errors)))] if errors else None


class Admission:
    """Latency predictor per model and run queue per device; used from the event loop.

    Parameters
    ----------
    devices : dict of str -> DeviceConfig
    tenants : dict of str -> TenantConfig, optional
        Their device quotas go to the device queues.
    clock : callable
        Monotonic seconds, for the quotas.
    """

    def __init__(self, devices, tenants=None, clock=time.monotonic):
        self._tenants, self._clock, self._seen = dict(tenants or {}), clock, {}
        quotas = {name: {} for name in devices}
        for tenant in (tenants or {}).values():
            for device, share in tenant.quota:
                quotas[device][tenant.name] = (share, tenant.isolation == "hard")
        self.queues = {name: DeviceQueue(d.workers, len(PRIORITIES), d.max_queue,
                                         quotas=quotas[name], clock=clock)
                       for name, d in devices.items()}
        self._predictors = {}  # (model, device) -> _Predictor
        self._max_batch = {}
        self._shaping = {}  # model -> (max queue delay in seconds, preferred batch sizes)
        self._devices = {}

    def add_model(self, name, seconds_per_image, max_batch=1, devices=("cpu",), *,
                  max_queue_delay=0.0, preferred=()):
        """``seconds_per_image``: a number, or ``{device: number}`` (one per device);
        ``max_queue_delay`` (seconds) and ``preferred`` (batch sizes) shape its batches
        (see :meth:`admit`)."""
        for device in devices:
            planner = seconds_per_image[device] if isinstance(seconds_per_image, dict) \
                else seconds_per_image
            self._predictors[name, device] = _Predictor(planner)
        self._max_batch[name] = max_batch
        self._shaping[name] = (float(max_queue_delay), tuple(preferred))
        self._devices[name] = tuple(devices)

    def predict(self, model, images, device=None):
        """Predicted seconds of one run of ``images`` images of ``model`` on ``device``
        (default: its first)."""
        return self._predictors[model, device or self._devices[model][0]].predict(images)

    def tail(self, model, images, device=None):
        """A high estimate of one run of ``images`` images (see :meth:`_Predictor.tail`)."""
        return self._predictors[model, device or self._devices[model][0]].tail(images)

    def batch_limit(self, model, device, max_batch, leader_images, run_budget=float("inf")):
        """Images a batch of ``model`` on ``device`` may hold now: ``max_batch``, less while
        a tenant with an SLO that uses this device has been active in the last
        ``ACTIVE_SECONDS``. Runs are not preempted, so a request of that tenant arriving
        just after a batch starts waits for all of it, and then runs in a batch of its own
        (with riders): each batch's tail time (:meth:`tail`) is kept within half of the
        SLO less ``SLO_MARGIN`` of it, so the one it waits for and its own fit together.
        ``run_budget`` is the leader's own: the seconds its run may take and still meet its
        SLO (riders must not make it late). Never below the leader's own images; with no
        such tenant active (the latency-bound tenant idle), batches grow to ``max_batch``
        again (soft isolation gives the capacity back)."""
        now, budget = self._clock(), run_budget
        for tenant in self._tenants.values():
            if tenant.slo_ms is None or now - self._seen.get(tenant.name, -1e18) \
                    > ACTIVE_SECONDS:
                continue
            if any(device in self._devices.get(name, ()) for name in tenant.models):
                budget = min(budget, tenant.slo_ms / 1e3 * (1 - SLO_MARGIN) / 2)
        images = max_batch
        while images > leader_images and self.tail(model, images, device) > budget:
            images -= 1
        return images

    def choose(self, model, images, priority="normal", avoid=(), only=None):
        """The device of ``model`` predicted to finish a new request first: its queue's
        wait at ``priority`` plus its own predicted time; devices in ``avoid`` (unhealthy)
        only when all are; with ``only``, never a device outside it (the instances a
        tenant may use). Returns ``(device, wait, own)``."""
        rank = PRIORITIES.index(priority)
        choices = self._devices[model] if only is None else \
            tuple(d for d in self._devices[model] if d in only)
        devices = [d for d in choices if d not in avoid] or choices
        best = None
        for device in devices:
            own = self._predictors[model, device].predict(images)
            wait = self.queues[device].predicted_wait(rank)
            if best is None or wait + own < best[1] + best[2]:
                best = (device, wait, own)
        return best

    def admit(self, model, device, images, slo_seconds, priority="normal", *, key=None,
              payload=None, now=None, tenant=None, avoid=(), only=None):
        """Queue the request on ``device`` (None: the model's device predicted to finish it
        first, see :meth:`choose`) if it can meet ``slo_seconds`` (None: always); ``key``
        and ``payload`` go to the ticket (see :meth:`DeviceQueue.gather`); ``now`` (the
        caller's clock) with an SLO gives the ticket its deadline.

        Returns
        -------
        (Ticket or None, Refusal or None)
            The ticket (its ``device`` set) to :meth:`~DeviceQueue.acquire` and then pass
            to :meth:`done`, or the refusal (nothing queued).
        """
        if tenant is not None:
            self._seen[tenant] = self._clock()
        if device is None:
            device = self.choose(model, images, priority, avoid, only)[0]
        predictor, max_batch = self._predictors[model, device], self._max_batch[model]
        own = predictor.predict(images)
        # What it adds to the queue: its share of a full batch when it may ride in one.
        share = own if key is None or max_batch == 1 else min(
            own, predictor.predict(max_batch) * images / max_batch)
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
        deadline = float("inf") if slo_seconds is None or now is None else \
            now + slo_seconds - own
        hold, fill, preferred = self._hold(model, device, images, key, slo_seconds, wait,
                                           own)
        try:
            return queue.enqueue(PRIORITIES.index(priority), share, images=images, key=key,
                                 payload=payload, deadline=deadline, tenant=tenant,
                                 device=device, hold=hold, fill=fill,
                                 preferred=preferred), None
        except QueueFull as exc:
            return None, Refusal(f"device {device!r} is full: {exc}", wait + own)

    def _hold(self, model, device, images, key, slo_seconds, wait, own):
        """``(hold seconds, fill images, preferred sizes)`` of a new request (see
        ``queueing``'s "batch shaping"): it may wait up to the model's max queue delay for
        the smallest preferred size (else ``max_batch``, either within
        :meth:`batch_limit`) to be reached, but never past what its SLO leaves after the
        predicted wait and run, less ``SLO_MARGIN``."""
        delay, preferred = self._shaping[model]
        if key is None or delay <= 0:
            return 0.0, 1, preferred
        fill = min(min(preferred, default=self._max_batch[model]),
                   self.batch_limit(model, device, self._max_batch[model], images))
        if slo_seconds is not None:
            delay = min(delay, slo_seconds * (1 - SLO_MARGIN) - wait - own)
        return max(0.0, delay), fill, preferred

    def done(self, model, device, ticket, seconds, images=None, predicted=None):
        """Leave the device's queue and calibrate the model's predictor with the measured
        time of a run of ``images`` predicted at ``predicted`` (default: the ticket's; a
        batch's leader passes the batch's); ``seconds`` None when the run failed, never
        ran, or was another ticket's batch: nothing to learn."""
        self.queues[device].finish(ticket)
        if seconds is not None:
            self._predictors[model, device].observe(ticket.images if images is None else images,
                                            ticket.work if predicted is None else predicted,
                                            seconds)

    def stats(self, model, device=None):
        """Predictor figures of ``model`` on ``device`` (default: its first): the planner's
        seconds per image, the measured median seconds per request size, runs measured,
        the tail factor (:meth:`_Predictor.tail` over the median), and the p50/p95 relative
        error of each prediction against its run, overall and per run size."""
        p = self._predictors[model, device or self._devices[model][0]]

        def quantile(errors, q):
            errors = sorted(errors)
            return errors[min(len(errors) - 1, int(q * len(errors)))] if errors else None

        return {"planner_seconds_per_image": p.planner,
                "measured_seconds_by_images": {str(n): p.by_images[n]
                                               for n in sorted(p.by_images)},
                "runs_measured": p.measured,
                "tail_factor": p.tail(1) / p.predict(1) if p.predict(1) > 0 else None,
                "prediction_error_p50": quantile(p.abs_errors, 0.5),
                "prediction_error_p95": quantile(p.abs_errors, 0.95),
                "prediction_error_by_images": {
                    str(n): {"runs": len(e), "p50": quantile(e, 0.5), "p95": quantile(e, 0.95),
                             "jitter_p95": p.spread(n)}
                    for n, e in sorted(p.errors_by_images.items())}}
