"""``tessera soak --resident``: the resident cases (:mod:`.resident`) with a progress bar, a
summary and ``bench/results/soak_resident.json``.

Every mismatch or error is printed the moment it is found, with the command that repeats
it; ``--only`` runs chosen cases and prints each in full (and writes no JSON).
"""

import re
import time
from collections import Counter

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

from tessera.results import metric, write_results

from .resident import draw_program, program_repro, run_program_case

__all__ = ["resident_soak_command"]

BENCHMARK = "soak_resident"


def _reason_class(reason):
    """A refusal without its numbers and names, so that similar refusals count together."""
    return re.sub(r"'[^']*'", "'…'", re.sub(r"\d+", "#", reason))


def _say(console, style, *lines):
    console.print("\n".join(lines), style=style, markup=False, highlight=False, soft_wrap=True)


def resident_soak_command(console, *, seed, count, only=None):
    """Run resident cases ``0..count-1`` of ``seed`` (or the ``only`` indices, a list);
    return the exit status (0: no mismatch and no error)."""
    indices = list(only) if only is not None else list(range(count))
    started = time.perf_counter()
    statuses, reasons, failures = Counter(), Counter(), []
    pressures, configs = Counter(), Counter()
    reuse = [0, 0]  # arena words against the words of every tensor, over the passed cases
    progress = Progress("[progress.description]{task.description}", BarColumn(),
                        MofNCompleteColumn(), TimeElapsedColumn(), console=console,
                        disable=only is not None)
    with progress:
        task = progress.add_task(f"resident soak seed {seed}", total=len(indices))
        for index in indices:
            case = draw_program(seed, index)
            result = run_program_case(case)
            statuses[result.status] += 1
            pressures[(case.pressure, result.status)] += 1
            configs[case.config_name] += 1
            if result.status == "refused":
                reasons[_reason_class(result.detail)] += 1
            if result.status == "pass":
                reuse[0] += result.figures["arena_words"]
                reuse[1] += result.figures["tensor_words"]
            if result.failed:
                failures.append({"index": index, "status": result.status,
                                 "layer": result.layer, "detail": result.detail,
                                 "description": case.description,
                                 "repro": program_repro(seed, index)})
                _say(progress.console, "red", f"MISMATCH {result.message}")
            if only is not None:
                layers = "; ".join(f"{layer.name} {layer.op} {layer.inputs}->{layer.output}"
                                   for layer in case.layers)
                _say(console, None, f"resident case {index} of seed {seed}: "
                                    f"{case.description}", f"  layers: {layers}",
                     f"  {result.status} {result.detail}".rstrip(),
                     f"  figures: {result.figures}")
            progress.update(task, advance=1, description=f"resident soak seed {seed}: "
                            f"{len(failures)} mismatches")
    seconds = time.perf_counter() - started
    for reason, number in reasons.most_common(5):
        _say(console, "dim", f"refused {number}: {reason}")
    share = f"{reuse[0] / reuse[1]:.0%}" if reuse[1] else "-"
    if only is None:
        metrics = [
            metric("soak_resident_cases", len(indices), "cases"),
            metric("soak_resident_passes", statuses["pass"], "cases"),
            metric("soak_resident_refusals", statuses["refused"], "cases",
                   note="the compiler's ResidentFitError, mostly memories drawn short"),
            metric("soak_resident_mismatches", len(failures), "cases", target=0,
                   note="mismatches and errors against the golden models"),
            metric("soak_resident_seconds", round(seconds, 1), "s"),
        ]
        path = write_results(BENCHMARK, metrics, seed=seed, statuses=dict(statuses),
                             configs=dict(configs),
                             pressures={f"{p}: {s}": n for (p, s), n in pressures.items()},
                             refusal_reasons=dict(reasons.most_common()),
                             arena_over_tensor_words=share, mismatches=failures)
        console.print(f"results: {path}")
    verdict = "0 mismatches" if not failures else f"{len(failures)} mismatches"
    _say(console, "green" if not failures else "bold red",
         f"resident soak seed {seed}: {len(indices)} cases in {seconds:.0f} s: "
         f"{statuses['pass']} passed, {statuses['refused']} refused (with reason), "
         f"{verdict}; arenas hold {share} of their tensors' words (reuse)")
    return 1 if failures else 0
