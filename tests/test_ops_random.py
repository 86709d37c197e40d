"""Random ops: explicit seeds, no global state, impure; distribution checked by moments."""

from __future__ import annotations

import numpy as np
import pytest

from nexus.ir.graph import Graph
from nexus.ir.opdef import OpTypeError, get_op
from nexus.ir.types import TensorType, sym
from nexus.ops.check import apply_op
from nexus.passes.shapes import infer_shapes


@pytest.mark.parametrize("dtype,np_dtype", [("f32", np.float32), ("f64", np.float64), ("f16", np.float16)])
def test_uniform_range_dtype_and_moments(dtype: str, np_dtype: type) -> None:
    x = apply_op("RandomUniform", np.array([200, 100], np.int64), np.int64(7), dtype=dtype, low=-2.0, high=3.0)
    assert x.dtype == np_dtype and x.shape == (200, 100)
    assert x.min() >= -2.0 and x.max() < 3.0
    # Uniform(-2, 3): mean 0.5, variance 25 / 12.
    assert abs(float(x.astype(np.float64).mean()) - 0.5) < 0.05
    assert abs(float(x.astype(np.float64).var()) - 25 / 12) < 0.1


def test_normal_moments() -> None:
    x = apply_op("RandomNormal", np.array([50000], np.int64), np.int64(1), dtype="f64", mean=1.0, scale=2.0)
    assert x.dtype == np.float64
    assert abs(x.mean() - 1.0) < 0.05 and abs(x.std() - 2.0) < 0.05


def test_seed_determines_values_and_no_global_state() -> None:
    shape = np.array([4, 3], np.int64)
    a = apply_op("RandomUniform", shape, np.int64(3))
    np.random.seed(123)  # the global NumPy state must not matter
    b = apply_op("RandomUniform", shape, np.int64(3))
    c = apply_op("RandomUniform", shape, np.int64(4))
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)


def test_impure_and_typed() -> None:
    assert not get_op("RandomUniform").pure and not get_op("RandomNormal").pure
    with pytest.raises(OpTypeError, match="dtype must be a float type"):
        apply_op("RandomNormal", np.array([2], np.int64), np.int64(0), dtype="i32")
    with pytest.raises(OpTypeError, match="the seed must be an integer scalar"):
        apply_op("RandomNormal", np.array([2], np.int64), np.float32(0))


def test_shape_from_graph_value_and_seed_per_iteration() -> None:
    n = sym("N")
    g = Graph("r", [TensorType("f32", (n, 3)), TensorType("i64", ())], ["x", "seed"])
    x, seed = g.args
    e = g.start_block
    noise = g.add("RandomNormal", [g.add("ShapeOf", [x], e), seed], e)
    y = g.add("Add", [x, noise], e)
    g.end_block.append_input(g.add("Return", [y], e))
    infer_shapes(g)
    assert noise.type == TensorType("f32", (n, 3))
    out1 = g(np.zeros((5, 3), np.float32), np.int64(1))
    out2 = g(np.zeros((5, 3), np.float32), np.int64(2))
    assert out1.shape == (5, 3) and not np.array_equal(out1, out2)
