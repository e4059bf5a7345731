"""``tessera loadtest``: traffic from a serve configuration's tenants to a running server.

The tokens, models and SLOs come from the same TOML file the server reads, so a load test
needs no second description of the tenants; each answer is checked bit for bit against a
direct ``InferenceSession.run`` of the model file on the same input. The traffic itself is
:mod:`tessera.serve.loadgen` (shared with ``bench/bench_serve.py``): loopback only, bounded in
requests and seconds; each tenant's traffic comes from its own process.
"""

import numpy as np

from sw_driver import InferenceSession
from tessera.serve.loadgen import TenantLoad, check_loopback, get_json, run_load, summarize

from .config import ServeConfigError

__all__ = ["parse_load", "run_loadtest"]

#: Distinct inputs per tenant (cycled), each with its reference output.
INPUTS = 32


def parse_load(text):
    """``NAME=RATE`` (Poisson requests/s) or ``NAME=cN`` (N closed-loop clients) ->
    ``(name, rate, concurrency)``."""
    name, sep, value = text.partition("=")
    try:
        if not (sep and name):
            raise ValueError
        if value.startswith("c"):
            clients = int(value[1:])
            if clients < 1:
                raise ValueError
            return name, None, clients
        rate = float(value)
        if not rate > 0:
            raise ValueError
        return name, rate, None
    except ValueError:
        raise ValueError(f"--tenant {text!r}: expected NAME=RATE (requests/s > 0) or NAME=cN "
                         f"(N >= 1 closed-loop clients)") from None


def _inputs(session, images, rng):
    (info,) = session.get_inputs()
    shape = [images] + [d if isinstance(d, int) and d > 0 else 1 for d in info.shape[1:]]
    inputs = [rng.random(shape, dtype=np.float32) for _ in range(INPUTS)]
    output = session.get_outputs()[0].name
    return info.name, output, inputs, [session.run([output], {info.name: x})[0]
                                       for x in inputs]


def run_loadtest(config, loads, *, url=None, duration=10.0, max_requests=10_000, images=1,
                 seed=0, binary=True):
    """Drive ``loads`` (from :func:`parse_load`) at the server of ``config``; return the
    JSON-ready result: per tenant figures (each tenant's rates over the seconds its own
    traffic took, ``capped`` when it stopped at ``max_requests`` before ``duration``), and
    each model's predictor statistics."""
    url = url or f"http://{config.host}:{config.port}"
    check_loopback(url)
    rng = np.random.default_rng(seed)
    tenants, sessions = [], {}
    for name, rate, clients in loads:
        if name not in config.tenants:
            raise ServeConfigError(f"{config.source}: --tenant {name!r} is not a tenant; "
                                   f"tenants: {sorted(config.tenants)}")
        tenant = config.tenants[name]
        model = tenant.models[0]
        if model not in sessions:
            sessions[model] = InferenceSession(str(config.models[model].path))
        input_name, output_name, inputs, expected = _inputs(sessions[model], images, rng)
        tenants.append(TenantLoad(name, tenant.token, model, inputs, expected, rate=rate,
                                  concurrency=clients, binary=binary, slo_ms=tenant.slo_ms,
                                  input_name=input_name, output_name=output_name))
    # One process per tenant: in one event loop, one tenant's flood delays another's
    # requests in the client, and that lag would count as the server's latency.
    seconds = run_load(url, tenants, duration=duration, max_requests=max_requests, seed=seed,
                       processes=True)
    predictors = {}
    for load in tenants:
        if load.model not in predictors:
            stats = get_json(url, f"/v2/models/{load.model}/stats", load.token)
            predictors[load.model] = stats["predictor"]
    return {"url": url, "duration": duration, "max_requests": max_requests,
            "seconds": seconds, "seed": seed, "images_per_request": images,
            "tenants": [summarize(t, seconds) for t in tenants], "predictors": predictors}
