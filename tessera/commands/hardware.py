"""`tessera sim`, `tessera verilog` and `tessera bitstream`: the testbenches, the Verilog
and the board builds."""

import time

from rich.table import Table
from rich.text import Text

from tessera.commands.common import (
    add_array_options,
    add_config_option,
    engine_config,
    print_error,
)
from tessera.console import console


def cmd_sim(args):
    from twin.outcomes import read_outcomes
    from twin.runner import SimBuildError, TestbenchFailed, run_testbench
    from twin.testbenches import TESTBENCHES, find_testbench

    benches = [find_testbench(args.tb)] if args.tb else list(TESTBENCHES.values())
    chosen = engine_config(args) if args.config else None
    table = Table(title="cocotb / Verilator testbenches")
    for column in ("testbench", "config", "test", "result", "sim time"):
        table.add_column(column)
    failures, waves, messages = 0, [], []
    for bench in benches:
        for config in _testbench_configs(bench, chosen):
            try:
                with console.status(f"{bench.name} on {config.name}: building and "
                                    f"simulating"):
                    started = time.monotonic()
                    results, wave = run_testbench(bench.module, config, seed=args.seed,
                                                  waves=args.waves, check=False,
                                                  name=f"make-sim-{args.seed}")
            except (SimBuildError, TestbenchFailed) as error:
                failures += 1
                table.add_row(bench.name, config.name, "(no result)", "[red]FAIL[/]", "")
                messages.append(f"{bench.name} {config.name}: {error}")
                continue
            outcomes = read_outcomes(results)
            console.print(f"{bench.name} {config.name}: {len(outcomes)} tests in "
                          f"{time.monotonic() - started:.1f} s")
            styles = {"PASS": "[green]PASS[/]", "FAIL": "[red]FAIL[/]",
                      "SKIP": "[dim]not for this build[/]"}
            for outcome in outcomes:
                failures += outcome.result == "FAIL"
                table.add_row(bench.name, config.name, outcome.name, styles[outcome.result],
                              f"{outcome.sim_us:.1f} us" if outcome.result != "SKIP" else "")
                if outcome.error:
                    messages.append(f"{bench.name} {config.name} {outcome.name}: "
                                    f"{outcome.error}")
            if not outcomes:
                failures += 1
                table.add_row(bench.name, config.name, "(no result)", "[red]FAIL[/]", "")
            if wave:
                waves.append(wave)
    console.print(table)
    for message in messages:  # the testbenches' own words for each failure
        console.print(Text.assemble(("FAIL ", "red"), message))
    for wave in waves:
        console.print(f"waveform: {wave}")
    console.print(f"seed {args.seed}: " + ("[green]all passed[/]" if not failures
                                            else f"[red]{failures} failed[/] (logs under build/)"))
    return 1 if failures else 0


def _testbench_configs(bench, chosen):
    """The builds ``bench`` runs: its own list, or ``chosen`` (``--config``) in the form the
    testbench takes. The block testbenches take lane counts, not an engine: their own list."""
    from contract.config import ArrayConfig, ConvEngineConfig
    from twin.system import TopBuild

    if chosen is None:
        return bench.configs
    kind = type(bench.configs[0])
    if kind is ArrayConfig:
        return (chosen.array,)
    if kind is ConvEngineConfig:
        return (chosen,)
    if kind is TopBuild:
        return (TopBuild(chosen),)
    return bench.configs


def cmd_verilog(args):
    from hw.verilog import write_array_verilog

    engine = engine_config(args)
    config = engine.array
    if args.target == "multi":
        # N accelerator instances on one FPGA (spatial sharing, docs/serving.md).
        from hw.multi_top import write_multi_verilog

        path = write_multi_verilog(engine, args.instances, args.build)
        console.print(f"{args.instances} x {engine.name}: wrote {path}")
        return 0
    if args.target == "xdma":
        # The whole accelerator behind XDMA's AXI port names (docs/xdma.md).
        from hw.axi_wrapper import write_xdma_verilog

        path = write_xdma_verilog(engine, args.build)
        console.print(f"{engine.name} (XDMA): wrote {path} ({path.stat().st_size // 1024} KiB)")
        return 0
    path = write_array_verilog(config, args.build)
    console.print(f"{config.name}: wrote {path} ({path.stat().st_size // 1024} KiB)")
    return 0


def cmd_bitstream(args):
    import dataclasses

    from contract.config import ArrayConfig
    from hw.bitstream import (
        DEFAULT_SEED,
        KNOWN_BOARDS,
        BitstreamError,
        build_array_bitstream,
        build_bitstream,
        default_config,
    )
    from tessera.board_report import console_say, print_summary

    if args.board not in KNOWN_BOARDS:
        console.print(f"[red]unknown board {args.board!r}[/]; known boards: "
                      + ", ".join(sorted(KNOWN_BOARDS)))
        return 2
    def pick(value, default):
        return default if value is None else value

    seed = pick(args.seed, DEFAULT_SEED)
    try:
        if args.array:
            # The bare systolic array under its on-chip pattern load (no host link).
            config = None if args.rows is None and args.cols is None else ArrayConfig(
                rows=pick(args.rows, 8), cols=pick(args.cols, 8))
            if args.config is not None:
                config = engine_config(args).array
            report = build_array_bitstream(args.board, config, build_root=args.build,
                                           seed=seed, say=console_say(console))
            print_summary(report, console=console)
            return 0
        if args.config is not None:  # the file or preset instead of the board's own
            config = engine_config(args)
        else:
            config = default_config(args.board)
        if args.config is None and (args.rows is not None or args.cols is not None):
            array = ArrayConfig(rows=pick(args.rows, config.rows),
                                cols=pick(args.cols, config.cols), pump=config.array.pump)
            config = dataclasses.replace(config, array=array)
        # --clock-mhz, else the configuration's clock, else the board's (None).
        report = build_bitstream(args.board, config, build_root=args.build,
                                 clock_mhz=pick(args.clock_mhz, config.clock_mhz),
                                 seed=seed, router=args.router, say=console_say(console))
    except BitstreamError as error:
        print_error(error, prefix="bitstream failed: ")
        return 1
    print_summary(report, console=console)
    if not report["timing_met"]:
        print_error(report["timing_failure"], prefix="timing not met: ")
        return 1
    return 0


def add_commands(sub):
    """Add ``sim``, ``verilog``, ``bitstream`` to the subcommands ``sub``."""
    p = sub.add_parser("sim", help="run the cocotb/Verilator testbenches")
    p.add_argument("--tb", help="run only this testbench")
    p.add_argument("--waves", action="store_true", help="write FST waveforms under build/")
    p.add_argument("--seed", type=int, default=1)
    add_config_option(p)
    p.set_defaults(func=cmd_sim)

    p = sub.add_parser("verilog", help="write the array's Verilog to build/")
    add_array_options(p)
    p.add_argument("--target", choices=("array", "xdma", "multi"), default="array",
                   help="array: the systolic array alone; xdma: the whole accelerator with "
                        "AXI4-Lite/AXI4-Stream ports for Xilinx XDMA (docs/xdma.md); multi: "
                        "--instances accelerators on one device (docs/serving.md)")
    p.add_argument("--instances", type=int, default=2,
                   help="accelerator instances for --target multi (default 2)")
    p.add_argument("--build", default="build")
    add_config_option(p)
    p.set_defaults(func=cmd_verilog)

    p = sub.add_parser("bitstream", help="synthesise, place and route the whole accelerator "
                                          "for a board (docs/boards.md)")
    p.add_argument("--board", required=True)
    p.add_argument("--rows", type=int, default=None,
                   help="array rows R (default: the board's configuration)")
    p.add_argument("--cols", type=int, default=None,
                   help="array columns C (default: the board's configuration)")
    p.add_argument("--clock-mhz", type=float, default=None,
                   help="design clock made by the board's PLL (default: the board's)")
    p.add_argument("--array", action="store_true",
                   help="build the bare systolic array under an on-chip pattern instead")
    p.add_argument("--build", default="build")
    p.add_argument("--router", choices=("router1", "router2"), default=None,
                   help="nextpnr's router (default: router2 for the 85F with the "
                        "resident block and for a pumped array, which router1 does not "
                        "route; else nextpnr's, router1)")
    p.add_argument("--seed", type=int, default=None,
                   help="nextpnr's placer seed (default: the flow's fixed one, "
                        "hw.bitstream.DEFAULT_SEED); report.json records it")
    add_config_option(p, "the accelerator to build", "the board's own configuration")
    p.set_defaults(func=cmd_bitstream)
