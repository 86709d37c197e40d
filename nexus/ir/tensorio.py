"""A small pure-NumPy reader and writer of the safetensors format.

Layout of a file: an unsigned 64-bit little-endian header length ``N``; ``N`` bytes of
UTF-8 JSON (padded with spaces to a multiple of 8), an object mapping each tensor name
to ``{"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]}`` plus an optional
``"__metadata__"`` object of string to string; then the raw little-endian bytes, offsets
counted from the end of the header.

Files are untrusted input: the reader checks every size, offset and dtype, requires the
tensors to tile the data area exactly (no overlaps, no holes, nothing left over, as the
reference implementation does) and raises :class:`LoadError` naming the problem.
Nothing is unpickled or evaluated.
"""

from __future__ import annotations

import json
import os
import struct
from collections.abc import Mapping
from typing import Any

import numpy as np

from nexus.ir.limits import LimitError, load_json

# safetensors dtype names -> little-endian NumPy dtypes.  BF16 and the F8 types have no
# NumPy dtype, so they are refused with a clear message rather than misread.
ST_DTYPES: dict[str, np.dtype] = {
    "BOOL": np.dtype("?"),
    "U8": np.dtype("u1"),
    "I8": np.dtype("i1"),
    "U16": np.dtype("<u2"),
    "I16": np.dtype("<i2"),
    "U32": np.dtype("<u4"),
    "I32": np.dtype("<i4"),
    "U64": np.dtype("<u8"),
    "I64": np.dtype("<i8"),
    "F16": np.dtype("<f2"),
    "F32": np.dtype("<f4"),
    "F64": np.dtype("<f8"),
}
_ST_BY_KIND = {(d.kind, d.itemsize): name for name, d in ST_DTYPES.items()}

MAX_HEADER = 100_000_000  # the reference implementation's limit
_METADATA = "__metadata__"


class LoadError(ValueError):
    """A file that is missing, truncated or malformed; the message says which and why."""


# --- writing -------------------------------------------------------------------------------
def save_bytes(tensors: Mapping[str, np.ndarray], metadata: Mapping[str, str] | None = None) -> bytes:
    """The safetensors bytes of ``tensors`` (written in name order)."""
    head, arrays = _layout(tensors, metadata)
    return b"".join([head, *(a.tobytes() for a in arrays)])


def save_file(tensors: Mapping[str, np.ndarray], path: str | os.PathLike[str],
              metadata: Mapping[str, str] | None = None) -> None:
    """Write ``tensors`` to ``path`` in the safetensors format."""
    head, arrays = _layout(tensors, metadata)
    with open(path, "wb") as f:
        f.write(head)
        for a in arrays:  # straight from the arrays' memory, no intermediate copy
            f.write(a.data)


def _layout(tensors: Mapping[str, np.ndarray],
            metadata: Mapping[str, str] | None) -> tuple[bytes, list[np.ndarray]]:
    """The length-prefixed, padded header and the little-endian contiguous arrays."""
    header: dict[str, Any] = {}
    if metadata:
        for k, v in metadata.items():
            if not isinstance(k, str) or not isinstance(v, str):
                raise TypeError("safetensors metadata maps strings to strings")
        header[_METADATA] = dict(metadata)
    arrays: list[np.ndarray] = []
    offset = 0
    for name in sorted(tensors):
        if not isinstance(name, str) or not name or name == _METADATA:
            raise ValueError(f"bad tensor name {name!r}")
        arr = np.asarray(tensors[name])
        st = _st_dtype(arr.dtype, name)
        data = np.ascontiguousarray(arr, dtype=ST_DTYPES[st])
        header[name] = {"dtype": st, "shape": list(arr.shape), "data_offsets": [offset, offset + data.nbytes]}
        arrays.append(data)
        offset += data.nbytes
    text = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text, arrays


def _st_dtype(dt: np.dtype, name: str) -> str:
    st = _ST_BY_KIND.get((dt.kind, dt.itemsize))
    if st is None:
        raise TypeError(f"tensor {name!r}: dtype {dt} cannot be stored in safetensors")
    return st


# --- reading -------------------------------------------------------------------------------
def load_bytes(data: bytes, source: str = "<bytes>") -> dict[str, np.ndarray]:
    """The tensors in safetensors ``data``.  Raises LoadError naming ``source``."""
    return _read(data, source)[0]


def load_file(path: str | os.PathLike[str]) -> dict[str, np.ndarray]:
    """The tensors of a safetensors file (each a fresh, writable array)."""
    return _read(_read_file(path), os.fspath(path))[0]


def load_metadata(path: str | os.PathLike[str]) -> dict[str, str]:
    """The ``__metadata__`` of a safetensors file ({} when absent)."""
    return _read(_read_file(path), os.fspath(path))[1]


def _read_file(path: str | os.PathLike[str]) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        raise LoadError(f"{os.fspath(path)}: no such file") from None
    except OSError as e:
        raise LoadError(f"{os.fspath(path)}: cannot read: {e.strerror or e}") from None


def _read(data: bytes, source: str) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    def bad(msg: str) -> LoadError:
        return LoadError(f"{source}: not a valid safetensors file: {msg}")

    if len(data) < 8:
        raise bad(f"{len(data)} bytes; the header length alone takes 8")
    (n,) = struct.unpack("<Q", data[:8])
    if n > MAX_HEADER:
        raise bad(f"header length {n} exceeds the limit of {MAX_HEADER} bytes")
    if 8 + n > len(data):
        raise bad(f"header length {n} runs past the end of the file ({len(data)} bytes)")
    raw = data[8:8 + n]
    if not raw.startswith(b"{"):
        raise bad("the header is not a JSON object")
    try:
        header = load_json(raw.decode("utf-8"), object_pairs_hook=_no_duplicates)
    except UnicodeDecodeError:
        raise bad("the header is not UTF-8") from None
    except json.JSONDecodeError as e:
        raise bad(f"the header is not JSON ({e.msg} at byte {e.pos})") from None
    except _DuplicateKey as e:
        raise bad(f"key {e.args[0]!r} appears twice in the header") from None
    except LimitError as e:
        raise bad(f"the header: {e}") from None
    if not isinstance(header, dict):
        raise bad("the header is not a JSON object")
    metadata = header.pop(_METADATA, None) or {}
    if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
        raise bad("__metadata__ must map strings to strings")
    body = memoryview(data)[8 + n:]
    entries = [(name, *_entry(name, spec, bad)) for name, spec in header.items()]
    # The tensors must tile the data area: sorted by offset, each starts where the last ended.
    entries.sort(key=lambda e: (e[3], e[4]))
    pos = 0
    out: dict[str, np.ndarray] = {}
    for name, dt, shape, begin, end in entries:
        if begin != pos:
            what = "overlaps the previous tensor" if begin < pos else f"leaves a hole of {begin - pos} bytes before it"
            raise bad(f"tensor {name!r} at bytes [{begin}, {end}) {what}")
        if end > len(body):
            raise bad(f"tensor {name!r} ends at byte {end}, past the data area ({len(body)} bytes)")
        arr = np.frombuffer(body[begin:end], dtype=dt).reshape(shape)
        if dt.kind == "b" and arr.size and np.frombuffer(body[begin:end], dtype=np.uint8).max() > 1:
            raise bad(f"tensor {name!r}: BOOL bytes must be 0 or 1")
        out[name] = arr.astype(dt.newbyteorder("="), copy=True)
        pos = end
    if pos != len(body):
        raise bad(f"{len(body) - pos} bytes after the last tensor are not described by the header")
    return out, dict(metadata)


def _entry(name: str, spec: Any, bad: Any) -> tuple[np.dtype, tuple[int, ...], int, int]:
    if not name:
        raise bad("a tensor has an empty name")
    if not isinstance(spec, dict) or set(spec) != {"dtype", "shape", "data_offsets"}:
        raise bad(f"tensor {name!r} must have exactly the keys dtype, shape and data_offsets")
    st = spec["dtype"]
    if not isinstance(st, str) or st not in ST_DTYPES:
        known = ", ".join(ST_DTYPES)
        raise bad(f"tensor {name!r} has dtype {st!r}; this reader supports {known}")
    dt = ST_DTYPES[st]
    shape = spec["shape"]
    if not isinstance(shape, list) or not all(_is_uint(d) for d in shape):
        raise bad(f"tensor {name!r}: shape must be a list of non-negative integers, got {shape!r}")
    offsets = spec["data_offsets"]
    if not (isinstance(offsets, list) and len(offsets) == 2 and all(_is_uint(o) for o in offsets)):
        raise bad(f"tensor {name!r}: data_offsets must be two non-negative integers, got {offsets!r}")
    begin, end = offsets
    if begin > end:
        raise bad(f"tensor {name!r}: data_offsets [{begin}, {end}] run backwards")
    count = 1
    for d in shape:
        count *= d
    if count * dt.itemsize != end - begin:
        raise bad(f"tensor {name!r}: {st}{shape} needs {count * dt.itemsize} bytes, "
                  f"data_offsets give {end - begin}")
    return dt, tuple(shape), begin, end


def _is_uint(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and x >= 0


class _DuplicateKey(Exception):
    pass


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in pairs:
        if k in out:
            raise _DuplicateKey(k)
        out[k] = v
    return out
