"""nx.save / nx.load: text plus safetensors payload round-trips bit-exactly."""

from __future__ import annotations

import os

import numpy as np
import pytest

import nexus as nx
from nexus import seeds
from nexus.io import LoadError, load, payload_path, save
from nexus.ir import Graph, structurally_equal, verify
from nexus.ir.parser import parse
from nexus.ir.printer import print_graph
from nexus.ir.types import TensorType


def _const_graph(arrays: dict[str, np.ndarray]) -> Graph:
    g = Graph("consts")
    nodes = [g.add("Constant", [], g.start_block, {"value": a}, name=k) for k, a in arrays.items()]
    r = g.add("Return", nodes, g.start_block)
    g.end_block.append_input(r)
    return verify(g)


def _constants(g: Graph) -> dict[str, np.ndarray]:
    return {n.name: n.attrs["value"] for n in g.nodes() if n.op.name == "Constant"}  # type: ignore[misc]


def _bits(a: np.ndarray) -> tuple:
    return a.dtype.str, a.shape, a.tobytes()


SPECIAL = np.array([np.nan, -np.nan, -0.0, 0.0, np.inf, -np.inf, 1.0, -1.5], np.float64)
rng = np.random.default_rng(0)
ARRAYS = {
    "big_f32": rng.standard_normal((64, 33)).astype(np.float32),
    "big_f16": np.concatenate([SPECIAL, rng.standard_normal(40)]).astype(np.float16),
    "big_f64": np.concatenate([SPECIAL, rng.standard_normal(30)]).reshape(2, 19),
    "big_bool": rng.random((5, 7)) > 0.5,
    "big_i8": rng.integers(-128, 128, 50).astype(np.int8),
    "big_u8": rng.integers(0, 256, 50).astype(np.uint8),
    "big_i16": rng.integers(-2**15, 2**15, 50).astype(np.int16),
    "big_i32": rng.integers(-2**31, 2**31, 50).astype(np.int32),
    "big_i64": np.array([np.iinfo(np.int64).min, np.iinfo(np.int64).max] * 10, np.int64),
    "small_f32": SPECIAL.astype(np.float32),
    "small_f16": SPECIAL.astype(np.float16),
    "small_bool": np.array([[True, False], [False, True]]),
    "small_i64": np.array(-(2**63), np.int64),
    "empty": np.zeros((0, 4), np.float32),
}


def test_round_trip_is_bit_exact(tmp_path) -> None:
    g = _const_graph(ARRAYS)
    path = tmp_path / "model.nx"
    nx.save(g, path)
    assert os.path.exists(payload_path(path))
    text = path.read_text()
    assert 'tensor<f32[64, 33]: @"' in text and "tensor<f32[8]: [nan, -nan, -0.0, 0.0, inf, -inf" in text
    h = nx.load(path)
    assert structurally_equal(g, h)
    got = _constants(h)
    for k, a in ARRAYS.items():
        assert _bits(got[k]) == _bits(a), k


def test_every_f16_value_round_trips_inline() -> None:
    # All 65536 bit patterns, printed inline as text (no payload) and parsed back.
    a = np.arange(2**16, dtype=np.uint16).view(np.float16)
    g = _const_graph({"all": a})
    back = _constants(parse(print_graph(g)))["all"]
    nan = np.isnan(a)
    assert np.array_equal(back.view(np.uint16)[~nan], a.view(np.uint16)[~nan])
    assert np.array_equal(np.signbit(back[nan]), np.signbit(a[nan])) and np.isnan(back[nan]).all()


def test_random_f32_f64_round_trip_inline() -> None:
    bits32 = rng.integers(0, 2**32, 4000, dtype=np.uint64).astype(np.uint32).view(np.float32)
    bits64 = rng.integers(0, 2**63, 2000, dtype=np.int64).view(np.float64)
    g = _const_graph({"f": bits32[~np.isnan(bits32)], "d": bits64[~np.isnan(bits64)]})
    back = _constants(parse(print_graph(g)))
    assert back["f"].tobytes() == bits32[~np.isnan(bits32)].tobytes()
    assert back["d"].tobytes() == bits64[~np.isnan(bits64)].tobytes()


def test_small_graph_writes_no_payload_and_removes_stale(tmp_path) -> None:
    path = tmp_path / "s.nx"
    save(_const_graph({"big": np.ones(100, np.float32)}), path)
    assert os.path.exists(payload_path(path))
    save(seeds.ifelse(), path)
    assert not os.path.exists(payload_path(path))
    assert structurally_equal(load(path), seeds.ifelse())


def test_seed_graphs_and_arguments_round_trip(tmp_path) -> None:
    for name, build in seeds.ALL.items():
        g = build()
        save(g, tmp_path / f"{name}.nx")
        h = load(tmp_path / f"{name}.nx")
        assert structurally_equal(g, h), name
        assert h() == g()
    g = Graph("args", [TensorType("f32", (2, 3)), TensorType("i64", ())], ["x", "n"])
    w = g.add("Constant", [], g.start_block, {"value": np.arange(24, dtype=np.float32).reshape(3, 8)})
    m = g.add("MatMul", [g.args[0], w], g.start_block)
    r = g.add("Return", [m, g.args[1]], g.start_block)
    g.end_block.append_input(r)
    save(g, tmp_path / "args.nx")
    h = load(tmp_path / "args.nx")
    assert structurally_equal(g, h) and [a.name for a in h.args] == ["x", "n"]
    assert h.arg_types == (TensorType("f32", (2, 3)), TensorType("i64", ()))
    x = np.ones((2, 3), np.float32)
    np.testing.assert_array_equal(h(x, 3)[0], x @ np.arange(24, dtype=np.float32).reshape(3, 8))


def test_load_errors_are_clear(tmp_path) -> None:
    with pytest.raises(FileNotFoundError, match="nope.nx: no such file"):
        load(tmp_path / "nope.nx")
    path = tmp_path / "m.nx"
    save(_const_graph({"big": np.ones(100, np.float32)}), path)
    os.remove(payload_path(path))
    with pytest.raises(LoadError, match="which does not exist"):
        load(path)
    with open(payload_path(path), "wb") as f:
        f.write(b"\x10\x00\x00\x00\x00\x00\x00\x00{garbage")
    with pytest.raises(LoadError, match="not a valid safetensors file"):
        load(path)
    from nexus.ir.tensorio import save_file

    save_file({"consts.big.value": np.ones(100, np.float64)}, payload_path(path))
    with pytest.raises(nx.ParseError, match="the text says f32"):
        load(path)
    (tmp_path / "bin.nx").write_bytes(b"graph \xff")
    with pytest.raises(LoadError, match="not UTF-8"):
        load(tmp_path / "bin.nx")
    (tmp_path / "bad.nx").write_text("graph @g {\n^entry:\n  %0 = Start : (\n}\n")
    with pytest.raises(nx.ParseError, match="line 3"):
        load(tmp_path / "bad.nx")


def test_payload_keys_never_collide(tmp_path) -> None:
    # Graph "m.w" node "v" and graph "m" node "w.v" both make the key "m.w.v.value".
    ones, twos = np.ones(20, np.float32), np.full(20, 2.0, np.float32)
    callee = Graph("m.w", [TensorType("f32", (20,))], ["x"])
    c = callee.add("Constant", [], callee.start_block, {"value": ones}, name="v")
    s = callee.add("Add", [callee.args[0], c], callee.start_block)
    callee.end_block.append_input(callee.add("Return", [s], callee.start_block))
    g = Graph("m")
    k = g.add("Constant", [], g.start_block, {"value": twos}, name="w.v")
    call = g.add("Call", [k], g.start_block, {"callee": callee})
    g.end_block.append_input(g.add("Return", [call], g.start_block))
    save(g, tmp_path / "m.nx")
    h = load(tmp_path / "m.nx")
    assert structurally_equal(g, h)
    np.testing.assert_array_equal(h(), twos + ones)
