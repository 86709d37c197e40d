"""Tape mode's record: cotangents are keyed by the identity of values, so the cases where
two values could be one object are checked here against hand-derived gradients (and
graph mode, which keys adjoints by node): a scalar max whose result *is* one of its
operands, one array passed for two differentiated arguments, a result that is an argument."""

from __future__ import annotations

import numpy as np
import pytest

import nexus as nx
from nexus.autodiff.tape import recorder
from nexus.ir.graph import Graph
from nexus.ir.types import TensorType

S = TensorType("f64", ())
V = TensorType("f64", (3,))


def test_a_max_that_returns_its_operand_keeps_the_operands_apart() -> None:
    """``max(x, y) + 3*y`` at a tie: the python backend's max returns the object ``y``
    itself, and the Maximum rule gives a tie's cotangent to x; y still gets its own 3."""
    g = Graph("tie", [S, S], ["x", "y"])
    e = g.start_block
    x, y = g.args
    m = g.add("Maximum", [x, y], e)
    three = g.add("Constant", [], e, {"value": np.array(3.0)})
    out = g.add("Add", [m, g.add("Mul", [three, y], e)], e)
    g.end_block.append_input(g.add("Return", [out], e))
    for a, b, want in ((0.5, 0.5, (1.0, 3.0)), (0.2, 0.7, (0.0, 4.0)), (0.9, 0.1, (1.0, 3.0))):
        for mode in ("tape", "graph"):
            got = nx.grad(g, argnums=(0, 1), mode=mode)(a, b)
            assert tuple(float(v) for v in got) == want, (mode, a, b)


def _sum_2x_3y() -> Graph:
    g = Graph("lin", [V, V], ["x", "y"])
    e = g.start_block
    x, y = g.args
    two = g.add("Constant", [], e, {"value": np.array(2.0)})
    three = g.add("Constant", [], e, {"value": np.array(3.0)})
    s = g.add("Add", [g.add("Mul", [x, two], e), g.add("Mul", [y, three], e)], e)
    g.end_block.append_input(g.add("Return", [g.add("ReduceSum", [s], e)], e))
    return g


@pytest.mark.parametrize("mode", ["tape", "graph"])
def test_one_array_for_two_arguments(mode: str) -> None:
    a = np.array([1.0, -2.0, 0.5])
    gx, gy = nx.grad(_sum_2x_3y(), argnums=(0, 1), mode=mode)(a, a)
    np.testing.assert_array_equal(gx, np.full(3, 2.0))
    np.testing.assert_array_equal(gy, np.full(3, 3.0))


@pytest.mark.parametrize("mode", ["tape", "graph"])
def test_a_result_that_is_another_argument(mode: str) -> None:
    """f(x, y) = y, called with one array for both: the cotangent of x is zero."""
    g = Graph("second", [V, V], ["x", "y"])
    g.end_block.append_input(g.add("Return", [g.args[1]], g.start_block))
    a = np.ones(3)
    _, fn = nx.vjp(g, a, a, argnums=0, mode=mode)
    np.testing.assert_array_equal(fn(np.full(3, 2.0))[0], np.zeros(3))


def test_the_record_holds_only_active_nodes() -> None:
    """Nodes that do not depend on a differentiated argument are not recorded."""
    g = _sum_2x_3y()
    rec = recorder(g, (0,))
    assert [n.op.name for n in rec.nodes] == ["Mul", "Add", "ReduceSum"]
    records, outs = rec.record(rec.arguments([np.ones(3), np.ones(3)]), None)
    assert [rec.nodes[r[0]].op.name for r in records] == ["Mul", "Add", "ReduceSum"]
    assert float(outs[0]) == 15.0


def _swaps(x, y, w, n):  # type: ignore[no-untyped-def]
    """A loop whose Phis swap (``a, b = b, a``): their copy is a cycle, one tuple
    assignment in the generated code that tape mode and its checkpoints run too."""
    a, b = x * w, y
    i = 0
    while i < n:
        a, b = b, a
        i += 1
    return np.sum(a * 2.0 + b * 3.0)


@pytest.mark.parametrize("checkpoint", [None, 1, 2])
def test_tape_mode_runs_the_backends_phi_copies(checkpoint: int | None) -> None:
    """Tape and checkpointed tape mode run the python backend's generated code, so a
    wrong Phi copy there fails here: the oracle is plain Python and finite differences."""
    f = nx.script(_swaps)
    x, y, w = np.array([0.5, -1.0, 2.0]), np.array([1.5, 0.25, -0.5]), 1.1
    for n in (0, 1, 3):
        value, grads = nx.value_and_grad(f, argnums=(0, 1), mode="tape", checkpoint=checkpoint)(x, y, w, n)
        assert np.isclose(value, _swaps(x, y, w, n))
        for k, arg in enumerate((x, y)):
            fd = np.zeros(3)
            for j in range(3):
                up, down = arg.copy(), arg.copy()
                up[j] += 1e-6
                down[j] -= 1e-6
                args_up, args_down = [x, y], [x, y]
                args_up[k], args_down[k] = up, down
                fd[j] = (_swaps(*args_up, w, n) - _swaps(*args_down, w, n)) / 2e-6
            np.testing.assert_allclose(grads[k], fd, rtol=1e-6, atol=1e-8)
