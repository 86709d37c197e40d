"""The unsigned (u16/u32/u64) and narrow (bf16, float8, float4, int4/int2) dtypes: the
type system and text form, safetensors, ONNX import/export, Cast's float8 semantics and
the backends.  Oracles: NumPy, ml_dtypes' conversions, the `safetensors` package (through
PyTorch), ONNX's reference implementation and ONNX Runtime."""

from __future__ import annotations

import sys
from typing import Any

import numpy as np
import pytest

import nexus as nx
from nexus.ir.types import ALL_DTYPE_NAMES, NARROW_DTYPES, TensorType, dtype_kind, dtype_of, numpy_dtype
from nexus.testing.extras import require

ml_dtypes = require("ml_dtypes", "onnx")
R = np.random.default_rng(3)
FLOAT8 = ["f8e4m3fn", "f8e4m3fnuz", "f8e5m2", "f8e5m2fnuz"]


def program(body: str, args: str, rets: str) -> nx.Graph:
    """A one-block graph: ``args`` the Start tuple's types, ``body`` the node lines."""
    types = [t.strip() for t in args.split(";")]
    projs = "\n".join(f"  %a{i} = Proj %0 {{num = {i}}} : {t}" for i, t in enumerate(types))
    start = f"({', '.join(types)},)" if len(types) == 1 else f"({', '.join(types)})"
    return nx.parse(f"graph @g {{\n^entry:\n  %0 = Start : {start}\n{projs}\n{body}\n"
                    f"  %r = Return {rets} : X\n^exit(%r):\n  End : X\n}}")


# --- the type system and the text form ----------------------------------------------------
def test_every_dtype_has_a_numpy_dtype_and_back() -> None:
    for name in ALL_DTYPE_NAMES:
        d = numpy_dtype(name)
        assert dtype_of(d) == name
        # the kind Nexus reports matches what the values are
        kind = dtype_kind(name)
        if name in NARROW_DTYPES:
            info = ml_dtypes.finfo(d) if kind == "f" else ml_dtypes.iinfo(d)
            assert (kind == "f") == hasattr(info, "eps")
        else:
            assert kind == d.kind


@pytest.mark.parametrize("name", ["bf16", *FLOAT8, "f8e8m0fnu", "f4e2m1fn", "i4", "u4", "i2", "u2", "u16", "u64"])
def test_constants_round_trip_through_text(name: str) -> None:
    d = numpy_dtype(name)
    raw = [0.5, 1.0, 2.0, 3.0] if dtype_kind(name) == "f" else [0, 1, 1, 0]
    if name == "f8e8m0fnu":
        raw = [0.5, 1.0, 2.0, 4.0]
    if name in ("u16", "u64"):
        raw = [0, 1, 255, int(np.iinfo(d).max)]
    value = np.array(raw, dtype=np.float64 if dtype_kind(name) == "f" else object).astype(d)
    g = nx.Graph("c", [])
    c = g.add("Constant", [], g.start_block, {"value": value})
    g.add("Return", [c], g.start_block)
    text = nx.print_graph(g)
    assert f"{name}[4]" in text
    back = nx.parse(text)
    got = next(n for n in back.nodes() if n.op.name == "Constant").attrs["value"]
    assert got.dtype == d and np.array_equal(got.astype(np.float64), value.astype(np.float64))


def test_type_system_needs_no_ml_dtypes_until_a_value_is_made(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "ml_dtypes", None)  # import ml_dtypes now fails
    t = TensorType("bf16", (2, 3))  # types and the text form need no NumPy values
    assert str(t) == "bf16[2, 3]"
    with pytest.raises(ValueError, match="dtype bf16 needs the ml_dtypes package"):
        numpy_dtype("bf16")
    with pytest.raises(ValueError, match="unknown dtype 'bf17'"):
        TensorType("bf17", ())


# --- safetensors ---------------------------------------------------------------------------
def test_safetensors_bf16_and_float8_match_the_reference_library(tmp_path: Any) -> None:
    torch = require("torch", "torch")
    st = require("safetensors.torch", "test")
    from nexus.ir.tensorio import load_file, save_file

    ref = {"b": torch.randn(3, 4).to(torch.bfloat16), "e4": (torch.randn(5) * 30).to(torch.float8_e4m3fn),
           "e5": (torch.randn(2, 2) * 1000).to(torch.float8_e5m2)}
    st.save_file(ref, str(tmp_path / "ref.safetensors"))
    got = load_file(tmp_path / "ref.safetensors")
    assert {k: v.dtype for k, v in got.items()} == {"b": numpy_dtype("bf16"), "e4": numpy_dtype("f8e4m3fn"),
                                                     "e5": numpy_dtype("f8e5m2")}
    for k, v in ref.items():
        np.testing.assert_array_equal(got[k].astype(np.float32), v.float().numpy())
    save_file(got, tmp_path / "ours.safetensors")  # and the reference library reads ours
    back = st.load_file(str(tmp_path / "ours.safetensors"))
    for k, v in ref.items():
        assert back[k].dtype == v.dtype and torch.equal(back[k].float(), v.float())


def test_safetensors_refuses_what_it_cannot_hold(tmp_path: Any) -> None:
    from nexus.ir.tensorio import save_file

    with pytest.raises(TypeError, match="cannot be stored in safetensors"):
        save_file({"x": np.zeros(3, numpy_dtype("i4"))}, tmp_path / "x.safetensors")


# --- Cast's float8 semantics against the ONNX reference -----------------------------------
def _onnx_cast(x: np.ndarray, to: int, **attrs: Any) -> np.ndarray:
    onnx = require("onnx", "onnx")
    from onnx import helper as h
    from onnx.reference import ReferenceEvaluator

    node = h.make_node("Cast", ["x"], ["y"], to=to, **attrs)
    m = h.make_model(h.make_graph([node], "c", [h.make_tensor_value_info("x", onnx.TensorProto.FLOAT, None)],
                                  [h.make_tensor_value_info("y", to, None)]), opset_imports=[h.make_opsetid("", 25)])
    return ReferenceEvaluator(m).run(None, {"x": x})[0]


EDGE = np.array([0.0, -0.0, 1e-9, 0.3, 1.7, -2.6, 240, 300, 448, 500, 57344, 6e4, 1e6, -1e6, np.inf, -np.inf, np.nan],
                np.float32)


@pytest.mark.parametrize("saturate", [1, 0])
@pytest.mark.parametrize("name", FLOAT8)
def test_cast_to_float8_matches_the_reference(name: str, saturate: int) -> None:
    from nexus.frontend.onnx.data import NEXUS_TO_ONNX
    from nexus.ops.math import _cast

    x = np.concatenate([EDGE, (R.normal(size=200) * 100).astype(np.float32)])
    want = _onnx_cast(x, NEXUS_TO_ONNX[name], saturate=saturate)
    got = _cast(x, name, saturate=bool(saturate))
    assert got.dtype == numpy_dtype(name)
    np.testing.assert_array_equal(got.astype(np.float32), want.astype(np.float32))


@pytest.mark.parametrize("saturate", [1, 0])
@pytest.mark.parametrize("mode", ["up", "down", "nearest"])
def test_cast_to_e8m0_matches_the_reference(mode: str, saturate: int) -> None:
    from nexus.ops.math import _cast

    x = np.concatenate([np.array([0.0, -2.5, 1.0, 1.5, 1.4999, 3.0, 0.75, 1e-30, 1e-40, 1e30, 3e38, np.inf, np.nan],
                                 np.float32),
                        np.abs(R.normal(size=100)).astype(np.float32) * 10])
    want = _onnx_cast(x, 24, round_mode=mode, saturate=saturate)
    got = _cast(x, "f8e8m0fnu", round_mode=mode, saturate=bool(saturate))
    np.testing.assert_array_equal(got.astype(np.float32), want.astype(np.float32))


# --- ONNX import and export ----------------------------------------------------------------
def _model(op: str, elem: int, n_in: int = 2, opset: int = 21) -> Any:
    require("onnx", "onnx")
    from onnx import helper as h

    ins = [h.make_tensor_value_info(f"x{i}", elem, [5]) for i in range(n_in)]
    node = h.make_node(op, [f"x{i}" for i in range(n_in)], ["y"])
    return h.make_model(h.make_graph([node], "m", ins, [h.make_tensor_value_info("y", elem, None)]),
                        opset_imports=[h.make_opsetid("", opset)])


@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div", "Max", "Min"])
@pytest.mark.parametrize("elem,np_dt", [(4, np.uint16), (12, np.uint32), (13, np.uint64)])
def test_unsigned_arithmetic_matches_onnxruntime(op: str, elem: int, np_dt: Any) -> None:
    ort = require("onnxruntime", "onnx")
    from onnx.reference import ReferenceEvaluator

    m = _model(op, elem)
    top = np.iinfo(np_dt).max
    a = np.array([0, 7, top, top - 3, 100], np_dt)
    b = np.array([1, 3, 2, top, 7], np_dt)
    try:
        want = ort.InferenceSession(m.SerializeToString()).run(None, {"x0": a, "x1": b})[0]
    except Exception:  # noqa: BLE001  (ONNX Runtime has no uint16 Max/Min kernel: the reference then)
        want = ReferenceEvaluator(m).run(None, {"x0": a, "x1": b})[0]
    got = nx.from_onnx(m)(a, b)
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("op", ["Add", "Mul", "Div", "Max"])
def test_bf16_arithmetic_runs_widened_and_matches_the_reference(op: str) -> None:
    from onnx.reference import ReferenceEvaluator

    m = _model(op, 16)  # BFLOAT16
    a = R.normal(size=5).astype(ml_dtypes.bfloat16)
    b = (R.normal(size=5) + 3).astype(ml_dtypes.bfloat16)
    want = ReferenceEvaluator(m).run(None, {"x0": a, "x1": b})[0]
    g = nx.from_onnx(m)
    assert "Cast" in nx.print_graph(g)  # computed in f32, rounded once
    got = g(a, b)
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got.astype(np.float32), want.astype(np.float32))


@pytest.mark.parametrize("name", ["u16", "u32", "u64", "bf16", "f8e4m3fn", "f8e5m2", "i4", "u4"])
def test_export_keeps_the_dtype(name: str) -> None:
    onnx = require("onnx", "onnx")
    from onnx.reference import ReferenceEvaluator

    from nexus.frontend.onnx.data import NEXUS_TO_ONNX

    g = program(f'  %y = Cast %a0 {{to = "{name}"}} : {name}[6]\n  %z = Cast %y {{to = "f32"}} : f32[6]',
                "f32[6]", "%y, %z")
    m = nx.to_onnx(g)
    onnx.checker.check_model(m)
    assert m.graph.output[0].type.tensor_type.elem_type == NEXUS_TO_ONNX[name]
    x = np.array([0.0, 1.0, 2.0, 3.0, 5.0, 7.0], np.float32)
    want = ReferenceEvaluator(m).run(None, {m.graph.input[0].name: x})
    got = g(x)
    assert got[0].dtype == want[0].dtype
    np.testing.assert_array_equal(got[1], want[1])


# --- the backends ---------------------------------------------------------------------------
UNSIGNED = """  %s = Add %a0, %a1 : {t}[4]
  %d = Div %s, %a1 : {t}[4]
  %l = Less %a0, %a1 : bool[4]
  %m = Maximum %d, %a0 : {t}[4]"""


@pytest.mark.parametrize("backend,extra", [("python", None), ("llvm", "llvmlite"), ("xla", "jax")])
@pytest.mark.parametrize("name", ["u16", "u32", "u64"])
def test_unsigned_on_every_backend(backend: str, extra: str | None, name: str) -> None:
    if extra is not None:
        require(extra, backend)
    d = numpy_dtype(name)
    g = program(UNSIGNED.format(t=name), f"{name}[4]; {name}[4]", "%m, %l")
    a = np.array([1, np.iinfo(d).max - 1, 7, 100], d)
    b = np.array([3, 1, 9, 1], d)
    kw = {"fallback": False} if backend == "llvm" else {}
    got = nx.compile(g, backend=backend, **kw)(a, b)
    want = (np.maximum((a + b) // b, a), a < b)  # NumPy wraps a + b around, as the dtype does
    for x, y in zip(got, want):
        assert np.asarray(x).dtype == y.dtype
        np.testing.assert_array_equal(x, y)


CASTS = """  %b = Cast %a0 {to = "bf16"} : bf16[5]
  %c = Cast %b {to = "f8e4m3fn"} : f8e4m3fn[5]"""
X5 = np.array([1.1, 500.0, -3.3, 1e6, np.nan], np.float32)


def _casts_want() -> tuple[np.ndarray, np.ndarray]:
    b = X5.astype(ml_dtypes.bfloat16)
    c = np.where(np.isnan(b.astype(np.float32)), np.nan, np.clip(b.astype(np.float32), -448, 448))
    return b, c.astype(ml_dtypes.float8_e4m3fn)  # ONNX saturates by default


def test_xla_runs_narrow_casts() -> None:
    require("jax", "xla")
    got = nx.compile(program(CASTS, "f32[5]", "%b, %c"), backend="xla")(X5)
    for x, y in zip(got, _casts_want()):
        assert x.dtype == y.dtype
        np.testing.assert_array_equal(x.astype(np.float32), y.astype(np.float32))


def test_llvm_refuses_narrow_dtypes_cleanly_and_falls_back() -> None:
    require("llvmlite", "llvm")
    from nexus.backends.llvm.dtypes import Unsupported

    g = program(CASTS, "f32[5]", "%b, %c")
    with pytest.raises(Unsupported, match="dtype bf16 has no LLVM type"):
        nx.compile(g, backend="llvm", fallback=False)
    got = nx.compile(g, backend="llvm")(X5)  # the default: the python backend runs what LLVM cannot
    for x, y in zip(got, _casts_want()):
        np.testing.assert_array_equal(x.astype(np.float32), y.astype(np.float32))


@pytest.mark.parametrize("name", ["bf16", "f8e5m2", "i4", "f8e4m3fnuz", "u64"])
def test_save_and_load_large_narrow_constants(name: str, tmp_path: Any) -> None:
    d = numpy_dtype(name)
    value = (np.arange(40) % 7).astype(np.float64 if dtype_kind(name) == "f" else np.int64).astype(d).reshape(5, 8)
    g = nx.Graph("c", [])
    c = g.add("Constant", [], g.start_block, {"value": value})
    g.add("Return", [c], g.start_block)
    nx.save(g, tmp_path / "m.nx")
    back = nx.load(tmp_path / "m.nx")
    got = next(n for n in back.nodes() if n.op.name == "Constant").attrs["value"]
    assert got.dtype == d and np.array_equal(got.astype(np.float64), value.astype(np.float64))


@pytest.mark.parametrize("name,opset", [("f8e4m3fn", 19), ("i4", 21), ("u4", 21)])
def test_export_picks_the_opset_the_dtypes_need_and_runs_in_onnxruntime(name: str, opset: int) -> None:
    ort = require("onnxruntime", "onnx")
    from nexus.backends.onnx.export import ExportError

    g = program(f'  %y = Cast %a0 {{to = "{name}"}} : {name}[6]\n  %z = Cast %y {{to = "f32"}} : f32[6]',
                "f32[6]", "%z")
    m = nx.to_onnx(g)
    assert m.opset_import[0].version == opset
    x = np.array([0.0, 1.0, 2.0, 3.0, 5.0, 7.0], np.float32)  # exact in all three (ONNX Runtime rounds 2.5 to
    # 3 for int4 where the reference truncates: the data avoid what they disagree on)
    got = ort.InferenceSession(m.SerializeToString()).run(None, {m.graph.input[0].name: x})[0]
    want = x.astype(numpy_dtype(name)).astype(np.float32)  # ml_dtypes' conversion (round to nearest even)
    np.testing.assert_array_equal(got, want)
    with pytest.raises(ExportError, match=f"needs ONNX opset {opset} or later \\(dtype {name}\\)"):
        nx.to_onnx(g, opset=18)
