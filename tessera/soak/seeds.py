"""The soak over many seeds (``tessera soak --seeds 1-8 [--ray]``): regression at scale.

Every seed runs configurations ``0 .. count-1`` on every backend against the golden
models, as ``tessera soak --seed S`` does; with ``--ray`` all of them are Ray tasks
(:class:`~.ray_runner.RaySoak`), without it one local loop. Each seed keeps its own
:class:`~.tally.Tally`; every mismatch is printed as it is found with its seed, its index
and the one local command that repeats it (:func:`~.runner.repro_command`), listed again at
the end in (seed, index) order, and written to ``bench/results/soak_seeds.json``.
"""

import contextlib
import time

import onnxruntime
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn
from rich.table import Table

from tessera.results import metric, write_results

from .backends import open_backends, parse_backends
from .console import _check_integer, _say, parse_only
from .runner import run_cases
from .tally import Tally

__all__ = ["BENCHMARK", "failure_lines", "seeds_command"]

BENCHMARK = "soak_seeds"


def failure_lines(seed, failure):
    """The two lines that report one mismatch: what differs, and the command repeating it."""
    return (f"MISMATCH seed {seed} {failure['backend']} case {failure['index']} "
            f"({failure['description']}): {failure['detail']}",
            f"  repro: {failure['repro']}")


def _local(seeds, count, names, use_onnxruntime, console, sim_config=None):
    with console.status("opening the backends (the twin is built on first use: 1-2 minutes, "
                        "cached in build/twin/)"):
        opened = open_backends(names, log=lambda message: console.print(
            message, style="dim", markup=False), sim_config=sim_config)
    results = (result for seed in seeds
               for result in run_cases(seed, range(count), opened, use_onnxruntime))
    return opened, results, None


def _on_ray(console, stack, address, seeds, count, names, use_onnxruntime, sim_config=None):
    from tessera.ray_cluster import LOCAL, connect

    from .ray_runner import RaySoak

    where = "a local Ray" if address == LOCAL else f"the Ray cluster at {address}"
    with console.status(f"starting {where}; the workers open the backends"):
        ray = stack.enter_context(connect(address))
        soak = RaySoak(ray, seeds, range(count), names, use_onnxruntime,
                       sim_config=sim_config)
    cpus = int(ray.cluster_resources().get("CPU", 0))
    console.print(f"ray: {len(seeds)} seeds x {count} configurations in {len(soak.work)} tasks "
                  f"on {where} ({cpus} CPUs)", markup=False)
    return soak.backends, None, soak.results


def _seed_table(tallies):
    names = next(iter(tallies.values())).available
    table = Table(title="soak over seeds: configurations failing per backend")
    table.add_column("seed", justify="right")
    table.add_column("configs", justify="right")
    for name in names:
        table.add_column(name, justify="right")
    for seed, tally in tallies.items():
        cells = []
        for name in names:
            totals = tally.backend_totals(name)
            failed = totals["mismatch"] + totals["error"]
            cells.append(f"[bold red]{failed}[/]" if failed else "0")
        table.add_row(str(seed), str(tally.total_configs), *cells)
    return table


def _metrics(tallies, seconds):
    configs = sum(t.total_configs for t in tallies.values())
    mismatches = sum(t.mismatches for t in tallies.values())
    return [
        metric("soak_seeds_seeds", len(tallies), "seeds"),
        metric("soak_seeds_configs", configs, "configurations"),
        metric("soak_seeds_mismatches", mismatches, "mismatches", target=0,
               note="backend outputs (and errors) differing from the golden models"),
        metric("soak_seeds_seconds", round(seconds, 1), "s",
               note="wall time of the command, Ray's start included"),
        metric("soak_seeds_per_second", round(len(tallies) / seconds, 3), "seeds/s"),
    ]


def seeds_command(console, *, seeds, count, backends=None, use_onnxruntime=True, ray=None,
                  sim_config=None):
    """Run the soak over ``seeds``; return the exit status (0: no mismatch anywhere).

    Parameters
    ----------
    console : rich.console.Console
    seeds : str
        ``--seeds``: seeds or ranges, e.g. ``"1-8"`` or ``"1,5,9-12"``.
    count : int
        Configurations ``0 .. count-1`` of every seed.
    backends : str or None
        Comma-separated provider names (None: all).
    use_onnxruntime : bool
    ray : str or None
        As for :func:`~.console.soak_command`.
    sim_config : contract.config.ConvEngineConfig or None
        As for :func:`~.console.soak_command`.

    Raises
    ------
    ValueError
        A bad argument; the message names it.
    tessera.ray_cluster.RayClusterError
        Ray is not installed or the cluster cannot be reached.
    """
    seeds = parse_only(seeds, option="--seeds")
    _check_integer("--count", count, 1)
    names = parse_backends(backends)
    started = time.perf_counter()
    with contextlib.ExitStack() as stack:
        if ray is None:
            opened, results, with_progress = _local(seeds, count, names, use_onnxruntime,
                                                    console, sim_config)
        else:
            opened, results, with_progress = _on_ray(console, stack, ray, seeds, count, names,
                                                     use_onnxruntime, sim_config)
        for backend in opened:
            console.print(f"{backend.name}: {backend.label}", markup=False,
                          style=None if backend.available else "yellow")
        tallies = {seed: Tally(seed, opened) for seed in seeds}
        progress = Progress("[progress.description]{task.description}", BarColumn(),
                            MofNCompleteColumn(), TimeElapsedColumn(), console=console)
        with progress:
            task = progress.add_task(f"soak seeds {seeds[0]}..{seeds[-1]}",
                                     total=len(seeds) * count)
            if with_progress is not None:  # Ray: the bar follows the tasks as they finish
                results = with_progress(lambda n: progress.update(task, advance=n))
            for result in results:
                for failure in tallies[result.case.seed].add(result):
                    _say(progress.console, "red", *failure_lines(result.case.seed, failure))
                if with_progress is None:
                    progress.update(task, advance=1)
        for backend in opened:
            backend.close()
    seconds = time.perf_counter() - started
    console.print(_seed_table(tallies))
    failures = [(seed, failure) for seed, tally in tallies.items() for failure in tally.failures]
    if failures:
        console.print(f"{len(failures)} mismatches, each with the command that repeats it:",
                      style="bold red")
        for seed, failure in failures:
            _say(console, None, *failure_lines(seed, failure))
    document = {seed: {"configs": t.total_configs, "mismatches": t.mismatches,
                       "backends": t.document()["backends"]} for seed, t in tallies.items()}
    path = write_results(BENCHMARK, _metrics(tallies, seconds),
                         onnxruntime=onnxruntime.__version__, wall_seconds=round(seconds, 1),
                         ray=ray, count=count, seeds=document,
                         mismatches=[{"seed": seed, **f} for seed, f in failures])
    console.print(f"results: {path}")
    verdict = ("[green]0 mismatches[/]" if not failures
               else f"[bold red]{len(failures)} mismatches[/] (repro commands above)")
    console.print(f"soak seeds {', '.join(map(str, seeds))}: {len(seeds)} x {count} "
                  f"configurations in {seconds:.1f} s ({len(seeds) / seconds:.2f} seeds/s), "
                  f"{verdict}")
    return 1 if failures else 0
