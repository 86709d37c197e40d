"""The backend seam: nx.compile on graphs, DSL functions and scripts; the backend and
lowering registries and their errors; the call boundary shared by every backend."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

import nexus as nx
from nexus import seeds
from nexus.backends import base
from nexus.backends.base import (
    BackendError,
    Executable,
    MissingLoweringError,
    lowering_table,
    register_backend,
    register_lowering,
)
from nexus.ir import Graph, SourceLoc, TensorType
from nexus.ir.binding import BindingError, signature


def _skip5(n: int) -> int:
    s, i = 0, 1
    while i <= n:
        if i == 5:
            i += 1
            continue
        s += i
        i += 1
        if s > 25:
            break
    return s


@nx.script
def skip5(n: int) -> Any:
    s = 0
    i = 1
    while i <= n:
        if i == 5:
            i += 1
            continue
        s += i
        i += 1
        if s > 25:
            break
    return s


def test_compile_a_graph() -> None:
    exe = nx.compile(seeds.skip5_loop())
    assert isinstance(exe, Executable) and exe.backend == "python"
    assert exe() == _skip5(10)
    assert "def " in exe.source()


def test_compile_a_dsl_function() -> None:
    with nx.function("twice", x="f32") as f:
        f.returns(f.args[0] * 2.0)
    exe = nx.compile(f)
    assert exe(np.float32(1.5)) == np.float32(3.0)


def test_compile_a_script_specialises_per_signature() -> None:
    exe = nx.compile(skip5)
    for n in (0, 3, 5, 7, 10, 20):
        got = exe(n)
        assert got == _skip5(n) and type(got) is int
    assert exe.graph is skip5.graph_for(10)

    @nx.script
    def double(x: Any) -> Any:
        return x * 2

    exe = nx.compile(double)
    with pytest.raises(BackendError, match="call it once"):
        exe.source()
    for x in (np.arange(3, dtype=np.float32), np.arange(6, dtype=np.int64).reshape(2, 3), 4, 2.5):
        np.testing.assert_array_equal(exe(x), np.asarray(x) * 2)
    assert "def " in exe.source()


def test_run_and_call_go_through_the_backend() -> None:
    g = seeds.skip5_loop()
    assert nx.run(g) == g() == nx.compile(g)() == _skip5(10)
    assert nx.compile(g) is nx.compile(g)  # one executable per graph version and options


def test_an_executable_follows_graph_edits() -> None:
    g = Graph("inc", [TensorType("i64", ())])
    one = g.add("Constant", [], g.start_block, {"value": np.array(1, np.int64)})
    add = g.add("Add", [g.args[0], one], g.start_block)
    g.end_block.append_input(g.add("Return", [add], g.start_block))
    exe = nx.compile(g)
    assert exe(41) == 42
    add.set_input(1, g.add("Constant", [], g.start_block, {"value": np.array(10, np.int64)}))
    assert exe(41) == 51


def test_unknown_backend_names_the_known_ones() -> None:
    with pytest.raises(BackendError, match=r"unknown backend 'tpu' \(known: .*python"):
        nx.compile(seeds.ifelse(), backend="tpu")


def test_unknown_options_name_the_known_ones() -> None:
    assert nx.compile(seeds.skip5_loop(), max_iterations=100, parallel=False)() == _skip5(10)
    with pytest.raises(BackendError, match=r"no option 'fast' \(its options: max_iterations, parallel\)"):
        nx.compile(seeds.ifelse(), fast=True)


def test_compile_refuses_other_things() -> None:
    with pytest.raises(TypeError, match="takes a Graph, a DSL function or an @nx.script function"):
        nx.compile(lambda x: x)


@pytest.fixture
def strict_backend() -> Iterator[str]:
    """A backend that lowers every data node through its table (as XLA and LLVM will)."""
    name = "strict-test"

    class Strict(Executable):
        backend = name

        def __init__(self, g: Graph):
            self.graph = g
            table = lowering_table(name)
            self.rules = [table.rule(n) for n in g.nodes() if n.op.kind == "data" and n.op.name != "Constant"]

        def __call__(self, *args: Any) -> Any:
            return len(self.rules)

        def source(self) -> str:
            return ""

    register_backend(name, Strict)
    try:
        yield name
    finally:
        base.BACKENDS.pop(name, None)
        base.TABLES.pop(name, None)


def test_missing_lowering_names_op_node_line_and_backend(strict_backend: str) -> None:
    g = Graph("f", [TensorType("f32", ())], ["x"])
    y = g.add("Exp", [g.args[0]], g.start_block, name="y", loc=SourceLoc("model.py", 12, 4))
    g.end_block.append_input(g.add("Return", [y], g.start_block))
    with pytest.raises(MissingLoweringError) as info:
        nx.compile(g, backend=strict_backend)
    msg = str(info.value)
    assert "'strict-test'" in msg and "op Exp" in msg and "%y" in msg and "model.py:12" in msg
    register_lowering(strict_backend, "Exp")(lambda node: None)
    assert nx.compile(g, backend=strict_backend)(1.0) == 1


def test_lowering_rules_only_for_registered_ops(strict_backend: str) -> None:
    with pytest.raises(ValueError, match="unknown op.*NoSuchOp"):
        register_lowering(strict_backend, "NoSuchOp")
    register_lowering(strict_backend, "Exp")(lambda node: None)
    with pytest.raises(ValueError, match="two lowering rules"):
        register_lowering(strict_backend, "Exp")(lambda node: None)


def test_every_lowering_key_is_a_registered_op() -> None:
    assert "Add" in lowering_table("python")
    assert base.check_tables() == []
    bogus = {"python": base.LoweringTable("python", {"NoSuchOp": lambda n, a: None})}
    assert base.check_tables(bogus) == ["python:NoSuchOp"]


# --- the call boundary (nexus/ir/binding.py) ---------------------------------------------
def _graph(*types: TensorType) -> Graph:
    g = Graph("g", list(types))
    g.end_block.append_input(g.add("Return", list(g.args), g.start_block))
    return g


CASES = [
    (TensorType("i64", ()), [3, True, np.int64(-4), np.int32(7), np.array(5), np.uint8(200), 2**40]),
    (TensorType("i32", ()), [3, np.int64(-4), np.int32(7), np.array(5, np.int16)]),
    (TensorType("f32", ()), [1.5, 3, True, np.float64(0.1), np.float32(2.5), np.int64(7), np.array(0.3)]),
    (TensorType("f64", ()), [1.5, 3, np.float32(0.1), np.array(0.3, np.float16)]),
    (TensorType("bool", ()), [True, np.bool_(False), np.array(True)]),
    (TensorType("f32", (nx.ir.sym("N"),)), [np.arange(3, dtype=np.float32), np.arange(4.0), [1, 2], (0.5,)]),
    (TensorType("i64", (2, nx.ir.sym("M"))), [np.ones((2, 3), np.int64), np.ones((2, 1), np.int32), [[1], [2]]]),
    (TensorType("f32", None), [np.ones((2, 3), np.float32), 1.0, np.arange(4)]),
]


@pytest.mark.parametrize("t,values", CASES, ids=[str(t) for t, _ in CASES])
def test_conversion_agrees_with_numpy(t: TensorType, values: list[Any]) -> None:
    """Fast paths and the general path give what NumPy's own conversion gives."""
    convert = signature(_graph(t)).convert
    want = nx.ir.types.numpy_dtype(t.dtype)
    for x in values:
        (got,) = convert([x])
        oracle = np.asarray(x).astype(want)
        assert np.asarray(got).dtype == want and np.array_equal(np.asarray(got), oracle), (t, x, got)
        if t.shape == ():
            assert isinstance(got, np.generic)  # scalars are NumPy scalars, not 0-d arrays


def test_binding_errors_name_the_argument() -> None:
    N = nx.ir.sym("N")
    g = _graph(TensorType("i64", ()), TensorType("f32", (N, 2)), TensorType("f32", (N,)))
    convert = signature(g).convert
    ok = [1, np.zeros((3, 2), np.float32), np.zeros(3, np.float32)]
    assert len(convert(ok)) == 3
    with pytest.raises(BindingError, match="takes 3 arguments, got 2"):
        convert(ok[:2])
    with pytest.raises(BindingError, match=r"argument 0 \(%0\): argument of dtype float64 cannot be passed as i64"):
        convert([1.5, *ok[1:]])
    with pytest.raises(BindingError, match=r"argument 1 has rank 1"):
        convert([1, np.zeros(3, np.float32), ok[2]])
    with pytest.raises(BindingError, match=r"argument 1 has size 3 in dim 1"):
        convert([1, np.zeros((3, 3), np.float32), ok[2]])
    with pytest.raises(BindingError, match=r"argument 2 binds N = 4 \(dim 0\), but argument 1 bound N = 3"):
        convert([1, ok[1], np.zeros(4, np.float32)])
    with pytest.raises(BindingError, match="out of bounds|cannot be passed"):
        signature(_graph(TensorType("i32", ()))).convert([2**40])


def test_script_calls_specialise_on_numpy_scalars_and_no_arguments() -> None:
    """The call's fast path keys on argument classes: NumPy scalars of two dtypes are two
    signatures, and a function without arguments is one."""

    @nx.script
    def double(x: Any) -> Any:
        return x * 2

    for x in (np.float32(1.5), np.float64(1.5), np.int32(3), np.float32(2.5), 7, True):
        got = double(x)
        want = x * 2
        assert got == want and np.asarray(got).dtype == np.asarray(want).dtype, (x, got)

    @nx.script
    def seven() -> Any:
        return 3 + 4

    assert [seven() for _ in range(3)] == [7, 7, 7]
