"""``tessera soak`` (``make soak``): the soak with a progress bar, a summary and JSON.

Every mismatch is printed the moment it is found, with the one-line command that
reproduces it; ``--only`` runs chosen cases and prints each in full. The results go to
``bench/results/soak.json`` (:func:`tessera.results.write_results`): counts per layer kind
and backend, refusal reasons, onnxruntime differences, and the metric ``soak_mismatches``.
"""

import contextlib
import re
import time

import onnxruntime
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table

from tessera.results import metric, write_results

from .backends import open_backends, parse_backends
from .runner import repro_command, run_cases
from .tally import Tally

__all__ = ["parse_only", "soak_command"]

BENCHMARK = "soak"


def _check_integer(name, value, least):
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        what = "a positive" if least == 1 else "a non-negative"
        raise ValueError(f"{name} must be {what} integer, not {value!r}")
    return value


def parse_only(text, option="--only"):
    """Case indices from ``"4711"``, ``"3,17,40"`` or ranges ``"10-19"`` (inclusive).

    Raises
    ------
    ValueError
        Naming ``option`` (``--only``, or ``--seeds`` for seeds) and what it accepts.
    """
    indices = []
    for part in text.split(","):
        match = re.fullmatch(r"\s*(\d+)\s*(?:-\s*(\d+)\s*)?", part)
        if not match or (match[2] is not None and int(match[2]) < int(match[1])):
            raise ValueError(f"{option} must be non-negative integers or ranges separated "
                             f"by commas (e.g. 4711 or 3,17,40-49), not {text!r}")
        first = int(match[1])
        indices.extend(range(first, int(match[2] or first) + 1))
    return list(dict.fromkeys(indices))


def _cell(counts):
    text = f"{counts['pass']}"
    if counts["refused"]:
        text += f" [dim]+{counts['refused']} refused[/]"
    failed = counts["mismatch"] + counts["error"]
    if failed:
        text += f" [bold red]{failed} FAILED[/]"
    return text


def _backend_table(tally):
    table = Table(title=f"soak seed {tally.seed}: backends against the golden models "
                        f"(passed, refused, failed)")
    table.add_column("kind")
    table.add_column("configs", justify="right")
    for name in tally.available:
        table.add_column(name, justify="right")
    for kind in tally.kinds_seen:
        table.add_row(kind, str(tally.configs[kind]),
                      *(_cell(tally.outcomes[kind][name]) for name in tally.available))
    table.add_row("[bold]all[/]", f"[bold]{tally.total_configs}[/]",
                  *(_cell(tally.backend_totals(name)) for name in tally.available))
    return table


def _onnxruntime_table(tally):
    table = Table(title="golden models against onnxruntime (QDQ graph, optimizations off)")
    for column in ("kind", "configs", "differ", "elements differing", "max |diff|",
                   "max tie dist.", "off-tie"):
        table.add_column(column, justify="left" if column == "kind" else "right")
    for kind in tally.kinds_seen:
        counts = tally.onnxruntime[kind]
        share = counts.elements_differing / counts.elements if counts.elements else 0.0
        distance = "" if counts.max_tie_distance is None else f"{counts.max_tie_distance:.1e}"
        away = f"[bold red]{counts.away_from_tie}[/]" if counts.away_from_tie else "0"
        table.add_row(kind, str(counts.compared), str(counts.configs_differing),
                      f"{counts.elements_differing} ({share:.2%})", str(counts.max_abs_diff),
                      distance, away)
    return table


def _print_refusals(console, tally, shown=3):
    for name in tally.available:
        reasons = tally.reasons[name]
        if reasons:
            top = "; ".join(f"{reason} ({count})" for reason, count in reasons.most_common(shown))
            more = f"; {len(reasons) - shown} other reasons" if len(reasons) > shown else ""
            console.print(f"{name} refused {sum(reasons.values())}: {top}{more}",
                          markup=False, style="dim")


def _say(console, style, *lines):
    """Plain lines, never wrapped, so a repro command stays one line to copy."""
    console.print("\n".join(lines), style=style, markup=False, highlight=False, soft_wrap=True)


def _print_case(console, result):
    """Everything about one case (for ``--only``)."""
    case = result.case
    lines = [f"case {case.index} of seed {case.seed}: {case.description}"]
    if result.golden_error:
        lines.append(f"  golden: error {result.golden_error}")
    for name, outcome in result.backends.items():
        lines.append(f"  {name}: {outcome.status} {outcome.detail}".rstrip())
    ort = result.onnxruntime
    if ort is not None:
        if ort.error:
            text = f"error {ort.error}"
        elif not ort.differing:
            text = f"identical ({ort.elements} elements)"
        else:
            text = (f"{ort.detail}; max tie distance {ort.max_tie_distance}, "
                    f"{ort.away_from_tie} away from a tie")
        lines.append(f"  onnxruntime: {text}")
    _say(console, None, *lines)


def _metrics(tally, seconds):
    compared, differing, elements, max_diff, away = tally.onnxruntime_totals()
    metrics = [
        metric("soak_configs", tally.total_configs, "configurations"),
        metric("soak_mismatches", tally.mismatches, "mismatches", target=0,
               note="backend outputs (and errors) differing from the golden models"),
        metric("soak_onnxruntime_configs_differing", differing, "configurations",
               note=f"of {compared} compared with onnxruntime's unoptimized QDQ graph"),
        metric("soak_onnxruntime_elements_differing", elements, "elements"),
        metric("soak_onnxruntime_max_abs_diff", max_diff, "LSB", target=1),
        metric("soak_onnxruntime_away_from_tie", away, "elements", target=0,
               note="differences that float32 rounding near a tie does not explain"),
        metric("soak_seconds", round(seconds, 1), "s"),
    ]
    for name in tally.available:
        totals = tally.backend_totals(name)
        metrics += [metric(f"soak_{name}_passes", totals["pass"], "configurations"),
                    metric(f"soak_{name}_refusals", totals["refused"], "configurations"),
                    metric(f"soak_{name}_mismatches", totals["mismatch"] + totals["error"],
                           "configurations", target=0)]
    return metrics


def _start_on_ray(console, stack, address, seed, indices, names, use_onnxruntime,
                  sim_config=None):
    """(backend infos, None, a function of a progress callback yielding the results)."""
    from tessera.ray_cluster import LOCAL, connect

    from .ray_runner import RaySoak

    where = "a local Ray" if address == LOCAL else f"the Ray cluster at {address}"
    with console.status(f"starting {where}; the workers open the backends"):
        ray = stack.enter_context(connect(address))
        soak = RaySoak(ray, seed, indices, names, use_onnxruntime, sim_config=sim_config)
    cpus = int(ray.cluster_resources().get("CPU", 0))
    console.print(f"ray: {len(indices)} configurations in {len(soak.chunks)} tasks on {where} "
                  f"({cpus} CPUs)", markup=False)
    return soak.backends, None, soak.results


def _run(console, seed, only, opened, indices, results, with_progress):
    """Tally ``results`` with a progress bar, printing failures as they come."""
    for backend in opened:
        console.print(f"{backend.name}: {backend.label}", markup=False,
                      style=None if backend.available else "yellow")
    tally = Tally(seed, opened)
    progress = Progress("[progress.description]{task.description}", BarColumn(),
                        MofNCompleteColumn(), TimeElapsedColumn(), TimeRemainingColumn(),
                        console=console, disable=only is not None)
    with progress:
        task = progress.add_task(f"soak seed {seed}", total=len(indices))
        if with_progress is not None:  # Ray: the bar follows the chunks as they finish
            results = with_progress(lambda n: progress.update(task, advance=n))
        for result in results:
            for failure in tally.add(result):
                _say(progress.console, "red",
                     f"MISMATCH {failure['backend']} case {failure['index']} "
                     f"({failure['description']}): {failure['detail']}",
                     f"  repro: {failure['repro']}")
            ort = result.onnxruntime
            if ort is not None and ort.away_from_tie:
                _say(progress.console, "yellow",
                     f"onnxruntime differs away from a tie in case {result.case.index}: "
                     f"{ort.detail}", f"  repro: {repro_command(seed, result.case.index)}")
            if only is not None:
                _print_case(console, result)
            progress.update(task, advance=0 if with_progress else 1,
                            description=f"soak seed {seed}: {tally.mismatches} mismatches")
    for backend in opened:
        backend.close()
    return tally


def soak_command(console, *, seed, count, only=None, backends=None, use_onnxruntime=True,
                 ray=None, sim_config=None):
    """Run the soak as ``tessera soak`` does; return the exit status (0: no mismatch).

    Parameters
    ----------
    console : rich.console.Console
    seed : int
        Non-negative.
    count : int
        Cases ``0 .. count-1``; ignored with ``only``.
    only : str or None
        Indices to run instead, as :func:`parse_only` reads them; each is printed in full
        and no JSON is written (``bench/results/soak.json`` keeps the full run's).
    backends : str or None
        Comma-separated provider names (None: all).
    use_onnxruntime : bool
    ray : str or None
        Run the cases as Ray tasks (:mod:`.ray_runner`): :data:`tessera.ray_cluster.LOCAL`
        starts a local Ray, ``HOST:PORT`` joins a cluster; None runs them here.
    sim_config : contract.config.ConvEngineConfig or None
        The engine the "sim" backend's twin is built for (``--config``; None: its default).

    Raises
    ------
    ValueError
        A bad argument; the message names it.
    tessera.ray_cluster.RayClusterError
        Ray is not installed or the cluster cannot be reached.
    """
    _check_integer("--seed", seed, 0)
    _check_integer("--count", count, 1)
    indices = parse_only(only) if only is not None else range(count)
    names = parse_backends(backends)
    started = time.perf_counter()
    with contextlib.ExitStack() as stack:
        if ray is None:
            with console.status("opening the backends (the twin is built on first use: 1-2 "
                                "minutes, cached in build/twin/)"):
                opened = open_backends(names, log=lambda message: console.print(
                    message, style="dim", markup=False), sim_config=sim_config)
            results, with_progress = run_cases(seed, indices, opened, use_onnxruntime), None
        else:
            opened, results, with_progress = _start_on_ray(
                console, stack, ray, seed, indices, names, use_onnxruntime, sim_config)
        tally = _run(console, seed, only, opened, indices, results, with_progress)
    seconds = time.perf_counter() - started
    console.print(_backend_table(tally))
    _print_refusals(console, tally)
    if use_onnxruntime:
        console.print(_onnxruntime_table(tally))
    if only is None:
        path = write_results(BENCHMARK, _metrics(tally, seconds),
                             onnxruntime=onnxruntime.__version__, wall_seconds=round(seconds, 1),
                             **tally.document())
        console.print(f"results: {path}")
    verdict = ("[green]0 mismatches[/]" if not tally.mismatches
               else f"[bold red]{tally.mismatches} mismatches[/] (repro commands above)")
    console.print(f"soak seed {seed}: {tally.total_configs} configurations in {seconds:.0f} s, "
                  f"{verdict} against the golden models on {', '.join(tally.available)}")
    return 1 if tally.mismatches else 0
