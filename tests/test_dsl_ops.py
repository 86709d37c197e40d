"""The DSL's op functions and operators against NumPy."""

from __future__ import annotations

import numpy as np

import nexus as nx
from nexus.frontend import dsl
from nexus.ir.opdef import all_ops, snake_case


def test_every_data_op_has_a_function() -> None:
    names = set(dsl.op_names())
    for op in all_ops().values():
        if op.kind == "data" and op.name != "Constant":
            assert snake_case(op.name) in names, op.name
    assert {"add", "subtract", "multiply", "matmul", "less", "greater", "equal", "tanh", "reshape"} <= names
    assert nx.matmul is dsl.matmul and nx.sub is dsl.sub


def test_operators_match_numpy() -> None:
    a = np.array([[1.5, -2.0], [0.25, 3.0]], dtype=np.float32)
    b = np.array([[2.0, 1.0], [-1.0, 0.5]], dtype=np.float32)

    @nx.graph(x=("f32", (2, 2)), y=("f32", (2, 2)), t="i64")
    def f(x, y, t):
        return (x + y, x - 1.0, 2.0 * x, x / y, -x, abs(x), x @ y, x ** 2.0, x[t], x[1, t],
                x < y, x >= 0.5, (x < y) & (y > 0.0), ~(x == y), x != y)

    got = f(a, b, 1)
    want = (a + b, a - 1, 2 * a, a / b, -a, np.abs(a), a @ b, a ** 2, a[1], a[1, 1],
            a < b, a >= 0.5, (a < b) & (b > 0), ~(a == b), a != b)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-6)
        assert np.asarray(g).dtype == np.asarray(w).dtype


def test_bit_operators_on_integers_match_numpy() -> None:
    """& | ^ ~ are bitwise on integers (logical on bools, above); << >> shift."""
    rng = np.random.default_rng(3)
    a = rng.integers(-1000, 1000, size=6).astype(np.int64)
    b = rng.integers(-1000, 1000, size=6).astype(np.int64)
    s = rng.integers(0, 10, size=6).astype(np.int64)

    @nx.graph(x=("i64", (6,)), y=("i64", (6,)), k=("i64", (6,)))
    def f(x, y, k):
        return x & y, x | y, x ^ y, ~x, x << k, x >> k, 7 & x, 1 << k, (x ^ y) & 1

    got = f(a, b, s)
    want = (a & b, a | b, a ^ b, ~a, a << s, a >> s, 7 & a, 1 << s, (a ^ b) & 1)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(g, w)
        assert g.dtype == w.dtype


def test_functions_with_attributes_and_shapes() -> None:
    a = np.arange(6, dtype=np.float32)

    @nx.graph(x=("f32", (6,)))
    def f(x):
        m = nx.reshape(x, (2, 3), name="m")
        s = nx.reduce_sum(m, axes=(1,), keepdims=False)
        return nx.cast(s, to=np.float64), nx.transpose(m, perm=(1, 0)), nx.tanh(m), nx.maximum(m, 2.0)

    s, t, th, mx = f(a)
    m = a.reshape(2, 3)
    np.testing.assert_allclose(s, m.sum(axis=1))
    assert s.dtype == np.float64
    np.testing.assert_array_equal(t, m.T)
    np.testing.assert_allclose(th, np.tanh(m), rtol=1e-6)
    np.testing.assert_array_equal(mx, np.maximum(m, np.float32(2)))
    assert any(n.name == "m" for n in f.nodes())


def test_weak_typing_of_python_scalars() -> None:
    with nx.function("w") as f:
        i = nx.constant(3, dtype="i32")
        x = nx.constant(1.5, dtype="f64")
        f.returns(i + 1, x * 2, nx.constant(7), nx.constant(0.5), nx.constant(True))
    got = f.graph()
    assert [np.asarray(v).dtype for v in got] == [np.int32, np.float64, np.int64, np.float32, np.bool_]
    assert [v.item() for v in got] == [4, 3.0, 7, 0.5, True]


def test_ops_with_several_results_give_a_tuple() -> None:
    a = np.array([3.0, -1.0, 7.0, 2.0], dtype=np.float32)

    @nx.graph(x=("f32", (4,)))
    def f(x):
        values, indices, _k = nx.top_k(x, 2)
        return values, indices

    values, indices = f(a)
    np.testing.assert_array_equal(values, np.sort(a)[::-1][:2])
    np.testing.assert_array_equal(indices, np.argsort(-a)[:2])


def test_device_placement() -> None:
    with nx.function("placed", x="f32") as f:
        (x,) = f.args
        y = x + 1.0
        with nx.device("/CPU:0", machine="m0"):
            z = y * 2.0
            with nx.device("/CPU:1"):
                w = z - 1.0
        f.returns(w)
    g = f.graph
    ops = {n.op.name: n for n in g.nodes()}
    assert "device" not in ops["Add"].attrs
    assert (ops["Mul"].attrs["device"], ops["Mul"].attrs["machine"]) == ("/CPU:0", "m0")
    assert (ops["Sub"].attrs["device"], ops["Sub"].attrs["machine"]) == ("/CPU:1", "m0")
    assert g(2.0) == 5.0
    assert nx.parse(nx.print_graph(g))(2.0) == 5.0


def test_every_op_family_op_is_an_nx_function() -> None:
    # New ops need no export line: nx.<snake_case name> is found from the registry.
    from nexus.ir.opdef import all_ops, snake_case
    from nexus.ops import FAMILIES

    names = [snake_case(op.name) for op in all_ops().values() if op.family in FAMILIES]
    assert len(names) > 80
    missing = [n for n in names if not callable(getattr(nx, n, None))]
    assert not missing
