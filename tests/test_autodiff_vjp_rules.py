"""Every VJP rule against central finite differences in float64, in both modes; and
every differentiable op in the registry has a rule and a case here."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import nexus as nx
from nexus.autodiff import VJPS
from nexus.ir.graph import Graph
from nexus.ir.opdef import all_ops
from nexus.ir.types import TensorType, TupleType, dtype_of

R = np.random.default_rng(0)


def f(*shape: int) -> np.ndarray:
    return R.normal(size=shape)


def pos(*shape: int) -> np.ndarray:
    return R.uniform(0.5, 2.0, size=shape)


def away(*shape: int) -> np.ndarray:
    """Values kept away from 0 (kinks of Abs, Relu...)."""
    x = R.uniform(0.2, 1.5, size=shape)
    return x * np.where(R.random(shape) < 0.5, -1.0, 1.0)


def i64(v: Any) -> np.ndarray:
    return np.array(v, dtype=np.int64)


# op -> list of (inputs, attrs); float64 inputs are differentiated, the others are constants.
Case = tuple[list[np.ndarray], dict[str, Any]]
CASES: dict[str, list[Case]] = {
    "Identity": [([f(3)], {})],
    # comm ops in a world of one rank (tests/test_distributed.py checks them on several)
    "Memcpy": [([f(3)], {"device": "/CPU:0", "src": "/CPU:1"})],
    "AllReduce": [([f(2, 3)], {}), ([f(3)], {"op": "mean"})],
    "AllGather": [([f(2, 3)], {"group": "0", "axis": 1})],
    "ReduceScatter": [([f(4)], {"group": "0"})],
    "Add": [([f(2, 3), f(3)], {}), ([f(1, 3), f(2, 1)], {})],
    "Sub": [([f(2, 3), f(2, 1)], {})],
    "Mul": [([f(2, 3), f(3)], {})],
    "Div": [([f(2, 3), pos(3)], {})],
    "Pow": [([pos(2, 3), f(3)], {})],
    "Maximum": [([away(4), away(4) + 3.0], {}), ([away(2, 2) + 3.0, away(2)], {})],
    "Minimum": [([away(4), away(4) + 3.0], {})],
    "Neg": [([f(3)], {})], "Abs": [([away(5)], {})], "Exp": [([f(3)], {})], "Log": [([pos(3)], {})],
    "Tanh": [([f(3)], {})], "Sigmoid": [([f(3)], {})], "Relu": [([away(5)], {})],
    "Cast": [([f(3)], {"to": "f32"}), ([f(3)], {"to": "f64"})],
    "ReduceSum": [([f(2, 3)], {"axes": [1]}), ([f(2, 3)], {}), ([f(2, 3, 2)], {"axes": [0, 2], "keepdims": True})],
    "ReduceMean": [([f(2, 3)], {"axes": [0]}), ([f(4)], {})],
    "ReduceMax": [([f(2, 3)], {"axes": [1]}), ([f(5)], {})],
    "ReduceMin": [([f(2, 3)], {"axes": [0], "keepdims": True})],
    "ReduceProd": [([pos(2, 3)], {"axes": [1]})],
    "MatMul": [([f(2, 3), f(3, 4)], {}), ([f(3), f(3, 2)], {}), ([f(2, 3), f(3)], {}), ([f(3), f(3)], {}),
               ([f(2, 2, 3), f(3, 2)], {})],
    "Reshape": [([f(2, 3), i64([3, 2])], {})],
    "Transpose": [([f(2, 3, 4)], {"perm": [2, 0, 1]}), ([f(2, 3)], {})],
    "Gather": [([f(4, 3), i64([0, 2, 2])], {}), ([f(4, 3), i64(1)], {"axis": 1})],
    "Gelu": [([f(4)], {}), ([f(4)], {"approximate": "tanh"})],
    "Softplus": [([f(4)], {})], "LeakyRelu": [([away(5)], {"alpha": 0.2})],
    "HardSigmoid": [([f(8) * 3], {}), ([f(8) * 4], {"alpha": 1 / 6, "beta": 0.5})], "HardSwish": [([f(8) * 3], {})],
    "PRelu": [([away(2, 3), f(3)], {})],
    "Softmax": [([f(2, 3)], {}), ([f(2, 3)], {"axis": 0})], "LogSoftmax": [([f(2, 3)], {"axis": 1})],
    "Slice": [([f(4, 5), i64([1]), i64([3])], {}),
              ([f(4, 5), i64([0, 4]), i64([4, 0]), i64([0, 1]), i64([2, -2])], {})],
    "GatherND": [([f(3, 4), i64([[0, 1], [2, 3], [0, 1]])], {}), ([f(2, 3, 2), i64([[1], [2]])], {"batch_dims": 1})],
    "ScatterND": [([f(3, 4), i64([[0], [2]]), f(2, 4)], {}),
                  ([f(3, 4), i64([[0], [0]]), f(2, 4)], {"reduction": "add"})],
    "SetItem": [([f(4, 5), f(5), i64(-2)], {"kinds": "i"}),  # value broadcast over a row
                ([f(4, 5), f(2, 1), i64(1), i64(3), i64(1), i64([0, 4])], {"kinds": "si"}),
                ([f(3, 4), f(1), np.array([True, False, True])], {"kinds": "i"})],
    "Gemm": [([f(2, 3), f(3, 4), f(4)], {"alpha": 0.5, "beta": 2.0}),
             ([f(3, 2), f(4, 3), f(2, 4)], {"transA": True, "transB": True})],
    "Einsum": [([f(2, 3), f(3, 4)], {"equation": "ij,jk->ik"}), ([f(2, 3)], {"equation": "ij->i"}),
               ([f(2, 3), f(3)], {"equation": "ij,j->"})],
    "Sqrt": [([pos(3)], {})], "Rsqrt": [([pos(3)], {})], "Reciprocal": [([pos(3)], {})],
    "Sin": [([f(3)], {})], "Cos": [([f(3)], {})], "Erf": [([f(3)], {})],
    "Asin": [([R.uniform(-0.8, 0.8, 4)], {})], "Acos": [([R.uniform(-0.8, 0.8, 4)], {})], "Atan": [([f(4)], {})],
    "Asinh": [([f(4)], {})], "Acosh": [([R.uniform(1.2, 3.0, 4)], {})], "Atanh": [([R.uniform(-0.8, 0.8, 4)], {})],
    "Clip": [([f(6) * 2, np.array(-0.5), np.array(0.7)], {})],
    "Where": [([np.array([True, False, True]), f(3), f(2, 1)], {})],
    "CumSum": [([f(2, 4)], {"axis": 1}), ([f(4)], {"exclusive": True, "reverse": True})],
    # CumProd with a zero inside: the gradient is exact there (no division by x).
    "CumProd": [([f(2, 4)], {"axis": 1}), ([np.array([0.7, 0.0, -1.3, 2.0])], {})],
    "Append": [([f(2, 3), f(3)], {}), ([np.zeros((0, 1)), f(3)], {})],
    "Flatten": [([f(2, 3, 2)], {"axis": 2})], "Squeeze": [([f(2, 1, 3)], {"axes": [1]})],
    "Unsqueeze": [([f(2, 3)], {"axes": [0, 3]})],
    "Concat": [([f(2, 3), f(2, 1), f(2, 2)], {"axis": 1})],
    "Split": [([f(5, 2)], {"split": [2, 3]}), ([f(2, 6)], {"axis": 1, "num_outputs": 3})],
    "Expand": [([f(3, 1), i64([2, 3, 4])], {})],
    "Tile": [([f(2, 3), i64([2, 3])], {})],
    "Roll": [([f(3, 4), i64([1, -2])], {"axes": [0, 1]}), ([f(5), i64(7)], {"axes": [0]})],
    "Pad": [([f(2, 3), i64([1, 0, 0, -1])], {})],
    "Conv": [([f(1, 2, 5, 5), f(4, 1, 3, 3), f(4)],
              {"group": 2, "strides": [2, 1], "pads": [1, 0, 1, 1], "dilations": [1, 2]}),
             ([f(2, 3, 6), f(2, 3, 2)], {})],
    "ConvTranspose": [([f(1, 2, 3, 3), f(2, 3, 3, 3), f(3)],
                       {"strides": [2, 2], "pads": [1, 0, 0, 1], "output_padding": [1, 0]}),
                      ([f(1, 4, 3), f(4, 1, 2)], {"strides": [2], "group": 2})],
    "MaxPool": [([f(1, 2, 5, 5)], {"kernel_shape": [2, 3], "strides": [2, 2], "pads": [0, 1, 1, 1], "ceil_mode": True}),
                ([f(1, 1, 6)], {"kernel_shape": [2], "dilations": [2]})],
    "AveragePool": [([f(1, 1, 5, 4)], {"kernel_shape": [3, 2], "strides": [2, 2], "pads": [1, 0, 1, 1]}),
                    ([f(1, 2, 5)], {"kernel_shape": [2], "strides": [2], "pads": [1, 0], "ceil_mode": True,
                                    "count_include_pad": True}),
                    ([f(1, 1, 7, 6)], {"kernel_shape": [2, 2], "dilations": [2, 3], "pads": [1, 1, 0, 1]})],
    "GlobalAveragePool": [([f(2, 3, 2, 2)], {})],
    "BatchNormalization": [([f(2, 3, 2), f(3), f(3), f(3), pos(3)], {"epsilon": 1e-3})],
    "LayerNormalization": [([f(2, 3, 4), f(4), f(4)], {}), ([f(2, 3, 4), f(3, 4)], {"axis": 1})],
    "Dropout": [([f(3)], {})],
    "Resize": [([f(1, 1, 3, 4), i64([1, 1, 5, 3])], {}),
               ([f(1, 1, 3, 4), i64([1, 1, 5, 3])],
                {"mode": "linear", "coordinate_transformation_mode": "align_corners"}),
               ([f(2, 5), i64([2, 3])], {"mode": "linear"}),
               ([f(1, 1, 4, 5), i64([1, 1, 7, 3])], {"mode": "cubic", "exclude_outside": True}),
               ([f(1, 1, 9, 4), i64([1, 1, 4, 4])], {"mode": "linear", "antialias": True}),
               ([f(1, 6, 7), i64([1, 4, 2])], {"mode": "cubic", "antialias": True, "cubic_coeff_a": -0.5}),
               ([f(1, 1, 4, 4), i64([1, 1, 3, 5])],
                {"mode": "linear", "coordinate_transformation_mode": "tf_crop_and_resize",
                 "roi": [0, 0, -0.2, 0.1, 1, 1, 0.8, 1.3], "extrapolation_value": 7.0}),
               ([f(1, 3, 5), i64([1, 3, 7])], {"mode": "nearest", "scales": [1.0, 1.0, 1.6],
                                              "coordinate_transformation_mode": "half_pixel_symmetric"})],
    "BooleanMask": [([f(4, 2), np.array([True, False, True, True])], {})],
    "TopK": [([f(2, 5), i64(3)], {"axis": 1}), ([f(6), i64(2)], {"largest": False})],
    # indices picked twice and negative ones: the adjoint must add, not overwrite
    "GatherElements": [([f(3, 4), i64([[0, 2, -1, 0], [1, 1, 1, 2]])], {}),
                       ([f(2, 3), i64([[0, 0, 2], [1, -1, 1]])], {"axis": 1})],
}


def _graph(op: str, inputs: list[np.ndarray], attrs: dict[str, Any]) -> tuple[Graph, list[int]]:
    """A graph applying ``op``: float inputs are arguments, the others constants."""
    diff = [i for i, x in enumerate(inputs) if x.dtype == np.float64]
    g = Graph(op.lower(), [TensorType("f64", inputs[i].shape) for i in diff])
    e = g.start_block
    args = iter(g.args)
    ins = [next(args) if i in diff else g.add("Constant", [], e, {"value": x}) for i, x in enumerate(inputs)]
    n = g.add(op, ins, e, attrs)
    outs = [g.add("Proj", [n], e, {"num": k}) for k in range(len(n.type.elems))] \
        if isinstance(n.type, TupleType) else [n]
    g.end_block.append_input(g.add("Return", outs, e))
    return g, diff


def _fd(fn: Callable[[list[np.ndarray]], float], xs: list[np.ndarray], k: int, eps: float = 1e-6) -> np.ndarray:
    out = np.zeros_like(xs[k])
    for idx in np.ndindex(xs[k].shape):
        plus = [x.copy() for x in xs]
        minus = [x.copy() for x in xs]
        plus[k][idx] += eps
        minus[k][idx] -= eps
        out[idx] = (fn(plus) - fn(minus)) / (2 * eps)
    return out


PARAMS = [(op, i) for op, cases in CASES.items() for i in range(len(cases))]


@pytest.mark.parametrize("mode", ["tape", "graph"])
@pytest.mark.parametrize(("op", "case"), PARAMS, ids=[f"{op}-{i}" for op, i in PARAMS])
def test_rule_matches_finite_differences(op: str, case: int, mode: str) -> None:
    inputs, attrs = CASES[op][case]
    g, diff = _graph(op, inputs, attrs)
    xs = [inputs[i] for i in diff]
    res = nx.run(g, *xs)
    outs = list(res) if isinstance(res, tuple) else [res]
    cts = [R.normal(size=np.shape(o)).astype(np.asarray(o).dtype) for o in outs]

    def scalar(vals: list[np.ndarray]) -> float:
        r = nx.run(g, *vals)
        rs = list(r) if isinstance(r, tuple) else [r]
        return float(sum(np.sum(np.asarray(o, dtype=np.float64) * c) for o, c in zip(rs, cts)))

    _, fn = nx.vjp(g, *xs, mode=mode)
    grads = fn(*cts)
    low = any(np.asarray(o).dtype != np.float64 for o in outs)  # a Cast to f32 rounds
    for k, gk in enumerate(grads):
        assert np.shape(gk) == xs[k].shape and np.asarray(gk).dtype == np.float64
        np.testing.assert_allclose(gk, _fd(scalar, xs, k, 1e-3 if low else 1e-6),
                                   rtol=1e-3 if low else 1e-6, atol=1e-3 if low else 1e-7)


def test_every_differentiable_op_has_a_rule_and_a_case() -> None:
    diff = sorted(name for name, op in all_ops().items() if op.differentiable)
    assert [n for n in diff if n not in VJPS] == [], "ops without a VJP rule"
    assert [n for n in diff if n not in CASES] == [], "ops without a finite-difference case"


def test_missing_rule_names_op_and_table() -> None:
    from nexus.autodiff.vjp import MissingVJPError, vjp_rule

    with pytest.raises(MissingVJPError, match=r"NoSuchOp.*VJPS"):
        vjp_rule("NoSuchOp")


def test_integer_inputs_get_no_gradient() -> None:
    t = TensorType("f64", (3,))
    g = Graph("cast", [t, TensorType("i64", (3,))])
    e = g.start_block
    y = g.add("Mul", [g.args[0], g.add("Cast", [g.args[1]], e, {"to": "f64"})], e)
    g.end_block.append_input(g.add("Return", [g.add("ReduceSum", [y], e)], e))
    for mode in ("tape", "graph"):
        gx, gi = nx.grad(g, argnums=(0, 1), mode=mode)(np.ones(3), np.array([1, 2, 3]))
        np.testing.assert_allclose(gx, [1, 2, 3])
        assert not np.any(gi)
    assert dtype_of(np.float64) == "f64"
