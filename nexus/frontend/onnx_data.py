"""Reading an ONNX model safely: the protobuf, its tensors and their external data.

Loading never executes code: the model is parsed as protobuf and tensors are read as raw
bytes.  External data (``data_location == EXTERNAL``) is read here rather than by
``onnx.load``, only from files inside the model's directory: a location that is absolute,
that climbs out (``../x``, CVE-2022-25882), that climbs out through a nested path
(``sub/../../x``, CVE-2024-27318) or through a symlink (CVE-2026-27489), and an offset or
length past the end of the file are refused with :class:`ExternalDataError`.

``onnx`` is imported only inside these functions: ``import nexus`` never needs it.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from nexus.ir.types import DTYPES, numpy_dtype


class OnnxImportError(ValueError):
    """A model Nexus cannot import: malformed, or using what Nexus lacks.  The message
    names the node (its op type, name and index) where there is one."""


class ExternalDataError(OnnxImportError):
    """External data that would be read from outside the model's directory, or past the
    end of its file."""


# ONNX TensorProto.DataType -> Nexus dtype (those Nexus has).
ONNX_DTYPES: dict[int, str] = {1: "f32", 2: "u8", 3: "i8", 5: "i16", 6: "i32", 7: "i64", 9: "bool",
                               10: "f16", 11: "f64"}
NEXUS_TO_ONNX: dict[str, int] = {v: k for k, v in ONNX_DTYPES.items()}
_ONNX_NAMES = {0: "undefined", 4: "uint16", 8: "string", 12: "uint32", 13: "uint64", 14: "complex64",
               15: "complex128", 16: "bfloat16", 17: "float8e4m3fn", 18: "float8e4m3fnuz", 19: "float8e5m2",
               20: "float8e5m2fnuz", 21: "uint4", 22: "int4", 23: "float4e2m1"}
assert set(ONNX_DTYPES.values()) <= set(DTYPES)


def nexus_dtype(elem_type: int, what: str) -> str:
    """The Nexus dtype of an ONNX element type; OnnxImportError for one Nexus lacks."""
    dt = ONNX_DTYPES.get(elem_type)
    if dt is None:
        name = _ONNX_NAMES.get(elem_type, f"type {elem_type}")
        raise OnnxImportError(f"{what}: ONNX element type {name} has no Nexus dtype "
                              f"(Nexus has {', '.join(sorted(DTYPES))})")
    return dt


def load_model(source: Any) -> tuple[Any, str | None]:
    """A ModelProto and the directory its external data may come from (None for a model
    given in memory).  ``source`` is a path, bytes, or a ModelProto."""
    import onnx
    from google.protobuf.message import DecodeError

    if isinstance(source, onnx.ModelProto):
        return source, None
    if isinstance(source, (bytes, bytearray)):
        data, base = bytes(source), None
    else:
        path = os.fspath(source)
        try:
            with open(path, "rb") as f:
                data = f.read()
        except OSError as e:
            raise OnnxImportError(f"cannot read ONNX model {path!r}: {e.strerror}") from None
        base = os.path.dirname(os.path.abspath(path))
    model = onnx.ModelProto()
    try:
        model.ParseFromString(data)
    except (DecodeError, RuntimeError, ValueError) as e:
        raise OnnxImportError(f"not a valid ONNX model (truncated or corrupt protobuf): {e}") from None
    if not model.HasField("graph"):
        raise OnnxImportError("not a valid ONNX model: it has no graph")
    return model, base


def tensor_to_array(t: Any, base_dir: str | None, what: str) -> np.ndarray:
    """The value of a TensorProto as a NumPy array, external data read safely."""
    from onnx import TensorProto, numpy_helper

    dtype = nexus_dtype(t.data_type, what)
    if t.data_location == TensorProto.EXTERNAL:
        raw = read_external(t, base_dir, what)
        arr = np.frombuffer(raw, dtype=numpy_dtype(dtype).newbyteorder("<")).astype(numpy_dtype(dtype))
        count = int(np.prod(t.dims)) if len(t.dims) else 1
        if arr.size != count:
            raise ExternalDataError(f"{what}: external data holds {arr.size} elements, dims {list(t.dims)} "
                                    f"need {count}")
        return arr.reshape(tuple(t.dims))
    try:
        arr = numpy_helper.to_array(t)
    except Exception as e:  # noqa: BLE001  (a corrupt tensor: onnx raises several kinds)
        raise OnnxImportError(f"{what}: cannot read tensor: {e}") from None
    return np.array(arr, dtype=numpy_dtype(dtype), order="C")


def read_external(t: Any, base_dir: str | None, what: str) -> bytes:
    """The bytes of an external tensor, read only from inside ``base_dir``."""
    info = {e.key: e.value for e in t.external_data}
    location = info.get("location")
    if not location:
        raise ExternalDataError(f"{what}: external data without a location")
    if base_dir is None:
        raise ExternalDataError(f"{what}: external data {location!r} needs the model's directory: load the model "
                                f"from its path")
    path = safe_location(base_dir, location, what)
    try:
        offset = int(info.get("offset", "0"))
        length = int(info["length"]) if "length" in info else None
    except ValueError:
        raise ExternalDataError(f"{what}: external data offset/length are not integers") from None
    size = os.path.getsize(path)
    if offset < 0 or offset > size:
        raise ExternalDataError(f"{what}: external data offset {offset} is past the end of {location!r} "
                                f"({size} bytes)")
    if length is not None and (length < 0 or offset + length > size):
        raise ExternalDataError(f"{what}: external data length {length} at offset {offset} runs past the end "
                                f"of {location!r} ({size} bytes)")
    with open(path, "rb") as f:
        f.seek(offset)
        return f.read(size - offset if length is None else length)


def safe_location(base_dir: str, location: str, what: str) -> str:
    """The real path of ``location`` if it lies inside ``base_dir``; else ExternalDataError."""
    if os.path.isabs(location) or location.startswith(("/", "\\")) or ":" in location:
        raise ExternalDataError(f"{what}: external data location {location!r} is absolute; it must be a path "
                                f"inside the model's directory")
    parts = location.replace("\\", "/").split("/")
    if ".." in parts:
        raise ExternalDataError(f"{what}: external data location {location!r} climbs out with '..'; it must "
                                f"stay inside the model's directory")
    root = os.path.realpath(base_dir)
    path = os.path.realpath(os.path.join(root, location))
    if os.path.commonpath([root, path]) != root:
        raise ExternalDataError(f"{what}: external data location {location!r} leads outside the model's "
                                f"directory (through a symlink)")
    if not os.path.isfile(path):
        raise ExternalDataError(f"{what}: external data file {location!r} does not exist in the model's directory")
    return path
