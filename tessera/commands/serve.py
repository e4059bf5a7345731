"""`tessera serve` and `tessera loadtest`: the inference server and the traffic that
checks it."""



from tessera.commands.common import (
    add_ray_argument,
    fail,
    print_error,
)
from tessera.console import console


def cmd_serve(args):
    # The web stack is an optional extra (pip install .[serve]): imported only here.
    from tessera.serve import ServeConfigError, load_config

    try:
        config = load_config(args.config)
    except ServeConfigError as exc:
        print_error(exc)
        return 2
    try:
        from tessera.serve import server
    except ImportError as exc:
        raise ValueError(f"tessera serve needs the serving extra ({exc.name} is missing): "
                         f"pip install '.[serve]' or make setup") from None
    port = config.port if args.port is None else args.port
    names = ", ".join(config.models)
    if args.ray is not None:  # Ray Serve replicas of the same application (docs/scale-out.md)
        from tessera.ray_cluster import RayClusterError  # imports no Ray
        from tessera.serve.on_ray import serve_on_ray

        try:
            return serve_on_ray(config, args.ray, replicas=args.replicas, port=args.port,
                                say=lambda text: console.print(
                                    f"serving {names} for {len(config.tenants)} tenant(s) on "
                                    f"http://{config.host}:{port}/v2 with {text}",
                                    markup=False, soft_wrap=True))
        except (ServeConfigError, RayClusterError) as error:
            return fail(error)
    console.print(f"serving {names} for {len(config.tenants)} tenant(s) on "
                  f"http://{config.host}:{port}/v2")
    server.run(config, port=args.port)
    return 0


def cmd_loadtest(args):
    import json

    from tessera.serve import ServeConfigError, load_config
    from tessera.serve.loadtest import parse_load, run_loadtest

    try:
        config = load_config(args.config)
        result = run_loadtest(config, [parse_load(t) for t in args.tenant], url=args.url,
                              duration=args.duration, max_requests=args.max_requests,
                              images=args.images, seed=args.seed, binary=not args.json)
    except (ServeConfigError, RuntimeError, OSError) as exc:
        print_error(exc)
        return 2
    from tessera.tables import loadtest_notes, loadtest_table

    console.print(loadtest_table(result))
    for line in loadtest_notes(result):
        console.print(line, markup=False, highlight=False)
    for model, p in result["predictors"].items():
        console.print(f"predictor {model}: p50 error {p['prediction_error_p50']}, p95 "
                      f"{p['prediction_error_p95']} over {p['runs_measured']} runs")
    if args.out:
        with open(args.out, "w") as sink:
            json.dump(result, sink, indent=2)
        console.print(f"wrote {args.out}")
    if args.plot:
        from tessera.serve.plot import plot_tenants

        plot_tenants([("load test", result["tenants"])], args.plot,
                     f"tessera loadtest of {result['url']} ({result['seconds']:.1f} s)")
        console.print(f"wrote {args.plot}")
    return 1 if any(t["lost"] or t["wrong"] for t in result["tenants"]) else 0


def add_commands(sub):
    """Add ``serve`` and ``loadtest`` to the subcommands ``sub``."""
    p = sub.add_parser("serve", help="KServe v2 inference server on 127.0.0.1 for the models "
                                     "and tenants of a TOML file (docs/serving.md)")
    p.add_argument("--config", required=True, help="serve configuration (TOML)")
    p.add_argument("--port", type=int, help="override the file's [server] port")
    add_ray_argument(p, "the server as Ray Serve replicas placed by device resources")
    p.add_argument("--replicas", type=int, default=1,
                   help="Ray Serve replicas with --ray (default %(default)s)")
    p.set_defaults(func=cmd_serve)

    p = sub.add_parser("loadtest", help="Poisson or closed-loop traffic from a serve config's "
                                        "tenants to a server on 127.0.0.1, answers checked")
    p.add_argument("--config", required=True, help="the server's configuration (TOML)")
    p.add_argument("--tenant", action="append", required=True,
                   help="NAME=RATE (Poisson requests/s) or NAME=cN (N closed-loop clients); "
                        "repeat per tenant")
    p.add_argument("--url", help="server (loopback only; default: the config's host:port)")
    p.add_argument("--duration", type=float, default=10.0,
                   help="seconds of traffic (default %(default)s)")
    p.add_argument("--max-requests", type=int, default=10_000,
                   help="requests per tenant at most (default %(default)s)")
    p.add_argument("--images", type=int, default=1, help="images per request (default 1)")
    p.add_argument("--json", action="store_true", help="JSON tensors instead of binary")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", help="write the figures as JSON here")
    p.add_argument("--plot", help="draw latency p50/p99/p99.9 against the SLO, throughput "
                                  "and goodput per tenant into this PNG")
    p.set_defaults(func=cmd_loadtest)
