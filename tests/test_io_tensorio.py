"""nexus.ir.tensorio against the `safetensors` package as the oracle, both directions,
and the reader's refusal of malformed files."""

from __future__ import annotations

import json
import struct

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from nexus.ir import tensorio
from nexus.ir.tensorio import LoadError
from nexus.testing.extras import require

DTYPES = ["bool", "uint8", "int8", "uint16", "int16", "uint32", "int32", "uint64", "int64",
          "float16", "float32", "float64"]


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    """Bit-exact equality (NaN payloads and -0.0 included)."""
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


arrays = st.sampled_from(DTYPES).flatmap(
    lambda dt: hnp.arrays(np.dtype(dt), hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=4)))
tensor_dicts = st.dictionaries(st.text(min_size=1, max_size=8).filter(lambda s: s != "__metadata__"),
                               arrays, max_size=5)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tensor_dicts)
def test_ours_written_oracle_reads(tensors: dict[str, np.ndarray]) -> None:
    stn = require("safetensors.numpy", "test")
    got = stn.load(tensorio.save_bytes(tensors))
    assert set(got) == set(tensors)
    for k, v in tensors.items():
        assert _same(got[k], v), k


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tensor_dicts)
def test_oracle_written_ours_reads(tensors: dict[str, np.ndarray]) -> None:
    stn = require("safetensors.numpy", "test")
    got = tensorio.load_bytes(stn.save(tensors, metadata={"k": "v"}))
    assert set(got) == set(tensors)
    for k, v in tensors.items():
        assert _same(got[k], v), k
        assert got[k].flags.writeable


def test_files_and_metadata(tmp_path) -> None:
    stn = require("safetensors.numpy", "test")
    from safetensors import safe_open

    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    p = tmp_path / "a.safetensors"
    tensorio.save_file({"x": x, "e": np.zeros((0, 3), np.int64)}, p, metadata={"format": "nexus"})
    with safe_open(str(p), framework="numpy") as f:
        assert f.metadata() == {"format": "nexus"}
        assert _same(f.get_tensor("x"), x)
    stn.save_file({"y": x.T.copy()}, str(tmp_path / "b.safetensors"), metadata={"m": "1"})
    assert _same(tensorio.load_file(tmp_path / "b.safetensors")["y"], x.T.copy())
    assert tensorio.load_metadata(tmp_path / "b.safetensors") == {"m": "1"}


def test_save_file_matches_save_bytes_for_every_dtype(tmp_path) -> None:
    stn = require("safetensors.numpy", "test")
    tensors = {dt: (np.arange(7) % 2).astype(dt).reshape(7, 1) for dt in DTYPES}
    tensors["scalar"] = np.array(3.5, np.float16)
    tensors["empty"] = np.zeros((2, 0), np.int32)
    tensorio.save_file(tensors, tmp_path / "a.st")
    data = (tmp_path / "a.st").read_bytes()
    assert data == tensorio.save_bytes(tensors)
    got = stn.load(data)
    assert all(_same(got[k], v) for k, v in tensors.items())


def test_header_is_padded_to_8() -> None:
    data = tensorio.save_bytes({"abc": np.ones(3, np.float32)})
    (n,) = struct.unpack("<Q", data[:8])
    assert n % 8 == 0 and data[8 + n - 1:8 + n] in (b" ", b"}")


def test_special_floats_and_byte_order_are_exact() -> None:
    x = np.array([np.nan, -np.nan, -0.0, 0.0, np.inf, -np.inf, 1e-45], np.float32)
    x_be = np.array([1.5, -2.25], dtype=">f8")
    got = tensorio.load_bytes(tensorio.save_bytes({"x": x, "be": x_be}))
    assert _same(got["x"], x)
    assert got["be"].tolist() == [1.5, -2.25]
    with pytest.raises(TypeError, match="cannot be stored"):
        tensorio.save_bytes({"c": np.ones(2, np.complex64)})


# --- malformed files -------------------------------------------------------------------------
def _file(header: dict, body: bytes = b"", pad: bool = True) -> bytes:
    text = json.dumps(header).encode()
    if pad:
        text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + body


def _raw(header: str) -> bytes:
    """A file whose header is this text (json.dumps cannot write every malformed header)."""
    text = header.encode()
    return struct.pack("<Q", len(text)) + text


def _t(dtype: str, shape: list, begin: int, end: int) -> dict:
    return {"dtype": dtype, "shape": shape, "data_offsets": [begin, end]}


BROKEN = {
    "short": (b"\x01\x00", "header length alone"),
    "huge header": (struct.pack("<Q", 2**40) + b"{}", "exceeds the limit"),
    "header past end": (struct.pack("<Q", 64) + b"{}", "runs past the end"),
    "not object": (_file([1, 2]), "not a JSON object"),  # type: ignore[arg-type]
    "not json": (struct.pack("<Q", 8) + b"{nope!!}", "not JSON"),
    "not utf8": (struct.pack("<Q", 8) + b'{"\xff":1}  ', "not UTF-8"),
    "dup key": (struct.pack("<Q", 16) + b'{"a":1,"a":2}   ', "appears twice"),
    "bad dtype": (_file({"a": _t("C64", [1], 0, 8)}, b"\0" * 8), "dtype 'C64'"),
    "bad keys": (_file({"a": {"dtype": "F32", "shape": [1]}}, b"\0" * 4), "exactly the keys"),
    "neg shape": (_file({"a": _t("F32", [-1], 0, 4)}, b"\0" * 4), "non-negative"),
    "float shape": (_file({"a": _t("F32", [1.0], 0, 4)}, b"\0" * 4), "non-negative"),
    "bool offsets": (_file({"a": _t("U8", [1], False, True)}, b"\0"), "two non-negative"),
    "backwards": (_file({"a": _t("U8", [0], 4, 0)}, b"\0" * 4), "run backwards"),
    "size mismatch": (_file({"a": _t("F32", [2], 0, 4)}, b"\0" * 4), "needs 8 bytes"),
    "overlap": (_file({"a": _t("F32", [2], 0, 8), "b": _t("F32", [1], 4, 8)}, b"\0" * 8), "overlaps"),
    "hole": (_file({"a": _t("F32", [1], 4, 8)}, b"\0" * 8), "hole of 4 bytes"),
    "past end": (_file({"a": _t("F32", [4], 0, 16)}, b"\0" * 8), "past the data area"),
    "trailing": (_file({"a": _t("F32", [1], 0, 4)}, b"\0" * 8), "4 bytes after the last tensor"),
    "bool byte": (_file({"a": _t("BOOL", [2], 0, 2)}, b"\x01\x07"), "must be 0 or 1"),
    "metadata": (_file({"__metadata__": {"a": 1}}), "__metadata__"),
    "empty name": (_file({"": _t("U8", [1], 0, 1)}, b"\0"), "empty name"),
    "deep": (struct.pack("<Q", 200_008) + b"{" + b'"a":' + b"[" * 200_000 + b"   ", "nest more than 32 levels deep"),
    # Past Nexus's limit of 600 characters a number (and past int()'s default of 4300 digits).
    "long number": (_raw('{"a": {"dtype": "U8", "shape": [1], "data_offsets": [0, ' + "1" * 5000 + ']}}'),
                    "a number of 5000 characters"),
}


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_malformed_files_are_refused(case: str) -> None:
    data, message = BROKEN[case]
    with pytest.raises(LoadError, match=message):
        tensorio.load_bytes(data, "f.st")


def test_missing_file(tmp_path) -> None:
    with pytest.raises(LoadError, match="no such file"):
        tensorio.load_file(tmp_path / "nope.safetensors")


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_mutated_files_load_or_raise_load_error(data: st.DataObject) -> None:
    valid = bytearray(tensorio.save_bytes({
        "w": np.arange(6, dtype=np.float32).reshape(2, 3), "b": np.array([True, False]),
        "i": np.array([7], np.int64)}, metadata={"m": "x"}))
    for _ in range(data.draw(st.integers(1, 4))):
        kind = data.draw(st.sampled_from(["flip", "truncate", "insert", "delete"]))
        pos = data.draw(st.integers(0, max(len(valid) - 1, 0)))
        if kind == "flip" and valid:
            valid[pos] = data.draw(st.integers(0, 255))
        elif kind == "truncate":
            del valid[pos:]
        elif kind == "insert":
            valid[pos:pos] = data.draw(st.binary(min_size=1, max_size=4))
        elif valid:
            del valid[pos]
    try:
        out = tensorio.load_bytes(bytes(valid))
    except LoadError:
        return
    assert all(isinstance(v, np.ndarray) for v in out.values())
