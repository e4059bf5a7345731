"""Batch inference over a data set (``tessera run-dataset``; ``docs/ray.md``, ``scale-out.md``).

The samples (one ``.npy`` array, first axis the sample) are cut into batches; each batch
goes through one :class:`sw_driver.InferenceSession`. Locally one session runs them all;
with Ray, ``ray.data`` ``map_batches`` spreads them over an actor pool, each actor holding
one session (the model's bytes are sent once per actor) and asking for the Ray resource of
its device (:func:`tessera.ray_cluster.actor_resources`), so actors land only on nodes that
have it. Every row carries its sample index, Ray Data is asked to keep the order, and the
outputs are checked to come back complete and in order as they arrive.

:func:`run_to_shards` writes the outputs in order as ``.npy`` or Parquet shards with a
manifest that records each finished shard under a content hash of its input rows, the model
and the providers; a rerun skips the shards already written, so an interrupted run resumes.
A Parquet shard or file (:func:`write_parquet`) has two columns, ``index`` (the sample's
position, int64) and ``y`` (its output as Arrow's fixed-shape tensor, the model's dtype), so
any Arrow reader gets the samples back with their positions; pyarrow comes with the
``[ray]`` extra (``ray[data]``) and is imported only when Parquet is asked for.
"""

import hashlib
import json
import os
import re
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from sw_driver.providers.options import format_providers

__all__ = ["FORMATS", "MANIFEST", "BatchJobError", "Fault", "SessionActor", "ShardReport",
           "load_shards", "pyarrow_modules", "read_parquet", "run_dataset", "run_to_shards",
           "write_parquet"]

#: Ray Data column names.
INDEX, X, Y, NODE = "index", "x", "y", "node"
#: The manifest of a shard directory.
MANIFEST = "manifest.json"
MANIFEST_FORMAT = 1
#: Shard file formats (``--format``), also their file suffixes.
FORMATS = ("npy", "parquet")


def pyarrow_modules():
    """``(pyarrow, pyarrow.parquet)``, or a ValueError saying how to get them."""
    try:
        import pyarrow
        import pyarrow.parquet
    except ImportError:
        raise ValueError("Parquet output needs pyarrow: install the [ray] extra (its "
                         "ray[data] brings pyarrow), or write .npy") from None
    return pyarrow, pyarrow.parquet


def write_parquet(file, indices, y):
    """Write samples ``indices`` and their outputs ``y`` (first axis the sample) as Parquet.

    ``y`` becomes a fixed-shape tensor column (a plain column for one value per sample), so
    reading it back gives the same dtype and shape.
    """
    pa, pq = pyarrow_modules()
    y = np.ascontiguousarray(y)
    column = (pa.FixedShapeTensorArray.from_numpy_ndarray(y) if y.ndim > 1
              else pa.array(y, type=pa.from_numpy_dtype(y.dtype)))
    pq.write_table(pa.table({INDEX: pa.array(np.asarray(indices), pa.int64()), Y: column}),
                   file)


def read_parquet(path):
    """``(indices, y)`` of a file :func:`write_parquet` wrote.

    Raises
    ------
    ValueError
        Not such a file, naming it and what it holds.
    """
    pa, pq = pyarrow_modules()
    try:
        table = pq.read_table(path)
    except (OSError, pa.ArrowException) as error:
        raise ValueError(f"{path}: not a readable Parquet file ({error})") from None
    if table.column_names != [INDEX, Y]:
        raise ValueError(f"{path}: columns {table.column_names}, expected {[INDEX, Y]} "
                         f"(written by tessera run-dataset)")
    column = table.column(Y).combine_chunks()
    y = (column.to_numpy_ndarray() if isinstance(column, pa.FixedShapeTensorArray)
         else column.to_numpy(zero_copy_only=False))
    return table.column(INDEX).to_numpy(), y


class BatchJobError(RuntimeError):
    """A session raised on a Ray actor: the job stops (not retried), naming the cause."""


def _session_error(error):
    """``Type: message`` of the exception a session raised, from Ray's wrapper of it.

    Ray Data re-raises a failed batch as ``RayTaskError(UserCodeException)``, whose cause
    chain does not survive the trip from the worker: only its text holds the session's
    exception, as the last ``Type: message`` line before the chained traceback.
    """
    text = re.sub(r"\x1b\[[0-9;]*m", "", str(error))
    first = text.split("The above exception was the direct cause")[0]
    lines = [line for line in first.splitlines() if re.match(r"[A-Za-z_][\w.]*: ", line)]
    return lines[-1] if lines else f"{type(error).__name__}: {text.splitlines()[0]}"


@dataclass(frozen=True)
class Fault:
    """Injected into :class:`SessionActor` by tests (never by the CLI).

    After ``after`` batches the actor raises (``kind="raise"``: an application error, not
    retried: the run stops), ends its process (``kind="exit"``: a lost actor, which Ray
    restarts and whose batch it retries), or sleeps ``seconds`` before each batch
    (``kind="slow"``: a slow device, so that a test can act while the run is under way).
    ``once`` names a file created when a raise or exit fires; while it exists no actor
    fires again, so only the first death happens.
    """

    kind: str
    after: int = 0
    once: str = None
    seconds: float = 0.0

    def __post_init__(self):
        if self.kind not in ("raise", "exit", "slow"):
            raise ValueError(f"Fault kind must be 'raise', 'exit' or 'slow', not "
                             f"{self.kind!r}")
        if self.kind != "slow" and not self.once:
            raise ValueError(f"a {self.kind!r} Fault needs `once`, the file that marks it fired")

    def fire(self):
        if self.kind == "slow":
            time.sleep(self.seconds)
            return
        try:
            os.close(os.open(self.once, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            return
        if self.kind == "exit":
            os._exit(17)
        raise RuntimeError(f"injected fault after {self.after} batches")


class SessionActor:
    """One session of ``model`` on ``providers``; called with a batch of ``{index, x}``.

    Parameters
    ----------
    model : bytes
        The ONNX model.
    providers : list
        Names and ``(name, options)`` pairs, as ``InferenceSession`` takes them.
    fault : Fault or None
    """

    def __init__(self, model, providers, fault=None):
        from sw_driver import InferenceSession

        self.session = InferenceSession(model, providers=providers)
        self.input = self.session.get_inputs()[0].name
        self.fault, self.batches = fault, 0
        self.node = _node_id()

    def __call__(self, batch):
        if self.fault is not None and self.batches >= self.fault.after:
            self.fault.fire()
        self.batches += 1
        y = self.session.run(None, {self.input: np.ascontiguousarray(batch[X])})[0]
        return {INDEX: batch[INDEX], Y: y, NODE: np.full(len(y), self.node)}


def _node_id():
    ray = sys.modules.get("ray")  # imported only inside a Ray worker or a --ray driver
    if ray is not None and ray.is_initialized():
        return ray.get_runtime_context().get_node_id()
    return "local"


def _local_batches(model, providers, x, indices, batch_size, fault):
    actor = SessionActor(model, providers, fault)
    for start in range(0, len(indices), batch_size):
        chunk = indices[start:start + batch_size]
        yield actor({INDEX: chunk, X: x[chunk]})


def _ray_batches(ray, model, providers, x, indices, batch_size, actors, resource, fault):
    import ray.data

    from tessera.ray_cluster import actor_resources, require_resources

    options = actor_resources(providers, resource)
    require_resources(ray, options, actors,
                      what=f"sessions of {format_providers(providers)}")
    context = ray.data.DataContext.get_current()
    context.execution_options.preserve_order = True
    context.enable_progress_bars = False
    dataset = ray.data.from_items([{INDEX: int(i), X: x[i]} for i in indices])
    mapped = dataset.map_batches(
        SessionActor, fn_constructor_args=(model, providers, fault), batch_size=batch_size,
        batch_format="numpy", compute=ray.data.ActorPoolStrategy(size=actors),
        **options)  # a lost actor: Ray Data's defaults restart it and retry its batches
    try:
        yield from mapped.iter_batches(batch_size=None, batch_format="numpy")
    except ray.exceptions.RayError as error:  # Ray's wrapper holds the session's own error
        raise BatchJobError(f"a session of {format_providers(providers)} failed on a Ray "
                            f"actor: {_session_error(error)}") from None


def _in_order(batches, indices, nodes):
    """``(indices, outputs)`` of each batch, checked to continue ``indices`` exactly."""
    position = 0
    for batch in batches:
        got = np.asarray(batch[INDEX])
        expected = indices[position:position + len(got)]
        if not np.array_equal(got, expected):  # lost, repeated or out of order
            raise RuntimeError(f"Ray Data returned samples {got[:10].tolist()} at position "
                               f"{position}, not {expected[:10].tolist()}: lost, repeated "
                               f"or out of order")
        position += len(got)
        nodes.update(Counter(str(node) for node in batch[NODE]))
        yield got, batch[Y]
    if position != len(indices):
        raise RuntimeError(f"Ray Data returned {position} of {len(indices)} samples")


def _batches(model, x, indices, providers, batch_size, ray, actors, resource, fault):
    if batch_size < 1:
        raise ValueError(f"--batch must be a positive integer, not {batch_size}")
    if actors < 1:
        raise ValueError(f"--actors must be a positive integer, not {actors}")
    if len(x) == 0:
        raise ValueError("the input holds no samples")
    if ray is None:
        return _local_batches(model, providers, x, indices, batch_size, fault)
    return _ray_batches(ray, model, providers, x, indices, batch_size, actors, resource,
                        fault)


def run_dataset(model, x, providers, *, batch_size=32, ray=None, actors=2, resource=None,
                fault=None, nodes=None):
    """The first output of ``model`` for every sample of ``x``, in order.

    Parameters
    ----------
    model : bytes
        The ONNX model.
    x : numpy.ndarray
        Samples along the first axis, as the model's input takes them.
    providers : list
        Names and ``(name, options)`` pairs, as ``InferenceSession`` takes them.
    batch_size : int
        Samples per ``session.run``.
    ray : module or None
        An initialized ``ray`` (:func:`tessera.ray_cluster.connect`): run on an actor pool
        of ``actors`` sessions. None: one session here.
    actors : int
    resource : str or None
        The Ray resource each actor asks for instead of its providers' own
        (:func:`tessera.ray_cluster.actor_resources`).
    fault : Fault or None
        Injected by tests.
    nodes : collections.Counter or None
        If given, counts the samples each Ray node ran (``"local"`` without Ray).

    Returns
    -------
    numpy.ndarray

    Raises
    ------
    tessera.ray_cluster.ResourceUnavailable
        No node, or too few, offer the actors' resource: refused before anything runs.
    """
    indices = np.arange(len(x))
    nodes = Counter() if nodes is None else nodes
    batches = _batches(model, x, indices, providers, batch_size, ray, actors, resource, fault)
    return np.concatenate([y for _, y in _in_order(batches, indices, nodes)])


@dataclass
class ShardReport:
    """What :func:`run_to_shards` did."""

    written: list = field(default_factory=list)
    skipped: list = field(default_factory=list)
    nodes: Counter = field(default_factory=Counter)


def _sha256(*parts):
    digest = hashlib.sha256()
    for part in parts:
        data = part if isinstance(part, bytes) else str(part).encode()
        digest.update(len(data).to_bytes(8, "little"))
        digest.update(data)
    return digest.hexdigest()


def _shard_key(model_hash, providers, x, start, stop):
    rows = np.ascontiguousarray(x[start:stop])
    # format_providers writes plain names as "a,b": shard keys of plain lists are unchanged.
    return _sha256(model_hash, format_providers(providers), start, stop, rows.dtype.str,
                   rows.shape,
                   rows.tobytes())


def _write_atomically(path, write):
    partial = path.with_name(path.name + ".partial")
    with open(partial, "wb") as file:
        write(file)
        file.flush()
        os.fsync(file.fileno())
    os.replace(partial, path)


def _read_manifest(directory):
    path = directory / MANIFEST
    if not path.exists():
        return {}
    try:
        manifest = json.loads(path.read_text())
        if manifest.get("format") != MANIFEST_FORMAT:
            raise ValueError(f"format {manifest.get('format')!r}, not {MANIFEST_FORMAT}")
        return manifest["shards"]
    except (ValueError, KeyError, TypeError, AttributeError) as error:
        raise ValueError(f"{path}: not a run-dataset manifest ({error}); remove it or "
                         f"choose another --out") from None


def _save_manifest(directory, shards):
    text = json.dumps({"format": MANIFEST_FORMAT, "shards": shards}, indent=1, sort_keys=True)
    _write_atomically(directory / MANIFEST, lambda file: file.write(text.encode()))


def _file_sha256(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _finished(directory, name, entry, key):
    path = directory / name
    return (entry is not None and entry.get("key") == key and path.exists()
            and entry.get("output_sha256") == _file_sha256(path))


def _check_format(directory, shards, format):
    if format not in FORMATS:
        raise ValueError(f"--format must be one of {', '.join(FORMATS)}, not {format!r}")
    other = sorted(name for name in shards if not name.endswith(f".{format}"))
    if other:
        raise ValueError(f"--out {directory} holds shards of another format ({other[0]}); "
                         f"rerun with that --format or choose another --out")


def run_to_shards(model, x, providers, out, *, shard_size, batch_size=32, ray=None,
                  actors=2, resource=None, fault=None, format="npy"):
    """Write the outputs of ``model`` for ``x`` into ``out`` as shards, resumably.

    Shard ``part-NNNNN.npy`` (or ``.parquet``, :func:`write_parquet`) holds the outputs of
    samples ``[N * shard_size, ...)``. The
    shards are written in order, each (then the manifest) atomically as soon as its last
    sample is back; a shard whose manifest entry matches the content hash of its input
    rows, the model and the providers, and whose file still has the recorded hash, is
    skipped, so rerunning an interrupted command finishes the job without redoing it.

    Parameters
    ----------
    out : str or pathlib.Path
        The shard directory (created).
    shard_size : int
        Samples per shard.
    format : str
        ``"npy"`` or ``"parquet"`` (:data:`FORMATS`).
    model, x, providers, batch_size, ray, actors, resource, fault
        As :func:`run_dataset`.

    Returns
    -------
    ShardReport
    """
    if shard_size < 1:
        raise ValueError(f"--shard-size must be a positive integer, not {shard_size}")
    directory = Path(out)
    if directory.exists() and not directory.is_dir():
        raise ValueError(f"--out {directory}: a file, not a shard directory (give a "
                         f"directory, or a name ending in .npy for one output file)")
    directory.mkdir(parents=True, exist_ok=True)
    shards = _read_manifest(directory)
    _check_format(directory, shards, format)
    if format == "parquet":
        pyarrow_modules()  # refused before anything runs
    model_hash = hashlib.sha256(model).hexdigest()
    report, pending = ShardReport(), []
    for start in range(0, len(x), shard_size):
        stop = min(start + shard_size, len(x))
        name = f"part-{start // shard_size:05d}.{format}"
        key = _shard_key(model_hash, providers, x, start, stop)
        if _finished(directory, name, shards.get(name), key):
            report.skipped.append(name)
        else:
            shards.pop(name, None)
            pending.append((name, start, stop, key))
    if not pending:
        return report
    indices = np.concatenate([np.arange(start, stop) for _, start, stop, _ in pending])
    batches = _in_order(_batches(model, x, indices, providers, batch_size, ray, actors,
                                 resource, fault), indices, report.nodes)
    buffered, count = [], 0
    for _, y in batches:
        buffered.append(y)
        count += len(y)
        while pending and count >= pending[0][2] - pending[0][1]:
            name, start, stop, key = pending.pop(0)
            rows = np.concatenate(buffered)
            shard, rest = rows[:stop - start], rows[stop - start:]
            buffered, count = [rest], len(rest)
            if format == "parquet":
                _write_atomically(directory / name, lambda file, shard=shard, start=start:
                                  write_parquet(file, np.arange(start, start + len(shard)),
                                                shard))
            else:
                _write_atomically(directory / name,
                                  lambda file, shard=shard: np.save(file, shard))
            shards[name] = {"start": start, "stop": stop, "key": key,
                            "output_sha256": _file_sha256(directory / name)}
            _save_manifest(directory, shards)
            report.written.append(name)
    return report


def load_shards(out):
    """The outputs in the shard directory ``out``, concatenated in sample order.

    Raises
    ------
    ValueError
        The manifest is missing, the shards leave a gap, or a file's hash differs from
        the manifest's, naming the shard.
    """
    directory = Path(out)
    shards = _read_manifest(directory)
    if not shards:
        raise ValueError(f"{directory}: no {MANIFEST} with finished shards")
    arrays, position = [], 0
    for name, entry in sorted(shards.items(), key=lambda item: item[1]["start"]):
        if entry["start"] != position:
            raise ValueError(f"{directory / name}: starts at sample {entry['start']}, "
                             f"expected {position} (a shard is missing: rerun the job)")
        if not (directory / name).is_file():
            raise ValueError(f"{directory / name}: missing, though the manifest lists it "
                             f"(rerun the job to rewrite it)")
        if _file_sha256(directory / name) != entry["output_sha256"]:
            raise ValueError(f"{directory / name}: its contents differ from the manifest's "
                             f"hash (rerun the job to rewrite it)")
        if name.endswith(".parquet"):
            indices, y = read_parquet(directory / name)
            if not np.array_equal(indices, np.arange(entry["start"], entry["stop"])):
                raise ValueError(f"{directory / name}: its index column is not samples "
                                 f"{entry['start']}..{entry['stop'] - 1}")
            arrays.append(y)
        else:
            arrays.append(np.load(directory / name, allow_pickle=False))
        position = entry["stop"]
    return np.concatenate(arrays)
