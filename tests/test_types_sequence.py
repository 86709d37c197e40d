"""Sequence and optional types in the IR: the text form, the lattice, the call boundary,
the verifier, the ops on the python backend against plain Python and NumPy, and the
refusal of the tensor-only backends."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import nexus as nx
from nexus.backends.base import ContainersUnsupportedError
from nexus.ir.binding import BindingError
from nexus.ir.graph import Graph
from nexus.ir.node import Node
from nexus.ir.opdef import OpTypeError
from nexus.ir.parser import ParseError
from nexus.ir.types import (
    OptionalType,
    SequenceType,
    TensorType,
    compatible,
    join_types,
    parse_dim,
    scalar,
    sym,
)
from nexus.testing.extras import require

F3 = TensorType("f32", (3,))
FN = TensorType("f32", ("N", 3))
rng = np.random.default_rng(29)


# --- the text form -------------------------------------------------------------------------------
@pytest.mark.parametrize("t", [
    SequenceType(F3), SequenceType(F3, 4), SequenceType(FN, "2*L + 1"), SequenceType(TensorType("i64", None), 0),
    SequenceType(scalar("bool"), "L"), OptionalType(F3), OptionalType(SequenceType(FN, 2)),
    OptionalType(TensorType("bf16", None)),
], ids=str)
def test_types_print_and_parse_back(t: Any) -> None:
    g = Graph("g", [t], ["v"])
    ret = g.add("Return", [g.args[0]], g.start_block)
    g.end_block.append_input(ret)
    text = nx.print_graph(g)
    assert str(t) in text
    back = nx.parse(text)
    assert back.arg_types == (t,)
    assert nx.print_graph(back) == text


def test_the_written_form() -> None:
    assert str(SequenceType(FN, "L")) == "seq<f32[N, 3], L>"
    assert str(SequenceType(TensorType("f32", None))) == "seq<f32[...]>"
    assert str(OptionalType(SequenceType(scalar("i64"), 0))) == "opt<seq<i64, 0>>"


@pytest.mark.parametrize(("text", "why"), [
    ("seq<X>", "a sequence holds tensors"),
    ("seq<seq<f32>>", "a sequence holds tensors"),
    ("opt<opt<f32>>", "an optional holds a tensor or a sequence"),
    ("seq<f32, >", "bad dim"),
    ("seq<f32, -1>", "negative"),
    ("seq<f32", r"bad dim '\)'"),  # the tuple's comma starts a length
    ("opt<f32, 3>", "expected '>'"),
])
def test_bad_types_are_parse_errors(text: str, why: str) -> None:
    src = f"graph @g {{\n^entry:\n  %0 = Start : ({text},)\n  %1 = Return : X\n^exit(%1):\n  End : X\n}}\n"
    with pytest.raises(ParseError, match=why):
        nx.parse(src)


def test_deep_nesting_is_refused_before_recursing() -> None:
    deep = "opt<" * 200 + "f32" + ">" * 200
    src = f"graph @g {{\n^entry:\n  %0 = Start : ({deep},)\n  %1 = Return : X\n^exit(%1):\n  End : X\n}}\n"
    with pytest.raises(ParseError):
        nx.parse(src)


# --- the lattice -----------------------------------------------------------------------------------
def test_join_keeps_what_agrees_and_widens_the_rest() -> None:
    a, b = SequenceType(TensorType("f32", (3, 4)), 2), SequenceType(TensorType("f32", (3, 5)), 2)
    j = join_types(a, b)
    assert isinstance(j, SequenceType) and j.length == 2
    assert j.elem.shape is not None and j.elem.shape[0] == 3 and not isinstance(j.elem.shape[1], int)
    k = join_types(SequenceType(F3, 1), SequenceType(F3, 2))
    assert isinstance(k, SequenceType) and not isinstance(k.length, int) and k.length is not None
    assert join_types(SequenceType(F3, 1), SequenceType(F3)) == SequenceType(F3)
    # The empty sequence's element type says nothing: the other side's stays.
    assert join_types(SequenceType(TensorType("f32", None), 0), SequenceType(F3, 1)).elem == F3  # type: ignore[union-attr]
    assert join_types(OptionalType(F3), OptionalType(TensorType("f32", None))) == OptionalType(TensorType("f32", None))
    for x, y in [(SequenceType(F3), SequenceType(TensorType("i64", (3,)))), (SequenceType(F3), F3),
                 (OptionalType(F3), F3), (OptionalType(F3), OptionalType(SequenceType(F3)))]:
        with pytest.raises(TypeError):
            join_types(x, y)


def test_compatible() -> None:
    assert compatible(SequenceType(FN, 3), SequenceType(TensorType("f32", (7, 3)), "L"))
    assert not compatible(SequenceType(F3, 3), SequenceType(F3, 4))
    assert not compatible(SequenceType(F3), SequenceType(TensorType("f32", (4,))))
    assert compatible(OptionalType(F3), OptionalType(TensorType("f32", None)))
    assert not compatible(OptionalType(F3), F3)
    assert SequenceType(F3, "2*L").length == 2 * sym("L") == parse_dim("2*L")


def test_a_sequence_holds_tensors_only() -> None:
    with pytest.raises(TypeError):
        SequenceType(SequenceType(F3))  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        OptionalType(OptionalType(F3))  # type: ignore[arg-type]


# --- graphs over sequences ------------------------------------------------------------------------
def graph(arg_types: list[Any], body: Callable[[Graph, list[Node]], list[Node]], name: str = "g") -> Graph:
    g = Graph(name, arg_types, [f"a{k}" for k in range(len(arg_types))])
    outs = body(g, list(g.args))
    ret = g.add("Return", outs, g.start_block)
    g.end_block.append_input(ret)
    nx.verify(g)
    back = nx.parse(nx.print_graph(g))  # the round trip, as for every graph
    nx.verify(back)
    assert nx.ir.structurally_equal(g, back)
    return g


def i64(g: Graph, v: int) -> Node:
    return g.add("Constant", [], g.start_block, {"value": np.array(v, np.int64)})


def test_every_op_against_python_lists() -> None:
    seq_t = SequenceType(TensorType("f64", ("R", 2)))

    def body(g: Graph, a: list[Node]) -> list[Node]:
        b = g.start_block
        s, x, p = a
        ins = g.add("SequenceInsert", [s, x, p], b)
        back = g.add("SequenceInsert", [ins, x], b)
        at = g.add("SequenceAt", [back, p], b)
        erased = g.add("SequenceErase", [back, p], b)
        last_gone = g.add("SequenceErase", [erased], b)
        length = g.add("SequenceLength", [back], b)
        cat = g.add("ConcatFromSequence", [back], b, {"axis": 0})
        pair = g.add("SequenceConstruct", [x, x], b)
        stacked = g.add("ConcatFromSequence", [pair], b, {"axis": -1, "new_axis": True})
        empty = g.add("SequenceEmpty", [], b, {"dtype": "f64"})
        one = g.add("SequenceInsert", [empty, x], b)
        return [ins, at, erased, last_gone, length, cat, stacked, one]

    g = graph([seq_t, TensorType("f64", (1, 2)), scalar("i64")], body)
    assert str(g.result_types[4]) == "i64" and str(g.result_types[7]) == "seq<f64[1, 2], 1>"
    for _ in range(20):
        n = int(rng.integers(0, 5))
        s = [rng.normal(size=(int(rng.integers(0, 4)), 2)) for _ in range(n)]
        x = rng.normal(size=(1, 2))
        p = int(rng.integers(-n, n + 1))
        ins, at, erased, last_gone, length, cat, stacked, one = g(s, x, p)
        want = list(s)
        want.insert(p if p >= 0 else p + n, x)  # Python's insert: before position p
        _same(ins, want)
        back = [*want, x]
        np.testing.assert_array_equal(at, back[p])
        erased_want = list(back)
        del erased_want[p]
        _same(erased, erased_want)
        _same(last_gone, erased_want[:-1])
        assert length == len(back) and np.asarray(length).dtype == np.int64
        np.testing.assert_array_equal(cat, np.concatenate(back, axis=0))
        np.testing.assert_array_equal(stacked, np.stack([x, x], axis=-1))
        _same(one, [x])


def _same(got: Any, want: list[Any]) -> None:
    assert isinstance(got, list) and len(got) == len(want)
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize(("shape", "axis", "split", "keepdims"), [
    ((5, 3), 0, None, True), ((5, 3), 1, None, False), ((7, 2), 0, 3, True), ((6, 2), -2, 2, True),
    ((4, 6), 1, [1, 0, 5], True), ((4, 0), 1, None, True), ((3, 4), 0, [3], False),
])
def test_split_to_sequence_against_numpy(shape: tuple[int, ...], axis: int, split: Any, keepdims: bool) -> None:
    x = rng.normal(size=shape).astype(np.float32)

    def body(g: Graph, a: list[Node]) -> list[Node]:
        ins = [a[0]] + ([] if split is None else [g.add("Constant", [], g.start_block,
                                                        {"value": np.array(split, np.int64)})])
        s = g.add("SplitToSequence", ins, g.start_block, {"axis": axis, "keepdims": keepdims})
        return [s, g.add("SequenceLength", [s], g.start_block)]

    g = graph([TensorType("f32", shape)], body)
    n = shape[axis]
    if split is None:
        want = [np.take(x, [k], axis=axis) if keepdims else np.take(x, k, axis=axis) for k in range(n)]
    elif np.ndim(split) == 0:
        want = np.array_split(x, range(split, n, split), axis=axis)
    else:
        want = np.split(x, np.cumsum(split)[:-1], axis=axis)
    got, length = g(x)
    _same(got, want)
    assert length == len(want)
    t = g.result_types[0]
    assert isinstance(t, SequenceType)
    if isinstance(t.length, int):  # the type rule's length, where it knows it, is the run's
        assert t.length == len(want)
    for piece in got:
        assert compatible(TensorType("f32", piece.shape), t.elem)


def test_optionals() -> None:
    def body(g: Graph, a: list[Node]) -> list[Node]:
        b = g.start_block
        (o,) = a
        wrapped = g.add("Optional", [g.add("OptionalGetElement", [o], b)], b)
        empty = g.add("OptionalEmpty", [], b, {"dtype": "i32", "sequence": True})
        return [g.add("OptionalHasElement", [o], b), wrapped, g.add("OptionalHasElement", [empty], b), empty]

    g = graph([OptionalType(TensorType("i32", (2,)))], body)
    assert str(g.result_types[3]) == "opt<seq<i32[...]>>"
    has, wrapped, has_empty, empty = g(np.array([1, 2], np.int32))
    assert has and not has_empty and empty is None
    np.testing.assert_array_equal(wrapped, [1, 2])
    with pytest.raises(nx.NexusRuntimeError, match="OptionalGetElement.*the optional is empty"):
        g(None)


@pytest.mark.parametrize(("position", "n"), [(3, 3), (-4, 3), (0, 0)])
def test_a_position_out_of_range_names_the_node(position: int, n: int) -> None:
    g = graph([SequenceType(F3), scalar("i64")],
              lambda g, a: [g.add("SequenceAt", a, g.start_block, name="picked")])
    with pytest.raises(nx.NexusRuntimeError, match=r"SequenceAt %picked.*out of range"):
        g([np.zeros(3, np.float32)] * n, position)


def test_type_rules_refuse_what_does_not_fit() -> None:
    g = Graph("g", [SequenceType(F3, 0), TensorType("i64", (3,)), F3], ["s", "x", "f"])
    s, x, f = g.args
    b = g.start_block
    with pytest.raises(OpTypeError, match="holds f32"):
        g.add("SequenceInsert", [s, x], b)
    with pytest.raises(OpTypeError, match="one dtype"):
        g.add("SequenceConstruct", [f, x], b)
    with pytest.raises(OpTypeError, match="position"):
        g.add("SequenceAt", [s, f], b)
    with pytest.raises(OpTypeError, match="empty"):
        g.add("SequenceErase", [s], b)
    with pytest.raises(OpTypeError, match="must be a sequence"):
        g.add("SequenceLength", [f], b)
    with pytest.raises(OpTypeError, match="must be an optional"):
        g.add("OptionalGetElement", [s], b)
    with pytest.raises(OpTypeError, match="at most 3"):
        g.add("SequenceInsert", [s, f, x, x], b)


def test_the_verifier_checks_sequence_types() -> None:
    g = Graph("g", [SequenceType(F3)], ["s"])
    s = g.args[0]
    n = g.add("SequenceConstruct", [g.add("SequenceAt", [s, i64(g, 0)], g.start_block)], g.start_block,
              type=SequenceType(F3, 2))  # the rule gives length 1
    g.end_block.append_input(g.add("Return", [n], g.start_block))
    with pytest.raises(nx.VerifyError, match=r"has type seq<f32\[3\], 2> but its op.s rule gives seq<f32\[3\], 1>"):
        nx.verify(g)


# --- the call boundary ------------------------------------------------------------------------------
def test_the_boundary_takes_lists_and_none() -> None:
    g = graph([SequenceType(TensorType("f32", ("H", 3)), "N"), TensorType("f32", ("N",)),
               OptionalType(SequenceType(scalar("i64")))],
              lambda g, a: [g.add("SequenceLength", [a[0]], g.start_block),
                            g.add("OptionalHasElement", [a[2]], g.start_block)])
    x = np.zeros(2, np.float32)
    # Element symbols are per element: H may differ between them.
    assert g([np.ones((1, 3)), np.ones((4, 3))], x, None) == (2, False)
    assert g((np.ones((1, 3)),) * 2, x, [1, 2, 3]) == (2, True)
    for args, why in [
        (([np.ones((1, 3))], x, None), r"argument 1 'a1' binds N = 2 .* argument 0 'a0' \(its length\) bound N = 1"),
        (([np.ones((1, 4))] * 2, x, None), r"argument 0 \(%a0\), element 0 has size 4 in dim 1"),
        (([np.ones(3)] * 2, x, None), r"element 0 has rank 1"),
        ((np.ones((2, 1, 3)), x, None), "must be a list of arrays"),
        (([np.ones((1, 3))] * 2, x, [1.5]), "cannot be passed as i64"),
        (([np.ones((1, 3), np.float64)] * 2, x, np.int64(3)), "must be a list of arrays"),
    ]:
        with pytest.raises(BindingError, match=why):
            g(*args)


def test_a_fixed_length_is_checked() -> None:
    g = graph([SequenceType(F3, 2)], lambda g, a: [g.add("SequenceLength", a, g.start_block)])
    assert g([np.zeros(3)] * 2) == 2
    with pytest.raises(BindingError, match="holds 3 tensors"):
        g([np.zeros(3)] * 3)


# --- backends ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("backend", ["xla", "llvm"])
def test_tensor_only_backends_refuse_by_name(backend: str) -> None:
    require({"xla": "jax", "llvm": "llvmlite"}[backend], backend)
    g = graph([TensorType("f32", (2, 3))], lambda g, a: [g.add(
        "ConcatFromSequence", [g.add("SplitToSequence", a, g.start_block, {"axis": 0}, name="parts")],
        g.start_block, {"axis": 0})])
    with pytest.raises(ContainersUnsupportedError, match=rf"backend '{backend}' holds no sequence or optional "
                                                          r"values: SplitToSequence %parts in \^entry"):
        nx.compile(g, backend=backend)
    h = graph([SequenceType(F3)], lambda g, a: [g.add("Identity", a, g.start_block)])
    with pytest.raises(ContainersUnsupportedError, match=r"Proj %a0 .* makes a seq<f32\[3\]>"):
        nx.compile(h, backend=backend)


def test_auto_keeps_sequences_on_the_python_backend() -> None:
    g = graph([TensorType("f32", (4, 3))], lambda g, a: [g.add(
        "ConcatFromSequence", [g.add("SplitToSequence", a, g.start_block, {"axis": 1, "keepdims": True})],
        g.start_block, {"axis": 0})])
    x = rng.normal(size=(4, 3)).astype(np.float32)
    want = np.concatenate(np.split(x, 3, axis=1), axis=0)
    np.testing.assert_array_equal(nx.compile(g, backend="auto")(x), want)
    np.testing.assert_array_equal(g(x), want)


@pytest.mark.parametrize("mode", ["graph", "tape"])
def test_grad_through_a_sequence_is_refused_by_name(mode: str) -> None:
    from nexus.autodiff import GradError

    def body(g: Graph, a: list[Node]) -> list[Node]:
        b = g.start_block
        parts = g.add("SplitToSequence", a, b, {"axis": 0, "keepdims": False}, name="parts")
        y = g.add("ConcatFromSequence", [parts], b, {"axis": 0})
        return [g.add("ReduceSum", [g.add("Mul", [y, y], b)], b)]

    g = graph([TensorType("f64", (4, 3))], body)
    with pytest.raises(GradError, match=r"SplitToSequence %parts in \^entry: gradient requested through op "
                                        r"SplitToSequence, whose result is a seq<f64\[3\], 4>: sequences and "
                                        r"optionals are not differentiable"):
        nx.grad(g, mode=mode)(np.ones((4, 3)))
    h = graph([SequenceType(TensorType("f64", (3,)))], lambda g, a: [g.add("Identity", a, g.start_block)])
    with pytest.raises(GradError, match=r"argument 0 \(%a0\) is a seq<f64\[3\]>: nx.grad differentiates with "
                                        r"respect to tensors only"):
        nx.grad(h, mode=mode)([np.ones(3)])


def test_the_picture_labels_sequence_edges_with_their_type() -> None:
    from nexus.viz.dot import to_dot

    g = graph([TensorType("f32", (4, 3))], lambda g, a: [g.add(
        "ConcatFromSequence", [g.add("SplitToSequence", a, g.start_block, {"axis": 0})], g.start_block, {"axis": 0})])
    edges = [line for line in to_dot(g).splitlines() if "->" in line and "seq<" in line]
    assert len(edges) == 1 and 'label=" seq<f32[1, 3], 4>"' in edges[0]


# --- the run-time value: appends share a list, values stay immutable ------------------------------
def test_appends_share_a_list_and_values_stay_immutable() -> None:
    from nexus.ops.sequence import SeqValue

    base = SeqValue([np.float64(0)]).appended(np.float64(1))
    a = base.appended(np.float64(2))  # extends the shared list in place
    b = base.appended(np.float64(3))  # position 2 is taken: a copy
    assert list(base) == [0, 1] and list(a) == [0, 1, 2] and list(b) == [0, 1, 3]
    assert a._items is base._items and b._items is not base._items
    shorter = SeqValue(a._items, 1)  # what erasing the last two would give
    assert list(shorter) == [0] and list(shorter.appended(np.float64(9))) == [0, 9] and list(a) == [0, 1, 2]
    assert len(a) == 3 and a[-1] == 2 and a[1:] == [1, 2]
    with pytest.raises(IndexError):
        a[3]


def test_concurrent_appends_to_one_value_each_see_their_own() -> None:
    import threading

    from nexus.ops.sequence import SeqValue

    for _ in range(20):
        parent = SeqValue([np.zeros(1)])
        results: dict[int, Any] = {}

        def append(k: int) -> None:
            results[k] = parent.appended(np.full(1, k))

        threads = [threading.Thread(target=append, args=(k,)) for k in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert list(parent) == [0]
        for k, v in results.items():
            assert [float(x[0]) for x in v] == [0.0, float(k)]


def test_programs_that_branch_a_sequence_see_their_own_values() -> None:
    """Two appends to one value, an erase of the last, then appends again: each result as
    Python's lists compute it, and the caller gets plain lists."""

    def body(g: Graph, a: list[Node]) -> list[Node]:
        b = g.start_block
        s, x, y = a
        sx = g.add("SequenceInsert", [s, x], b)
        sy = g.add("SequenceInsert", [s, y], b)
        cut = g.add("SequenceErase", [sx], b)
        cy = g.add("SequenceInsert", [cut, y], b)
        return [s, sx, sy, cut, cy]

    g = graph([SequenceType(F3), F3, F3], body)
    s = [np.full(3, k, np.float32) for k in range(3)]
    x, y = np.ones(3, np.float32), np.full(3, 7, np.float32)
    out = g(s, x, y)
    assert all(type(v) is list for v in out)
    for got, want in zip(out, [s, s + [x], s + [y], s, s + [y]]):
        _same(got, want)


def test_a_call_passes_sequences_both_ways() -> None:
    callee = graph([SequenceType(F3), F3], lambda g, a: [g.add("SequenceInsert", a, g.start_block)], "callee")
    caller = graph([SequenceType(F3), F3], lambda g, a: [g.add(
        "SequenceLength", [g.add("Call", a, g.start_block, {"callee": callee})], g.start_block)])
    assert caller([np.zeros(3, np.float32)] * 2, np.ones(3, np.float32)) == 3


def test_the_dsl_builds_sequence_ops_from_the_registry() -> None:
    with nx.function("g", x=("f32", (3,))) as f:
        (x,) = f.args
        s = nx.sequence_insert(nx.sequence_construct(x, x * 2.0), x + 1.0)
        f.returns(nx.concat_from_sequence(s, axis=0, new_axis=True), nx.sequence_length(s))
    assert "seq<f32[3], 3>" in nx.print_graph(f.graph)
    x = rng.normal(size=3).astype(np.float32)
    stacked, n = nx.run(f.graph, x)
    np.testing.assert_array_equal(stacked, np.stack([x, x * 2, x + 1]))
    assert n == 3


def test_shape_inference_reads_a_symbolic_length() -> None:
    """Split x[N, 3] into N pieces: the length is N, so Range(0, SequenceLength) is [N]."""

    def body(g: Graph, a: list[Node]) -> list[Node]:
        b = g.start_block
        n = g.add("SequenceLength", [g.add("SplitToSequence", a, b, {"axis": 0, "keepdims": False})], b)
        return [g.add("Range", [i64(g, 0), n, i64(g, 1)], b)]

    g = graph([TensorType("f32", ("N", 3))], body)
    assert g.result_types[0].shape != (sym("N"),)  # type: ignore[union-attr]  # the op's rule alone cannot know
    nx.infer_shapes(g)
    assert g.result_types[0] == TensorType("i64", ("N",))
    np.testing.assert_array_equal(g(np.zeros((5, 3), np.float32)), np.arange(5))
