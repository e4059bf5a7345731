"""The HTTP application: KServe v2 endpoints over Tessera sessions, with tenants and limits.

This is the only module of the serving layer that imports FastAPI; ``tessera serve``
imports it on demand, so the runtime and the rest of the CLI never load the web stack.
"""

import asyncio
import concurrent.futures
import contextlib
import hmac
import json
import logging
import queue as queue_module
import time
from dataclasses import dataclass, field

import numpy as np
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from sw_driver import InferenceSession
from sw_driver.errors import InputError, TesseraError
from sw_driver.planner import Planner

from .admission import SLO_MARGIN, Admission, planner_seconds_per_image
from .config import PRIORITIES
from .health import FALLBACK, DeviceHealth
from .limits import TokenBucket, retry_after
from .metrics import CONTENT_TYPE_LATEST, Metrics
from .protocol import HEADER_LENGTH, ProtocolError, decode_infer, encode_infer, tensor_metadata
from .queueing import Shed, batch_key
from .worker import DeviceWorker, SessionSpec, make_session

__all__ = ["REQUEST_LOG", "create_app"]

#: One JSON object per inference request (tenant, model, device, batch, queue_ms, run_ms,
#: status, ...); ``tessera serve`` writes it to stderr, one line each.
REQUEST_LOG = logging.getLogger("tessera.serve.requests")


class _Refused(Exception):
    """Ends a request with a v2 error: ``{"error": message}`` and the given status."""

    def __init__(self, status, message, headers=None):
        super().__init__(message)
        self.status, self.message, self.headers = status, message, headers


class _EarlyRefusals:
    """ASGI middleware: answers the refusals ``decide(scope)`` returns (a
    :class:`_Refused`) with a v2 error, without reading the body or routing."""

    def __init__(self, app, decide):
        self.app, self.decide = app, decide

    async def __call__(self, scope, receive, send):
        refusal = self.decide(scope) if scope["type"] == "http" else None
        if refusal is None:
            await self.app(scope, receive, send)
            return
        body = json.dumps({"error": refusal.message}).encode()
        headers = [(b"content-type", b"application/json"),
                   (b"content-length", str(len(body)).encode())]
        headers += [(k.lower().encode(), v.encode()) for k, v in (refusal.headers or {}).items()]
        await send({"type": "http.response.start", "status": refusal.status,
                    "headers": headers})
        await send({"type": "http.response.body", "body": body})


@dataclass
class _Model:
    config: object
    sessions: dict  # device -> InferenceSession with that device's providers
    fallback: InferenceSession  # the CPU provider: where a failed batch is retried
    runs: dict  # device -> batches run there (the balancing's choices, for /stats)
    plan: object = None  # PipelinePlan when the model has parallelism "pipeline" or "auto"
    stages: tuple = ()  # the two stage models when the plan is a pipeline
    specs: dict = field(default_factory=dict)  # device -> SessionSpec (a worker builds it)

    @property
    def session(self):
        """The session on the model's first device (metadata, and tests that wrap it)."""
        return self.sessions[self.config.device]

    @session.setter
    def session(self, value):
        self.sessions[self.config.device] = value


def _load_models(config, admission):
    models = {}
    for name, model in config.models.items():
        sessions, planned, planners, specs = {}, {}, {}, {}
        for device in model.devices:
            planners[device] = planner = Planner()
            # One of N instances: its "sim" provider is the twin of the instance's engine.
            specs[device] = SessionSpec(str(model.path), tuple(
                config.devices[device].providers or model.providers),
                config.devices[device].engine)
            try:
                sessions[device] = make_session(specs[device], planner)
            except TesseraError as exc:
                raise type(exc)(f"{config.source}: [models.{name}] on device {device!r}: "
                                f"{exc}") from exc
            planned[device] = planner_seconds_per_image(sessions[device].graph, planner)
        if model.parallelism != "data":
            plan, stages = _pipeline(config, model, sessions, planners, admission)
            models[name] = _Model(model, sessions, InferenceSession(str(model.path),
                                                                    providers=["cpu"]),
                                  dict.fromkeys(model.devices, 0), plan, stages)
            if stages:
                continue  # requests go through the stages; the whole model is metadata
        admission.add_model(name, planned, model.max_batch, model.devices,
                            **_shaping(model))
        models.setdefault(name, _Model(model, sessions, InferenceSession(str(model.path),
                                                                         providers=["cpu"]),
                                       dict.fromkeys(model.devices, 0)))
        models[name].specs = specs
    return models


def _shaping(model):
    """The admission's batch-shaping arguments of a ``ModelConfig``."""
    return {"max_queue_delay": model.max_queue_delay_ms / 1e3,
            "preferred": model.preferred_batch_sizes}


def _pipeline(config, model, sessions, planners, admission):
    """The model's :class:`~tessera.serve.pipeline.PipelinePlan` over its two devices and,
    when it is a pipeline, its two stage models (registered with ``admission`` as
    ``NAME/stage0`` and ``NAME/stage1``, each on its own device)."""
    from .config import ModelConfig
    from .pipeline import layer_seconds, plan, split_model

    graph = sessions[model.device].graph
    seconds = {d: layer_seconds(sessions[d].graph, planners[d]) for d in model.devices}
    try:
        chosen = plan(graph, seconds, model.devices, force=model.parallelism == "pipeline")
    except ValueError as exc:
        raise TesseraError(f"{config.source}: [models.{model.name}] parallelism = "
                           f"'pipeline': {exc}") from None
    if chosen.choice != "pipeline":
        return chosen, ()
    first, out_name, second, in_name = split_model(model.path, chosen.tensor)
    stages = []
    for index, (data, (device, _, _)) in enumerate(zip((first, second), chosen.stages,
                                                        strict=True)):
        stage = ModelConfig(f"{model.name}/stage{index}", model.path, model.providers,
                            device, model.max_batch)
        spec = SessionSpec(data, tuple(config.devices[device].providers or model.providers))
        planner = Planner()
        session = make_session(spec, planner)
        admission.add_model(stage.name, {device: planner_seconds_per_image(session.graph,
                                                                           planner)},
                            model.max_batch, (device,), **_shaping(model))
        stages.append(_Model(stage, {device: session},
                             InferenceSession(data, providers=["cpu"]), {device: 0},
                             specs={device: spec}))
    stages[0].boundary, stages[1].boundary = out_name, in_name
    return chosen, tuple(stages)


def _start_workers(config, models):
    """``device -> queue of DeviceWorker`` for each device with ``process = "worker"``:
    ``workers`` processes, each holding the session of every model (or pipeline stage) run
    on the device. All are started, then awaited, so their loading overlaps."""
    served = [s for m in models.values() for s in (m.stages or (m,))]
    started = []
    try:
        pools = {}
        for name, device in config.devices.items():
            if device.process != "worker":
                continue
            specs = {m.config.name: m.specs[name] for m in served if name in m.specs}
            pools[name] = queue_module.SimpleQueue()
            for _ in range(device.workers):
                started.append(DeviceWorker(name, specs, device.timeout_s))
                pools[name].put(started[-1])
        for worker in started:
            try:
                worker.wait_ready()
            except Exception as exc:
                raise type(exc)(f"{config.source}: [devices.{worker.name}] process = "
                                f"'worker': {exc}") from exc
    except BaseException:
        for worker in started:
            worker.close()
        raise
    return pools, started


def find_tenant(tenants, token):
    """The tenant (of the ``tenants`` mapping) whose token ``token`` is, or None. Every
    token is compared, in constant time: how long it takes says nothing of which matched."""
    found = None
    for tenant in tenants.values():
        if hmac.compare_digest(tenant.token.encode(), token.strip().encode()):
            found = tenant
    return found


def inference_model(method, path):
    """The model an inference request (``POST /v2/models/NAME/infer``) names, or None for
    any other request."""
    if method != "POST" or not path.startswith("/v2/models/") or not path.endswith("/infer"):
        return None
    return path[len("/v2/models/"):-len("/infer")]


def create_app(config, *, clock=time.monotonic, upstream=None):
    """A FastAPI application serving ``config`` (a :class:`~tessera.serve.config.ServeConfig`).

    Sessions are created here, so a model that cannot load fails at startup, naming it.
    ``clock`` drives the rate limits and device probes (tests pass a fake one). Setting
    ``app.state.draining`` (``tessera serve`` does on SIGTERM) makes ``/v2/health/ready``
    answer 503 and new inference requests 503, while the admitted ones finish.

    ``upstream`` makes it a side lane (:mod:`tessera.serve.lanes`): requests are checked
    and decoded here and run by ``upstream.call`` in the main process, which holds the
    scheduler and the devices; counts go to ``upstream.metrics``.
    """
    admission = Admission(config.devices, config.tenants, clock=clock)
    models = _load_models(config, admission)
    device_health = {name: DeviceHealth(name, d.probe_s, clock=clock)
                     for name, d in config.devices.items()}
    buckets = {name: TokenBucket(t.rate, t.burst, clock) for name, t in config.tenants.items()}
    worker_pools, workers = ({}, []) if upstream is not None else _start_workers(config,
                                                                                 models)

    def close():
        """Stop the worker processes (idempotent): after the drain, at the app's shutdown;
        ``tessera serve`` calls it again after uvicorn returns, and tests call it."""
        for worker in workers:
            worker.close()

    @contextlib.asynccontextmanager
    async def lifespan(app):
        yield
        close()

    app = FastAPI(title="Tessera inference server", docs_url=None, redoc_url=None,
                  openapi_url=None, lifespan=lifespan)
    metrics = Metrics() if upstream is None else upstream.metrics
    app.state.refused_type = _Refused
    app.state.close, app.state.workers = close, workers
    app.state.config, app.state.models, app.state.admission = config, models, admission
    app.state.metrics = metrics
    app.state.health, app.state.draining = device_health, False

    @app.exception_handler(_Refused)
    async def refused(request, exc):
        return JSONResponse({"error": exc.message}, status_code=exc.status, headers=exc.headers)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request, exc):
        message = {404: f"no endpoint {request.method} {request.url.path}",
                   405: f"method {request.method} not allowed on {request.url.path}"}
        return JSONResponse({"error": message.get(exc.status_code, str(exc.detail))},
                            status_code=exc.status_code)

    def tenant_of(request):
        header = request.headers.get("authorization", "")
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not token:
            raise _Refused(401, "missing bearer token: send 'Authorization: Bearer <token>'",
                           {"WWW-Authenticate": "Bearer"})
        found = find_tenant(config.tenants, token)
        if found is None:
            raise _Refused(401, "invalid bearer token", {"WWW-Authenticate": "Bearer"})
        return found

    def rate_refusal(tenant):
        wait = buckets[tenant.name].take()
        if wait > 0:
            return _Refused(429, f"tenant {tenant.name!r} is over its rate limit of "
                                 f"{tenant.rate:g} requests/s (burst {tenant.burst})",
                            {"Retry-After": retry_after(wait)})
        return None

    def early_refusal(scope):
        """A refusal decided from the request line and headers alone (rate limit, every
        device's queue full for the tenant's priority), or None: the full path decides.
        Under overload most requests end here, before the body is read and before the
        web framework's routing, so refusing costs the server less than serving."""
        name = inference_model(scope["method"], scope["path"])
        if name is None or app.state.draining:
            return None
        header = dict(scope["headers"]).get(b"authorization", b"").decode("latin-1")
        scheme, _, token = header.partition(" ")
        tenant = (find_tenant(config.tenants, token) if scheme.lower() == "bearer" and token
                  else None)
        if tenant is None or name not in models or name not in tenant.models:
            return None
        labels = {"tenant": tenant.name, "model": name}
        scope["tessera_rate_checked"] = True
        refusal = rate_refusal(tenant)
        if refusal is None and upstream is None:  # a side lane has no queues of its own
            rank = PRIORITIES.index(tenant.priority)
            queues = [admission.queues[d] for d in config.devices_for(tenant.name, name)]
            if all(q.full_for(rank) for q in queues):
                refusal = _Refused(503, f"model {name!r} for tenant {tenant.name!r}: every "
                                        f"device's queue is full (max_queue = "
                                        f"{queues[0].max_queue}) of requests of its priority "
                                        f"or a higher one",
                                   {"Retry-After": retry_after(sum(
                                       q.predicted_wait(rank) for q in queues) / len(queues))})
        elif refusal is None and upstream.full():
            # The lane's requests already out could fill every device's queue: more would
            # only cost the main process a refusal each (tessera/serve/lanes.py).
            refusal = _Refused(503, f"model {name!r} for tenant {tenant.name!r}: the "
                                    f"server's queues are full ({upstream.limit} requests of "
                                    f"the lower priorities waiting or running)",
                               {"Retry-After": "1"})
        if refusal is not None:
            metrics.requests.labels(**labels, code=str(refusal.status)).inc()
            REQUEST_LOG.info(json.dumps({**labels, "status": refusal.status,
                                         "error": refusal.message}))
        return refusal

    def model_for(request, name, labels=None):
        tenant = tenant_of(request)
        if labels is not None:
            labels["tenant"] = tenant.name
        if name not in models:
            raise _Refused(404, f"unknown model {name!r}")
        if name not in tenant.models:
            raise _Refused(403, f"tenant {tenant.name!r} may not use model {name!r}")
        return tenant, models[name]

    @app.get("/v2")
    async def server_metadata():
        return {"name": "tessera", "version": "0.1.0", "extensions": ["binary_tensor_data"]}

    @app.get("/v2/health/live")
    async def live():
        return Response(status_code=200)

    @app.get("/v2/health/ready")
    async def ready():
        # Every session was created at startup (a failed one stopped the server), and every
        # model has a CPU fallback, so only draining makes the server unready; a failed
        # device is reported in the body (its models run on the fallback meanwhile).
        if app.state.draining:
            return JSONResponse({"error": "the server is draining (shutting down)"},
                                status_code=503)
        return JSONResponse({"ready": True, "devices": {
            name: health.as_dict() for name, health in device_health.items()}})

    @app.get("/v2/models/{name}")
    async def model_metadata(name: str, request: Request):
        _, model = model_for(request, name)
        session = model.session
        return {"name": name, "versions": ["1"], "platform": "tessera_onnx_int8",
                "inputs": [tensor_metadata(i) for i in session.get_inputs()],
                "outputs": [tensor_metadata(o) for o in session.get_outputs()]}

    @app.get("/v2/models/{name}/ready")
    async def model_ready(name: str, request: Request):
        model_for(request, name)
        return Response(status_code=200)

    @app.get("/v2/models/{name}/stats")
    async def model_stats(name: str, request: Request):
        _, model = model_for(request, name)
        # A pipeline's requests run as its stages, each on its own device.
        runs = {d: (model.sessions[d], model.runs[d], name) for d in model.config.devices}
        for stage in model.stages:
            runs[stage.config.device] = (stage.session, stage.runs[stage.config.device],
                                         stage.config.name)
        if model.stages:
            policy = "pipeline: " + model.plan.describe()
        elif len(model.config.devices) > 1:
            policy = "data parallel: each request to the device predicted to finish it first"
        else:
            policy = "one device"
        first = runs[model.config.device][2]
        return {"name": name, "device": model.config.device,
                "max_batch": model.config.max_batch,
                "max_queue_delay_ms": model.config.max_queue_delay_ms,
                "preferred_batch_sizes": list(model.config.preferred_batch_sizes),
                "providers": model.session.get_providers(), "fallback": ["cpu"],
                "health": device_health[model.config.device].as_dict(),
                "predictor": admission.stats(first, model.config.device),
                "parallelism": {"setting": model.config.parallelism,
                                **(model.plan.as_dict() if model.plan is not None
                                   else {"choice": "data"})},
                "balancing": {
                    "policy": policy,
                    "devices": {d: {"providers": session.get_providers(),
                                    "batches": batches,
                                    "tenant": config.owner(d) or "shared",
                                    "health": device_health[d].as_dict(),
                                    "predictor": admission.stats(who, d),
                                    "process": config.devices[d].process,
                                    **({"workers": [w.stats() for w in workers
                                                    if w.name == d]}
                                       if d in worker_pools else {})}
                                for d, (session, batches, who) in runs.items()}}}

    async def read_body(request):
        limit = config.max_body_bytes
        declared = request.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            raise _Refused(413, f"request body of {declared} bytes exceeds the server's "
                                f"max_body_bytes of {limit}")
        chunks, size = [], 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise _Refused(413, f"request body exceeds the server's max_body_bytes of "
                                    f"{limit}")
            chunks.append(chunk)
        return b"".join(chunks)

    def run(model, device, feeds, names):
        """Run on ``device``, or on the model's CPU fallback when the device is unhealthy
        or its run fails: ``(values, seconds, where it ran, the device's error or None)``.
        """
        health, error = device_health[device], None
        if health.should_try():
            start = time.perf_counter()
            try:
                if device in worker_pools:
                    values, seconds = run_in_worker(device, model.config.name, names, feeds)
                else:
                    values = model.sessions[device].run(names, feeds)
                    seconds = time.perf_counter() - start
            except InputError:
                raise  # the request's fault: the CPU would refuse it too
            except TesseraError as exc:  # a device fault or timeout: retried below
                health.failed(exc)
                error = exc
            else:
                health.passed()
                return values, seconds, device, None
        start = time.perf_counter()
        values = model.fallback.run(names, feeds)
        return values, time.perf_counter() - start, FALLBACK, error

    def run_in_worker(device, key, names, feeds):
        """A run in one of the device's worker processes: ``(outputs, the worker's own
        seconds)``, the time the predictor learns (no GIL shared with the front end in it).
        The device's queue starts at most ``workers`` runs at once, so a worker is free."""
        pool = worker_pools[device]
        worker = pool.get()
        try:
            return worker.run(key, names, feeds)
        finally:
            pool.put(worker)

    @app.get("/metrics")
    async def prometheus():
        if upstream is None:  # the main process holds the queues
            metrics.show_queues(admission.queues)
        return Response(metrics.render(), media_type=CONTENT_TYPE_LATEST)

    executor = concurrent.futures.ThreadPoolExecutor(
        max_workers=sum(d.workers for d in config.devices.values()),
        thread_name_prefix="tessera-run")
    app.state.executor = executor

    def launch(ticket):
        """Start ``ticket``'s run (it was just given a slot, in the event loop): riders of
        its key join, the batch goes to a run thread, and its completion comes back as one
        callback. No request's coroutine sits between one run and the next: under a flood
        of connections each hop through the event loop's queue costs milliseconds, and the
        device would idle for several of them per batch."""
        queue = admission.queues[ticket.device]
        feeds, model, names = ticket.payload
        # The leader's deadline is its latest start (perf_counter clock); its run may take
        # its own predicted time plus the slack it has left, less the SLO margin.
        own = admission.predict(model.config.name, ticket.images, ticket.device)
        run_budget = (ticket.deadline - time.perf_counter() + own) * (1 - SLO_MARGIN)
        limit = admission.batch_limit(model.config.name, ticket.device,
                                      model.config.max_batch, ticket.images, run_budget)
        batch = [ticket, *queue.gather(ticket, limit,
                                       lambda n: admission.predict(model.config.name, n,
                                                                   ticket.device))]
        try:
            if len(batch) > 1:
                feeds = {k: np.concatenate([t.payload[0][k] for t in batch]) for k in feeds}
            loop = asyncio.get_running_loop()
            future = executor.submit(run, model, ticket.device, feeds, names)
        except Exception as exc:  # answered as a failed run, never a slot held forever
            future = concurrent.futures.Future()
            future.set_exception(exc)
            complete(model, batch, future)
            return
        future.add_done_callback(
            lambda f: loop.call_soon_threadsafe(complete, model, batch, f))

    def complete(model, batch, future):
        """A run ended: answer each request of the batch with its slice (or the error),
        calibrate the predictor, free the slot (which may launch the next run)."""
        learned = None
        try:
            learned = answer_batch(model, batch, future)
        finally:  # whatever happened above, the slot is freed and nobody waits forever
            name, leader = model.config.name, batch[0]
            for ticket in batch:
                if not ticket.outcome.done():
                    ticket.outcome.set_exception(TesseraError(
                        f"model {name!r}: the batch's results were lost"))
            for ticket in batch[1:]:
                admission.done(name, ticket.device, ticket, None)
            admission.done(name, leader.device, leader, learned,
                           images=sum(t.images for t in batch), predicted=leader.work)

    def answer_batch(model, batch, future):
        """Resolve the batch's outcomes; the seconds the predictor may learn, or None."""
        leader, name, device = batch[0], model.config.name, batch[0].device
        total = sum(t.images for t in batch)
        learned = None
        try:
            values, seconds, where, error = future.result()
            if len(batch) > 1 and any(v.ndim == 0 or v.shape[0] != total for v in values):
                raise TesseraError(f"model {name!r}: max_batch > 1 needs every output to "
                                   f"lead with the batch dimension; got shapes "
                                   f"{[list(v.shape) for v in values]} for {total} images")
        except Exception as exc:  # the requests' own handlers turn it into 400/500
            for ticket in batch:
                if not ticket.outcome.done():
                    ticket.outcome.set_exception(exc)
        else:
            model.runs[device] += 1
            info = {"device": where, "batch": total, "retried": error is not None}
            if error is not None:
                metrics.retries.labels(device=device).inc()
            # A retried batch ran elsewhere: the device's predictor learns nothing.
            learned = None if where == FALLBACK else seconds
            metrics.batch_images.labels(model=name).observe(total)
            metrics.busy_seconds.labels(device=where).inc(seconds)
            if leader.work > 0 and learned is not None:
                metrics.prediction_ratio.labels(device=device).observe(seconds / leader.work)
            start = 0
            for ticket in batch:
                if not ticket.outcome.done():  # its client may have gone
                    ticket.outcome.set_result(
                        ([v[start:start + ticket.images] for v in values], seconds, info))
                start += ticket.images
        return learned

    for queue in admission.queues.values():
        queue.launch = launch

    app.add_middleware(_EarlyRefusals, decide=early_refusal)

    @app.post("/v2/models/{name}/infer")
    async def infer(name: str, request: Request):
        # Label values come from the config only ("-" otherwise): clients cannot add series.
        labels = {"tenant": "-", "model": name if name in models else "-"}
        log = {} if upstream is None else {"lane": "side"}
        try:
            response = await answer(name, request, labels, log)
        except _Refused as exc:
            metrics.requests.labels(**labels, code=str(exc.status)).inc()
            REQUEST_LOG.info(json.dumps({**labels, **log, "status": exc.status,
                                         "error": exc.message}))
            raise
        metrics.requests.labels(**labels, code="200").inc()
        REQUEST_LOG.info(json.dumps({**labels, **log, "status": 200}))
        return response

    async def execute(name, model, tenant, feeds, names, images, slo, received, only):
        """Admit, queue and run one request of ``model`` (a served model or a pipeline's
        stage; ``name`` is what the client asked for): ``(values, seconds queued, seconds
        run, run info)``, or :class:`_Refused`."""
        own = model.config.name
        key = None if model.config.max_batch == 1 else batch_key(own, names, feeds)
        unhealthy = [d for d in model.config.devices if not device_health[d].healthy]
        ticket, refusal = admission.admit(own, None, images, slo, tenant.priority,
                                          key=key, payload=(feeds, model, names),
                                          now=received, tenant=tenant.name, avoid=unhealthy,
                                          only=only)
        if refusal is not None:
            raise _Refused(503, f"model {name!r} for tenant {tenant.name!r}: "
                                f"{refusal.message}",
                           {"Retry-After": retry_after(refusal.retry_after)})
        queue = admission.queues[ticket.device]
        queued = time.perf_counter()
        try:
            await queue.acquire(ticket)
        except Shed as exc:
            wait = queue.predicted_wait(ticket.rank) + ticket.work
            raise _Refused(503, f"model {name!r} for tenant {tenant.name!r}: shed: {exc}",
                           {"Retry-After": retry_after(wait)}) from None
        queued = time.perf_counter() - queued
        try:
            # Shielded: a client that goes away must not cancel the batch's shared future.
            values, seconds, info = await asyncio.shield(ticket.outcome)
        except InputError as exc:
            raise _Refused(400, f"model {name!r}: {exc}") from None
        except TesseraError as exc:
            raise _Refused(500, f"model {name!r}: the run failed: {exc}") from None
        except Exception as exc:  # not the driver's: still an answer, never a traceback
            raise _Refused(500, f"model {name!r}: the run failed: {type(exc).__name__}: "
                                f"{exc}") from None
        return values, queued, seconds, info

    async def run_request(name, tenant_name, feeds, names, images, slo, received):
        """Admit, queue and run a decoded request (from this process's HTTP front end or
        a side lane's): ``(values, seconds queued, seconds run, run info)``, or
        :class:`_Refused`."""
        model, tenant = models[name], config.tenants[tenant_name]
        if not model.stages:
            return await execute(name, model, tenant, feeds, names, images, slo, received,
                                 config.devices_for(tenant.name, name))
        # A pipeline: the first stage must leave the second's predicted time within the
        # SLO; once admitted, the second stage is never refused for the SLO.
        first, second = model.stages
        rest = admission.predict(second.config.name, images, second.config.device)
        budget = None if slo is None else max(slo - rest, 1e-9)
        (middle,), queued0, ran0, info0 = await execute(
            name, first, tenant, feeds, [first.boundary], images, budget, received, None)
        values, queued1, ran1, info1 = await execute(
            name, second, tenant, {second.boundary: middle}, names, images, None, received,
            None)
        info = {"device": f"{info0['device']} -> {info1['device']}",
                "batch": max(info0["batch"], info1["batch"]),
                "retried": info0["retried"] or info1["retried"]}
        return values, queued0 + queued1, ran0 + ran1, info

    app.state.run_request = run_request

    async def answer(name, request, labels, log):
        received = time.perf_counter()
        tenant, model = model_for(request, name, labels)
        if app.state.draining:
            raise _Refused(503, "the server is draining (shutting down): send the request "
                                "to another replica", {"Retry-After": "1"})
        if not request.scope.get("tessera_rate_checked"):
            refusal = rate_refusal(tenant)
            if refusal is not None:
                raise refusal
        body = await read_body(request)
        session = model.session
        try:
            decoded = decode_infer(body, request.headers.get(HEADER_LENGTH),
                                   session.get_inputs(), session.get_outputs())
        except ProtocolError as exc:
            raise _Refused(exc.status, f"model {name!r}: {exc}") from None
        images = max(int(next(iter(decoded.feeds.values())).shape[0]), 1)
        log["images"] = images
        slo = None if tenant.slo_ms is None else tenant.slo_ms / 1e3
        names = [n for n, _ in decoded.outputs]
        metrics.images.labels(**labels).observe(images)
        values, queued, seconds, info = await (upstream.call if upstream is not None
                                               else run_request)(
            name, tenant.name, decoded.feeds, names, images, slo, received)
        log["queue_ms"] = round(queued * 1e3, 3)
        metrics.queue_seconds.labels(**labels).observe(queued)
        log.update(device=info["device"], batch=info["batch"], retried=info["retried"],
                   run_ms=round(seconds * 1e3, 3))
        metrics.compute_seconds.labels(**labels).observe(seconds)
        infos = {o.name: o for o in session.get_outputs()}
        content, headers = encode_infer(name, decoded, dict(zip(names, values, strict=True)),
                                        infos)
        latency = time.perf_counter() - received
        metrics.latency_seconds.labels(**labels).observe(latency)
        if slo is not None:  # the series exists (at 0) once the tenant has been answered
            metrics.slo_violations.labels(**labels).inc(1 if latency > slo else 0)
        return Response(content=content, headers=headers)

    return app
