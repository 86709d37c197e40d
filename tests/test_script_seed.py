"""Seed 001's @nx.script examples (and seed 000's programs written as scripts) against
plain Python and NumPy: the oracle is always the undecorated function or a NumPy loop."""

from __future__ import annotations

import operator
import textwrap
import types

import numpy as np
import pytest

import nexus as nx
from nexus import Tensor
from nexus.ir.printer import structural_diff
from nexus.testing.py_gen import trivial_phis
from nexus.viz import to_dot


def check_graph(g: nx.Graph) -> None:
    """Every script graph verifies, round-trips through the text form and draws."""
    nx.verify(g)
    assert not trivial_phis(g)  # Braun et al.: no Phi with one distinct input is left
    again = nx.parse(nx.print_graph(g))
    assert structural_diff(again, g) == ""
    dot = to_dot(g)
    assert "digraph" in str(dot)


@nx.script
def accumulate(x: Tensor, n: int) -> Tensor:
    y = x
    for i in range(n):
        y = y + i
    return y


@pytest.mark.parametrize("n", [0, 1, 5])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64])
def test_accumulate_matches_python(n: int, dtype: type) -> None:
    x = np.arange(4).astype(dtype)
    want = accumulate.fn(x, n)
    got = accumulate(x, n)
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)
    check_graph(accumulate.graph)


def test_accumulate_graph_has_loop_phis() -> None:
    accumulate(np.zeros(2, np.float32), 3)
    g = accumulate.graph
    phis = [n for n in g.nodes() if n.op.name == "Phi"]
    assert {p.name for p in phis} >= {"y"}  # y is carried by a Phi at the loop header
    structural = {g.start, g.end, *g.args}
    missing = [n for n in g.nodes() if n.loc is None and n not in structural]
    assert not missing, missing


@nx.script
def ifelse():
    a = 1.0
    b = 2.0
    if a < b:
        c = a + b
    else:
        c = a - b
    d = c * 2.0
    return d


def test_ifelse() -> None:
    assert ifelse() == ifelse.fn() == 6.0
    check_graph(ifelse.graph)


@nx.script
def skip5():
    total = 0
    i = 1
    while i <= 10:
        if i == 5:
            i = i + 1
            continue
        total = total + i
        i = i + 1
        if total > 25:
            break
    return total


def test_skip5_is_31() -> None:
    assert skip5.fn() == 31
    assert skip5() == 31
    assert isinstance(skip5(), int)
    check_graph(skip5.graph)


@nx.script
def first_example(x: float, y: float):
    limit = 100.0
    step = 1.0
    while x < limit:
        s = x + y
        product = x * y
        if s > 50.0:
            x = x + step
        else:
            if product < 30.0:
                break
            else:
                continue
    final_result = x * y
    return final_result


@pytest.mark.parametrize("y", [50.0, 2.0])
def test_seed000_first_example(y: float) -> None:
    assert first_example(5.0, y) == first_example.fn(5.0, y) == {50.0: 5000.0, 2.0: 10.0}[y]
    check_graph(first_example.graph)


def test_seed000_first_example_endless_hits_iteration_limit() -> None:
    g = first_example.graph_for(5.0, 10.0)
    with pytest.raises(nx.NexusRuntimeError, match="max_iterations"):
        nx.run(g, 5.0, 10.0, max_iterations=1000)


def rnn_cell(x, h, W, U):
    return nx.tanh(nx.matmul(W, x) + nx.matmul(U, h))


@nx.script
def rnn(x_sequence: Tensor["T", "D"], h0: Tensor["H"], W: Tensor["H", "D"],  # noqa: F821, UP037
        U: Tensor["H", "H"], T: int) -> Tensor:  # noqa: F821, UP037  (dim names, not forward references)
    h = h0
    t = 0
    while t < T:
        x_t = x_sequence[t]
        h = rnn_cell(x_t, h, W, U)
        t = t + 1
    return h


def rnn_cell_np(x, h, W, U):
    return np.tanh(W @ x + U @ h)


@nx.script
def rnn_np(x_sequence, h0, W, U, T: int):
    h = h0
    t = 0
    while t < T:
        x_t = x_sequence[t]
        h = rnn_cell_np(x_t, h, W, U)
        t = t + 1
    return h


def _rnn_inputs(T: int = 7, D: int = 5, H: int = 4, dtype: type = np.float32) -> tuple:
    rng = np.random.default_rng(7)
    return (rng.standard_normal((T, D)).astype(dtype), rng.standard_normal(H).astype(dtype),
            rng.standard_normal((H, D)).astype(dtype), rng.standard_normal((H, H)).astype(dtype), T)


def test_rnn_matches_numpy_loop() -> None:
    xs, h0, W, U, T = _rnn_inputs()
    want = h0
    for t in range(T):
        want = np.tanh(W @ xs[t] + U @ want)
    got = rnn(xs, h0, W, U, T)
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    g = rnn.graph
    assert not [n for n in g.nodes() if n.op.name == "Call"], "undecorated helpers are inlined"
    assert {"MatMul", "Tanh", "Gather"} <= {n.op.name for n in g.nodes()}
    check_graph(g)


def test_rnn_same_function_run_eagerly() -> None:
    xs, h0, W, U, T = _rnn_inputs(dtype=np.float64)
    np.testing.assert_allclose(rnn_np(xs, h0, W, U, T), rnn_np.fn(xs, h0, W, U, T), rtol=1e-12)
    # A second signature (f32) is a second graph; sizes do not make new ones.
    rnn_np(*_rnn_inputs(dtype=np.float32))
    rnn_np(*_rnn_inputs(T=3, D=2, H=6, dtype=np.float32))
    assert len(rnn_np.graphs) == 2


def test_rnn_named_dims_are_checked() -> None:
    xs, h0, W, U, T = _rnn_inputs()
    with pytest.raises(nx.BindingError, match=r"rnn\(\): argument .* binds H = 4 .* bound H = 3"):
        rnn(xs, np.zeros(3, np.float32), W, U, T)


def test_rnn_symbolic_shapes_in_graph() -> None:
    g = rnn.graph
    text = nx.print_graph(g)
    assert "f32[T, D]" in text and "f32[H]" in text


# Seed 001, section 4.3, examples 1 and 2, copied verbatim (the seed writes them at module
# level with `import nexus`); each becomes a function body that returns the seed's result.
SEED001_IFELSE = """\
a = nexus.constant(1.0)
b = nexus.constant(2.0)
if nexus.less(a, b):
    c = nexus.add(a, b)
else:
    c = nexus.subtract(a, b)
d = nexus.multiply(c, 2.0)
"""
SEED001_SKIP5 = """\
sum = nexus.constant(0)
i = nexus.constant(1)
while i <= 10:
    if i == 5:
        i = i + 1
        continue
    sum = sum + i
    i = i + 1
    if sum > 25:




        break
result = sum
"""


def _as_function(body: str, result: str) -> str:
    return "def f():\n" + textwrap.indent(body, "    ") + f"    return {result}\n"


# The oracle: the same source as plain Python, nexus's functions being Python's operators
# and nexus.constant the identity.
PLAIN_NEXUS = types.SimpleNamespace(constant=lambda v: v, less=operator.lt, add=operator.add,
                                    subtract=operator.sub, multiply=operator.mul)


@pytest.mark.parametrize("body,result,want", [(SEED001_IFELSE, "d", 6.0), (SEED001_SKIP5, "result", 31)],
                         ids=["ifelse", "skip5"])
def test_seed001_examples_verbatim(body: str, result: str, want: float) -> None:
    src = _as_function(body, result)
    namespace: dict = {"nexus": PLAIN_NEXUS}
    exec(compile(src, "<seed 001>", "exec"), namespace)  # noqa: S102  (the seed's own example)
    expected = namespace["f"]()
    assert expected == want and type(expected) is type(want)
    f = nx.script_source(src, "f", {"nexus": nx})
    got = f()
    assert got == expected and type(got) is type(expected)
    check_graph(f.graph)


def test_script_constant_takes_a_dtype() -> None:
    f = nx.script_source("def f(x):\n    return x + nx.constant(1, dtype=np.int32)\n", "f", {"nx": nx, "np": np})
    got = f(np.arange(3, dtype=np.int32))
    want = np.arange(3, dtype=np.int32) + np.int32(1)
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)
    g = nx.script_source("def f(x):\n    return x * nx.constant(W) + nx.constant([1, 2, 3], dtype=np.float32)\n",
                         "f", {"nx": nx, "np": np, "W": np.full(3, 2.0, np.float32)})
    want = np.arange(3, dtype=np.float32) * np.float32(2) + np.array([1, 2, 3], np.float32)
    got = g(np.arange(3, dtype=np.float32))
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, want)
