"""The `tessera` command line: the programs behind the make targets, each a thin layer
over the packages."""

import argparse
import sys
import time
import xml.etree.ElementTree as ElementTree

from rich.console import Console
from rich.table import Table

console = Console()


def _array_config(args):
    from hw.config import ArrayConfig

    return ArrayConfig(rows=args.rows, cols=args.cols)


def _add_array_options(parser, rows=8, cols=8):
    parser.add_argument("--rows", type=int, default=rows, help="array rows R (default %(default)s)")
    parser.add_argument("--cols", type=int, default=cols,
                        help="array columns C (default %(default)s)")


def _testcase_outcomes(results_xml):
    """(name, passed, sim time in ns) for each test case of a cocotb results file."""
    outcomes = []
    for case in ElementTree.parse(results_xml).getroot().iter("testcase"):
        failed = case.find("failure") is not None or case.find("error") is not None
        outcomes.append((case.get("name"), not failed, float(case.get("sim_time_ns", 0))))
    return outcomes


def cmd_sim(args):
    from sim.runner import run_testbench
    from sim.testbenches import TESTBENCHES, find_testbench

    benches = [find_testbench(args.tb)] if args.tb else list(TESTBENCHES.values())
    table = Table(title="cocotb / Verilator testbenches")
    for column in ("testbench", "config", "test", "result", "sim time"):
        table.add_column(column)
    failures, waves = 0, []
    for bench in benches:
        for config in bench.configs:
            with console.status(f"{bench.name} on {config.name}: building and simulating"):
                started = time.monotonic()
                results, wave = run_testbench(bench.module, config, seed=args.seed,
                                              waves=args.waves, check=False,
                                              name=f"make-sim-{args.seed}")
            outcomes = _testcase_outcomes(results)
            console.print(f"{bench.name} {config.name}: {len(outcomes)} tests in "
                          f"{time.monotonic() - started:.1f} s")
            for name, passed, sim_ns in outcomes:
                failures += not passed
                table.add_row(bench.name, config.name, name,
                              "[green]PASS[/]" if passed else "[red]FAIL[/]",
                              f"{sim_ns / 1000:.1f} us")
            if not outcomes:
                failures += 1
                table.add_row(bench.name, config.name, "(no result)", "[red]FAIL[/]", "")
            if wave:
                waves.append(wave)
    console.print(table)
    for wave in waves:
        console.print(f"waveform: {wave}")
    console.print(f"seed {args.seed}: " + ("[green]all passed[/]" if not failures
                                            else f"[red]{failures} failed[/] (logs under build/)"))
    return 1 if failures else 0


def cmd_verilog(args):
    from hw.verilog import write_array_verilog

    config = _array_config(args)
    path = write_array_verilog(config, args.build)
    console.print(f"{config.name}: wrote {path} ({path.stat().st_size // 1024} KiB)")
    return 0


def cmd_bitstream(args):
    from hw.bitstream import KNOWN_BOARDS, build_bitstream

    if args.board not in KNOWN_BOARDS:
        console.print(f"[red]unknown board {args.board!r}[/]; known boards: "
                      + ", ".join(sorted(KNOWN_BOARDS)))
        return 2
    build_bitstream(args.board, _array_config(args), build_root=args.build)
    return 0


def cmd_bench(args):
    import importlib
    import pkgutil

    import bench

    names = sorted(info.name.removeprefix("bench_") for info in pkgutil.iter_modules(bench.__path__)
                   if info.name.startswith("bench_"))
    chosen = args.names or names
    unknown = sorted(set(chosen) - set(names))
    if unknown:
        console.print(f"[red]unknown benchmark(s) {', '.join(unknown)}[/]; known: "
                      + ", ".join(names))
        return 2
    for name in chosen:
        console.rule(f"bench {name}")
        importlib.import_module(f"bench.bench_{name}").main()
    return 0


def cmd_demo(args):
    import json
    import tempfile

    from sim.runner import run_testbench

    config = _array_config(args)
    m, k, n = args.m, args.k, args.n
    console.print(f"Tessera demo: C = A @ B with A {m}x{k}, B {k}x{n} (int8, seed {args.seed}) "
                  f"on a {config.rows}x{config.cols} systolic array simulated by Verilator")
    with tempfile.TemporaryDirectory() as tmp:
        report_path = f"{tmp}/report.json"
        started = time.monotonic()
        with console.status("generating Verilog, building with Verilator, simulating"):
            run_testbench("sim.tb_demo", config, seed=args.seed, name="demo",
                          extra_env={"TESSERA_DEMO_SHAPE": f"{m},{k},{n}",
                                     "TESSERA_REPORT": report_path})
        with open(report_path) as f:
            report = json.load(f)
    ideal = report["padded_macs"] / (config.rows * config.cols)
    table = Table(title="demo result")
    table.add_column("")
    table.add_column("value", justify="right")
    table.add_row("check against golden model", "[green]bit-exact[/]")
    table.add_row("tiles / operand beats", f"{report['tiles']} / {report['beats']}")
    table.add_row("cycles, first beat to last result", str(report["cycles"]))
    table.add_row("ideal cycles (padded MACs / R*C)", f"{ideal:.0f}")
    table.add_row("utilization", f"{ideal / report['cycles']:.1%}")
    table.add_row("wall time", f"{time.monotonic() - started:.1f} s")
    console.print(table)
    return 0


def build_parser():
    parser = argparse.ArgumentParser(prog="tessera", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("sim", help="run the cocotb/Verilator testbenches")
    p.add_argument("--tb", help="run only this testbench")
    p.add_argument("--waves", action="store_true", help="write FST waveforms under build/")
    p.add_argument("--seed", type=int, default=1)
    p.set_defaults(func=cmd_sim)

    p = sub.add_parser("verilog", help="write the array's Verilog to build/")
    _add_array_options(p)
    p.add_argument("--build", default="build")
    p.set_defaults(func=cmd_verilog)

    p = sub.add_parser("bitstream", help="synthesise, place and route a board top")
    p.add_argument("--board", required=True)
    _add_array_options(p)
    p.add_argument("--build", default="build")
    p.set_defaults(func=cmd_bitstream)

    p = sub.add_parser("bench", help="run benchmarks into bench/results/*.json")
    p.add_argument("names", nargs="*")
    p.set_defaults(func=cmd_bench)

    p = sub.add_parser("demo", help="a random GEMM on the simulated array, checked and timed")
    _add_array_options(p)
    p.add_argument("--m", type=int, default=40)
    p.add_argument("--k", type=int, default=96)
    p.add_argument("--n", type=int, default=40)
    p.add_argument("--seed", type=int, default=2026)
    p.set_defaults(func=cmd_demo)
    return parser


def main(argv=None):
    from tessera.toolchain import ToolchainError, apply_tool_env

    args = build_parser().parse_args(argv)
    try:
        apply_tool_env()
        return args.func(args)
    except (ValueError, ToolchainError) as error:
        console.print(f"[red]error:[/] {error}")
        return 2


if __name__ == "__main__":
    sys.exit(main())
