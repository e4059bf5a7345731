"""`tessera bench` and `tessera soak`: the benchmarks, and random layers through every
backend against the golden models."""

import sys

from tessera.commands.common import (
    add_config_option,
    add_ray_argument,
    engine_config,
    fail,
)
from tessera.console import console


def cmd_bench(args):
    import subprocess

    # The benchmarks measure the product and import it, so the product does not import them:
    # they run as their own program (bench/run.py), which prints each figure and the summary.
    if args.config:
        engine_config(args)  # a bad --config fails here, in the CLI's own words
    command = [sys.executable, "-m", "bench", *args.names]
    if args.config:
        command += ["--config", args.config]
    return subprocess.call(command)


def cmd_soak(args):
    from tessera.ray_cluster import RayClusterError  # imports no Ray
    from tessera.soak.console import soak_command

    try:
        if args.resident:  # random resident programs on the golden resident device
            from tessera.soak.console import parse_only
            from tessera.soak.resident import RESIDENT_COUNT
            from tessera.soak.resident_console import resident_soak_command

            if args.seed < 0 or (args.count is not None and args.count < 1):
                raise ValueError("--seed must be non-negative and --count positive")
            return resident_soak_command(
                console, seed=args.seed, count=args.count or RESIDENT_COUNT,
                only=None if args.only is None else parse_only(args.only))
        if args.count is None:
            args.count = 10000
        # The engine the "sim" backend's twin is built for (None: the provider's default).
        sim_config = engine_config(args) if args.config else None
        if args.seeds is not None:  # regression at scale: whole seeds, locally or on Ray
            from tessera.soak.seeds import seeds_command

            if args.only is not None:
                raise ValueError("--seeds runs whole seeds; repeat one case with --seed S "
                                 "--index I")
            return seeds_command(console, seeds=args.seeds, count=args.count,
                                 backends=args.backends,
                                 use_onnxruntime=not args.no_onnxruntime, ray=args.ray,
                                 sim_config=sim_config)
        return soak_command(console, seed=args.seed, count=args.count, only=args.only,
                            backends=args.backends, use_onnxruntime=not args.no_onnxruntime,
                            ray=args.ray, sim_config=sim_config)
    except (ValueError, RayClusterError) as error:
        return fail(error)


def add_commands(sub):
    """Add ``bench``, ``soak`` to the subcommands ``sub``."""
    p = sub.add_parser("bench", help="run benchmarks into bench/results/*.json")
    p.add_argument("names", nargs="*")
    add_config_option(p)
    p.set_defaults(func=cmd_bench)

    p = sub.add_parser("soak", help="random layers through every backend against the golden "
                                    "models and onnxruntime; bench/results/soak.json")
    p.add_argument("--seed", type=int, default=1, help="soak seed (default %(default)s)")
    p.add_argument("--count", type=int, default=None,
                   help="configurations 0..COUNT-1 (default 10000; with --resident 300)")
    p.add_argument("--resident", action="store_true",
                   help="random resident programs (residual graphs, arena pressure) compiled "
                        "and played on the golden resident device instead; "
                        "bench/results/soak_resident.json (docs/soak.md)")
    p.add_argument("--seeds", help="run every seed of these, e.g. 1-8, COUNT configurations "
                                   "each, and list every mismatch with its seed; "
                                   "bench/results/soak_seeds.json (docs/scale-out.md)")
    p.add_argument("--only", "--index", dest="only",
                   help="run these cases instead and print each in full, e.g. 4711 "
                        "or 3,17,40-49 (writes no JSON)")
    p.add_argument("--backends", "--providers", dest="backends",
                   help="comma-separated providers, with options as run's --providers "
                        "(default: all of cpu, opencl, gpu, sim, pcie; unavailable ones are "
                        "reported)")
    p.add_argument("--no-onnxruntime", action="store_true",
                   help="skip the comparison with onnxruntime")
    add_ray_argument(p, "the configurations as Ray tasks")
    add_config_option(p, "the engine the sim backend's twin is built for")
    p.set_defaults(func=cmd_soak)
