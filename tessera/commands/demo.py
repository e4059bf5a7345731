"""`tessera demo` and `tessera demo-array`: the digits CNN on the twin, and a GEMM on the
simulated array."""

import time

from rich.table import Table

from tessera.commands.common import (
    add_array_options,
    add_config_option,
    array_config,
    engine_config,
    fail,
    int_from,
    print_error,
)
from tessera.console import console

#: Largest M, K or N `tessera demo-array` takes: cocotb simulates ~10^4 cycles a second,
#: and 1024^3 on the 8x8 array is already 16 M operand beats.
DEMO_MAX_SIDE = 1024


def cmd_demo_array(args):
    import json
    import tempfile

    from twin.runner import SimBuildError, TestbenchFailed, run_testbench

    config = array_config(args)
    m, k, n = args.m, args.k, args.n
    console.print(f"Tessera demo: C = A @ B with A {m}x{k}, B {k}x{n} (int8, seed {args.seed}) "
                  f"on a {config.rows}x{config.cols} systolic array simulated by Verilator")
    with tempfile.TemporaryDirectory() as tmp:
        report_path = f"{tmp}/report.json"
        started = time.monotonic()
        try:
            with console.status("generating Verilog, building with Verilator, simulating"):
                run_testbench("sim.tb_demo", config, seed=args.seed, name="demo",
                              extra_env={"TESSERA_DEMO_SHAPE": f"{m},{k},{n}",
                                         "TESSERA_REPORT": report_path},
                              log=lambda message: console.print(message, style="dim",
                                                                markup=False))
        except (SimBuildError, TestbenchFailed) as error:
            print_error(error)
            return 1
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


def _demo_profile_table(totals, images):
    from tessera.tables import profile_table

    return profile_table(totals, f"twin run: per-layer profile (sum over {images} images)",
                         cycles=True)


def _link_table(result, images, batch, provider):
    """Bytes over the host link per image and link time against compute time, resident
    beside layer at a time (the twin's cycles at its clock; the UART at 3 Mbaud and XDMA
    priced by their models)."""
    from tessera import demo

    runs = {}
    segments = [e["segment"] for e in result.profile.values() if "segment" in e]
    cycles = sum(e.get("cycles", 0) for e in result.profile.values())
    if segments:
        runs["resident"] = (sum(s["link_bytes_per_inference"] for s in segments),
                            cycles / images, sum(s["passes"] for s in segments), True)
    n = result.layered_images
    if n:
        rows = result.layered.values()
        runs["layer at a time"] = (sum(e["bytes"] for e in rows) / n,
                                   sum(e.get("cycles", 0) for e in rows) / n,
                                   segments[0]["passes"] if segments else 7, False)
    clock = provider.compute_clock_hz()
    table = Table(title=f"host link per image ({clock / 1e6:g} MHz, batch {batch})")
    for column in ("run", "bytes", "compute", "UART 3 Mbaud", "XDMA"):
        table.add_column(column, justify="left" if column == "run" else "right")
    for row in demo.link_rows(runs, clock, batch=batch):
        table.add_row(*row)
    console.print(table)
    if not segments:
        console.print("this twin has no resident player: every layer crossed the link")


def cmd_demo(args):
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

    from models.zoo import DIGITS_FLOAT, DIGITS_QDQ, load_digits_split
    from sw_driver import InferenceSession
    from sw_driver.errors import TesseraError
    from sw_driver.providers import sim as sim_module
    from sw_driver.providers.sim import SimProvider
    from tessera import demo

    if args.batch < 1:
        return fail(f"--batch must be a positive integer, not {args.batch}")
    # None: the "sim" provider's own default (the default preset).
    config = engine_config(args) if args.config else None
    started = time.perf_counter()
    _, _, x, labels = load_digits_split()
    if args.samples is not None:
        x, labels = x[:args.samples], labels[:args.samples]
    result = demo.DemoResult(labels=labels)
    shown = config or sim_module.DEFAULT_CONFIG
    engine = f"{shown.rows}x{shown.cols}"
    console.print(f"Tessera demo: the digits CNN ({DIGITS_QDQ.name}) on {len(x)} test images, "
                  f"on the Verilator twin of the {engine} accelerator, Tessera's CPU provider "
                  f"and onnxruntime")
    try:
        with console.status(f"loading the {engine} twin (built with Verilator on first use, "
                            f"1-2 minutes; cached in build/twin/)"):
            sim = demo.timed(result, "twin-open", SimProvider, config,
                             log=lambda message: console.print(message, style="dim",
                                                                 markup=False))
            twin = InferenceSession(DIGITS_QDQ, providers=[sim, "cpu"])
            cpu = InferenceSession(DIGITS_QDQ, providers=["cpu"])
        with Progress("[progress.description]{task.description}", BarColumn(),
                      MofNCompleteColumn(), TimeElapsedColumn(), console=console) as bar:
            task = bar.add_task(r"twin  providers=\[sim, cpu]", total=len(x))
            result.outputs["twin"] = demo.timed(
                result, "twin", demo.run_session, twin, x, args.batch, totals=result.profile,
                advance=lambda n: bar.advance(task, n))
            # Beside it, a few images layer at a time on the same twin: what the link
            # would carry without the resident program.
            sim.resident = False
            layered = InferenceSession(DIGITS_QDQ, providers=[sim, "cpu"])
            few = x[:min(len(x), args.batch, 10)]
            task = bar.add_task(r"twin  layer at a time", total=len(few))
            demo.run_session(layered, few, args.batch, totals=result.layered,
                             advance=lambda n: bar.advance(task, n))
            result.layered_images = len(few)
            task = bar.add_task(r"cpu   providers=\[cpu]", total=len(x))
            result.outputs["cpu"] = demo.timed(result, "cpu", demo.run_session, cpu, x,
                                               args.batch, advance=lambda n: bar.advance(task, n))
            task = bar.add_task("onnxruntime float + int8", total=2)
            result.outputs["float"] = demo.timed(result, "ort-float", demo.onnxruntime_outputs,
                                                 DIGITS_FLOAT, x)
            bar.advance(task)
            result.outputs["ort-int8"] = demo.timed(result, "ort-int8",
                                                    demo.onnxruntime_outputs, DIGITS_QDQ, x)
            bar.advance(task)
        sim.close()
    except TesseraError as error:
        return fail(error)
    console.print(_demo_profile_table(result.profile, len(x)))
    if args.verbose:
        from tessera.tables import reasons_grid

        console.print(reasons_grid(result.profile))
    table = Table(title=f"digits test split, {len(x)} images")
    table.add_column("model / runtime")
    table.add_column("accuracy", justify="right")
    table.add_column("wall time", justify="right")
    for label, key, seconds in (
            ("float, onnxruntime", "float", "ort-float"),
            (f"int8, Tessera on the {engine} twin (sim + cpu)", "twin", "twin"),
            ("int8, Tessera cpu provider", "cpu", "cpu"),
            ("int8, onnxruntime (same QDQ model)", "ort-int8", "ort-int8")):
        table.add_row(label, f"{result.accuracy(key):.2%}", f"{result.seconds[seconds]:.2f} s")
    console.print(table)
    if result.identical:
        console.print("twin vs cpu provider: [green]identical[/] (every logit, bit for bit)")
    else:
        differ = int((result.outputs["twin"] != result.outputs["cpu"]).sum())
        console.print(f"twin vs cpu provider: [red]{differ} logits differ[/]")
    _link_table(result, len(x), args.batch, sim)
    cycles = sum(entry.get("cycles", 0) for entry in result.profile.values())
    console.print(f"twin: {cycles:,} simulated cycles, opened in "
                  f"{result.seconds['twin-open']:.1f} s; demo total "
                  f"{time.perf_counter() - started:.1f} s")
    return 0 if result.identical else 1


def add_commands(sub):
    """Add ``demo``, ``demo-array`` to the subcommands ``sub``."""
    p = sub.add_parser("demo", help="the digits CNN on the Verilator twin vs the CPU and "
                                    "onnxruntime: accuracy, identity, per-layer profile")
    p.add_argument("--batch", type=int, default=50,
                   help="images per session run (default %(default)s)")
    p.add_argument("--samples", type=int, default=None,
                   help="first N test images only (default: all 450)")
    p.add_argument("--verbose", action="store_true",
                   help="each layer's whole placement reason below the profile table")
    add_config_option(p)
    p.set_defaults(func=cmd_demo)

    p = sub.add_parser("demo-array",
                       help="a random GEMM on the simulated array, checked and timed")
    add_array_options(p)
    side = int_from(1, DEMO_MAX_SIDE)
    p.add_argument("--m", type=side, default=40,
                   help=f"rows of A, 1 to {DEMO_MAX_SIDE} (default %(default)s)")
    p.add_argument("--k", type=side, default=96,
                   help=f"columns of A and rows of B, 1 to {DEMO_MAX_SIDE} (default %(default)s)")
    p.add_argument("--n", type=side, default=40,
                   help=f"columns of B, 1 to {DEMO_MAX_SIDE} (default %(default)s)")
    p.add_argument("--seed", type=int, default=2026)
    add_config_option(p)
    p.set_defaults(func=cmd_demo_array)
