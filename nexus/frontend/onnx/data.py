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

from nexus.frontend.importing import read_source
from nexus.ir.types import ALL_DTYPE_NAMES, is_dtype, numpy_dtype


class OnnxImportError(ValueError):
    """A model Nexus cannot import: malformed, or using what Nexus lacks.  The message
    names the node (its op type, name and index) where there is one."""


class ExternalDataError(OnnxImportError):
    """External data that would be read from outside the model's directory, or past the
    end of its file."""


# ONNX TensorProto.DataType -> Nexus dtype (those Nexus has).
ONNX_DTYPES: dict[int, str] = {1: "f32", 2: "u8", 3: "i8", 4: "u16", 5: "i16", 6: "i32", 7: "i64", 9: "bool",
                               10: "f16", 11: "f64", 12: "u32", 13: "u64", 16: "bf16", 17: "f8e4m3fn",
                               18: "f8e4m3fnuz", 19: "f8e5m2", 20: "f8e5m2fnuz", 21: "u4", 22: "i4", 23: "f4e2m1fn",
                               24: "f8e8m0fnu", 25: "u2", 26: "i2"}
NEXUS_TO_ONNX: dict[str, int] = {v: k for k, v in ONNX_DTYPES.items()}
_ONNX_NAMES = {0: "undefined", 8: "string", 14: "complex64", 15: "complex128", 27: "float6e2m3", 28: "float6e3m2"}
assert all(is_dtype(d) for d in ONNX_DTYPES.values())


def nexus_dtype(elem_type: int, what: str) -> str:
    """The Nexus dtype of an ONNX element type; OnnxImportError for one Nexus lacks."""
    dt = ONNX_DTYPES.get(elem_type)
    if dt is None:
        name = _ONNX_NAMES.get(elem_type, f"type {elem_type}")
        raise OnnxImportError(f"{what}: ONNX element type {name} has no Nexus dtype "
                              f"(Nexus has {', '.join(ALL_DTYPE_NAMES)})")
    return dt


def load_model(source: Any) -> tuple[Any, str | None]:
    """A ModelProto and the directory its external data may come from (None for a model
    given in memory).  ``source`` is a path, bytes, or a ModelProto."""
    import onnx
    from google.protobuf.message import DecodeError

    if isinstance(source, onnx.ModelProto):
        return source, None
    data, path = read_source(source, "ONNX model", OnnxImportError)
    base = None if path is None else os.path.dirname(os.path.abspath(path))
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
        arr = _from_external(raw, t, dtype, what)
        count = int(np.prod(t.dims)) if len(t.dims) else 1
        if arr.size != count:
            raise ExternalDataError(f"{what}: external data holds {arr.size} elements, dims {list(t.dims)} "
                                    f"need {count}")
        return arr.reshape(tuple(t.dims))
    try:
        arr = numpy_helper.to_array(t)
        return np.array(arr, dtype=numpy_dtype(dtype), order="C")
    except Exception as e:  # noqa: BLE001  (a corrupt tensor: onnx raises several kinds)
        raise OnnxImportError(f"{what}: cannot read tensor: {e}") from None


def _from_external(raw: bytes, t: Any, dtype: str, what: str) -> np.ndarray:
    """The elements of external data: little-endian, one per element, except the 4- and
    2-bit types, which ONNX packs two (four) to a byte, low bits first."""
    try:
        dt = numpy_dtype(dtype)
    except ValueError as e:
        raise OnnxImportError(f"{what}: {e}") from None
    bits = {"i4": 4, "u4": 4, "f4e2m1fn": 4, "i2": 2, "u2": 2}.get(dtype)
    if bits is None:
        return np.frombuffer(raw, dtype=dt.newbyteorder("<") if dt.kind != "V" else dt).astype(dt)
    count = int(np.prod(t.dims)) if len(t.dims) else 1
    packed = np.frombuffer(raw, dtype=np.uint8)
    per = 8 // bits
    codes = ((packed[:, None] >> (np.arange(per, dtype=np.uint8) * bits)) & ((1 << bits) - 1)).reshape(-1)
    if codes.size < count or codes.size - count >= per:
        raise ExternalDataError(f"{what}: external data holds {len(raw)} bytes, dims {list(t.dims)} need "
                                f"{-(-count // per)}")
    return codes[:count].astype(np.uint8).view(dt)


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


# ONNX op -> the Nexus op that means the same: the same inputs, no attributes.  The importer
# maps these one to one and the exporter (nexus/backends/onnx/lowering.py) maps them back.
ONE_TO_ONE = {
    "Add": "Add", "Sub": "Sub", "Mul": "Mul", "Abs": "Abs", "Neg": "Neg", "Exp": "Exp", "Log": "Log",
    "Sqrt": "Sqrt", "Reciprocal": "Reciprocal", "Relu": "Relu", "Sigmoid": "Sigmoid", "Tanh": "Tanh",
    "Erf": "Erf", "Floor": "Floor", "Ceil": "Ceil", "Round": "Round", "Sign": "Sign", "Sin": "Sin",
    "Cos": "Cos", "Asin": "Asin", "Acos": "Acos", "Atan": "Atan", "Asinh": "Asinh", "Acosh": "Acosh",
    "Atanh": "Atanh", "Where": "Where", "Equal": "Equal", "Greater": "Greater", "Less": "Less",
    "GreaterOrEqual": "GreaterEqual", "LessOrEqual": "LessEqual", "Not": "Not", "And": "And", "Or": "Or",
    "Xor": "Xor", "MatMul": "MatMul", "Identity": "Identity", "PRelu": "PRelu", "Expand": "Expand",
    "Tile": "Tile", "GatherND": "GatherND", "GlobalAveragePool": "GlobalAveragePool",
    "Softplus": "Softplus", "BitwiseAnd": "BitwiseAnd", "BitwiseOr": "BitwiseOr", "BitwiseXor": "BitwiseXor",
    "BitwiseNot": "BitwiseNot", "SequenceConstruct": "SequenceConstruct", "SequenceInsert": "SequenceInsert",
    "SequenceAt": "SequenceAt", "SequenceErase": "SequenceErase", "SequenceLength": "SequenceLength",
}
