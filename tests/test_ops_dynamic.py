"""Data-dependent ops against ONNX Runtime and PyTorch; the NMS example of seed 001 with
symbolic shapes, checked against ONNX Runtime on 100 random inputs."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import sympy

from nexus.ir.graph import Graph
from nexus.ir.opdef import OpTypeError
from nexus.ir.types import TensorType, sym
from nexus.ops.check import apply_op
from nexus.passes.shapes import infer_shapes
from nexus.testing.extras import require

RNG = np.random.default_rng(3)
N = sym("N")


def ort_session(nodes: list, inputs: list, outputs: list, opset: int = 18) -> Any:
    require("onnx", "onnx")
    rt = require("onnxruntime", "onnx")
    from onnx import helper

    model = helper.make_model(helper.make_graph(nodes, "t", inputs, outputs),
                              opset_imports=[helper.make_opsetid("", opset)])
    return rt.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


def ort_one(op: str, inputs: list[np.ndarray], n_out: int, **attrs: Any) -> list[np.ndarray]:
    onnx = require("onnx", "onnx")
    from onnx import helper

    names = [f"i{k}" for k in range(len(inputs))]
    vi = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(x.dtype), x.shape)
          for n, x in zip(names, inputs)]
    outs = [f"o{k}" for k in range(n_out)]
    sess = ort_session([helper.make_node(op, names, outs, **attrs)], vi, [onnx.ValueInfoProto(name=o) for o in outs])
    return sess.run(None, dict(zip(names, inputs)))


def random_boxes(rng: np.random.Generator, shape: tuple, center: int = 0) -> np.ndarray:
    if center:
        c = rng.uniform(0, 10, shape + (2,))
        wh = rng.uniform(0.5, 4, shape + (2,))
        return np.concatenate([c, wh], axis=-1).astype(np.float32)
    a = rng.uniform(0, 10, shape + (2,))
    b = a + rng.uniform(-4, 4, shape + (2,))  # corners in either order
    return np.concatenate([a, b], axis=-1).astype(np.float32)


# --- the seed-001 NMS example --------------------------------------------------------------
def nms_example() -> tuple[Graph, dict[str, Any]]:
    """boxes [N, 4], scores [N] -> selected boxes [nb, 4]; then uses nb in a Reshape
    (flatten to [4 * nb]) and a Slice (the first nb // 2 rows)."""
    g = Graph("nms", [TensorType("f32", (N, 4)), TensorType("f32", (N,)), TensorType("i64", ()),
                      TensorType("f32", ()), TensorType("f32", ())],
              ["boxes", "scores", "max_out", "iou", "score_thr"])
    e = g.start_block
    nms = g.add("NonMaxSuppression", list(g.args), e, {"select_boxes": True}, name="nms")
    sel = g.add("Proj", [nms], e, {"num": 0}, name="selected")
    nb = g.add("Proj", [nms], e, {"num": 1}, name="num_boxes")
    four = g.add("Constant", [], e, {"value": np.array(4, np.int64)})
    two = g.add("Constant", [], e, {"value": np.array(2, np.int64)})
    flat_len = g.add("Unsqueeze", [g.add("Mul", [nb, four], e)], e, {"axes": (0,)})
    flat = g.add("Reshape", [sel, flat_len], e, name="flat")
    half = g.add("Unsqueeze", [g.add("FloorDiv", [nb, two], e)], e, {"axes": (0,)})
    zero = g.add("Constant", [], e, {"value": np.array([0], np.int64)})
    first = g.add("Slice", [sel, zero, half], e, name="first_half")
    r = g.add("Return", [sel, nb, flat, first], e)
    g.end_block.append_input(r)
    return g, {"sel": sel, "flat": flat, "first": first, "nb": nb}


def test_nms_example_shapes_are_symbolic_in_nb() -> None:
    g, n = nms_example()
    infer_shapes(g)
    sel_t = n["sel"].type
    assert isinstance(sel_t, TensorType) and sel_t.shape is not None
    nb, four = sel_t.shape
    assert four == 4 and isinstance(nb, sympy.Symbol) and nb != N
    assert n["flat"].type == TensorType("f32", (4 * nb,))
    assert n["first"].type == TensorType("f32", (sympy.floor(nb / 2), 4))
    assert n["nb"].type == TensorType("i64", ())


def test_nms_example_matches_onnxruntime_on_100_random_inputs() -> None:
    onnx = require("onnx", "onnx")
    from onnx import TensorProto, helper

    g, _ = nms_example()
    infer_shapes(g)
    sess = ort_session(
        [helper.make_node("NonMaxSuppression", ["b", "s", "m", "i", "t"], ["sel"])],
        [helper.make_tensor_value_info("b", TensorProto.FLOAT, [1, None, 4]),
         helper.make_tensor_value_info("s", TensorProto.FLOAT, [1, 1, None]),
         helper.make_tensor_value_info("m", TensorProto.INT64, [1]),
         helper.make_tensor_value_info("i", TensorProto.FLOAT, [1]),
         helper.make_tensor_value_info("t", TensorProto.FLOAT, [1])],
        [onnx.ValueInfoProto(name="sel")])
    rng = np.random.default_rng(100)
    total = 0
    for trial in range(100):
        n = int(rng.integers(0, 60)) if trial else 0
        boxes = random_boxes(rng, (n,))
        scores = rng.uniform(0, 1, n).astype(np.float32)
        max_out = np.int64(rng.integers(0, 40))
        iou = np.float32(rng.uniform(0.1, 0.9))
        thr = np.float32(rng.uniform(0, 0.5))
        sel, nb, flat, first = g(boxes, scores, max_out, iou, thr)
        (want_idx,) = sess.run(None, {"b": boxes[None], "s": scores[None, None], "m": np.array([max_out]),
                                      "i": np.array([iou]), "t": np.array([thr])})
        want = boxes[want_idx[:, 2]]
        np.testing.assert_array_equal(sel, want)
        assert sel.dtype == np.float32 and int(nb) == len(want)
        np.testing.assert_array_equal(flat, want.reshape(-1))
        np.testing.assert_array_equal(first, want[: len(want) // 2])
        total += len(want)
    assert total > 100  # the inputs did select boxes


@pytest.mark.parametrize("center", [0, 1])
@pytest.mark.parametrize("b,c,n", [(1, 1, 30), (2, 3, 25), (1, 2, 0)])
def test_nms_batched_onnx_layout(center: int, b: int, c: int, n: int) -> None:
    boxes = random_boxes(RNG, (b, n), center)
    scores = RNG.uniform(0, 1, (b, c, n)).astype(np.float32)
    args = [boxes, scores, np.array([5], np.int64), np.array([0.4], np.float32), np.array([0.2], np.float32)]
    got, nb = apply_op("NonMaxSuppression", *args, center_point_box=center)
    (want,) = ort_one("NonMaxSuppression", args, 1, center_point_box=center)
    np.testing.assert_array_equal(got, want)
    assert int(nb) == len(want)


def test_nms_ties_keep_lower_index_first() -> None:
    boxes = np.array([[0, 0, 1, 1], [5, 5, 6, 6], [0, 0, 1, 1]], np.float32)
    scores = np.array([0.5, 0.5, 0.5], np.float32)
    args = [boxes[None], scores[None, None], np.array([3], np.int64), np.array([0.5], np.float32),
            np.array([0.0], np.float32)]
    got, _ = apply_op("NonMaxSuppression", *args)
    np.testing.assert_array_equal(got, ort_one("NonMaxSuppression", args, 1)[0])


def test_nms_rule_errors() -> None:
    f = np.float32
    with pytest.raises(OpTypeError, match=r"boxes must be \[N, 4\] or \[B, N, 4\]"):
        apply_op("NonMaxSuppression", np.zeros((3, 5), f), np.zeros(3, f), np.int64(1), f(0.5), f(0))
    with pytest.raises(OpTypeError, match="3 boxes but 4 scores"):
        apply_op("NonMaxSuppression", np.zeros((3, 4), f), np.zeros(4, f), np.int64(1), f(0.5), f(0))
    with pytest.raises(OpTypeError, match="scores are f64, boxes are f32"):
        apply_op("NonMaxSuppression", np.zeros((3, 4), f), np.zeros(3), np.int64(1), f(0.5), f(0))


# --- NonZero, Unique, BooleanMask, TopK ------------------------------------------------------
@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.bool_])
@pytest.mark.parametrize("shape", [(5,), (3, 4), (2, 0, 3)])
def test_nonzero(dtype: type, shape: tuple) -> None:
    x = (RNG.integers(0, 2, size=shape) * RNG.integers(1, 5, size=shape)).astype(dtype)
    idx, n = apply_op("NonZero", x)
    (want,) = ort_one("NonZero", [x], 1, )
    np.testing.assert_array_equal(idx, want)
    assert int(n) == want.shape[1]


@pytest.mark.parametrize("sorted_", [True, False])
@pytest.mark.parametrize("dtype", [np.float32, np.int64])
@pytest.mark.parametrize("shape", [(10,), (3, 4), (0,)])
def test_unique(sorted_: bool, dtype: type, shape: tuple) -> None:
    x = RNG.integers(0, 5, size=shape).astype(dtype)
    got = apply_op("Unique", x, sorted=sorted_)
    want = ort_one("Unique", [x.reshape(-1)], 4, sorted=int(sorted_))
    for g_, w in zip(got[:4], want):
        np.testing.assert_array_equal(g_, w)
    assert int(got[4]) == len(want[0])


@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("sorted_", [True, False])
def test_unique_slices_against_numpy(axis: int, sorted_: bool) -> None:
    x = RNG.integers(0, 2, size=(4, 3, 2)).astype(np.float32)
    vals, first, inverse, counts, u = apply_op("UniqueSlices", x, axis=axis, sorted=sorted_)
    want_v, want_f, want_i, want_c = np.unique(x, axis=axis, return_index=True, return_inverse=True,
                                               return_counts=True)
    order = np.arange(len(want_f)) if sorted_ else np.argsort(want_f, kind="stable")
    np.testing.assert_array_equal(vals, np.take(want_v, order, axis=axis))
    np.testing.assert_array_equal(first, want_f[order])
    np.testing.assert_array_equal(counts, want_c[order])
    np.testing.assert_array_equal(np.take(vals, inverse, axis=axis), x)  # inverse rebuilds x
    assert int(u) == len(want_f)


@pytest.mark.parametrize("xs,ms", [((6,), (6,)), ((3, 4), (3,)), ((3, 4), (3, 4)), ((2, 3, 2), (2, 3)), ((0, 2), (0,))])
@pytest.mark.parametrize("dtype", [np.float32, np.int64])
def test_boolean_mask(xs: tuple, ms: tuple, dtype: type) -> None:
    torch = require("torch", "torch")
    x = RNG.integers(-5, 5, size=xs).astype(dtype)
    m = RNG.random(ms) > 0.5
    out, k = apply_op("BooleanMask", x, m)
    want = torch.from_numpy(x)[torch.from_numpy(m)].numpy()
    np.testing.assert_array_equal(out, want)
    assert out.dtype == dtype and int(k) == len(want)


@pytest.mark.parametrize("largest", [True, False])
@pytest.mark.parametrize("axis", [-1, 0])
@pytest.mark.parametrize("dtype", [np.float32, np.int64])
@pytest.mark.parametrize("as_const", [True, False])
def test_topk(largest: bool, axis: int, dtype: type, as_const: bool) -> None:
    x = RNG.integers(0, 6, size=(5, 7)).astype(dtype)  # many ties
    k = np.int64(3)
    vals, idx, kk = apply_op("TopK", x, k, axis=axis, largest=largest, const=(1,) if as_const else ())
    want_v, want_i = ort_one("TopK", [x, np.array([3], np.int64)], 2, axis=axis, largest=int(largest))
    np.testing.assert_array_equal(vals, want_v)
    np.testing.assert_array_equal(idx, want_i)
    assert int(kk) == 3


def test_topk_k_from_shape_is_symbolic() -> None:
    g = Graph("t", [TensorType("f32", (N,))], ["x"])
    (x,) = g.args
    e = g.start_block
    two = g.add("Constant", [], e, {"value": np.array(2, np.int64)})
    k = g.add("FloorDiv", [g.add("DimSize", [x], e, {"axis": 0}), two], e)
    t = g.add("TopK", [x, k], e)
    vals, kk = g.add("Proj", [t], e, {"num": 0}), g.add("Proj", [t], e, {"num": 2})
    g.end_block.append_input(g.add("Return", [vals, kk], e))
    infer_shapes(g)
    assert vals.type == TensorType("f32", (sympy.floor(N / 2),))
    x_val = RNG.standard_normal(9).astype(np.float32)
    got, n = g(x_val)
    np.testing.assert_array_equal(got, np.sort(x_val)[::-1][:4])


def test_topk_static_k_out_of_range() -> None:
    with pytest.raises(OpTypeError, match="k = 9 is out of range"):
        apply_op("TopK", np.zeros((3, 4), np.float32), np.int64(9), const=(1,))


def test_nms_example_prints_and_parses_with_symbols() -> None:
    from nexus.ir import parse, print_graph, structurally_equal, verify

    g, _ = nms_example()
    infer_shapes(g)
    verify(g)
    text = print_graph(g)
    assert "f32[4*nb" in text and structurally_equal(g, parse(text))


def test_nms_adversarial_ties_touching_and_empty_boxes_match_onnxruntime() -> None:
    """Integer corners: equal scores, touching edges, zero-area and flipped boxes."""
    onnx = require("onnx", "onnx")
    from onnx import TensorProto, helper

    sess = ort_session(
        [helper.make_node("NonMaxSuppression", ["b", "s", "m", "i", "t"], ["sel"])],
        [helper.make_tensor_value_info("b", TensorProto.FLOAT, [1, None, 4]),
         helper.make_tensor_value_info("s", TensorProto.FLOAT, [1, 1, None]),
         helper.make_tensor_value_info("m", TensorProto.INT64, [1]),
         helper.make_tensor_value_info("i", TensorProto.FLOAT, [1]),
         helper.make_tensor_value_info("t", TensorProto.FLOAT, [1])],
        [onnx.ValueInfoProto(name="sel")])
    rng = np.random.default_rng(5)
    for _ in range(100):
        n = int(rng.integers(0, 200))
        a = rng.integers(0, 20, (n, 2)).astype(np.float32)
        boxes = np.concatenate([a, a + rng.integers(-5, 6, (n, 2)).astype(np.float32)], 1)
        scores = (rng.integers(0, 10, n) / 10).astype(np.float32)
        mo = np.int64(rng.integers(0, 50))
        iou, thr = np.float32(rng.choice([0.0, 0.3, 0.5, 1.0])), np.float32(rng.choice([0.0, 0.2]))
        got, nb = apply_op("NonMaxSuppression", boxes, scores, mo, iou, thr)
        (want,) = sess.run(None, {"b": boxes[None], "s": scores[None, None], "m": np.array([mo]),
                                  "i": np.array([iou]), "t": np.array([thr])})
        np.testing.assert_array_equal(got, want[:, 2])
        assert int(nb) == len(want)
