"""Reading an ONNX file into a checked ``ModelProto``: the importer's first step.

Kept apart from the importer so that every way a file can be broken (missing, not ONNX,
truncated, dangling tensor names, failing ``onnx.checker``) turns into one
:class:`~sw_driver.errors.ModelLoadError` here, naming the file.
"""

import os

import onnx
from google.protobuf.message import DecodeError

from .errors import MissingInitializerError, ModelLoadError

__all__ = ["load_model", "node_label"]


def node_label(node, index):
    """A name for a node in messages: its ONNX name, or ``<op_type>#<index>`` if unnamed."""
    return node.name or f"{node.op_type}#{index}"


def _read(path_or_bytes):
    if isinstance(path_or_bytes, onnx.ModelProto):
        return path_or_bytes.SerializeToString(), "<ModelProto>"
    if isinstance(path_or_bytes, (bytes, bytearray, memoryview)):
        return bytes(path_or_bytes), "<bytes>"
    if isinstance(path_or_bytes, (str, os.PathLike)):
        source = os.fspath(path_or_bytes)
        try:
            with open(source, "rb") as f:
                return f.read(), source
        except OSError as exc:
            raise ModelLoadError(f"cannot read model file {source!r}: {exc.strerror}") from exc
    raise ModelLoadError(
        f"expected a path, bytes or onnx.ModelProto, not {type(path_or_bytes).__name__}"
    )


def _check_tensor_names(model, source):
    """Every node input must be an initializer, a graph input or an earlier node's output.

    onnx.checker would also notice, but only as "not topologically sorted"; a missing
    initializer deserves its own message.
    """
    graph = model.graph
    known = {t.name for t in graph.initializer} | {i.name for i in graph.input}
    produced = {out for node in graph.node for out in node.output}
    for index, node in enumerate(graph.node):
        for position, name in enumerate(node.input):
            if name and name not in known and name not in produced:
                raise MissingInitializerError(
                    f"{source}: input {position} ({name!r}) of node "
                    f"{node_label(node, index)!r} ({node.op_type}) is not an initializer, a "
                    f"graph input or any node's output; the file lacks that initializer"
                )


def load_model(path_or_bytes):
    """Load and validate an ONNX model.

    Parameters
    ----------
    path_or_bytes : str, os.PathLike, bytes or onnx.ModelProto

    Returns
    -------
    (onnx.ModelProto, str)
        The model and a description of its source (the path, or ``"<bytes>"``).

    Raises
    ------
    ModelLoadError
        Unreadable, empty, not ONNX, truncated or corrupt, or rejected by ``onnx.checker``.
    MissingInitializerError
        A node reads a tensor nobody provides.
    """
    data, source = _read(path_or_bytes)
    if not data:
        raise ModelLoadError(f"{source}: the model is empty (0 bytes)")
    model = onnx.ModelProto()
    try:
        model.ParseFromString(data)
    except (DecodeError, ValueError, RuntimeError) as exc:
        raise ModelLoadError(
            f"{source}: not an ONNX model, or a truncated or corrupt one ({len(data)} bytes "
            f"could not be parsed: {exc})"
        ) from exc
    # Arbitrary bytes sometimes parse as a protobuf with only unknown fields.
    if not model.opset_import or not model.HasField("graph") or not model.graph.node:
        raise ModelLoadError(
            f"{source}: not an ONNX model, or a truncated one (no graph nodes or opset "
            f"after parsing {len(data)} bytes)"
        )
    _check_tensor_names(model, source)
    try:
        onnx.checker.check_model(model)
    except onnx.checker.ValidationError as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ModelLoadError(
            f"{source}: not a valid ONNX model (truncated or corrupt?): {first}"
        ) from exc
    return model, source
