"""`tessera run`, `tessera run-dataset`, `tessera quantize` and `tessera zoo`: the host
runtime on models and data sets."""

import sys
import time

from tessera.commands.common import (
    add_config_option,
    add_ray_argument,
    fail,
    one_line,
)
from tessera.console import console


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
                          f"{one_line(exc)}") from exc


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
    from tessera.tables import segment_lines

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
        return fail(error)
    y = np.concatenate(outputs)
    console.print(_profile_table(totals, batches, args.profile))
    for line in segment_lines(totals):
        console.print(line, highlight=False)
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
        return fail(error)
    suffix = next((f for f in ("npy", "parquet") if args.out.endswith(f".{f}")), None)
    sharded = suffix is None
    if args.format is not None and suffix not in (None, args.format):
        return fail(f"--out {args.out} is a .{suffix} file but --format is {args.format}: "
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
        return fail(f"{error}{kept}")
    except (TesseraError, _UsageError, ValueError, RayClusterError) as error:
        return fail(error)
    if sharded:
        console.print(f"{len(x)} samples in batches of up to {args.batch} on {where}: "
                      f"{wall:.2f} s; {len(result.written)} shard(s) written, "
                      f"{len(result.skipped)} already done, in {args.out}", markup=False)
        return 0
    if suffix == "parquet":
        try:
            write_parquet(args.out, np.arange(len(result)), result)
        except (OSError, ValueError) as error:
            return fail(f"--out {args.out}: {error}")
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
        return fail(error)
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


def add_commands(sub):
    """Add ``run``, ``run-dataset``, ``quantize`` and ``zoo`` to the subcommands ``sub``."""
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
    add_config_option(p, "the engine the sim and uart-twin providers build")
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
    add_ray_argument(p, "the batches on a pool of Ray actors, one session each")
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
