"""The SSA builder (nexus.ir.cons) used directly through the Graph API, as an importer
would: blocks made with ``g.new_block``, variables bound per block, loop headers sealed
after their bodies.  Oracle: each graph runs on the interpreter and must agree with the
plain Python function it was built from."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import nexus as nx
from nexus.ir import Block, Graph, Node, scalar, verify
from nexus.ir.cons import SSABuilder, SSAError, UndefinedUse

I64 = scalar("i64")


class Fn:
    """A function under construction: its graph, the builder and the current block."""

    def __init__(self, name: str, params: list[str], ssa: type[SSABuilder[str]] = SSABuilder):
        self.g = Graph(name, [I64] * len(params), params)
        self.ssa = ssa(self.g)
        self.block: Block = self.g.start_block
        for p, arg in zip(params, self.g.args):
            self.ssa.set_value(p, self.block, arg)

    def const(self, value: int) -> Node:
        return self.g.add("Constant", [], self.g.start_block, {"value": np.array(value, np.int64)})

    def op(self, name: str, *inputs: Node) -> Node:
        return self.g.add(name, list(inputs), self.block)

    def get(self, var: str) -> Node:
        value = self.ssa.get_value(var, self.block)
        assert value is not None, var
        return value

    def set(self, var: str, value: Node) -> None:
        self.ssa.set_value(var, self.block, value)

    def jmp(self) -> Node:
        return self.g.add("Jmp", [], self.block)

    def branch(self, c: Node) -> tuple[Node, Node]:
        """End the block with a Cond on ``c``: its (true, false) exits."""
        cond = self.g.add("Cond", [c], self.block)
        false = self.g.add("Proj", [cond], self.block, {"num": 0})
        true = self.g.add("Proj", [cond], self.block, {"num": 1})
        return true, false

    def enter(self, name: str, preds: list[Node], seal: bool = True) -> Block:
        """Make a block with ``preds`` the current one; sealed unless it heads a loop."""
        self.block = self.g.new_block(name, preds)
        if seal:
            self.ssa.seal(self.block)
        return self.block

    def ret(self, value: Node) -> nx.Graph:
        """Return ``value``; finish SSA (``problems``: its live undefined uses) and verify."""
        self.g.end_block.append_input(self.g.add("Return", [value], self.block))
        self.problems = self.ssa.finish()
        verify(self.g)
        return self.g


def phis(g: Graph, name: str | None = None) -> list[Node]:
    return [n for n in g.nodes() if n.op.name == "Phi" and (name is None or n.name == name)]


def test_diamond_joins_only_what_differs() -> None:
    def py(a: int, b: int) -> int:
        x, y = a, b
        if a < b:
            x, y = a + b, b
        return x * 2 + y

    f = Fn("diamond", ["a", "b"])
    f.set("x", f.get("a"))
    f.set("y", f.get("b"))
    true, false = f.branch(f.op("Less", f.get("a"), f.get("b")))
    f.enter("then", [true])
    f.set("x", f.op("Add", f.get("a"), f.get("b")))
    f.set("y", f.get("b"))  # the same node on both paths: no Phi
    f.enter("join", [f.jmp(), false])
    g = f.ret(f.op("Add", f.op("Mul", f.get("x"), f.const(2)), f.get("y")))

    assert [p.name for p in phis(g)] == ["x"]
    for a, b in itertools.product(range(-2, 3), repeat=2):
        assert int(nx.run(g, a, b)) == py(a, b), (a, b)


def _sum_loop(declare: bool) -> tuple[Fn, Block]:
    """``i = s = 0; while i < n: s += i; i += 1``, the header sealed after the body;
    returns the function after the back edge is added but before sealing."""
    f = Fn("sum", ["n"])
    f.set("i", f.const(0))
    f.set("s", f.const(0))
    header = f.enter("header", [f.jmp()], seal=False)
    if declare:
        f.ssa.declare_assigned(header, ["i", "s"])
    true, false = f.branch(f.op("Less", f.get("i"), f.get("n")))
    f.enter("body", [true])
    f.set("s", f.op("Add", f.get("s"), f.get("i")))
    f.set("i", f.op("Add", f.get("i"), f.const(1)))
    header.append_input(f.jmp())
    f.enter("exit", [false])
    return f, header


@pytest.mark.parametrize("declare", [False, True], ids=["phi-for-n-then-removed", "n-declared-invariant"])
def test_loop_header_sealed_after_its_body(declare: bool) -> None:
    def py(n: int) -> int:
        i = s = 0
        while i < n:
            s += i
            i += 1
        return s

    f, header = _sum_loop(declare)
    # Before sealing, reading n at the header made an incomplete Phi unless declared invariant.
    assert sorted(p.name or "" for p in header.phis) == (["i", "s"] if declare else ["i", "n", "s"])
    f.ssa.seal(header)
    assert sorted(p.name or "" for p in header.phis) == ["i", "s"]  # n's Phi(n, itself) was trivial
    assert all(p.num_inputs == 2 for p in header.phis)
    g = f.ret(f.get("s"))
    for n in range(-1, 7):
        assert int(nx.run(g, n)) == py(n), n


def test_wrongly_declared_invariant_is_caught_at_sealing() -> None:
    f2 = Fn("sum", ["n"])
    f2.set("i", f2.const(0))
    header = f2.enter("header", [f2.jmp()], seal=False)
    f2.ssa.declare_assigned(header, [])  # wrong: the body assigns i
    true, _ = f2.branch(f2.op("Less", f2.get("i"), f2.get("n")))
    f2.enter("body", [true])
    f2.set("i", f2.op("Add", f2.get("i"), f2.const(1)))
    header.append_input(f2.jmp())
    with pytest.raises(SSAError, match="'i' changes around the loop"):
        f2.ssa.seal(header)


def test_trivial_phi_cascade_removes_the_replacement_too() -> None:
    """x never changes in two nested loops.  The outer header is sealed before the inner
    body is built (its back edge, the inner loop's exit, is known by then), so x gets
    S = Phi(v, P) at the outer header and P = Phi(S, P) at the inner one.  Sealing the
    inner header makes P trivial (= S), and the cascade then finds S = Phi(v, S)
    trivial as well: no Phi is left for x, and P stands for v."""

    def py(v: int, n: int, m: int) -> int:
        k = i = 0
        while i < n:
            j = 0
            while j < m:
                k = k + v
                j += 1
            i += 1
        return k + v

    f = Fn("cascade", ["v", "n", "m"])
    v = f.get("v")
    f.set("x", v)
    f.set("k", f.const(0))
    f.set("i", f.const(0))
    outer = f.enter("outer", [f.jmp()], seal=False)
    t1, f1 = f.branch(f.op("Less", f.get("i"), f.get("n")))
    f.enter("outer_body", [t1])
    f.set("j", f.const(0))
    inner = f.enter("inner", [f.jmp()], seal=False)
    t2, f2 = f.branch(f.op("Less", f.get("j"), f.get("m")))
    f.enter("inner_exit", [f2])
    f.set("i", f.op("Add", f.get("i"), f.const(1)))
    outer.append_input(f.jmp())
    f.ssa.seal(outer)
    f.enter("inner_body", [t2])
    p = f.get("x")
    assert p.op.name == "Phi" and p.block is inner
    assert len(phis(f.g, "x")) == 2  # P at the inner header, S at the outer one
    f.set("k", f.op("Add", f.get("k"), p))
    f.set("j", f.op("Add", f.get("j"), f.const(1)))
    inner.append_input(f.jmp())
    f.ssa.seal(inner)
    assert phis(f.g, "x") == []
    assert f.ssa.resolve(p) is v
    f.enter("outer_exit", [f1])
    g = f.ret(f.op("Add", f.get("k"), f.get("x")))
    for args in itertools.product([3, -2], [0, 1, 3], [0, 2]):
        assert int(nx.run(g, *args)) == py(*args), args


class Placeholders(SSABuilder[str]):
    """The script's policy for a variable undefined on some path: a placeholder operand,
    reported by ``finish`` if a live value still uses it."""

    def undefined_operand(self, var: str, phi: Node, edge: Node) -> Node:
        return self.g.add("Constant", [], self.g.start_block, {"value": np.array(0, np.int64)}, name="undef")


def _maybe_defined(f: Fn, use_it: bool) -> tuple[nx.Graph, Node]:
    """``if a < b: y = 2 * a``, then (if ``use_it``) ``r = y if a < b else b``; returns
    the graph and the edge along which y has no value."""
    assert f.ssa.get_value("y", f.block) is None
    cond = f.op("Less", f.get("a"), f.get("b"))
    true, else_edge = f.branch(cond)
    f.enter("then", [true])
    f.set("y", f.op("Mul", f.get("a"), f.const(2)))
    f.enter("join", [f.jmp(), else_edge])
    if not use_it:
        f.get("y")  # read, but nothing uses it
        return f.ret(f.get("b")), else_edge
    y = f.get("y")
    true, false = f.branch(cond)
    f.enter("use", [true])
    f.set("r", y)
    from_use = f.jmp()
    f.enter("other", [false])
    f.set("r", f.get("b"))
    f.enter("end", [from_use, f.jmp()])
    return f.ret(f.get("r")), else_edge


def test_variable_undefined_on_one_path() -> None:
    def py(a: int, b: int) -> int:
        if a < b:
            y = 2 * a
        return y if a < b else b  # noqa: F821  (y is defined whenever it is read)

    # The default policy has no value for the missing operand.
    f = Fn("undef", ["a", "b"])
    with pytest.raises(SSAError, match="'y' has no value on an edge into block \\^join"):
        _maybe_defined(f, use_it=True)

    # A placeholder operand: the graph is right, and finish names the live use.
    f = Fn("undef", ["a", "b"], Placeholders)
    g, else_edge = _maybe_defined(f, use_it=True)
    (use,) = f.problems
    assert use == UndefinedUse("y", use.user, else_edge) and use.user.op.name == "Phi"
    for a, b in itertools.product(range(-2, 3), repeat=2):
        assert int(nx.run(g, a, b)) == py(a, b), (a, b)

    # Read but never used: the Phi is dead, and so is its placeholder.
    f = Fn("unused", ["a", "b"], Placeholders)
    g, _ = _maybe_defined(f, use_it=False)
    assert phis(g) == [] and not [n for n in g.nodes() if n.name == "undef"]


def test_swap_in_a_loop() -> None:
    def py(a: int, b: int, n: int) -> int:
        i = 0
        while i < n:
            a, b = b, a
            i += 1
        return a * 10 + b

    f = Fn("swap", ["a", "b", "n"])
    f.set("i", f.const(0))
    header = f.enter("header", [f.jmp()], seal=False)
    true, false = f.branch(f.op("Less", f.get("i"), f.get("n")))
    f.enter("body", [true])
    a, b = f.get("a"), f.get("b")
    f.set("a", b)
    f.set("b", a)
    f.set("i", f.op("Add", f.get("i"), f.const(1)))
    header.append_input(f.jmp())
    f.ssa.seal(header)
    f.enter("exit", [false])
    g = f.ret(f.op("Add", f.op("Mul", f.get("a"), f.const(10)), f.get("b")))
    pa, pb = phis(g, "a")[0], phis(g, "b")[0]
    assert pa.inputs[1] is pb and pb.inputs[1] is pa  # each Phi reads the other: a parallel copy
    for n in range(5):
        assert int(nx.run(g, 1, 2, n)) == py(1, 2, n), n
