"""The `tessera` command line: the programs behind the make targets, each a thin layer
over the packages."""

import argparse
import sys
import time

from rich.table import Table
from rich.text import Text

from tessera.console import console


def _add_config_option(parser, what="the hardware to build or simulate",
                       default="the 'default' preset"):
    parser.add_argument("--config", metavar="FILE|PRESET",
                        help=f"{what}: a .toml/.json configuration file or a preset (default, "
                             f"tiny, ulx3s-85f, ...; docs/config.md); default: {default}")


def _engine_config(args):
    """The ``ConvEngineConfig`` ``--config`` names (the default preset when none), with the
    command's ``--rows``/``--cols``, where it has them, overriding the array's size."""
    import dataclasses

    from contract.config import ArrayConfig
    from contract.config_file import DEFAULT_PRESET, load_config

    options = vars(args)
    config = load_config(options.get("config") or DEFAULT_PRESET)
    rows, cols = options.get("rows"), options.get("cols")
    if rows is not None or cols is not None:
        array = ArrayConfig(rows=config.rows if rows is None else rows,
                            cols=config.cols if cols is None else cols,
                            acc_width=config.acc_width)
        config = dataclasses.replace(config, array=array)
    return config


def _array_config(args):
    return _engine_config(args).array


def _int_from(low, high):
    """An argparse type: an integer in ``[low, high]``; anything else is a usage error (exit
    2) naming the option and the range."""
    def parse(text):
        try:
            value = int(text)
        except ValueError:
            value = None
        if value is None or not low <= value <= high:
            raise argparse.ArgumentTypeError(
                f"must be an integer from {low} to {high}, not {text!r}")
        return value
    return parse


def _add_array_options(parser):
    # No default here: the size comes from --config (or the default preset) unless given.
    parser.add_argument("--rows", type=int, help="array rows R (default: the configuration's)")
    parser.add_argument("--cols", type=int, help="array columns C (default: the configuration's)")


def _print_error(error, prefix="error: "):
    """An error in its own words, no Python traceback (on this module's ``console``, which
    tests may replace)."""
    # Text, not markup: messages hold "[...]" (lists, shapes, TOML tables such as
    # [tenants.a]) that rich's markup would silently eat.
    console.print(Text.assemble((prefix, "red"), str(error)))


def cmd_sim(args):
    from twin.outcomes import read_outcomes
    from twin.runner import SimBuildError, TestbenchFailed, run_testbench
    from twin.testbenches import TESTBENCHES, find_testbench

    benches = [find_testbench(args.tb)] if args.tb else list(TESTBENCHES.values())
    chosen = _engine_config(args) if args.config else None
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

    engine = _engine_config(args)
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
        KNOWN_BOARDS,
        BitstreamError,
        build_array_bitstream,
        build_bitstream,
        default_config,
    )

    if args.board not in KNOWN_BOARDS:
        console.print(f"[red]unknown board {args.board!r}[/]; known boards: "
                      + ", ".join(sorted(KNOWN_BOARDS)))
        return 2
    def pick(value, default):
        return default if value is None else value

    try:
        if args.array:
            # The bare systolic array under its on-chip pattern load (no host link).
            config = None if args.rows is None and args.cols is None else ArrayConfig(
                rows=pick(args.rows, 8), cols=pick(args.cols, 8))
            if args.config is not None:
                config = _engine_config(args).array
            build_array_bitstream(args.board, config, build_root=args.build)
            return 0
        if args.config is not None:  # the file or preset instead of the board's own
            config = _engine_config(args)
        else:
            config = default_config(args.board)
        if args.config is None and (args.rows is not None or args.cols is not None):
            array = ArrayConfig(rows=pick(args.rows, config.rows),
                                cols=pick(args.cols, config.cols))
            config = dataclasses.replace(config, array=array)
        # --clock-mhz, else the configuration's clock, else the board's (None).
        report = build_bitstream(args.board, config, build_root=args.build,
                                 clock_mhz=pick(args.clock_mhz, config.clock_mhz))
    except BitstreamError as error:
        _print_error(error, prefix="bitstream failed: ")
        return 1
    if not report["timing_met"]:
        _print_error(report["timing_failure"], prefix="timing not met: ")
        return 1
    return 0


def cmd_bench(args):
    import subprocess

    # The benchmarks measure the product and import it, so the product does not import them:
    # they run as their own program (bench/run.py), which prints each figure and the summary.
    if args.config:
        _engine_config(args)  # a bad --config fails here, in the CLI's own words
    command = [sys.executable, "-m", "bench", *args.names]
    if args.config:
        command += ["--config", args.config]
    return subprocess.call(command)


def cmd_soak(args):
    from tessera.ray_cluster import RayClusterError  # imports no Ray
    from tessera.soak.console import soak_command

    try:
        # The engine the "sim" backend's twin is built for (None: the provider's default).
        sim_config = _engine_config(args) if args.config else None
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
        return _fail(error)


#: Largest M, K or N `tessera demo-array` takes: cocotb simulates ~10^4 cycles a second,
#: and 1024^3 on the 8x8 array is already 16 M operand beats.
DEMO_MAX_SIDE = 1024


def cmd_demo_array(args):
    import json
    import tempfile

    from twin.runner import SimBuildError, TestbenchFailed, run_testbench

    config = _array_config(args)
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
            _print_error(error)
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


def cmd_demo(args):
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

    from models.zoo import DIGITS_FLOAT, DIGITS_QDQ, load_digits_split
    from sw_driver import InferenceSession
    from sw_driver.errors import TesseraError
    from sw_driver.providers import sim as sim_module
    from sw_driver.providers.sim import SimProvider
    from tessera import demo

    if args.batch < 1:
        return _fail(f"--batch must be a positive integer, not {args.batch}")
    # None: the "sim" provider's own default (the default preset).
    config = _engine_config(args) if args.config else None
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
        return _fail(error)
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
    cycles = sum(entry.get("cycles", 0) for entry in result.profile.values())
    console.print(f"twin: {cycles:,} simulated cycles, opened in "
                  f"{result.seconds['twin-open']:.1f} s; demo total "
                  f"{time.perf_counter() - started:.1f} s")
    return 0 if result.identical else 1


# -- host runtime: run, quantize, zoo --------------------------------------------------------

class _UsageError(Exception):
    """A bad argument of the runtime commands, reported in one line."""


def _load_npy(path, what):
    """The array in ``path``, or a one-line usage error naming ``what`` and the file."""
    import numpy as np

    try:
        with open(path, "rb") as file:
            # Checked first: without it NumPy takes any other file for a pickle and answers
            # with a hint about allow_pickle, which must stay off for untrusted files.
            if file.read(6) != b"\x93NUMPY":
                raise _UsageError(f"{what} {path!r} is not a .npy array file (no .npy "
                                  f"header; numpy.save writes one)")
            file.seek(0)
            return np.load(file, allow_pickle=False)
    except OSError as exc:
        raise _UsageError(f"cannot read {what} {path!r}: {exc.strerror or exc}") from exc
    except ValueError as exc:
        if "Object arrays" in str(exc):
            raise _UsageError(f"{what} {path!r} holds Python objects (an object array), "
                              f"not numbers") from exc
        raise _UsageError(f"{what} {path!r} is not a readable .npy array file: "
                          f"{_one_line(exc)}") from exc


def _one_line(error):
    return " ".join(str(error).split())


def _fail(error):
    # Plain stderr, not rich: messages hold "[1, 8, 8]" (markup) and must not wrap.
    print(f"error: {_one_line(error)}", file=sys.stderr)
    return 2


def _run_inputs(args, session):
    """(array of model inputs, labels or None) for `tessera run`."""
    import numpy as np

    inputs = session.get_inputs()
    if len(inputs) != 1:
        raise _UsageError(f"the model has {len(inputs)} inputs; `tessera run` feeds "
                          f"single-input models")
    shape = inputs[0].shape or []
    if args.dataset:
        if args.dataset != "digits":
            raise _UsageError(f"unknown dataset {args.dataset!r}; known: digits")
        from models.zoo import load_digits_split

        _, _, x, y = load_digits_split()
        return x, y
    if args.input:
        x = _checked_input(_load_npy(args.input, "input"), args.input, inputs[0])
        if shape and x.ndim == len(shape) - 1:
            x = x[None]  # one sample without its batch axis
        return x, None
    fixed = shape[1:]
    if not shape or not all(isinstance(d, int) and d > 0 for d in fixed):
        raise _UsageError(f"input {inputs[0].name!r} has shape {shape}; give --input FILE.npy")
    from models.zoo import random_models

    console.print(f"no --input or --dataset: {args.samples} random samples (--seed "
                  f"{args.seed}), so no accuracy; accuracy needs labelled data: --dataset "
                  f"digits (make run DATASET=digits)", markup=False)
    rng = np.random.default_rng(args.seed)
    if fixed == list(random_models.INPUT_SHAPE):
        return random_models.random_inputs(rng, args.samples), None
    return rng.standard_normal((args.samples, *fixed)).astype(np.float32), None


def _checked_input(x, path, info):
    """The array of ``--input`` file ``path`` as the model's float32 input ``info``.

    Float arrays of any width are read as float32 (the same real values). Integer arrays are
    refused, as the API refuses them: int8 data may already be quantized, and read as real
    values it would be quantized a second time. NaN and Inf are refused with their index in
    the file, not in a batch."""
    import numpy as np

    if x.dtype.kind in "iu":
        raise _UsageError(
            f"{path!r} holds {x.dtype} values; input {info.name!r} takes real values as "
            f"float32 ({info.type}), which Tessera quantizes itself. Save the real values as "
            f"float (int8 data already quantized: (q - zero_point) * scale)")
    if x.dtype.kind != "f":
        raise _UsageError(f"{path!r} holds {x.dtype} values, not real numbers")
    x = x.astype(np.float32, copy=False)
    bad = ~np.isfinite(x)
    if bad.any():
        index = tuple(int(i) for i in np.argwhere(bad)[0])
        raise _UsageError(f"{path!r} holds {int(bad.sum())} non-finite value(s), the first "
                          f"{float(x[index])} at index {index}; Tessera quantizes inputs to "
                          f"int8, where NaN and Inf have no meaning")
    return x


#: ``tessera run`` warns when more than this fraction of an input's values lie outside the
#: range its input quantizer represents (docs/runtime.md): they are all clipped to its ends.
SATURATION_WARN_FRACTION = 0.01


def _saturation_warning(session, name, x, source):
    """A warning line when more than :data:`SATURATION_WARN_FRACTION` of ``x`` saturates
    the model's QuantizeLinear of input ``name``; None otherwise (or with no such layer)."""
    import numpy as np

    from sw_driver import graph as g

    for layer in session.graph.layers:
        if not (isinstance(layer, g.Quantize) and layer.inputs[:1] == (name,)):
            continue
        scale, zero = layer.scale, layer.zero_point
        with np.errstate(over="ignore", invalid="ignore"):
            q = np.rint(x / np.float32(scale))
        clipped = int(np.count_nonzero((q < -128 - zero) | (q > 127 - zero)))
        if clipped <= SATURATION_WARN_FRACTION * x.size:
            continue
        low, high = (-128 - zero) * scale, (127 - zero) * scale
        return (f"warning: {clipped / x.size:.1%} of the values of {source} ({clipped:,} of "
                f"{x.size:,}) lie outside [{low:.4g}, {high:.4g}], the range the model "
                f"quantizes input {name!r} to (scale {scale:.4g}, zero point {zero}); they "
                f"are clipped to its ends, so the outputs say little about them (the "
                f"warning is for more than {SATURATION_WARN_FRACTION:.0%})")
    return None


def _configured_providers(names, spec):
    """``names`` with the twin providers ("sim", "uart-twin") given the engine of
    ``--config`` (``spec``) as their ``config`` option; a board's configuration is read from
    its own registers."""
    if spec is None:
        return names
    from contract.config_file import load_config
    from sw_driver.providers import provider_name

    config = load_config(spec)
    twins = ("sim", "uart-twin")
    if not set(twins) & {provider_name(entry) for entry in names}:
        raise _UsageError(f"--config builds the twin providers ({', '.join(twins)}); none is "
                          f"in --providers {','.join(map(provider_name, names))} (a board "
                          f"reports its own configuration)")
    return [(provider_name(entry), {"config": config, **_options(entry)})
            if provider_name(entry) in twins else entry for entry in names]


def _options(entry):
    return dict(entry[1]) if isinstance(entry, tuple) else {}


def _profile_table(totals, batches, full):
    """The per-layer profile of `tessera run`; with ``full`` (--profile), per-batch times
    and each layer's whole placement reason below the table."""
    from rich.console import Group

    from tessera.tables import profile_table, reasons_grid

    table = profile_table(totals, f"per-layer profile (sum over {batches} batch(es))",
                          share=True, per_batch=batches if full else None, why=not full)
    return Group(table, reasons_grid(totals)) if full else table


def cmd_run(args):
    import numpy as np
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

    from sw_driver import InferenceSession
    from sw_driver.errors import TesseraError
    from sw_driver.providers import format_providers, parse_providers, provider_name

    try:
        if args.batch < 1:
            raise _UsageError(f"--batch must be a positive integer, not {args.batch}")
        providers = parse_providers(args.providers)
        configured = _configured_providers(providers, args.config)
        if args.port:  # the "uart" provider's serial port (docs/uart.md)
            configured = [("uart", {"port": args.port, **_options(p)})
                          if provider_name(p) == "uart" else p for p in configured]
        # The "sim" provider builds its Verilator twin on first use: up to a minute.
        with console.status(f"opening {args.model} on {format_providers(providers)}"):
            session = InferenceSession(args.model, providers=configured,
                                       sequence_mode=args.sequence_mode)
        x, labels = _run_inputs(args, session)
        name = session.get_inputs()[0].name
        if len(x) == 0:
            raise _UsageError("the input holds no samples")
        source = (f"--input {args.input}" if args.input else f"--dataset {args.dataset}"
                  if args.dataset else "the random samples")
        warning = _saturation_warning(session, name, x, source)
        if warning is not None:
            print(warning, file=sys.stderr)
        outputs, totals, batches = [], {}, 0
        started = time.perf_counter()
        with Progress("[progress.description]{task.description}", BarColumn(),
                      MofNCompleteColumn(), TimeElapsedColumn(), console=console) as bar:
            task = bar.add_task(f"{args.model}: batches", total=-(-len(x) // args.batch))
            for start in range(0, len(x), args.batch):
                outputs.append(session.run(None, {name: x[start:start + args.batch]})[0])
                batches += 1
                for entry in session.profile():
                    total = totals.setdefault(entry["layer"], dict(entry, seconds=0.0,
                                                                   bytes=0))
                    total["seconds"] += entry["seconds"]
                    total["bytes"] += entry["bytes"]
                bar.advance(task)
        wall = time.perf_counter() - started
    except (TesseraError, _UsageError) as error:
        return _fail(error)
    y = np.concatenate(outputs)
    console.print(_profile_table(totals, batches, args.profile))
    kinds = [entry["semantics"] for entry in totals.values() if "semantics" in entry]
    if kinds:  # a sequence model: what each layer's arithmetic followed (docs/semantics.md)
        counts = ", ".join(f"{kind} {kinds.count(kind)}" for kind in dict.fromkeys(kinds))
        console.print(f"semantics (--sequence-mode {args.sequence_mode}): {counts} layers")
    console.print(f"{len(x)} samples in {batches} batch(es) of up to {args.batch} on "
                  f"{','.join(session.get_providers())}: {wall:.2f} s "
                  f"({len(x) / wall:.0f} samples/s); output {list(y.shape)} {y.dtype}")
    if labels is not None:
        accuracy = float((y.reshape(len(y), -1).argmax(axis=1) == labels).mean())
        console.print(f"accuracy on {args.dataset} (test split, {len(labels)} samples): "
                      f"{accuracy:.2%}")
    if args.output:
        np.save(args.output, y)
        console.print(f"outputs written to {args.output}")
    return 0


def cmd_run_dataset(args):
    import numpy as np

    from sw_driver.errors import TesseraError
    from sw_driver.providers import format_providers, parse_providers
    from tessera.batch import (
        BatchJobError,
        pyarrow_modules,
        run_dataset,
        run_to_shards,
        write_parquet,
    )

    # tessera.ray_cluster imports no Ray until connect() is called.
    from tessera.ray_cluster import LOCAL, RayClusterError, connect, parse_resources

    try:
        providers = parse_providers(args.providers)
    except TesseraError as error:
        return _fail(error)
    suffix = next((f for f in ("npy", "parquet") if args.out.endswith(f".{f}")), None)
    sharded = suffix is None
    if args.format is not None and suffix not in (None, args.format):
        return _fail(f"--out {args.out} is a .{suffix} file but --format is {args.format}: "
                     f"drop one, or give a directory for {args.format} shards")
    options = {"batch_size": args.batch, "resource": args.resource}

    def run(ray=None):
        if sharded:
            return run_to_shards(model, x, providers, args.out, shard_size=args.shard_size,
                                 ray=ray, actors=args.actors, format=args.format or "npy",
                                 **options)
        return run_dataset(model, x, providers, ray=ray, actors=args.actors, **options)

    try:
        if "parquet" in (suffix, args.format):
            pyarrow_modules()  # refused before the run, not after it
        resources = parse_resources(args.ray_resources or "")
        if resources and args.ray is None:
            raise _UsageError("--ray-resources declares devices to a local Ray: add --ray")
        model = _read_file(args.model, "model")
        x = _load_npy(args.input, "--input")
        started = time.perf_counter()
        if args.ray is None:
            with console.status(f"{len(x)} samples through {args.model} on "
                                f"{format_providers(providers)}"):
                result = run()
            where = "one local session"
        else:
            where = ("a local Ray" if args.ray == LOCAL else f"the Ray cluster at {args.ray}")
            with connect(args.ray, resources=resources) as ray, console.status(
                    f"{len(x)} samples through {args.model} on {args.actors} sessions "
                    f"on {where}"):
                result = run(ray)
            where = f"{args.actors} Ray actors ({where})"
        wall = time.perf_counter() - started
    except BatchJobError as error:
        kept = f"; the finished shards in {args.out} are kept: rerun to resume" if sharded else ""
        return _fail(f"{error}{kept}")
    except (TesseraError, _UsageError, ValueError, RayClusterError) as error:
        return _fail(error)
    if sharded:
        console.print(f"{len(x)} samples in batches of up to {args.batch} on {where}: "
                      f"{wall:.2f} s; {len(result.written)} shard(s) written, "
                      f"{len(result.skipped)} already done, in {args.out}", markup=False)
        return 0
    if suffix == "parquet":
        try:
            write_parquet(args.out, np.arange(len(result)), result)
        except (OSError, ValueError) as error:
            return _fail(f"--out {args.out}: {error}")
    else:
        np.save(args.out, result)
    console.print(f"{len(x)} samples in batches of up to {args.batch} on {where}: "
                  f"{wall:.2f} s; output {list(result.shape)} {result.dtype} written to "
                  f"{args.out}", markup=False)
    return 0


def _read_file(path, what):
    try:
        with open(path, "rb") as file:
            return file.read()
    except OSError as error:
        raise _UsageError(f"cannot read the {what} {path}: {error.strerror}") from None


def cmd_quantize(args):

    from sw_driver.errors import TesseraError
    from sw_driver.quantize import quantize_file

    try:
        if args.calibration == "digits":
            from models.zoo import load_digits_split

            data = load_digits_split()[0]
        else:
            data = _load_npy(args.calibration, "calibration data")
        started = time.perf_counter()
        out = quantize_file(args.model, args.output, data, method=args.method,
                            percentile=args.percentile)
    except (TesseraError, _UsageError) as error:
        return _fail(error)
    console.print(f"{args.model} -> {out} ({out.stat().st_size:,} bytes): {args.method} "
                  f"calibration on {len(data)} samples in {time.perf_counter() - started:.2f} s")
    if args.calibration == "digits":
        _digits_report(args.model, out)
    return 0


def _digits_report(float_path, qdq_path):
    """Float (onnxruntime) and int8 (Tessera CPU) accuracy on the digits test split."""
    import onnxruntime as ort

    from models.zoo import load_digits_split
    from sw_driver import InferenceSession

    _, _, x, y = load_digits_split()
    reference = ort.InferenceSession(str(float_path), providers=["CPUExecutionProvider"])
    name = reference.get_inputs()[0].name
    float_acc = (reference.run(None, {name: x})[0].argmax(axis=1) == y).mean()
    int8_acc = (InferenceSession(qdq_path).run(None, {name: x})[0].argmax(axis=1) == y).mean()
    console.print(f"digits test split: float {float_acc:.2%}, Tessera int8 {int8_acc:.2%}")


def cmd_zoo(args):
    from models.zoo import digits, random_models

    if args.digits or args.vit or args.rnn:
        paths = []
        if args.digits:
            paths += digits.export(verbose=True)
        if args.vit:
            from models.zoo import vit

            paths += vit.export(verbose=True)
        if args.rnn:
            from models.zoo import rowrnn

            paths += rowrnn.export(verbose=True)
    else:
        paths = [p for name in random_models.MODELS for p in random_models.build(name,
                                                                                 args.out)]
    for path in paths:
        console.print(f"wrote {path} ({path.stat().st_size:,} bytes)")
    return 0


def cmd_serve(args):
    # The web stack is an optional extra (pip install .[serve]): imported only here.
    from tessera.serve import ServeConfigError, load_config

    try:
        config = load_config(args.config)
    except ServeConfigError as exc:
        _print_error(exc)
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
            return _fail(error)
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
        _print_error(exc)
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


def _add_runtime_commands(sub):
    p = sub.add_parser("run", help="run an int8 QDQ model on Tessera's providers, profiled")
    p.add_argument("model", help="QDQ ONNX model")
    p.add_argument("--providers", default="cpu",
                   help="comma-separated, tried in order per layer; options as "
                        "name:key=value;key=value, e.g. uart:port=/dev/ttyUSB0, or a JSON "
                        "list (docs/runtime.md; default %(default)s)")
    source = p.add_mutually_exclusive_group()
    source.add_argument("--input", help=".npy array [N, ...] (or one sample without N)")
    source.add_argument("--dataset", help="a zoo data set's test split, with accuracy: digits")
    p.add_argument("--batch", type=int, default=64, help="samples per run (default %(default)s)")
    p.add_argument("--samples", type=int, default=256,
                   help="random samples when neither --input nor --dataset (default "
                        "%(default)s)")
    p.add_argument("--seed", type=int, default=0, help="seed of the random samples")
    p.add_argument("--profile", action="store_true",
                   help="per-batch times in the table, each layer's whole placement reason "
                        "below it")
    _add_config_option(p, "the engine the sim and uart-twin providers build")
    p.add_argument("--sequence-mode", choices=["ort", "integer"], default="ort",
                   help="Softmax/LayerNorm/GELU as onnxruntime's QDQ graph (ort, default) or "
                        "integer-only (integer; docs/semantics.md)")
    p.add_argument("--port", help="serial port of the \"uart\" provider, e.g. /dev/ttyUSB0 "
                                  "(default $TESSERA_UART_PORT; docs/uart.md)")
    p.add_argument("-o", "--output", help="save the outputs as .npy")
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("run-dataset", help="batch inference over a .npy data set, outputs in "
                                           "order; on Ray actors with --ray (docs/ray.md)")
    p.add_argument("model", help="QDQ ONNX model")
    p.add_argument("--input", required=True, help=".npy array [N, ...] of samples")
    p.add_argument("--out", required=True,
                   help="FILE.npy or FILE.parquet: one output file; otherwise a directory "
                        "of shards with a manifest, resumable (docs/scale-out.md)")
    p.add_argument("--format", choices=["npy", "parquet"],
                   help="shard files of a directory --out (default npy; parquet: columns "
                        "index, y)")
    p.add_argument("--shard-size", type=int, default=4096,
                   help="samples per shard of a directory --out (default %(default)s)")
    p.add_argument("--providers", default="cpu",
                   help="comma-separated, tried in order per layer; options as "
                        "name:key=value;key=value, e.g. uart:port=/dev/ttyUSB0, or a JSON "
                        "list (docs/runtime.md; default %(default)s)")
    p.add_argument("--batch", type=int, default=64, help="samples per run (default %(default)s)")
    p.add_argument("--actors", type=int, default=2,
                   help="sessions (Ray actors) with --ray (default %(default)s)")
    _add_ray_argument(p, "the batches on a pool of Ray actors, one session each")
    p.add_argument("--resource", metavar="NAME",
                   help="Ray resource each actor asks for (a board's name, e.g. fpga_ulx3s; "
                        "default: by provider, docs/scale-out.md)")
    p.add_argument("--ray-resources", metavar="NAME=N,...",
                   help="devices this machine offers a local --ray, e.g. fpga_ulx3s=1,GPU=1")
    p.set_defaults(func=cmd_run_dataset)

    p = sub.add_parser("quantize", help="float ONNX -> QDQ int8 ONNX with Tessera's quantizer")
    p.add_argument("model", help="float ONNX model")
    p.add_argument("--calibration", required=True,
                   help="'digits' (the training split) or a .npy array [N, ...]")
    p.add_argument("--method", choices=["minmax", "percentile"], default="minmax")
    p.add_argument("--percentile", type=float, default=99.99,
                   help="for --method percentile (default %(default)s)")
    p.add_argument("-o", "--output", required=True, help="QDQ model to write")
    p.set_defaults(func=cmd_quantize)

    p = sub.add_parser("zoo", help="write the random zoo models into build/zoo/")
    p.add_argument("--out", default="build/zoo")
    p.add_argument("--digits", action="store_true",
                   help="instead retrain the digits CNN and rewrite models/zoo/digits_*.onnx")
    p.add_argument("--vit", action="store_true",
                   help="instead retrain the digits ViT: models/zoo/vit_*.onnx, vit.json")
    p.add_argument("--rnn", action="store_true",
                   help="instead retrain the row GRU: models/zoo/rowgru_*.onnx, rowgru.json")
    p.set_defaults(func=cmd_zoo)

    p = sub.add_parser("serve", help="KServe v2 inference server on 127.0.0.1 for the models "
                                     "and tenants of a TOML file (docs/serving.md)")
    p.add_argument("--config", required=True, help="serve configuration (TOML)")
    p.add_argument("--port", type=int, help="override the file's [server] port")
    _add_ray_argument(p, "the server as Ray Serve replicas placed by device resources")
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


def _add_ray_argument(parser, what):
    from tessera.ray_cluster import LOCAL

    parser.add_argument("--ray", nargs="?", const=LOCAL, metavar="ADDRESS",
                        help=f"run {what}: alone, on a local Ray (127.0.0.1 only); with "
                             f"HOST:PORT, on that Ray cluster (docs/ray.md; needs the [ray] "
                             f"extra)")


def cmd_energy(args):
    from tessera.energy.estimate import energy_of_model
    from tessera.energy.model import COEFFICIENTS, EnergyModelError

    calibrate = None
    if (args.idle_w is None) != (args.busy_w is None):
        return _fail("--idle-w and --busy-w go together (docs/energy.md: calibration)")
    if args.idle_w is not None:
        calibrate = (args.idle_w, args.busy_w)
    try:
        result = energy_of_model(args.model, args.board, batch=args.batch, seed=args.seed,
                                 coefficients=args.coefficients or COEFFICIENTS,
                                 clock_mhz=args.clock_mhz, calibrate=calibrate,
                                 write=args.write, log=console.print)
    except EnergyModelError as error:
        return _fail(error)
    table = Table(title=f"ESTIMATE: energy of {result['model']} on {result['board']} "
                        f"({result['device']}, {result['clock_mhz']:g} MHz, "
                        f"{'calibrated' if result['calibrated'] else 'uncalibrated'} "
                        "coefficients)", title_justify="left")
    for column in ("block", "register toggles", "fabric nJ", "clock nJ", "EBR nJ", "DSP nJ",
                   "total nJ"):
        table.add_column(column, justify="left" if column == "block" else "right")
    per = 1e9 / result["batch"]
    for block, entry in result["energy"]["blocks"].items():
        table.add_row(block, f"{result['activity']['toggles'].get(block, 0):,}",
                      *(f"{entry[k] * per:,.1f}" for k in ("fabric_j", "clock_j", "ebr_j",
                                                            "dsp_j", "total_j")))
    table.add_row("static", "", "", "", "", "",
                  f"{result['energy']['static_j'] * per:,.1f}")
    console.print(table)
    if result["resources"]:
        console.print("resources (build report): " + ", ".join(
            f"{name} {used}/{available}" for name, (used, available)
            in sorted(result["resources"].items())))
    else:
        console.print(f"resources: no build report for {result['board']} "
                      f"(make bitstream BOARD={result['board']})")
    if result["not_counted"]:
        console.print("not counted (ran on the host): " + ", ".join(result["not_counted"]))
    console.print(f"ESTIMATE: {result['nj_per_inference']:,.0f} nJ/inference, "
                  f"{result['average_w'] * 1e3:,.1f} mW while busy, "
                  f"{result['gops_per_w']:,.1f} GOP/s/W ({result['gops']:,.2f} GOP/s, "
                  f"{result['cycles'] / result['batch']:,.0f} cycles per inference); "
                  f"coefficients {result['coefficients']}")
    if args.json:
        import json

        with open(args.json, "w") as sink:
            json.dump(result, sink, indent=2)
        console.print(f"wrote {args.json}")
    return 0


def _add_energy_command(sub):
    p = sub.add_parser("energy", help="ESTIMATE of the energy per inference from the energy "
                                      "twin's switching activity (docs/energy.md)")
    p.add_argument("model", help="QDQ int8 ONNX model")
    p.add_argument("--board", default="ulx3s-85f",
                   help="board whose default configuration and clock are used "
                        "(default %(default)s)")
    p.add_argument("--batch", type=_int_from(1, 1024), default=1,
                   help="images per measured run (default %(default)s)")
    p.add_argument("--seed", type=int, default=0, help="seed of the random inputs")
    p.add_argument("--clock-mhz", type=float, help="design clock (default: the board's)")
    p.add_argument("--coefficients", help="coefficients JSON (default: the shipped, "
                                          "uncalibrated tessera/energy/energy_coefficients.json)")
    p.add_argument("--idle-w", type=float, help="calibrate: measured watts, board idle")
    p.add_argument("--busy-w", type=float,
                   help="calibrate: measured watts, board running MODEL back to back")
    p.add_argument("--write", help="calibrate: write the fitted coefficients here "
                                   "(default: rewrite --coefficients)")
    p.add_argument("--json", help="also write the whole report to this JSON file")
    p.set_defaults(func=cmd_energy)


def build_parser():
    parser = argparse.ArgumentParser(prog="tessera", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("sim", help="run the cocotb/Verilator testbenches")
    p.add_argument("--tb", help="run only this testbench")
    p.add_argument("--waves", action="store_true", help="write FST waveforms under build/")
    p.add_argument("--seed", type=int, default=1)
    _add_config_option(p)
    p.set_defaults(func=cmd_sim)

    p = sub.add_parser("verilog", help="write the array's Verilog to build/")
    _add_array_options(p)
    p.add_argument("--target", choices=("array", "xdma", "multi"), default="array",
                   help="array: the systolic array alone; xdma: the whole accelerator with "
                        "AXI4-Lite/AXI4-Stream ports for Xilinx XDMA (docs/xdma.md); multi: "
                        "--instances accelerators on one device (docs/serving.md)")
    p.add_argument("--instances", type=int, default=2,
                   help="accelerator instances for --target multi (default 2)")
    p.add_argument("--build", default="build")
    _add_config_option(p)
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
    _add_config_option(p, "the accelerator to build", "the board's own configuration")
    p.set_defaults(func=cmd_bitstream)

    p = sub.add_parser("bench", help="run benchmarks into bench/results/*.json")
    p.add_argument("names", nargs="*")
    _add_config_option(p)
    p.set_defaults(func=cmd_bench)

    p = sub.add_parser("soak", help="random layers through every backend against the golden "
                                    "models and onnxruntime; bench/results/soak.json")
    p.add_argument("--seed", type=int, default=1, help="soak seed (default %(default)s)")
    p.add_argument("--count", type=int, default=10000,
                   help="configurations 0..COUNT-1 (default %(default)s)")
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
    _add_ray_argument(p, "the configurations as Ray tasks")
    _add_config_option(p, "the engine the sim backend's twin is built for")
    p.set_defaults(func=cmd_soak)

    p = sub.add_parser("demo", help="the digits CNN on the Verilator twin vs the CPU and "
                                    "onnxruntime: accuracy, identity, per-layer profile")
    p.add_argument("--batch", type=int, default=50,
                   help="images per session run (default %(default)s)")
    p.add_argument("--samples", type=int, default=None,
                   help="first N test images only (default: all 450)")
    p.add_argument("--verbose", action="store_true",
                   help="each layer's whole placement reason below the profile table")
    _add_config_option(p)
    p.set_defaults(func=cmd_demo)

    p = sub.add_parser("demo-array",
                       help="a random GEMM on the simulated array, checked and timed")
    _add_array_options(p)
    side = _int_from(1, DEMO_MAX_SIDE)
    p.add_argument("--m", type=side, default=40,
                   help=f"rows of A, 1 to {DEMO_MAX_SIDE} (default %(default)s)")
    p.add_argument("--k", type=side, default=96,
                   help=f"columns of A and rows of B, 1 to {DEMO_MAX_SIDE} (default %(default)s)")
    p.add_argument("--n", type=side, default=40,
                   help=f"columns of B, 1 to {DEMO_MAX_SIDE} (default %(default)s)")
    p.add_argument("--seed", type=int, default=2026)
    _add_config_option(p)
    p.set_defaults(func=cmd_demo_array)

    _add_runtime_commands(sub)
    _add_energy_command(sub)
    from tessera.build import add_commands  # build, sweep (docs/build.md)

    add_commands(sub)
    from tessera.flash import add_command as add_flash_command  # flash (docs/boards.md)

    add_flash_command(sub)
    return parser


def main(argv=None):
    from contract.config_file import ConfigFileError
    from hw.toolchain import ToolchainError, apply_tool_env

    args = build_parser().parse_args(argv)
    try:
        apply_tool_env()
        return args.func(args)
    except ConfigFileError as error:  # one line naming the file, the field and the range
        return _fail(error)
    except (ValueError, ToolchainError) as error:
        _print_error(error)
        return 2


if __name__ == "__main__":
    sys.exit(main())
