"""The stack type of graph-mode autodiff: its own kind (``stack``), not the empty tuple.

Checks the type's text form, its join rules, that the stack ops demand it, that the
verifier again lets tuples feed only Proj, and that a gradient graph with loops (whose
tape is a stack) verifies, prints ``stack``, parses back equal and runs to the values of
a plain-Python oracle.
"""

from __future__ import annotations

import numpy as np
import pytest

import nexus as nx
from nexus.autodiff import vjp_graph
from nexus.autodiff.examples import rnn
from nexus.ir.graph import Graph
from nexus.ir.opdef import OpTypeError
from nexus.ir.types import STACK, StackType, TensorType, TupleType, X, compatible, join_types, scalar
from nexus.ir.verify import VerifyError


def test_stack_is_its_own_kind() -> None:
    assert str(STACK) == "stack"
    assert StackType() == STACK and hash(StackType()) == hash(STACK)
    assert STACK != TupleType(())
    assert not isinstance(STACK, TupleType)


def test_join_and_compatible() -> None:
    assert join_types(STACK, STACK) == STACK
    assert compatible(STACK, STACK)
    for other in (TupleType(()), scalar("f32"), TensorType("i64", None), X):
        assert not compatible(STACK, other) and not compatible(other, STACK)
        with pytest.raises(TypeError, match="cannot join"):
            join_types(STACK, other)
    pair = TupleType((STACK, scalar("f64")))
    assert compatible(pair, TupleType((STACK, TensorType("f64", None))))
    assert not compatible(pair, TupleType((TupleType(()), scalar("f64"))))


def test_stack_ops_demand_a_stack() -> None:
    g = Graph("g", [scalar("f32")])
    b = g.start_block
    s = g.add("StackNew", [], b)
    assert s.type == STACK
    pushed = g.add("StackPush", [s, g.args[0]], b)
    assert pushed.type == STACK
    popped = g.add("StackPop", [pushed], b, {"dtype": "f32"})
    assert popped.type == TupleType((STACK, TensorType("f32", None)))
    with pytest.raises(OpTypeError, match="must be a stack"):
        g.add("StackPush", [g.args[0], g.args[0]], b)
    # The type the stacks used to have is no longer accepted.
    with pytest.raises(OpTypeError, match="must be a stack"):
        g.add("StackPop", [g.add("Identity", [g.args[0]], b, type=TupleType(()))], b, {"dtype": "f32"})


def _stack_text(stack_type: str) -> str:
    return f"""graph @g {{
^entry:
  %0 = Start : (f32)
  %x = Proj %0 {{num=0}} : f32
  %s = StackNew : {stack_type}
  %s1 = StackPush %s, %x : {stack_type}
  %p = StackPop %s1 {{dtype="f32"}} : ({stack_type}, f32)
  %top = Proj %p {{num=1}} : f32
  %r = Return %top : X
^exit(%r):
  End : X
}}
"""


def test_text_form_parses_verifies_and_runs() -> None:
    g = nx.parse(_stack_text("stack"))
    nx.verify(g)
    assert {n.type for n in g.nodes() if n.op.name in ("StackNew", "StackPush")} == {STACK}
    assert "StackNew : stack" in nx.print_graph(g)
    assert float(nx.run(g, np.float32(2.5))) == 2.5
    # The old spelling of a stack is a tuple now, and tuples feed only Proj.
    with pytest.raises((VerifyError, nx.ParseError), match="tuple|stack"):
        nx.verify(nx.parse(_stack_text("()")))


def test_unknown_type_names_stack() -> None:
    with pytest.raises(nx.ParseError, match="stack"):
        nx.parse(_stack_text("stak"))


def test_empty_tuple_feeding_a_non_proj_is_rejected() -> None:
    g = Graph("g", [scalar("f32")])
    b = g.start_block
    t = g.add("Identity", [g.args[0]], b, type=TupleType(()))
    y = g.add("Identity", [t], b, type=scalar("f32"))
    r = g.add("Return", [y], b)
    g.end_block.append_input(r)
    with pytest.raises(VerifyError, match="tuple"):
        nx.verify(g)


def _rnn_oracle(xs: np.ndarray, W: np.ndarray, U: np.ndarray, h0: np.ndarray, T: int) -> list[np.ndarray]:
    """Plain NumPy reverse mode of h = tanh(W x_t + U h), loss = sum(h)."""
    hs = [h0]
    for t in range(T):
        hs.append(np.tanh(W @ xs[t] + U @ hs[-1]))
    dW, dU, dh = np.zeros_like(W), np.zeros_like(U), np.ones_like(h0)
    for t in reversed(range(T)):
        da = dh * (1 - hs[t + 1] ** 2)
        dW += np.outer(da, xs[t])
        dU += np.outer(da, hs[t])
        dh = U.T @ da
    return [dW, dU, dh]


def test_gradient_graph_types_its_tape_as_stack() -> None:
    gg = vjp_graph(rnn(), (1, 2, 3), seed="ones")
    nx.verify(gg)
    stacky = [n for n in gg.nodes() if n.type == STACK]
    assert any(n.op.name == "Phi" for n in stacky) and any(n.op.name == "StackPush" for n in stacky)
    assert not any(n.type == TupleType(()) for n in gg.nodes())
    text = nx.print_graph(gg)
    assert ": stack" in text and ": ()" not in text
    back = nx.parse(text)
    nx.verify(back)
    again = nx.print_graph(back)
    assert nx.structurally_equal(nx.parse(again), back)
    rng = np.random.default_rng(7)
    D, H, T = 3, 4, 5
    args = [rng.normal(size=(T + 2, D)), rng.normal(size=(H, D)) * 0.5,
            rng.normal(size=(H, H)) * 0.5, rng.normal(size=H), T]
    got = nx.run(back, *args)[1:]
    for g_, want in zip(got, _rnn_oracle(*args)):
        np.testing.assert_allclose(g_, want, rtol=1e-9, atol=1e-12)
