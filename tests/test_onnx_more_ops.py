"""ONNX ops the official suite asked for beyond the core set (issue 29): each imported
model runs on the python backend and equals ONNX Runtime (onnx.reference where ONNX
Runtime lacks the op), on inputs other than the suite's; the new ops also export back
(import -> export -> ONNX Runtime)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import nexus as nx
from nexus.testing.extras import require

onnx = require("onnx", "onnx")
ort = require("onnxruntime", "onnx")
from onnx import TensorProto as T  # noqa: E402
from onnx import helper as h  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

RNG = np.random.default_rng(29)
ONNX_OF = {np.dtype(np.float32): T.FLOAT, np.dtype(np.float64): T.DOUBLE, np.dtype(np.int64): T.INT64,
           np.dtype(np.int32): T.INT32, np.dtype(np.bool_): T.BOOL, np.dtype(np.uint8): T.UINT8,
           np.dtype(np.int8): T.INT8, np.dtype(np.uint16): T.UINT16, np.dtype(np.int16): T.INT16}


def one_node(op: str, inputs: dict[str, np.ndarray], n_out: int = 1, opset: int = 22,
             consts: dict[str, Any] | None = None, **attrs: Any) -> Any:
    """A model of one ``op`` node over graph inputs named and typed after ``inputs``
    (an empty name skips an optional input), and initializers ``consts``."""
    consts = consts or {}
    names = list(inputs) + list(consts)
    ins = [h.make_tensor_value_info(k, ONNX_OF[v.dtype], list(v.shape)) for k, v in inputs.items()]
    first = next(iter({**inputs, **consts}.values()))
    out_types = attrs.pop("_out", [ONNX_OF[np.asarray(first).dtype]] * n_out)
    outs = [h.make_tensor_value_info(f"y{i}", t, None) for i, t in enumerate(out_types)]
    inits = [onnx.numpy_helper.from_array(np.asarray(v), k) for k, v in consts.items()]
    node = h.make_node(op, [n for n in attrs.pop("_order", names)], [f"y{i}" for i in range(n_out)], **attrs)
    return h.make_model(h.make_graph([node], "m", ins, outs, inits), opset_imports=[h.make_opsetid("", opset)])


def check(m: Any, inputs: dict[str, np.ndarray], oracle: str = "ort", rtol: float = 1e-5, atol: float = 1e-6,
          export: bool = True) -> nx.Graph:
    g = nx.from_onnx(m)
    nx.verify(g)
    got = g(*inputs.values())
    got = list(got) if isinstance(got, tuple) else [got]
    if oracle == "ort":
        want = ort.InferenceSession(m.SerializeToString()).run(None, inputs)
    else:
        want = ReferenceEvaluator(m).run(None, inputs)
    assert len(got) == len(want)
    for a, b in zip(got, want):
        assert np.asarray(a).dtype == b.dtype
        np.testing.assert_allclose(np.asarray(a), b, rtol=rtol, atol=atol)
    if export:
        e = nx.to_onnx(g)
        back = ort.InferenceSession(e.SerializeToString()).run(None, dict(zip([i.name for i in e.graph.input],
                                                                             inputs.values())))
        for a, b in zip(back, want):
            np.testing.assert_allclose(a, b, rtol=rtol, atol=atol)
    return g


# --- compositions at import ------------------------------------------------------------------
@pytest.mark.parametrize("shape,slope", [((2, 3, 4), (3,)), ((2, 3, 4, 5), (3,)), ((1, 5, 2, 2, 2), (5,))])
def test_prelu_legacy_per_channel_slope(shape: tuple[int, ...], slope: tuple[int, ...]) -> None:
    x = RNG.normal(size=shape).astype(np.float32)
    s = RNG.normal(size=slope).astype(np.float32)
    m = one_node("PRelu", {"x": x}, opset=6, consts={"s": s})
    g = nx.from_onnx(m)
    want = np.where(x >= 0, x, x * s.reshape((-1,) + (1,) * (len(shape) - 2)))
    np.testing.assert_allclose(g(x), want, rtol=1e-6)


def test_prelu_numpy_broadcast_is_kept_where_it_applies() -> None:
    x = RNG.normal(size=(2, 3, 3)).astype(np.float32)
    s = RNG.normal(size=(3,)).astype(np.float32)  # [3] on [.., 3, 3]: the last axis (opset 9 and later)
    check(one_node("PRelu", {"x": x, "s": s}, opset=16), {"x": x, "s": s})


@pytest.mark.parametrize("axis", [None, 0, 1, -1])
def test_compress(axis: int | None) -> None:
    x = RNG.normal(size=(4, 5)).astype(np.float32)
    cond = np.array([1, 0, 1, 1], bool) if axis == 0 else np.array([0, 1, 1, 0, 1], bool)
    attrs = {} if axis is None else {"axis": axis}
    check(one_node("Compress", {"x": x, "c": cond}, **attrs), {"x": x, "c": cond})


def test_compress_with_a_short_condition() -> None:
    x = np.arange(12, dtype=np.int64).reshape(3, 4)
    cond = np.array([0, 1], bool)  # shorter than the axis: the rest is left out
    check(one_node("Compress", {"x": x, "c": cond}, axis=1), {"x": x, "c": cond})


@pytest.mark.parametrize("axis,reverse,exclusive", [(0, 0, 0), (1, 1, 0), (1, 0, 1), (-1, 1, 1), (0, 1, 1)])
@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.float64])
def test_cumprod(axis: int, reverse: int, exclusive: int, dtype: Any) -> None:
    x = RNG.integers(-3, 4, size=(3, 4)).astype(dtype)
    check(one_node("CumProd", {"x": x}, consts={"axis": np.array(axis, np.int64)}, reverse=reverse,
                   exclusive=exclusive), {"x": x}, oracle="ref")


@pytest.mark.parametrize("time_axis", [0, 1])
def test_reverse_sequence(time_axis: int) -> None:
    x = RNG.normal(size=(5, 3, 2) if time_axis == 0 else (3, 5, 2)).astype(np.float32)
    lens = np.array([5, 1, 3], np.int64)
    check(one_node("ReverseSequence", {"x": x, "lens": lens}, time_axis=time_axis, batch_axis=1 - time_axis),
          {"x": x, "lens": lens})


@pytest.mark.parametrize("batch_dims", [0, 1, 2])
def test_gather_nd_batch_dims(batch_dims: int) -> None:
    x = RNG.normal(size=(2, 3, 4, 5)).astype(np.float32)
    lead = (2, 3)[:batch_dims]
    idx = np.stack([RNG.integers(0, n, size=lead + (6,)) for n in x.shape[batch_dims:][:2]], -1).astype(np.int64)
    check(one_node("GatherND", {"x": x, "i": idx}, batch_dims=batch_dims), {"x": x, "i": idx})


def test_range_takes_one_element_tensors() -> None:
    """ONNX function bodies (AffineGrid's) hand Range an If's [1] outputs."""
    n = np.array([4], np.int64)
    m = one_node("Range", {}, consts={"a": np.array(0, np.int64), "n": n, "d": np.array(1, np.int64)})
    np.testing.assert_array_equal(nx.from_onnx(m)(), np.arange(4))


# --- ScatterElements, Unique, TensorScatter ----------------------------------------------------
@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max", "min"])
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_scatter_elements(reduction: str, axis: int) -> None:
    x = RNG.normal(size=(4, 5)).astype(np.float32)
    n = x.shape[axis]
    # Repeated indices only where a reduction says how they combine; negatives count from the end.
    idx = (RNG.integers(-n, n, size=(3, 4)) if reduction != "none"
           else np.stack([RNG.permutation(np.arange(-n, 0) if k % 2 else np.arange(n))[:3 if axis == 0 else 4]
                          for k in range(3 if axis != 0 else 4)], 1 if axis == 0 else 0)).astype(np.int64)
    upd = RNG.normal(size=idx.shape).astype(np.float32)
    check(one_node("ScatterElements", {"x": x, "i": idx, "u": upd}, axis=axis, reduction=reduction),
          {"x": x, "i": idx, "u": upd})


def test_scatter_before_opset_11() -> None:
    x = np.zeros((3, 3), np.float32)
    idx = np.array([[1, 0, 2], [0, 2, 1]], np.int64)
    upd = np.arange(6, dtype=np.float32).reshape(2, 3)
    check(one_node("Scatter", {"x": x, "i": idx, "u": upd}, opset=10, axis=0), {"x": x, "i": idx, "u": upd},
          export=False)


@pytest.mark.parametrize("axis", [None, 0, 1, -1])
@pytest.mark.parametrize("is_sorted", [1, 0])
def test_unique(axis: int | None, is_sorted: int) -> None:
    x = RNG.integers(0, 2, size=(5, 3, 2)).astype(np.float32)
    attrs = {} if axis is None else {"axis": axis}
    check(one_node("Unique", {"x": x}, n_out=4, _out=[T.FLOAT, T.INT64, T.INT64, T.INT64], sorted=is_sorted,
                   **attrs), {"x": x})


def test_unique_length_is_a_symbol_of_the_graph() -> None:
    g = nx.from_onnx(one_node("Unique", {"x": np.zeros(6, np.int64)}, n_out=1))
    assert "u" in nx.print_graph(g)
    np.testing.assert_array_equal(g(np.array([3, 1, 3, 2, 1, 7])), [1, 2, 3, 7])
    np.testing.assert_array_equal(g(np.array([5, 5, 5, 5, 5, 5])), [5])


@pytest.mark.parametrize("mode", ["linear", "circular"])
@pytest.mark.parametrize("with_indices", [True, False])
def test_tensor_scatter(mode: str, with_indices: bool) -> None:
    past = RNG.normal(size=(2, 3, 6, 4)).astype(np.float32)
    upd = RNG.normal(size=(2, 3, 3, 4)).astype(np.float32)
    ins = {"p": past, "u": upd}
    if with_indices:
        ins["w"] = np.array([1, 3 if mode == "linear" else 5], np.int64)
    check(one_node("TensorScatter", ins, opset=24, mode=mode), ins, oracle="ref", export=False)


# --- integer convolution, MaxUnpool ------------------------------------------------------------
@pytest.mark.parametrize("pads", [[0, 0, 0, 0], [1, 0, 1, 2]])
def test_conv_integer(pads: list[int]) -> None:
    x = RNG.integers(0, 256, size=(1, 2, 5, 5)).astype(np.uint8)
    w = RNG.integers(0, 256, size=(3, 2, 3, 3)).astype(np.uint8)
    ins = {"x": x, "w": w, "xz": np.array(7, np.uint8), "wz": np.array(130, np.uint8)}
    m = one_node("ConvInteger", ins, pads=pads, _out=[T.INT32])
    g = nx.from_onnx(m)
    # ORT refuses pads on ConvInteger: the oracle is the integer convolution in int64.
    xi, wi = x.astype(np.int64) - 7, w.astype(np.int64) - 130
    xp = np.pad(xi, [(0, 0), (0, 0), (pads[0], pads[2]), (pads[1], pads[3])])
    want = np.zeros((1, 3, xp.shape[2] - 2, xp.shape[3] - 2), np.int64)
    for i in range(want.shape[2]):
        for j in range(want.shape[3]):
            want[0, :, i, j] = np.einsum("chw,mchw->m", xp[0, :, i:i + 3, j:j + 3], wi)
    got = g(*ins.values())
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("per_channel", [False, True])
def test_qlinear_conv(per_channel: bool) -> None:
    x = RNG.integers(0, 256, size=(1, 2, 6, 6)).astype(np.uint8)
    w = RNG.integers(0, 256, size=(4, 2, 3, 3)).astype(np.uint8)
    ws = (RNG.random(4) * 0.01 + 0.001).astype(np.float32) if per_channel else np.array(0.004, np.float32)
    wz = np.full(4, 128, np.uint8) if per_channel else np.array(128, np.uint8)
    ins = {"x": x, "xs": np.array(0.02, np.float32), "xz": np.array(3, np.uint8), "w": w, "ws": ws, "wz": wz,
           "ys": np.array(0.5, np.float32), "yz": np.array(100, np.uint8),
           "b": RNG.integers(-500, 500, size=4).astype(np.int32)}
    check(one_node("QLinearConv", ins, pads=[1, 1, 1, 1], _out=[T.UINT8]), ins, rtol=0, atol=1, export=False)


@pytest.mark.parametrize("with_shape", [False, True])
def test_max_unpool_inverts_max_pool(with_shape: bool) -> None:
    x = RNG.normal(size=(2, 3, 6, 6)).astype(np.float32)
    pool = h.make_node("MaxPool", ["x"], ["p", "i"], kernel_shape=[2, 2], strides=[2, 2])
    ins = ["p", "i"] + (["s"] if with_shape else [])
    unpool = h.make_node("MaxUnpool", ins, ["y"], kernel_shape=[2, 2], strides=[2, 2])
    inits = [onnx.numpy_helper.from_array(np.array([2, 3, 7, 7], np.int64), "s")] if with_shape else []
    m = h.make_model(h.make_graph([pool, unpool], "m", [h.make_tensor_value_info("x", T.FLOAT, list(x.shape))],
                                  [h.make_tensor_value_info("y", T.FLOAT, None)], inits),
                     opset_imports=[h.make_opsetid("", 22)])
    got = nx.from_onnx(m)(x)
    want = ReferenceEvaluator(m).run(None, {"x": x})[0]
    np.testing.assert_array_equal(got, want)
    assert got.shape == ((2, 3, 7, 7) if with_shape else x.shape)


# --- GridSample, DeformConv, Col2Im ------------------------------------------------------------
@pytest.mark.parametrize("mode", ["linear", "nearest", "cubic"])
@pytest.mark.parametrize("padding_mode", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("align_corners", [0, 1])
def test_grid_sample_2d(mode: str, padding_mode: str, align_corners: int) -> None:
    x = RNG.normal(size=(2, 3, 5, 6)).astype(np.float32)
    grid = RNG.uniform(-1.6, 1.6, size=(2, 4, 7, 2)).astype(np.float32)  # some taps fall outside
    ins = {"x": x, "g": grid}
    # Cubic with border padding: ONNX's reference clamps the position before taking the taps,
    # ONNX Runtime (as PyTorch) only the taps; Nexus follows the reference.
    oracle = "ref" if (mode, padding_mode) == ("cubic", "border") else "ort"
    check(one_node("GridSample", ins, mode=mode, padding_mode=padding_mode, align_corners=align_corners), ins,
          oracle=oracle, rtol=1e-4, atol=1e-5, export=oracle == "ort")


@pytest.mark.parametrize("mode", ["linear", "nearest"])
@pytest.mark.parametrize("padding_mode", ["zeros", "border", "reflection"])
def test_grid_sample_3d(mode: str, padding_mode: str) -> None:
    x = RNG.normal(size=(1, 2, 3, 4, 5)).astype(np.float32)
    grid = RNG.uniform(-1.3, 1.3, size=(1, 2, 3, 4, 3)).astype(np.float32)
    ins = {"x": x, "g": grid}
    check(one_node("GridSample", ins, mode=mode, padding_mode=padding_mode), ins, oracle="ref", rtol=1e-4,
          atol=1e-5)


def test_grid_sample_opset_16_mode_names() -> None:
    x = RNG.normal(size=(1, 1, 4, 4)).astype(np.float32)
    grid = RNG.uniform(-1, 1, size=(1, 3, 3, 2)).astype(np.float32)
    ins = {"x": x, "g": grid}
    check(one_node("GridSample", ins, opset=16, mode="bicubic"), ins, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("with_mask", [False, True])
@pytest.mark.parametrize("group,offset_group", [(1, 1), (2, 1), (1, 2), (2, 2)])
def test_deform_conv(with_mask: bool, group: int, offset_group: int) -> None:
    x = RNG.normal(size=(2, 4, 6, 5)).astype(np.float32)
    w = RNG.normal(size=(6, 4 // group, 3, 2)).astype(np.float32)
    out = (5, 4)  # 6 + 1 - 3 + 1 rows, 5 - 2 + 1 columns
    ins = {"x": x, "w": w, "off": (RNG.normal(size=(2, offset_group * 6 * 2) + out) * 1.5).astype(np.float32),
           "b": RNG.normal(size=6).astype(np.float32)}
    if with_mask:
        ins["mask"] = RNG.random(size=(2, offset_group * 6) + out).astype(np.float32)
    check(one_node("DeformConv", ins, pads=[1, 0, 0, 0], group=group, offset_group=offset_group), ins,
          rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("image,block,strides,pads,dil", [
    ([5, 5], [2, 2], [1, 1], [0, 0, 0, 0], [1, 1]),
    ([6, 7], [3, 2], [2, 1], [1, 0, 1, 1], [1, 2]),
    ([4, 4, 3], [2, 2, 2], [1, 2, 1], [0, 0, 0, 0, 0, 0], [1, 1, 1]),
])
def test_col2im(image: list[int], block: list[int], strides: list[int], pads: list[int], dil: list[int]) -> None:
    n = len(image)
    blocks = [(image[d] + pads[d] + pads[n + d] - dil[d] * (block[d] - 1) - 1) // strides[d] + 1 for d in range(n)]
    x = RNG.normal(size=(2, 3 * int(np.prod(block)), int(np.prod(blocks)))).astype(np.float32)
    m = one_node("Col2Im", {"x": x}, consts={"i": np.array(image, np.int64), "b": np.array(block, np.int64)},
                 strides=strides, pads=pads, dilations=dil)
    check(m, {"x": x}, oracle="ort" if n == 2 else "ref")


def test_col2im_undoes_im2col_of_torch() -> None:
    torch = require("torch", "torch")
    img = torch.randn(1, 2, 6, 5, dtype=torch.float64)
    cols = torch.nn.functional.unfold(img, (2, 3), dilation=1, padding=1, stride=(2, 1))
    want = torch.nn.functional.fold(cols, (6, 5), (2, 3), dilation=1, padding=1, stride=(2, 1)).numpy()
    got = nx.from_onnx(one_node("Col2Im", {"x": cols.numpy()}, consts={"i": np.array([6, 5], np.int64),
                                                                    "b": np.array([2, 3], np.int64)},
                                strides=[2, 1], pads=[1, 1, 1, 1]))(cols.numpy())
    np.testing.assert_allclose(got, want, rtol=1e-12)


# --- Scan before opset 9 -------------------------------------------------------------------------
def scan8_model(with_lens: bool, direction: int) -> Any:
    """Scan-8: a running sum state [2] and its stacked values over x [B, T, 2]."""
    body = h.make_graph([h.make_node("Add", ["s_in", "x_t"], ["s_out"]), h.make_node("Identity", ["s_out"], ["y_t"])],
                        "body", [h.make_tensor_value_info(n, T.FLOAT, [2]) for n in ("s_in", "x_t")],
                        [h.make_tensor_value_info(n, T.FLOAT, [2]) for n in ("s_out", "y_t")])
    node = h.make_node("Scan", ["lens" if with_lens else "", "s0", "x"], ["s", "y"], body=body, num_scan_inputs=1,
                       directions=[direction])
    ins = ([h.make_tensor_value_info("lens", T.INT64, [3])] if with_lens else []) + [
        h.make_tensor_value_info("s0", T.FLOAT, [3, 2]), h.make_tensor_value_info("x", T.FLOAT, [3, 4, 2])]
    return h.make_model(h.make_graph([node], "m", ins, [h.make_tensor_value_info("s", T.FLOAT, [3, 2]),
                                                        h.make_tensor_value_info("y", T.FLOAT, [3, 4, 2])]),
                        opset_imports=[h.make_opsetid("", 8)])


@pytest.mark.parametrize("with_lens", [False, True])
@pytest.mark.parametrize("direction", [0, 1])
def test_scan_before_opset_9(with_lens: bool, direction: int) -> None:
    ins = {"s0": RNG.normal(size=(3, 2)).astype(np.float32), "x": RNG.normal(size=(3, 4, 2)).astype(np.float32)}
    if with_lens:
        ins = {"lens": np.array([4, 1, 3], np.int64), **ins}
    check(scan8_model(with_lens, direction), ins, export=False)


# --- axes known only at run time: one graph for every value ---------------------------------------
def axes_model(op: str, x: np.ndarray, n_axes: int | None, opset: int = 18, extra: dict[str, np.ndarray] | None = None,
               **attrs: Any) -> Any:
    """``op`` with its axes (or axis) as graph input "a" ([n_axes], or a scalar for None)."""
    a = h.make_tensor_value_info("a", T.INT64, [] if n_axes is None else [n_axes])
    ins = [h.make_tensor_value_info("x", ONNX_OF[x.dtype], list(x.shape)), a]
    inits = [onnx.numpy_helper.from_array(v, k) for k, v in (extra or {}).items()]
    names = attrs.pop("_order", ["x", "a"])
    node = h.make_node(op, names, ["y"], **attrs)
    return h.make_model(h.make_graph([node], "m", ins, [h.make_tensor_value_info("y", ONNX_OF[x.dtype], None)],
                                     inits), opset_imports=[h.make_opsetid("", opset)])


def runs_for_each(m: Any, x: np.ndarray, values: list[Any], rtol: float = 1e-5) -> nx.Graph:
    """One imported graph, run for each axes value, equals ONNX Runtime."""
    g = nx.from_onnx(m)
    nx.verify(g)
    sess = ort.InferenceSession(m.SerializeToString())
    for v in values:
        a = np.asarray(v, np.int64)
        want = sess.run(None, {"x": x, "a": a})[0]
        got = np.asarray(g(x, a))
        assert got.shape == want.shape, (v, got.shape, want.shape)
        np.testing.assert_allclose(got, want, rtol=rtol, atol=1e-6)
    return g


X4 = RNG.normal(size=(2, 3, 4, 5)).astype(np.float32)


def test_unsqueeze_at_run_time_axes() -> None:
    x = RNG.normal(size=(3, 4)).astype(np.float32)
    runs_for_each(axes_model("Unsqueeze", x, 2), x, [[0, 3], [-1, 1], [2, 0]])


def test_squeeze_at_run_time_axes() -> None:
    x = RNG.normal(size=(1, 3, 1, 4)).astype(np.float32)
    runs_for_each(axes_model("Squeeze", x, 1), x, [[0], [2], [-2]])


@pytest.mark.parametrize("op", ["ReduceSum", "ReduceMax", "ReduceMean", "ReduceLogSumExp", "ReduceL2"])
@pytest.mark.parametrize("keepdims", [0, 1])
def test_reductions_over_run_time_axes(op: str, keepdims: int) -> None:
    runs_for_each(axes_model(op, X4, 2, keepdims=keepdims), X4, [[0, 2], [3, -3], [1, 3]], rtol=1e-4)


def test_a_run_time_axis_of_size_zero_reduces_to_the_identity() -> None:
    x = np.zeros((2, 0, 3), np.float32)
    runs_for_each(axes_model("ReduceSum", x, 1, keepdims=1), x, [[1], [2]])


@pytest.mark.parametrize("op", ["CumSum", "CumProd"])
def test_cumulative_along_a_run_time_axis(op: str) -> None:
    x = RNG.integers(1, 4, size=(3, 4, 2)).astype(np.float32)
    m = axes_model(op, x, None, opset=26 if op == "CumProd" else 18, exclusive=1, reverse=1)
    g = nx.from_onnx(m)
    ref = ReferenceEvaluator(m)
    for a in (0, 2, -2):
        v = np.array(a, np.int64)
        np.testing.assert_allclose(g(x, v), ref.run(None, {"x": x, "a": v})[0], rtol=1e-6)


def test_pad_at_run_time_axes() -> None:
    x = RNG.normal(size=(2, 3, 4)).astype(np.float32)
    m = axes_model("Pad", x, 2, extra={"p": np.array([1, 0, 2, 3], np.int64)}, _order=["x", "p", "", "a"])
    runs_for_each(m, x, [[0, 2], [-1, 1]])


def test_run_time_axes_on_other_backends_run_or_refuse_by_name() -> None:
    """XLA and LLVM give NumPy's answer for the composed graph, or refuse it naming a node."""
    x = RNG.normal(size=(3, 4)).astype(np.float32)
    g = nx.from_onnx(axes_model("Unsqueeze", x, 1))
    a = np.array([1], np.int64)
    for backend in ("xla", "llvm"):
        try:
            exe = nx.compile(g, backend=backend)
            got = exe(x, a)
        except ImportError:
            continue
        except Exception as e:  # noqa: BLE001  (a refusal must name what it refuses)
            assert "%" in str(e) or "op" in str(e), str(e)
            continue
        np.testing.assert_array_equal(np.asarray(got), x[:, None, :])


def test_dropout_training_mode_at_run_time() -> None:
    x = RNG.normal(size=(3, 4)).astype(np.float32)
    node = h.make_node("Dropout", ["x", "r", "t"], ["y", "mask"], seed=3)
    m = h.make_model(h.make_graph([node], "m", [h.make_tensor_value_info("x", T.FLOAT, [3, 4]),
                                                h.make_tensor_value_info("t", T.BOOL, [])],
                                  [h.make_tensor_value_info("y", T.FLOAT, None),
                                   h.make_tensor_value_info("mask", T.BOOL, None)],
                                  [onnx.numpy_helper.from_array(np.array(0.4, np.float32), "r")]),
                     opset_imports=[h.make_opsetid("", 18)])
    g = nx.from_onnx(m)
    ref = ReferenceEvaluator(m)
    for t in (np.array(False), np.array(True)):
        got, want = g(x, t), ref.run(None, {"x": x, "t": t})
        np.testing.assert_allclose(got[0], want[0], rtol=1e-6)
        np.testing.assert_array_equal(got[1], want[1])


# --- BitShift's out-of-range counts, BitCast, Det, MatMulInteger ----------------------------------
@pytest.mark.parametrize("direction", ["LEFT", "RIGHT"])
@pytest.mark.parametrize("dtype", [np.int8, np.int32, np.uint8])
def test_bitshift_counts_outside_the_width(direction: str, dtype: Any) -> None:
    info = np.iinfo(dtype)
    x = RNG.integers(info.min, info.max, size=12, endpoint=True).astype(dtype)
    bits = info.bits
    y = np.clip(np.array([-1, 0, 1, bits - 1, bits, bits + 3, 2, 3, -bits, 5, 7, 1]), info.min, info.max).astype(dtype)
    got = nx.from_onnx(one_node("BitShift", {"x": x, "y": y}, opset=22, direction=direction))(x, y)
    # The oracle: the shift on unbounded Python ints, wrapped to the width.
    want = []
    for a, b in zip(x.tolist(), y.tolist()):
        if b < 0 or b >= bits:
            want.append(0 if direction == "LEFT" or a >= 0 else -1)
        else:
            want.append(a << b if direction == "LEFT" else a >> b)
    np.testing.assert_array_equal(got, np.array(want).astype(np.int64).astype(dtype))


@pytest.mark.parametrize("src,dst", [(np.float32, T.INT32), (np.int64, T.DOUBLE), (np.uint16, T.INT16),
                                     (np.bool_, T.UINT8)])
def test_bitcast(src: Any, dst: int) -> None:
    x = (RNG.normal(size=(2, 3)) * 1000).astype(src) if src != np.bool_ else RNG.random((2, 3)) > 0.5
    got = nx.from_onnx(one_node("BitCast", {"x": x}, opset=26, to=dst, _out=[dst]))(x)
    want = x.view(onnx.helper.tensor_dtype_to_np_dtype(dst))
    np.testing.assert_array_equal(got, want)
    assert got.shape == x.shape


def test_bitcast_refuses_different_widths() -> None:
    with pytest.raises(Exception, match="width"):
        nx.from_onnx(one_node("BitCast", {"x": np.zeros(3, np.float32)}, opset=26, to=T.INT64, _out=[T.INT64]))


def test_det() -> None:
    x = RNG.normal(size=(2, 3, 4, 4)).astype(np.float32)
    check(one_node("Det", {"x": x}), {"x": x}, rtol=1e-4, atol=1e-5)


def test_matmul_integer_with_per_row_zero_points() -> None:
    a = RNG.integers(0, 256, size=(4, 3)).astype(np.uint8)
    b = RNG.integers(0, 256, size=(3, 5)).astype(np.uint8)
    ins = {"a": a, "b": b, "az": np.array([1, 2, 3, 4], np.uint8), "bz": np.array(128, np.uint8)}
    got = nx.from_onnx(one_node("MatMulInteger", ins, _out=[T.INT32]))(*ins.values())
    # ONNX Runtime takes only one zero point for a: the oracle is the product in int64.
    want = (a.astype(np.int64) - ins["az"][:, None]) @ (b.astype(np.int64) - 128)
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, want)


# --- RoiAlign ----------------------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["avg", "max"])
@pytest.mark.parametrize("ctm", ["half_pixel", "output_half_pixel"])
@pytest.mark.parametrize("sampling_ratio", [0, 2])
def test_roi_align(mode: str, ctm: str, sampling_ratio: int) -> None:
    x = RNG.normal(size=(2, 3, 10, 12)).astype(np.float32)
    rois = np.array([[0, 0, 9, 9], [1.5, 2.2, 7.1, 5.3], [-2, -1, 3, 4], [10, 8, 14, 12], [4, 4, 4, 4]], np.float32)
    ins = {"x": x, "rois": rois, "b": np.array([0, 1, 1, 0, 1], np.int64)}
    m = one_node("RoiAlign", ins, opset=16, mode=mode, coordinate_transformation_mode=ctm, output_height=3,
                 output_width=4, sampling_ratio=sampling_ratio, spatial_scale=0.9)
    check(m, ins, oracle="ref", rtol=1e-5, atol=1e-5)  # the reference sums in f32
    if mode == "avg":  # ONNX Runtime's max mode differs from the reference's (it maxes unweighted samples)
        check(m, ins, rtol=1e-4, atol=1e-5)


# --- DFT -----------------------------------------------------------------------------------------
def _complex(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    return x[..., 0] + 1j * x[..., 1] if x.shape[-1] == 2 else x[..., 0]


def _pairs(z: np.ndarray) -> np.ndarray:
    return np.stack([z.real, z.imag], axis=-1)


@pytest.mark.parametrize("opset", [17, 20])
@pytest.mark.parametrize("axis", [1, 2, -2])
@pytest.mark.parametrize("parts", [1, 2])
@pytest.mark.parametrize("inverse,onesided", [(0, 0), (1, 0), (0, 1), (1, 1)])
@pytest.mark.parametrize("length", [None, 5, 12])
def test_dft_against_numpy_fft(opset: int, axis: int, parts: int, inverse: int, onesided: int,
                               length: int | None) -> None:
    """Every mode of ONNX DFT against numpy.fft in f64 (fft, ifft, rfft's half, irfft), with
    dft_length truncating (5) or zero-padding (12) the 7- or 8-long signal axes."""
    x = RNG.normal(size=(2, 7, 8, parts)).astype(np.float32)
    consts: dict[str, np.ndarray] = {}
    order = ["x", "", ""]
    if length is not None:
        consts["n"] = np.array(length, np.int64)
        order[1] = "n"
    attrs: dict[str, Any] = {"inverse": inverse, "onesided": onesided}
    if opset >= 20:
        consts["axis"] = np.array(axis, np.int64)
        order[2] = "axis"
    else:
        attrs["axis"] = axis
    while order and not order[-1]:
        order.pop()
    m = one_node("DFT", {"x": x}, opset=opset, consts=consts, _order=order, **attrs)
    g = nx.from_onnx(m)
    got = np.asarray(g(x))
    z, ax = _complex(x), axis % 4
    m_len = x.shape[ax]
    if inverse and onesided:
        n = length if length is not None else 2 * (m_len - 1)
        want = np.fft.irfft(z, n=n, axis=ax)[..., None]
    elif inverse:
        want = _pairs(np.fft.ifft(z, n=length, axis=ax))
    else:
        f = np.fft.fft(z, n=length, axis=ax)
        if onesided:
            f = np.take(f, np.arange(f.shape[ax] // 2 + 1), axis=ax)
        want = _pairs(f)
    assert got.dtype == np.float32 and got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_dft_differentiates_and_exports() -> None:
    """The composition is MatMuls: nx.grad of sum(|fft(x)|^2) is 2 * L * x (Parseval), and it
    exports back to a model ONNX Runtime runs to the same values."""
    x = RNG.normal(size=(1, 16, 1)).astype(np.float32)
    m = one_node("DFT", {"x": x}, opset=17, axis=1)
    g = nx.from_onnx(m)
    e = nx.to_onnx(g)
    back = ort.InferenceSession(e.SerializeToString()).run(None, {e.graph.input[0].name: x})[0]
    np.testing.assert_allclose(back, _pairs(np.fft.fft(x[..., 0].astype(np.float64), axis=1)), rtol=1e-5, atol=1e-5)

    y, vjp_fn = nx.vjp(g, x)
    dx, = vjp_fn(2 * np.asarray(y))  # d sum(y * y) / dx
    np.testing.assert_allclose(np.asarray(dx), 2 * 16 * x, rtol=1e-4, atol=1e-4)


def test_dft_refuses_the_last_axis() -> None:
    x = RNG.normal(size=(2, 8, 1)).astype(np.float32)
    from nexus.frontend.onnx.data import OnnxImportError

    with pytest.raises(OnnxImportError, match="DFT: x must be"):
        nx.from_onnx(one_node("DFT", {"x": x}, opset=17, axis=2))


# --- STFT ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("parts,onesided", [(1, 1), (1, 0), (2, 0)])
@pytest.mark.parametrize("window,frame_length", [(True, None), (False, 8), (True, 8)])
def test_stft_against_numpy(parts: int, onesided: int, window: bool, frame_length: int | None) -> None:
    """Frames every 3 samples, times a Hann window, FFT'd: numpy builds the same frames."""
    x = RNG.normal(size=(2, 30, parts)).astype(np.float32)
    w = np.hanning(8 if window and frame_length else 10).astype(np.float32)
    ins = {"x": x, **({"w": w} if window else {})}
    consts = {"step": np.array(3, np.int64), **({"n": np.array(frame_length, np.int64)} if frame_length else {})}
    order = ["x", "step", "w" if window else "", "n" if frame_length else ""]
    while not order[-1]:
        order.pop()
    m = one_node("STFT", ins, opset=17, consts=consts, _order=order, onesided=onesided)
    length = frame_length or len(w)
    frames = 1 + (30 - length) // 3
    z = _complex(x)
    seg = np.stack([z[:, f * 3:f * 3 + length] for f in range(frames)], axis=1)
    if window:
        seg = seg * w[:length].astype(np.float64)
    f = np.fft.fft(seg, axis=-1)
    if onesided:
        f = f[..., :length // 2 + 1]
    got = np.asarray(nx.from_onnx(m)(*ins.values()))
    np.testing.assert_allclose(got, _pairs(f), rtol=1e-5, atol=1e-5)
    check(m, ins, oracle="ref", rtol=1e-4, atol=1e-5)


# --- MelWeightMatrix -----------------------------------------------------------------------------
@pytest.mark.parametrize("mel_bins,dft_length,out", [(8, 16, T.FLOAT), (10, 64, T.DOUBLE), (5, 31, T.FLOAT)])
def test_mel_weight_matrix(mel_bins: int, dft_length: int, out: int) -> None:
    """The sizes as initializers, the rates and edges as graph inputs: one graph, checked
    against ONNX Runtime for several sample rates and edges."""
    consts = {"m": np.array(mel_bins, np.int32), "n": np.array(dft_length, np.int32)}
    first = {"sr": np.array(16000, np.int32), "lo": np.array(20.0, np.float32), "hi": np.array(7000.0, np.float32)}
    m = one_node("MelWeightMatrix", first, opset=17, consts=consts, _order=["m", "n", "sr", "lo", "hi"],
                 _out=[out], output_datatype=out)
    g = check(m, first, export=False)  # its run-time range check has no ONNX form
    for sr, lo, hi in [(8000, 0.0, 3500.0), (22050, 133.3, 6000.5), (16000, 300.0, 301.0)]:
        ins = {"sr": np.array(sr, np.int32), "lo": np.array(lo, np.float32), "hi": np.array(hi, np.float32)}
        want = ort.InferenceSession(m.SerializeToString()).run(None, ins)[0]
        np.testing.assert_array_equal(np.asarray(g(*ins.values())), want)
    # An upper edge past the spectrum: ONNX Runtime refuses it, and so does Nexus, by name.
    bad = {"sr": np.array(8000, np.int32), "lo": np.array(0.0, np.float32), "hi": np.array(8000.0, np.float32)}
    with pytest.raises(Exception, match="out of range"):
        ort.InferenceSession(m.SerializeToString()).run(None, bad)
    from nexus.backends.base import NexusRuntimeError

    with pytest.raises(NexusRuntimeError, match="Assert .*MelWeightMatrix: the edges give mel bins outside"):
        g(*bad.values())


# --- ai.onnx.ml ----------------------------------------------------------------------------------
def ml_node(op: str, inputs: dict[str, np.ndarray], consts: dict[str, np.ndarray] | None = None,
            **attrs: Any) -> Any:
    consts = consts or {}
    ins = [h.make_tensor_value_info(k, ONNX_OF[v.dtype], list(v.shape)) for k, v in inputs.items()]
    first = next(iter(inputs.values()))
    node = h.make_node(op, list(inputs) + list(consts), ["y"], domain="ai.onnx.ml", **attrs)
    inits = [onnx.numpy_helper.from_array(v, k) for k, v in consts.items()]
    return h.make_model(h.make_graph([node], "m", ins, [h.make_tensor_value_info("y", ONNX_OF[first.dtype], None)],
                                     inits),
                        opset_imports=[h.make_opsetid("", 21), h.make_opsetid("ai.onnx.ml", 3)])


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64])
def test_binarizer(dtype: type) -> None:
    x = (RNG.normal(size=(3, 5)) * 4).astype(dtype)
    # ONNX Runtime has Binarizer for float only: the reference judges the others.
    check(ml_node("Binarizer", {"x": x}, threshold=0.5), {"x": x}, oracle="ort" if dtype == np.float32 else "ref",
          rtol=0, atol=0)


@pytest.mark.parametrize("shape,idx", [((3, 6), [4, 0, 4]), ((6,), [5, 1]), ((2, 3, 6), [[2], [3]])])
def test_array_feature_extractor(shape: tuple[int, ...], idx: list[Any]) -> None:
    x = RNG.normal(size=shape).astype(np.float32)
    check(ml_node("ArrayFeatureExtractor", {"x": x}, {"i": np.array(idx, np.int64)}), {"x": x}, rtol=0, atol=0)


def test_an_ml_op_without_rule_names_itself() -> None:
    from nexus.frontend.onnx.data import OnnxImportError

    x = np.zeros((2, 3), np.float32)
    with pytest.raises(OnnxImportError, match="ONNX op ai.onnx.ml.Normalizer has no Nexus import rule"):
        nx.from_onnx(ml_node("Normalizer", {"x": x}, norm="MAX"))


def _tree_ensemble(seed: int, aggregate: int, n_targets: int = 3, n_features: int = 4) -> tuple[Any, int]:
    """Two random full trees of depth 2 and 3: every mode, NaN tracking on some nodes."""
    rng = np.random.default_rng(seed)
    nodes: dict[str, list[Any]] = {k: [] for k in ("split", "feat", "mode", "t", "f", "tl", "fl", "miss")}
    leaf_t: list[int] = []
    leaf_w: list[float] = []
    members: list[float] = []
    roots: list[int] = []

    def leaf() -> int:
        leaf_t.append(int(rng.integers(n_targets)))
        leaf_w.append(float(rng.choice([0.0, *np.round(rng.normal(size=3) * 10, 2)])))
        return len(leaf_t) - 1

    def build(depth: int) -> int:
        i = len(nodes["split"])
        mode = int(rng.integers(7))
        for k in nodes:
            nodes[k].append(0)
        nodes["split"][i] = float(np.round(rng.normal(), 1)) if mode != 6 else float("nan")
        nodes["feat"][i], nodes["mode"][i], nodes["miss"][i] = int(rng.integers(n_features)), mode, int(rng.integers(2))
        if mode == 6:
            # ORT takes integer members only; the reference ends a set at a 0 member (a falsy value)
            members.extend([*rng.choice([-2.0, -1.0, 1.0, 2.0], size=2, replace=False).tolist(), float("nan")])
        for side, flag in (("t", "tl"), ("f", "fl")):
            if depth == 1:
                nodes[side][i], nodes[flag][i] = leaf(), 1
            else:
                nodes[side][i], nodes[flag][i] = build(depth - 1), 0
        return i

    roots = [build(2), build(3)]
    attrs = dict(nodes_splits=h.make_tensor("s", T.DOUBLE, [len(nodes["split"])], nodes["split"]),
                 nodes_featureids=nodes["feat"], nodes_modes=h.make_tensor("m", T.UINT8, [len(nodes["mode"])],
                                                                            nodes["mode"]),
                 nodes_truenodeids=nodes["t"], nodes_falsenodeids=nodes["f"], nodes_trueleafs=nodes["tl"],
                 nodes_falseleafs=nodes["fl"], nodes_missing_value_tracks_true=nodes["miss"],
                 leaf_targetids=leaf_t, leaf_weights=h.make_tensor("w", T.DOUBLE, [len(leaf_w)], leaf_w),
                 tree_roots=roots, n_targets=n_targets, aggregate_function=aggregate, post_transform=0)
    if members:
        attrs["membership_values"] = h.make_tensor("mv", T.DOUBLE, [len(members)], members)
    return attrs, n_features


@pytest.mark.parametrize("aggregate", [0, 1, 2, 3])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_tree_ensemble_against_the_reference(aggregate: int, seed: int) -> None:
    """Random trees with every comparison mode and NaN inputs, against onnx.reference and
    ONNX Runtime."""
    attrs, nf = _tree_ensemble(seed, aggregate)
    x = np.round(RNG.normal(size=(40, nf)) * 2)  # integers: ONNX Runtime tests set membership on int(x)
    x[RNG.random(x.shape) < 0.1] = np.nan
    m = ml_node("TreeEnsemble", {"x": x}, **attrs)
    m.opset_import[1].version = 5
    g = nx.from_onnx(m)
    got = np.asarray(g(x))
    want = ReferenceEvaluator(m).run(None, {"x": x})[0]
    if aggregate >= 2:  # a target no tree reaches: 0 in ONNX Runtime and Nexus, the dtype's max/min in the reference
        want = np.where(np.abs(want) == np.finfo(np.float64).max, 0.0, want)
    np.testing.assert_allclose(got, want, rtol=1e-12)
    theirs = ort.InferenceSession(m.SerializeToString()).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, theirs, rtol=1e-12)
    e = nx.to_onnx(g)  # exported as plain ONNX ops (Gather, comparisons, MatMul)
    back = ort.InferenceSession(e.SerializeToString()).run(None, {e.graph.input[0].name: x})[0]
    np.testing.assert_allclose(back, theirs, rtol=1e-12)


# --- ai.onnx.preview.training --------------------------------------------------------------------
@pytest.mark.parametrize("op,states,attrs", [
    ("Adagrad", 1, {"decay_factor": 0.1, "epsilon": 1e-6, "norm_coefficient": 0.01}),
    ("Adam", 2, {"alpha": 0.85, "beta": 0.95, "epsilon": 1e-6, "norm_coefficient": 0.01,
                 "norm_coefficient_post": 0.02}),
    ("Momentum", 1, {"alpha": 0.9, "beta": 0.5, "norm_coefficient": 0.01, "mode": "standard"}),
    ("Momentum", 1, {"alpha": 0.9, "beta": 0.5, "norm_coefficient": 0.01, "mode": "nesterov"}),
])
@pytest.mark.parametrize("step", [0, 3])
def test_optimizer_updates_against_the_reference(op: str, states: int, attrs: dict[str, Any], step: int) -> None:
    """Two tensors updated at once (the first step, t = 0, is special for Adam and Momentum)."""
    shapes = [(3, 4), (5,)]
    groups = [[RNG.normal(size=s).astype(np.float32) for s in shapes] for _ in range(2 + states)]
    if states:  # accumulated squares are non-negative
        groups[-1] = [np.abs(v) for v in groups[-1]]
    ins = {"r": np.array(0.1, np.float32), "t": np.array(step, np.int64)}
    ins.update({f"in{k}_{i}": v for k, grp in enumerate(groups) for i, v in enumerate(grp)})
    n_out = len(shapes) * (1 + states)
    node = h.make_node(op, list(ins), [f"y{i}" for i in range(n_out)], domain="ai.onnx.preview.training", **attrs)
    vis = [h.make_tensor_value_info(k, ONNX_OF[v.dtype], list(v.shape)) for k, v in ins.items()]
    outs = [h.make_tensor_value_info(f"y{i}", T.FLOAT, None) for i in range(n_out)]
    m = h.make_model(h.make_graph([node], "m", vis, outs), opset_imports=[
        h.make_opsetid("", 18), h.make_opsetid("ai.onnx.preview.training", 1)])
    got = nx.from_onnx(m)(*ins.values())
    want = ReferenceEvaluator(m).run(None, ins)
    assert len(got) == len(want)
    for a, b in zip(got, want):
        np.testing.assert_allclose(np.asarray(a), b, rtol=1e-5, atol=1e-6)
