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
import stat
import struct
from collections.abc import Mapping
from typing import Any

import numpy as np

from nexus.ir.limits import LimitError, load_json
from nexus.ir.types import dtype_of, numpy_dtype

# safetensors dtype names -> little-endian NumPy dtypes.
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
# safetensors names of narrow dtypes NumPy lacks -> their Nexus dtypes, whose NumPy values
# come from ml_dtypes (imported only when a file holds one; see nexus.ir.types).
ST_NARROW: dict[str, str] = {"BF16": "bf16", "F8_E4M3": "f8e4m3fn", "F8_E5M2": "f8e5m2"}
_ST_BY_NARROW = {v: k for k, v in ST_NARROW.items()}

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
        for a in arrays:  # straight from the arrays' memory, no intermediate copy (as bytes: the
            f.write(a.reshape(-1).view(np.uint8).data)  # ml_dtypes types have no buffer format)


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
        data = np.ascontiguousarray(arr, dtype=ST_DTYPES[st] if st in ST_DTYPES else arr.dtype)
        header[name] = {"dtype": st, "shape": list(arr.shape), "data_offsets": [offset, offset + data.nbytes]}
        arrays.append(data)
        offset += data.nbytes
    text = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text, arrays


def storable(dt: np.dtype) -> bool:
    """Whether safetensors has a dtype for arrays of ``dt`` (not the 4- and 2-bit types)."""
    try:
        _st_dtype(dt, "")
    except TypeError:
        return False
    return True


def _st_dtype(dt: np.dtype, name: str) -> str:
    st = _ST_BY_KIND.get((dt.kind, dt.itemsize))
    if st is None and dt.kind in "Vf":  # the ml_dtypes types (float8_e5m2 reports 'f')
        try:
            st = _ST_BY_NARROW.get(dtype_of(dt))
        except ValueError:
            st = None
    if st is None:
        raise TypeError(f"tensor {name!r}: dtype {dt} cannot be stored in safetensors")
    return st


# --- reading -------------------------------------------------------------------------------
MAX_RANK = 32
"""Dims of one tensor: NumPy 1.x's largest rank (NumPy 2 allows 64), as ``MAX_NESTING``."""
_MAX_DIM = 2**63 - 1  # the largest dim NumPy's intp holds


def load_bytes(data: bytes, source: str = "<bytes>") -> dict[str, np.ndarray]:
    """The tensors in safetensors ``data``.  Raises LoadError naming ``source``."""
    n, header, _ = _header(data[:8], lambda count: data[8:8 + count], len(data), source)
    return _tensors(header, memoryview(data)[8 + n:], source)


def load_file(path: str | os.PathLike[str], within: str | os.PathLike[str] | None = None) -> dict[str, np.ndarray]:
    """The tensors of a safetensors file (each a fresh, writable array).

    Only a regular file is read (a FIFO or a device is refused before it is opened), and
    its size is checked against the header before the data is read.  With ``within``,
    ``path`` must resolve (symlinks followed) to a file inside that directory."""
    return _load(path, within)[0]


def load_metadata(path: str | os.PathLike[str], within: str | os.PathLike[str] | None = None) -> dict[str, str]:
    """The ``__metadata__`` of a safetensors file ({} when absent)."""
    return _load(path, within)[1]


def _load(path: str | os.PathLike[str], within: str | os.PathLike[str] | None) -> tuple[dict[str, np.ndarray],
                                                                                       dict[str, str]]:
    source = os.fspath(path)
    with open_regular(path, within) as f:
        size = os.fstat(f.fileno()).st_size
        first = f.read(8)
        n, header, metadata = _header(first, f.read, size, source)
        body = f.read(size - 8 - n)
    return _tensors(header, body, source), metadata


def open_regular(path: str | os.PathLike[str], within: str | os.PathLike[str] | None = None) -> Any:
    """``path`` opened for reading in binary mode, refused with :class:`LoadError` unless
    it is a regular file (and, with ``within``, resolves inside that directory).

    The checks come before anything could block or run without end: a FIFO is never
    opened (and the open does not wait for a writer), a device such as ``/dev/zero``
    never read.  The file is checked again once open, so a swap in between is refused."""
    name = os.fspath(path)
    if within is not None:
        _check_within(name, os.fspath(within))
    try:
        st = os.stat(name)
        _check_regular(name, st.st_mode)
        fd = os.open(name, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0))
    except FileNotFoundError:
        raise LoadError(f"{name}: no such file") from None
    except OSError as e:
        raise LoadError(f"{name}: cannot read: {e.strerror or e}") from None
    try:
        _check_regular(name, os.fstat(fd).st_mode)
    except LoadError:
        os.close(fd)
        raise
    return os.fdopen(fd, "rb")


def _check_regular(name: str, mode: int) -> None:
    if stat.S_ISREG(mode):
        return
    what = ("a directory" if stat.S_ISDIR(mode) else "a FIFO" if stat.S_ISFIFO(mode)
            else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "a socket" if stat.S_ISSOCK(mode)
            else "not a file")
    raise LoadError(f"{name}: is {what}, not a regular file")


def _check_within(name: str, root: str) -> None:
    """Refuse ``name`` unless it resolves inside ``root`` (the rule ONNX adopted for
    external data after CVE-2024-27318): a symlink must not lead a model's payload out of
    the model's directory."""
    real, base = os.path.realpath(name), os.path.realpath(root)
    try:
        inside = os.path.commonpath([real, base]) == base
    except ValueError:  # different drives
        inside = False
    if not inside:
        raise LoadError(f"{name}: resolves outside the model's directory {root or '.'}; "
                        "a payload must be a file in the model's directory (symlinks out are refused)")


Entry = tuple[np.dtype, tuple[int, ...], int, int]  # dtype, shape, begin, end in the data area


def _header(first: bytes, read: Any, size: int, source: str) -> tuple[int, dict[str, Entry], dict[str, str]]:
    """The header length, the checked tensor entries and the ``__metadata__`` ({} when
    absent) of a file of ``size`` bytes; ``read(count)`` reads the header after the first
    8 bytes.  Nothing of the file's content is echoed beyond short quotes of the header."""
    def bad(msg: str) -> LoadError:
        return LoadError(f"{source}: not a valid safetensors file: {msg}")

    if len(first) < 8:
        raise bad(f"{size} bytes; the header length alone takes 8")
    (n,) = struct.unpack("<Q", first)
    # The length is not quoted: in a file that is not safetensors it is 8 bytes of content.
    if n > MAX_HEADER:
        raise bad(f"its first 8 bytes give a header length that exceeds the limit of {MAX_HEADER} bytes")
    if 8 + n > size:
        raise bad(f"its first 8 bytes give a header length that runs past the end of the file ({size} bytes)")
    raw = read(n)
    if len(raw) != n:
        raise bad("the file ended while its header was read")
    if not raw.startswith(b"{"):
        raise bad("the header is not a JSON object")
    try:
        header = load_json(raw.decode("utf-8"), object_pairs_hook=_no_duplicates)
    except UnicodeDecodeError:
        raise bad("the header is not UTF-8") from None
    except json.JSONDecodeError as e:
        raise bad(f"the header is not JSON ({e.msg} at byte {e.pos})") from None
    except _DuplicateKey as e:
        raise bad(f"key {_quote(e.args[0])} appears twice in the header") from None
    except LimitError as e:
        raise bad(f"the header: {e}") from None
    if not isinstance(header, dict):
        raise bad("the header is not a JSON object")
    metadata = header.pop(_METADATA, None) or {}
    if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
        raise bad("__metadata__ must map strings to strings")
    entries: list[tuple[str, np.dtype, tuple[int, ...], int, int]] = [
        (name, *_entry(name, spec, bad)) for name, spec in header.items()]
    # The tensors must tile the data area: sorted by offset, each starts where the last ended.
    entries.sort(key=lambda e: (e[3], e[4]))
    pos = 0
    for name, _, _, begin, end in entries:
        if begin != pos:
            what = "overlaps the previous tensor" if begin < pos else f"leaves a hole of {begin - pos} bytes before it"
            raise bad(f"tensor {_quote(name)} at bytes [{begin}, {end}) {what}")
        pos = end
    body = size - 8 - n
    for name, _, _, _, end in entries:
        if end > body:
            raise bad(f"tensor {_quote(name)} ends at byte {end}, past the data area ({body} bytes)")
    if pos != body:
        raise bad(f"{body - pos} bytes after the last tensor are not described by the header")
    return n, {e[0]: e[1:] for e in entries}, dict(metadata)


def _tensors(header: dict[str, Entry], body: Any, source: str) -> dict[str, np.ndarray]:
    """The arrays the checked ``header`` describes in ``body``, the bytes after it."""
    view = memoryview(body)
    out: dict[str, np.ndarray] = {}
    for name, (dt, shape, begin, end) in header.items():
        if end > len(view):  # the file shrank since its size was read
            raise LoadError(f"{source}: not a valid safetensors file: the file ended while tensor "
                            f"{_quote(name)} was read")
        arr = np.frombuffer(view[begin:end], dtype=dt).reshape(shape)
        if dt.kind == "b" and arr.size and np.frombuffer(view[begin:end], dtype=np.uint8).max() > 1:
            raise LoadError(f"{source}: not a valid safetensors file: tensor {_quote(name)}: "
                            "BOOL bytes must be 0 or 1")
        out[name] = arr.astype(dt.newbyteorder("=") if dt.kind != "V" else dt, copy=True)
    return out


def _quote(value: Any, limit: int = 40) -> str:
    """A short quote of a value read from a file: never more than ``limit`` characters."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _entry(name: str, spec: Any, bad: Any) -> tuple[np.dtype, tuple[int, ...], int, int]:
    if not name:
        raise bad("a tensor has an empty name")
    what = f"tensor {_quote(name)}"
    if not isinstance(spec, dict) or set(spec) != {"dtype", "shape", "data_offsets"}:
        raise bad(f"{what} must have exactly the keys dtype, shape and data_offsets")
    st = spec["dtype"]
    if not isinstance(st, str) or (st not in ST_DTYPES and st not in ST_NARROW):
        known = ", ".join([*ST_DTYPES, *ST_NARROW])
        raise bad(f"{what} has dtype {_quote(st)}; this reader supports {known}")
    if st in ST_NARROW:
        try:
            dt = numpy_dtype(ST_NARROW[st])
        except ValueError as e:
            raise bad(f"{what}: {e}") from None
    else:
        dt = ST_DTYPES[st]
    shape = spec["shape"]
    if not isinstance(shape, list) or not all(_is_uint(d) for d in shape):
        raise bad(f"{what}: shape must be a list of non-negative integers, got {_quote(shape)}")
    if len(shape) > MAX_RANK:
        raise bad(f"{what}: shape has {len(shape)} dims, more than the limit of {MAX_RANK}")
    big = next((i for i, d in enumerate(shape) if d > _MAX_DIM), None)
    if big is not None:
        raise bad(f"{what}: shape dim {big} is larger than the limit of 2**63 - 1")
    offsets = spec["data_offsets"]
    if not (isinstance(offsets, list) and len(offsets) == 2 and all(_is_uint(o) for o in offsets)):
        raise bad(f"{what}: data_offsets must be two non-negative integers, got {_quote(offsets)}")
    begin, end = offsets
    if begin > end:
        raise bad(f"{what}: data_offsets [{begin}, {end}] run backwards")
    count = 1
    for d in shape:
        count *= d
    if count * dt.itemsize != end - begin:
        raise bad(f"{what}: {st}{_quote(shape, 80)} needs {count * dt.itemsize} bytes, "
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
