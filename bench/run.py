"""Run benchmarks by name and sum up what they wrote: the program behind ``tessera bench``
(``python -m bench [NAME ...] [--config FILE|PRESET]``).

The benchmarks sit above the product (they import ``tessera``, never the other way), so the
CLI starts this module as a child process rather than importing it."""

import argparse
import importlib
import pkgutil
import time
from pathlib import Path

from rich.table import Table
from rich.text import Text

import bench
from contract.config import ConvEngineConfig
from contract.config_file import load_config
from tessera import results
from tessera.console import console


def benchmark_names():
    """The benchmarks, by the name ``tessera bench`` takes (``bench/bench_<name>.py``)."""
    return sorted(info.name.removeprefix("bench_") for info in pkgutil.iter_modules(bench.__path__)
                  if info.name.startswith("bench_"))


def run(chosen, engine=None):
    """Run each benchmark in ``chosen`` (all when empty), its twin built for ``engine`` where
    it builds one, then print a summary table; return the exit status."""
    names = benchmark_names()
    chosen = chosen or names
    unknown = sorted(set(chosen) - set(names))
    if unknown:
        console.print(f"[red]unknown benchmark(s) {', '.join(unknown)}[/]; known: "
                      + ", ".join(names))
        return 2
    summary = Table(title="benchmarks")
    for column in ("benchmark", "result", "metrics", "time", "written"):
        summary.add_column(column, overflow="fold")
    failed = 0
    for name in chosen:
        console.rule(f"bench {name}")
        first, started = len(results.WRITTEN), time.monotonic()
        try:
            module = importlib.import_module(f"bench.bench_{name}")
            if engine is not None:
                # A benchmark that builds a twin names its engine in CONFIG (docs/config.md).
                if isinstance(vars(module).get("CONFIG"), ConvEngineConfig):
                    module.CONFIG = engine
                else:
                    console.print(f"bench {name}: builds no twin of its own; --config not "
                                  f"used", style="yellow")
            module.main()
            result = "[green]ok[/]"
        except Exception as error:  # one failing benchmark must not hide the others' figures
            failed += 1
            _print_bench_error(name, error)
            result = "[red]failed[/]"
        written = results.WRITTEN[first:]
        summary.add_row(name, result, str(sum(count for _, count in written)),
                        f"{time.monotonic() - started:.1f} s",
                        ", ".join(_relative(path) for path, _ in written) or "-")
    console.print(summary)
    total = sum(count for _, count in results.WRITTEN)
    console.print(f"{len(chosen)} benchmark(s): {total} metric(s) written"
                  + (f", [red]{failed} failed[/]" if failed else ""))
    return 1 if failed else 0


def _relative(path):
    """``path`` relative to the working directory when it lies below it."""
    try:
        return str(Path(path).relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def _print_bench_error(name, error):
    """A benchmark's known failures in their own words; anything else with its traceback."""
    from hw.toolchain import ToolchainError
    from sw_driver.errors import TesseraError
    from twin.dma import TwinBuildError
    from twin.runner import SimBuildError, TestbenchFailed

    if isinstance(error, (SimBuildError, TestbenchFailed, TwinBuildError, TesseraError,
                          ToolchainError)):
        # Text, not markup: the messages hold "[...]" that rich would silently eat.
        console.print(Text.assemble((f"bench {name} failed: ", "red"), str(error)))
    else:
        console.print(Text(f"bench {name} failed:", style="red"))
        console.print_exception()


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*")
    parser.add_argument("--config", metavar="FILE|PRESET",
                        help="the engine of the benchmarks that build a twin (docs/config.md)")
    args = parser.parse_args(argv)
    return run(args.names, load_config(args.config) if args.config else None)
