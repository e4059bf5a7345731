"""The KServe v2 / Triton inference protocol: request decoding, response encoding.

Plain Python and NumPy (no web framework), so it is tested on its own. JSON tensors carry
``data`` in row-major order (flat or nested lists); the binary tensor extension puts the
JSON header first (its length in the ``Inference-Header-Content-Length`` HTTP header) and
the raw little-endian tensors after it, each sized by ``parameters.binary_data_size``.
"""

import json
import math
from dataclasses import dataclass

import numpy as np

__all__ = ["HEADER_LENGTH", "InferRequest", "ProtocolError", "decode_infer", "encode_infer",
           "tensor_metadata"]

#: The binary extension's HTTP header: bytes of JSON before the binary tensors.
HEADER_LENGTH = "Inference-Header-Content-Length"

#: ONNX type string -> (v2 datatype, NumPy dtype).
DATATYPES = {
    "tensor(float)": ("FP32", np.dtype("<f4")),
    "tensor(double)": ("FP64", np.dtype("<f8")),
    "tensor(float16)": ("FP16", np.dtype("<f2")),
    "tensor(int8)": ("INT8", np.dtype("i1")),
    "tensor(uint8)": ("UINT8", np.dtype("u1")),
    "tensor(int16)": ("INT16", np.dtype("<i2")),
    "tensor(int32)": ("INT32", np.dtype("<i4")),
    "tensor(int64)": ("INT64", np.dtype("<i8")),
    "tensor(bool)": ("BOOL", np.dtype("?")),
}


class ProtocolError(Exception):
    """A request the protocol refuses; ``status`` is the HTTP status (400 unless said)."""

    def __init__(self, message, status=400):
        super().__init__(message)
        self.status = status


@dataclass
class InferRequest:
    """A decoded request: NumPy feeds, and the outputs wanted as ``(name, binary)``."""

    id: str | None
    feeds: dict
    outputs: list


def _datatype(info):
    return DATATYPES.get(info.type, (info.type, None))


def tensor_metadata(info):
    """``{"name", "datatype", "shape"}`` of a model input or output (-1: any size)."""
    shape = [d if isinstance(d, int) and d > 0 else -1 for d in (info.shape or [])]
    return {"name": info.name, "datatype": _datatype(info)[0], "shape": shape}


def _json_header(body, header_length):
    if header_length is None:
        header, binary = body, b""
    else:
        try:
            size = int(header_length)
        except ValueError:
            size = -1
        if not 0 < size <= len(body):
            raise ProtocolError(f"{HEADER_LENGTH} must be an integer in 1..{len(body)} (the "
                                f"body's length), not {header_length!r}")
        header, binary = body[:size], body[size:]
    try:
        request = json.loads(header)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ProtocolError(f"request body is not valid JSON: {exc}") from None
    if not isinstance(request, dict):
        raise ProtocolError(f"request body must be a JSON object with \"inputs\", not "
                            f"{type(request).__name__}")
    return request, binary


def _check_shape(where, shape, info):
    if not (isinstance(shape, list) and all(isinstance(d, int) and not isinstance(d, bool)
                                            and d >= 0 for d in shape)):
        raise ProtocolError(f"{where}.shape must be a list of non-negative integers, not "
                            f"{shape!r}")
    expected = tensor_metadata(info)["shape"]
    if info.shape is not None and (len(shape) != len(expected) or 0 in shape or any(
            e != -1 and e != s for e, s in zip(expected, shape, strict=True))):
        raise ProtocolError(f"{where}.shape is {shape}; model input {info.name!r} expects "
                            f"{expected} (-1: any size >= 1)")


def _json_data(where, data, shape, dtype):
    try:
        array = np.asarray(data)
    except ValueError:
        array = None
    if array is None or array.dtype == object or array.dtype.kind not in "biuf":
        raise ProtocolError(f"{where}.data must be a list of numbers (flat or nested, "
                            f"row-major), not {str(data)[:80]}")
    count = math.prod(shape)
    if array.size != count:
        raise ProtocolError(f"{where}.data holds {array.size} values; shape {shape} needs "
                            f"{count}")
    if dtype.kind != "f" and array.dtype.kind == "f":
        raise ProtocolError(f"{where}.data holds non-integer values for {dtype.name}")
    return array.reshape(shape).astype(dtype.newbyteorder("="))


def _binary_size(where, entry):
    params = entry.get("parameters") or {}
    if not isinstance(params, dict):
        raise ProtocolError(f"{where}.parameters must be an object, not {params!r}")
    size = params.get("binary_data_size")
    if size is None:
        return None
    if not (isinstance(size, int) and not isinstance(size, bool) and size >= 0):
        raise ProtocolError(f"{where}.parameters.binary_data_size must be a non-negative "
                            f"integer, not {size!r}")
    return size


def _decode_inputs(request, binary, inputs):
    entries = request.get("inputs")
    if not isinstance(entries, list) or not entries:
        raise ProtocolError("request needs \"inputs\": a non-empty list of tensors")
    expected = {info.name: info for info in inputs}
    feeds, offset = {}, 0
    for i, entry in enumerate(entries):
        where = f"inputs[{i}]"
        if not isinstance(entry, dict):
            raise ProtocolError(f"{where} must be an object with name, shape, datatype, data")
        name = entry.get("name")
        if name not in expected:
            raise ProtocolError(f"{where}.name {name!r} is not an input of the model; its "
                                f"inputs are {sorted(expected)}")
        if name in feeds:
            raise ProtocolError(f"{where}.name {name!r} is given twice")
        info, where = expected[name], f"{where} ({name!r})"
        datatype, dtype = _datatype(info)
        if entry.get("datatype") != datatype:
            raise ProtocolError(f"{where}.datatype is {entry.get('datatype')!r}; the model "
                                f"expects {datatype!r}")
        shape = entry.get("shape")
        _check_shape(where, shape, info)
        size = _binary_size(where, entry)
        if size is None:
            if "data" not in entry:
                raise ProtocolError(f"{where} has neither data nor "
                                    f"parameters.binary_data_size")
            feeds[name] = _json_data(where, entry["data"], shape, dtype)
            continue
        if size != math.prod(shape) * dtype.itemsize:
            raise ProtocolError(f"{where}.parameters.binary_data_size is {size}; shape {shape} "
                                f"of {datatype} needs {math.prod(shape) * dtype.itemsize} bytes")
        if offset + size > len(binary):
            raise ProtocolError(f"{where}: the body's binary part has {len(binary) - offset} "
                                f"bytes left, binary_data_size says {size}")
        chunk = np.frombuffer(binary, dtype=dtype, count=math.prod(shape), offset=offset)
        feeds[name] = chunk.reshape(shape).astype(dtype.newbyteorder("="))
        offset += size
    if offset != len(binary):
        raise ProtocolError(f"the body has {len(binary) - offset} bytes after the binary "
                            f"tensors that no binary_data_size accounts for")
    for name, value in feeds.items():
        # Checked here, not only by the session: a request may share a batched run with
        # others, which its NaN must not fail.
        if value.dtype.kind == "f" and not np.isfinite(value).all():
            index = tuple(int(i) for i in np.argwhere(~np.isfinite(value))[0])
            raise ProtocolError(f"input {name!r} holds a non-finite value ({float(value[index])}"
                                f" at index {list(index)}); Tessera quantizes inputs to int8, "
                                f"where NaN and Inf have no meaning")
    missing = [name for name in expected if name not in feeds]
    if missing:
        raise ProtocolError(f"request lacks model input(s) {missing}")
    return feeds


def _decode_outputs(request, outputs):
    names = [info.name for info in outputs]
    params = request.get("parameters") or {}
    if not isinstance(params, dict):
        raise ProtocolError(f"request parameters must be an object, not {params!r}")
    binary_default = params.get("binary_data_output", False)
    entries = request.get("outputs")
    if entries is None:
        return [(name, bool(binary_default)) for name in names]
    if not isinstance(entries, list) or not entries:
        raise ProtocolError("\"outputs\", when given, must be a non-empty list of "
                            "{\"name\": ...}")
    wanted = []
    for i, entry in enumerate(entries):
        name = entry.get("name") if isinstance(entry, dict) else None
        if name not in names:
            raise ProtocolError(f"outputs[{i}].name {name!r} is not an output of the model; "
                                f"its outputs are {names}")
        binary = (entry.get("parameters") or {}).get("binary_data", binary_default)
        wanted.append((name, bool(binary)))
    return wanted


def decode_infer(body, header_length, inputs, outputs):
    """Decode an infer request against a model's inputs and outputs (``TensorInfo``s).

    Raises
    ------
    ProtocolError
        Naming the field at fault and what the model expects.
    """
    request, binary = _json_header(body, header_length)
    request_id = request.get("id")
    if request_id is not None and not isinstance(request_id, str):
        raise ProtocolError(f"request id must be a string, not {request_id!r}")
    feeds = _decode_inputs(request, binary, inputs)
    return InferRequest(request_id, feeds, _decode_outputs(request, outputs))


def encode_infer(model_name, request, results, infos):
    """``(body, headers)`` of the response to ``request`` given ``results`` (name -> array).

    Outputs asked for as binary go after the JSON header, in order; the header's length is
    then given in ``Inference-Header-Content-Length``.
    """
    outputs, chunks = [], []
    for name, binary in request.outputs:
        array = results[name]
        datatype, dtype = _datatype(infos[name])
        array = np.ascontiguousarray(array, dtype=dtype)
        entry = {"name": name, "datatype": datatype, "shape": list(array.shape)}
        if binary:
            chunks.append(array.tobytes())
            entry["parameters"] = {"binary_data_size": len(chunks[-1])}
        else:
            entry["data"] = array.reshape(-1).tolist()
        outputs.append(entry)
    response = {"model_name": model_name, "model_version": "1", "outputs": outputs}
    if request.id is not None:
        response["id"] = request.id
    header = json.dumps(response, separators=(",", ":")).encode()
    if not chunks:
        return header, {"content-type": "application/json"}
    return header + b"".join(chunks), {"content-type": "application/octet-stream",
                                       HEADER_LENGTH: str(len(header))}
