"""Run-time checks are inserted exactly where shape inference had to assume a fact."""

from __future__ import annotations

import numpy as np
import pytest

from nexus.backends.python import NexusRuntimeError
from nexus.ir.graph import Graph
from nexus.ir.node import Node
from nexus.ir.opdef import OpTypeError, all_ops
from nexus.ir.types import TensorType, sym
from nexus.passes.shapechecks import insert_shape_checks

N, M, K = sym("N"), sym("M"), sym("K")


def one_op(op: str, types: list[TensorType], **attrs: object) -> tuple[Graph, Node]:
    g = Graph("f", types, [f"x{i}" for i in range(len(types))])
    n = g.add(op, list(g.args), g.start_block, attrs, name="y")
    g.end_block.append_input(g.add("Return", [n], g.start_block))
    return g, n


def checks(g: Graph) -> list[Node]:
    return [n for n in g.nodes() if n.op.name == "CheckDims"]


def test_broadcast_of_two_symbols_is_checked_and_fails_clearly() -> None:
    g, y = one_op("Add", [TensorType("f32", (N,)), TensorType("f32", (M,))])
    insert_shape_checks(g)
    (c,) = checks(g)
    assert c in y.deps and c.attrs["broadcast"]
    np.testing.assert_array_equal(g(np.ones(3, np.float32), np.ones(3, np.float32)), np.full(3, 2, np.float32))
    np.testing.assert_array_equal(g(np.ones(3, np.float32), np.ones(1, np.float32)), np.full(3, 2, np.float32))
    with pytest.raises(NexusRuntimeError, match=r"Add %y .*dim 0 of input 0 \(N\) and dim 0 of input 1 \(M\).*"
                                                r"sizes 3 and 4; the second must equal the first"):
        g(np.ones(3, np.float32), np.ones(4, np.float32))


def test_a_broadcast_that_would_contradict_the_type_is_refused() -> None:
    """[N] + [M] is typed [N]: with N = 1 and M = 3 NumPy gives 3 elements, not N, so the
    check refuses it rather than let a value contradict its type."""
    g, _ = one_op("Add", [TensorType("f32", (N,)), TensorType("f32", (M,))])
    insert_shape_checks(g)
    assert np.add(ones(1), ones(3)).shape == (3,)  # what the type [N] = [1] would deny
    with pytest.raises(NexusRuntimeError, match="sizes 1 and 3; the second must equal the first"):
        g(ones(1), ones(3))
    # With an int on one side the type keeps the int, so a 1 on the symbol's side is fine.
    g, y = one_op("Add", [TensorType("f32", (N,)), TensorType("f32", (3,))])
    assert y.type == TensorType("f32", (3,))
    insert_shape_checks(g)
    np.testing.assert_array_equal(g(ones(1), ones(3)), np.add(ones(1), ones(3)))
    with pytest.raises(NexusRuntimeError):
        g(ones(2), ones(3))


def test_proved_facts_need_no_check() -> None:
    for types in ([TensorType("f32", (N, 3)), TensorType("f32", (N, 3))],
                  [TensorType("f32", (N, 1)), TensorType("f32", (1, M))],
                  [TensorType("f32", (4,)), TensorType("f32", (4,))]):
        g, _ = one_op("Mul", types)
        assert checks(insert_shape_checks(g)) == []


def test_matmul_contraction_and_concat_dims_are_checked() -> None:
    g, _ = one_op("MatMul", [TensorType("f32", (N, K)), TensorType("f32", (M, 5))])
    (c,) = checks(insert_shape_checks(g))
    assert not c.attrs["broadcast"]
    with pytest.raises(NexusRuntimeError, match="sizes 2 and 3 must be equal"):
        g(np.ones((4, 2), np.float32), np.ones((3, 5), np.float32))
    g, _ = one_op("Concat", [TensorType("f32", (N, K)), TensorType("f32", (N, M))], axis=0)
    (c,) = checks(insert_shape_checks(g))
    assert g(np.ones((2, 3), np.float32), np.ones((2, 3), np.float32)).shape == (4, 3)


def test_checks_survive_text_round_trip() -> None:
    from nexus.ir import parse, print_graph, structurally_equal, verify

    g, _ = one_op("Add", [TensorType("f32", (N,)), TensorType("f32", (M,))])
    insert_shape_checks(g)
    verify(g)
    assert structurally_equal(g, parse(print_graph(g)))


# --- every assumption a rule reports is guarded; NumPy is the oracle ---------------------
B, C = sym("B"), sym("C")
f32 = np.float32


def ones(*shape: int) -> np.ndarray:
    return np.ones(shape, f32)


def test_matmul_batch_dims_are_checked_as_numpy_does() -> None:
    # The example: f32[B,2,3] @ f32[C,3,4] typed f32[B,2,4] assuming B = C.
    g, y = one_op("MatMul", [TensorType("f32", (B, 2, 3)), TensorType("f32", (C, 3, 4))])
    (c,) = checks(insert_shape_checks(g))
    assert c in y.deps and c.attrs["broadcast"]
    a, b = np.random.default_rng(0).standard_normal((2, 2, 3), f32), np.ones((3, 3, 4), f32)
    with pytest.raises(ValueError):
        np.matmul(a, b)  # the oracle refuses it too
    with pytest.raises(NexusRuntimeError, match=r"MatMul %y .*dim 0 of input 0 \(B\) and dim 0 of input 1 \(C\)"
                                                r".*sizes 2 and 3; the second must equal the first"):
        g(a, b)
    b = np.random.default_rng(1).standard_normal((2, 3, 4), f32)
    np.testing.assert_allclose(g(a, b), np.matmul(a, b), rtol=1e-6)
    np.testing.assert_allclose(g(a, b[:1]), np.matmul(a, b[:1]), rtol=1e-6)  # NumPy broadcasts a 1


def test_broadcasting_add_is_checked_as_numpy_does() -> None:
    g, _ = one_op("Add", [TensorType("f32", (N,)), TensorType("f32", (M,))])
    insert_shape_checks(g)
    with pytest.raises(ValueError):
        np.add(ones(2), ones(3))
    with pytest.raises(NexusRuntimeError, match=r"\(N\) and .*\(M\)"):
        g(ones(2), ones(3))
    np.testing.assert_array_equal(g(ones(3), ones(3)), np.add(ones(3), ones(3)))


# (op, input types, attrs, inputs that fit, inputs that break the assumption, oracle)
CASES = [
    ("Sub", [TensorType("f32", (N, K)), TensorType("f32", (M,))], {}, [ones(3, 4), ones(4)],
     [ones(3, 2), ones(4)], np.subtract),
    ("Where", [TensorType("bool", (N,)), TensorType("f32", (M,)), TensorType("f32", ())], {},
     [np.array([True, False]), ones(2), f32(0)], [np.array([True, False]), ones(3), f32(0)], np.where),
    ("Gemm", [TensorType("f32", (2, K)), TensorType("f32", (M, 4)), TensorType("f32", (N,))], {},
     [ones(2, 3), ones(3, 4), ones(4)], [ones(2, 3), ones(3, 4), ones(5)],
     lambda a, b, c: a @ b + c),
    ("MatMul", [TensorType("f32", (2, K)), TensorType("f32", (M,))], {}, [ones(2, 3), ones(3)],
     [ones(2, 3), ones(4)], np.matmul),
    ("Concat", [TensorType("f32", (N, 2)), TensorType("f32", (M, 3))], {"axis": 1}, [ones(2, 2), ones(2, 3)],
     [ones(2, 2), ones(3, 3)], lambda a, b: np.concatenate([a, b], axis=1)),
    ("Einsum", [TensorType("f32", (N, K)), TensorType("f32", (M, 4))], {"equation": "ij,jk->ik"},
     [ones(2, 3), ones(3, 4)], [ones(2, 3), ones(5, 4)], lambda a, b: np.einsum("ij,jk->ik", a, b)),
    ("BooleanMask", [TensorType("f32", (N, 2)), TensorType("bool", (M,))], {},
     [ones(3, 2), np.array([True, False, True])], [ones(3, 2), np.array([True, False])],
     lambda x, m: x[m]),
]


@pytest.mark.parametrize("op,types,attrs,good,bad,oracle", CASES, ids=[c[0] for c in CASES])
def test_assumed_dims_are_checked(op, types, attrs, good, bad, oracle) -> None:  # type: ignore[no-untyped-def]
    g, y = one_op(op, types, **attrs)
    insert_shape_checks(g)
    assert checks(g) and all(c in y.deps for c in checks(g))
    out = g(*good)
    want = oracle(*good)
    np.testing.assert_allclose(out[0] if isinstance(out, tuple) else out, want, rtol=1e-6)
    with pytest.raises((ValueError, IndexError)):
        oracle(*bad)
    with pytest.raises(NexusRuntimeError, match=f"{op} %y .* assumes dim"):
        g(*bad)


def test_path_facts_prove_what_rules_assume() -> None:
    """Inside `if N == M:` the Add needs no check; after the join it does."""
    g = Graph("f", [TensorType("f32", (N,)), TensorType("f32", (M,))], ["x", "y"])
    e = g.start_block
    x, y = g.args
    eq = g.add("Equal", [g.add("DimSize", [x], e, {"axis": 0}), g.add("DimSize", [y], e, {"axis": 0})], e)
    cond = g.add("Cond", [eq], e)
    then = g.new_block("then", [g.add("Proj", [cond], e, {"num": 1})])
    other = g.new_block("other", [g.add("Proj", [cond], e, {"num": 0})])
    inside = g.add("Add", [x, y], then, name="inside")
    g.end_block.append_input(g.add("Return", [inside], then))
    outside = g.add("Add", [x, y], other, name="outside")
    g.end_block.append_input(g.add("Return", [outside], other))
    insert_shape_checks(g)
    assert not any(c in inside.deps for c in checks(g))
    assert any(c in outside.deps for c in checks(g))
    np.testing.assert_array_equal(g(ones(2), ones(2)), np.full(2, 2, f32))
    with pytest.raises(NexusRuntimeError, match="Add %outside"):
        g(ones(2), ones(3))


def test_each_block_checks_with_its_own_sizes() -> None:
    """DimSize nodes are made once per value, axis and block, and each one is used."""
    g, _ = one_op("Where", [TensorType("bool", (N,)), TensorType("f32", (M,)), TensorType("f32", (K,))])
    insert_shape_checks(g)
    assert len(checks(g)) == 2  # the dim the result keeps (N) against each other input's
    sizes = [n for n in g.nodes() if n.op.name == "DimSize"]
    assert len(sizes) == 3 and all(n.users for n in sizes)


def test_shapechecks_is_a_pass() -> None:
    from nexus.passes import optimize

    g, _ = one_op("Add", [TensorType("f32", (N,)), TensorType("f32", (M,))])
    optimize(g, "shapechecks")
    assert len(checks(g)) == 1


def test_nn_params_are_checked_as_torch_does() -> None:
    from nexus.testing.extras import require

    torch = require("torch", "torch")
    F = torch.nn.functional
    t = torch.from_numpy
    rng = np.random.default_rng(2)

    def rand(*shape: int) -> np.ndarray:
        return rng.standard_normal(shape).astype(f32)

    cases = [
        ("BatchNormalization", [TensorType("f32", (2, N, 3))] + [TensorType("f32", (M,))] * 4, {},
         lambda c: [rand(2, 3, 3), rand(c), rand(c), rand(c), np.abs(rand(c)) + 1],
         lambda x, s, b, m, v: F.batch_norm(t(x), t(m), t(v), t(s), t(b), training=False, eps=1e-5)),
        ("Conv", [TensorType("f32", (1, C, 5, 5)), TensorType("f32", (M, C, 3, 3)), TensorType("f32", (K,))], {},
         lambda c: [rand(1, 2, 5, 5), rand(3, 2, 3, 3), rand(c)],
         lambda x, w, b: F.conv2d(t(x), t(w), t(b))),
        ("LayerNormalization", [TensorType("f32", (2, N)), TensorType("f32", (M,))], {},
         lambda c: [rand(2, 3), rand(c)],
         lambda x, s: F.layer_norm(t(x), (x.shape[-1],), t(s))),
    ]
    for op, types, attrs, inputs, oracle in cases:
        g, y = one_op(op, types, **attrs)
        insert_shape_checks(g)
        assert checks(g) and all(c in y.deps for c in checks(g)), op
        good = inputs(3)
        np.testing.assert_allclose(g(*good), oracle(*good).numpy(), rtol=1e-4, atol=1e-5, err_msg=op)
        bad = inputs(4)
        with pytest.raises(RuntimeError):
            oracle(*bad)
        with pytest.raises(NexusRuntimeError, match=f"{op} %y .* assumes dim"):
            g(*bad)


BROADCASTING = sorted((o for o in all_ops().values() if o.broadcasting), key=lambda o: o.name)


@pytest.mark.parametrize("op", BROADCASTING, ids=lambda o: o.name)
def test_every_broadcasting_op_reports_the_dims_it_assumes(op) -> None:  # type: ignore[no-untyped-def]
    n = len(op.inputs)
    for dtypes in (("f32",) * n, ("bool",) + ("f32",) * (n - 1), ("bool",) * n, ("i64",) * n):
        ins = [TensorType(d, (sym(f"D{i}"),)) for i, d in enumerate(dtypes)]
        try:
            res = op.infer(ins, op.complete_attrs({}), [None] * n)
        except OpTypeError:
            continue
        # the result keeps input 0's dim; every other input's must equal it or be 1
        assert {(e.i, e.a, e.j, e.b, e.broadcast) for e in res.assumed} == {(0, 0, j, 0, True) for j in range(1, n)}
        return
    pytest.fail(f"no dtypes found that {op.name} accepts")


def test_which_dim_pairs_need_a_check() -> None:
    from nexus.ir.types import dims_may_differ

    assert not dims_may_differ(N, N) and not dims_may_differ(3, 4)  # the same dim; ints the rule compared
    assert dims_may_differ(N, M) and dims_may_differ(N, 3)
    assert dims_may_differ(K, 1) and not dims_may_differ(K, 1, broadcast=True)  # a contraction K vs 1
    assert not dims_may_differ(2 * (N + 1), 2 * N + 2)  # equal after simplification
    assert dims_may_differ(N + 1, M + 1, broadcast=True)
