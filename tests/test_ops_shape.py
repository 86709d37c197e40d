"""Shape and indexing ops against ONNX Runtime (one-node models) and PyTorch."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from nexus.ir.opdef import OpTypeError
from nexus.ops.check import apply_op
from nexus.testing.extras import require

RNG = np.random.default_rng(2)
DTYPES = [np.float32, np.int64, np.float16, np.bool_]


def rand(shape: tuple, dtype: type) -> np.ndarray:
    if dtype == np.bool_:
        return np.asarray(RNG.random(shape) > 0.5)
    return np.asarray(RNG.uniform(-9, 9, size=shape).astype(dtype))


def ort(op: str, inputs: list[np.ndarray], n_out: int = 1, opset: int = 18, **attrs: Any) -> list[np.ndarray]:
    """Run one ONNX node in ONNX Runtime: the independent oracle."""
    onnx = require("onnx", "onnx")
    rt = require("onnxruntime", "onnx")
    from onnx import helper

    names = [f"i{k}" for k in range(len(inputs))]
    outs = [f"o{k}" for k in range(n_out)]
    node = helper.make_node(op, names, outs, **attrs)
    vi = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(x.dtype), x.shape)
          for n, x in zip(names, inputs)]
    vo = [onnx.ValueInfoProto(name=n) for n in outs]
    model = helper.make_model(helper.make_graph([node], "t", vi, vo), opset_imports=[helper.make_opsetid("", opset)])
    sess = rt.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, dict(zip(names, inputs)))


def same(got: Any, want: np.ndarray) -> None:
    got = np.asarray(got)
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    assert got.shape == want.shape, (got.shape, want.shape)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape,axis", [((2, 3, 4), 1), ((2, 3, 4), 0), ((2, 3, 4), 3), ((2, 3, 4), -1), ((0, 3), 1)])
def test_flatten(dtype: type, shape: tuple, axis: int) -> None:
    x = rand(shape, dtype)
    same(apply_op("Flatten", x, axis=axis), ort("Flatten", [x], axis=axis)[0])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape,axes", [((1, 3, 1, 4), (0, 2)), ((1, 3, 1), None), ((3, 1), (-1,)), ((1,), (0,))])
def test_squeeze(dtype: type, shape: tuple, axes: tuple | None) -> None:
    x = rand(shape, dtype)
    ins = [x] if axes is None else [x, np.array(axes, np.int64)]
    same(apply_op("Squeeze", x, axes=axes), ort("Squeeze", ins)[0])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape,axes", [((3, 4), (0,)), ((3, 4), (1, -1)), ((), (0,)), ((0, 2), (2, 0))])
def test_unsqueeze(dtype: type, shape: tuple, axes: tuple) -> None:
    x = rand(shape, dtype)
    same(apply_op("Unsqueeze", x, axes=axes), ort("Unsqueeze", [x, np.array(axes, np.int64)])[0])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shapes,axis", [([(2, 3), (4, 3)], 0), ([(2, 3), (2, 0), (2, 1)], -1), ([(5,)], 0)])
def test_concat(dtype: type, shapes: list, axis: int) -> None:
    xs = [rand(s, dtype) for s in shapes]
    same(apply_op("Concat", *xs, axis=axis), ort("Concat", xs, axis=axis)[0])


@pytest.mark.parametrize("dtype", [np.float32, np.int64])
@pytest.mark.parametrize("shape,axis,split", [((6, 2), 0, (1, 2, 3)), ((2, 5), 1, (5, 0)), ((4,), 0, (4,))])
def test_split_sizes(dtype: type, shape: tuple, axis: int, split: tuple) -> None:
    x = rand(shape, dtype)
    got = apply_op("Split", x, axis=axis, split=split)
    want = ort("Split", [x, np.array(split, np.int64)], n_out=len(split), axis=axis)
    for g, w in zip(got, want):
        same(g, w)


@pytest.mark.parametrize("dim,n", [(6, 3), (7, 3), (5, 2)])
def test_split_num_outputs(dim: int, n: int) -> None:
    x = rand((dim, 2), np.float32)
    got = apply_op("Split", x, axis=0, num_outputs=n)
    for g, w in zip(got, ort("Split", [x], n_out=n, axis=0, num_outputs=n)):
        same(g, w)


SLICES = [
    # shape, starts, ends, axes, steps
    ((5, 6), [1], [4], None, None),
    ((5, 6), [-3, 0], [100, -1], [1, 0], None),
    ((5, 6), [4], [-100], [0], [-1]),
    ((5, 6), [-1, 5], [-6, 0], [0, 1], [-2, -2]),
    ((5, 6), [0], [6], [1], [4]),
    ((5, 6), [3], [1], [0], [1]),  # empty
    ((2, 3, 4), [0, 0], [2**63 - 1, 2], [-1, -2], [2, 1]),
    ((0, 3), [0], [5], [0], None),
]


@pytest.mark.parametrize("shape,starts,ends,axes,steps", SLICES)
@pytest.mark.parametrize("as_const", [True, False])
def test_slice(shape: tuple, starts: list, ends: list, axes: list | None, steps: list | None, as_const: bool) -> None:
    x = rand(shape, np.float32)
    ins = [x, np.array(starts, np.int64), np.array(ends, np.int64)]
    if axes is not None:
        ins.append(np.array(axes, np.int64))
    if steps is not None:
        ins.append(np.array(steps, np.int64))
    const = tuple(range(1, len(ins))) if as_const else ()
    same(apply_op("Slice", *ins, const=const), ort("Slice", ins)[0])


def test_slice_python_formula() -> None:
    # An independent oracle: Python's own slicing on nested lists.
    x = np.arange(10, dtype=np.int32)
    for s, e, st in [(-3, 100, 1), (8, 1, -3), (-100, -2, 2), (5, 5, 1)]:
        got = apply_op("Slice", x, np.array([s]), np.array([e]), np.array([0]), np.array([st]), const=(1, 2, 3, 4))
        assert got.tolist() == list(range(10))[s:e:st]


@pytest.mark.parametrize("dtype", [np.float32, np.int32])
@pytest.mark.parametrize("dshape,ishape,b", [((3, 4), (2, 2), 0), ((3, 4, 5), (2, 1), 0), ((2, 3, 4), (2, 1), 1),
                                             ((3, 4), (0, 2), 0), ((2, 3, 4), (2, 5, 2), 1)])
def test_gather_nd(dtype: type, dshape: tuple, ishape: tuple, b: int) -> None:
    x = rand(dshape, dtype)
    k = ishape[-1]
    hi = dshape[b: b + k]
    idx = np.stack([RNG.integers(-h, h, size=ishape[:-1]) for h in hi], axis=-1).astype(np.int64).reshape(ishape)
    same(apply_op("GatherND", x, idx, batch_dims=b), ort("GatherND", [x, idx], batch_dims=b)[0])


@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max", "min"])
@pytest.mark.parametrize("dtype", [np.float32, np.int64])
def test_scatter_nd(reduction: str, dtype: type) -> None:
    x = rand((4, 3, 2), dtype)
    # Distinct indices for "none" (duplicates are unspecified there).
    idx = np.array([[0, 1], [3, 2], [1, 0]] if reduction == "none" else [[0, 1], [3, 2], [0, 1]], np.int64)
    upd = rand((3, 2), dtype)
    kw = {} if reduction == "none" else {"reduction": reduction}
    same(apply_op("ScatterND", x, idx, upd, reduction=reduction), ort("ScatterND", [x, idx, upd], **kw)[0])


@pytest.mark.parametrize("mode", ["constant", "reflect", "edge"])
@pytest.mark.parametrize("dtype", [np.float32, np.int32])
@pytest.mark.parametrize("pads", [[1, 2, 0, 1], [0, 0, 2, 2], [2, 1, 1, 2]])
def test_pad(mode: str, dtype: type, pads: list) -> None:
    x = rand((3, 4), dtype)
    p = np.array(pads, np.int64)
    value = 1.5 if dtype == np.float32 else 7.0
    ins = [x, p] + ([np.array(value, dtype)] if mode == "constant" else [])
    want = ort("Pad", ins, mode=mode)[0]
    same(apply_op("Pad", x, p, mode=mode, value=value, const=(1,)), want)
    same(apply_op("Pad", x, p, mode=mode, value=value), want)


def test_pad_negative_crops() -> None:
    x = rand((4, 5), np.float32)
    p = np.array([-1, 2, 1, -2], np.int64)
    same(apply_op("Pad", x, p, const=(1,)), ort("Pad", [x, p])[0])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape,reps", [((2, 3), [2, 1]), ((3,), [0]), ((1, 2, 1), [3, 1, 2])])
def test_tile(dtype: type, shape: tuple, reps: list) -> None:
    x = rand(shape, dtype)
    r = np.array(reps, np.int64)
    same(apply_op("Tile", x, r, const=(1,)), ort("Tile", [x, r])[0])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape,target", [((3, 1), [2, 3, 4]), ((1,), [5]), ((2, 3), [1, 3]), ((3, 1), [3, 0])])
def test_expand(dtype: type, shape: tuple, target: list) -> None:
    x = rand(shape, dtype)
    t = np.array(target, np.int64)
    same(apply_op("Expand", x, t, const=(1,)), ort("Expand", [x, t])[0])
    same(apply_op("Expand", x, t), ort("Expand", [x, t])[0])


@pytest.mark.parametrize("start,limit,delta,dtype", [
    (0, 10, 3, np.int64), (5, -3, -2, np.int32), (3, 3, 1, np.int64), (0.5, 2.0, 0.3, np.float32),
    (1.0, -1.0, -0.25, np.float64),
])
@pytest.mark.parametrize("as_const", [True, False])
def test_range(start: float, limit: float, delta: float, dtype: type, as_const: bool) -> None:
    ins = [np.array(v, dtype) for v in (start, limit, delta)]
    got = apply_op("Range", *ins, const=(0, 1, 2) if as_const else ())
    same(got, ort("Range", ins)[0])


@pytest.mark.parametrize("axis", [-1, 0, 1])
@pytest.mark.parametrize("vdtype", [np.float32, np.int64])
def test_one_hot(axis: int, vdtype: type) -> None:
    idx = np.array([[0, 3, -1], [2, 5, -4]], np.int64)  # 5 and -5 are out of range for depth 4
    depth, vals = np.array(4, np.int64), np.array([0, 7], vdtype)
    want = ort("OneHot", [idx, depth, vals], axis=axis)[0]
    same(apply_op("OneHot", idx, depth, vals, axis=axis, const=(1,)), want)


@pytest.mark.parametrize("value", [np.array(0, np.float32), np.array([3], np.int64), np.array(True)])
def test_constant_of_shape(value: np.ndarray) -> None:
    s = np.array([2, 0, 3], np.int64)
    want = np.full((2, 0, 3), value.reshape(()), value.dtype)
    same(apply_op("ConstantOfShape", s, value=value), want)
    same(apply_op("ConstantOfShape", s, value=value, const=(0,)), want)


def test_shape_of_and_dim_size() -> None:
    x = rand((2, 0, 5), np.float32)
    same(apply_op("ShapeOf", x), np.array([2, 0, 5], np.int64))
    got = apply_op("DimSize", x, axis=-1)
    assert np.asarray(got).dtype == np.int64 and int(got) == 5


def test_reshape_symbolic_shape_value_from_graph() -> None:
    x = rand((2, 6), np.float32)
    same(apply_op("Reshape", x, np.array([3, -1], np.int64), const=(1,)), x.reshape(3, 4))


@pytest.mark.parametrize("op,args,attrs,msg", [
    ("Concat", [np.zeros((2, 3), np.float32), np.zeros((2, 4), np.float32)], {"axis": 0}, "differ in dim 1"),
    ("Concat", [np.zeros((2, 3), np.float32), np.zeros((2, 3), np.int64)], {"axis": 0}, "dtype mismatch"),
    ("Concat", [np.zeros((2,), np.float32), np.zeros((2, 3), np.float32)], {"axis": 0}, "rank 2"),
    ("Squeeze", [np.zeros((2, 3), np.float32)], {"axes": (0,)}, "has size 2, not 1"),
    ("Split", [np.zeros((5,), np.float32)], {"split": (2, 2)}, "sums to 4"),
    ("Unsqueeze", [np.zeros((2,), np.float32)], {"axes": (3,)}, "out of range"),
    ("Tile", [np.zeros((2, 3), np.float32), np.array([2])], {}, "repeats has 1 entries"),
    ("Pad", [np.zeros((2, 3), np.float32), np.array([1, 1])], {}, "needs 4"),
    ("Slice", [np.zeros((2, 3), np.float32), np.array([0.5]), np.array([1])], {}, "1-D integer tensor"),
    ("GatherND", [np.zeros((2, 3), np.float32), np.zeros((2, 3), np.int64)], {}, "does not fit"),
    ("Range", [np.int64(0), np.int32(5), np.int64(1)], {}, "dtype mismatch"),
])
def test_errors(op: str, args: list, attrs: dict, msg: str) -> None:
    with pytest.raises(OpTypeError, match=msg):
        apply_op(op, *args, **attrs)
