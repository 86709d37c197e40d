"""Random structured programs (nested if/else, counted loops with break, tensors and
scalars) run by the interpreter, sequential and parallel, against an independent
dictionary-based oracle interpreter written here from the seed-000 pseudocode."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import pytest

import nexus as nx
from nexus.ir.analysis import node_order
from nexus.ir.graph import Graph
from nexus.ir.node import Block, Node
from nexus.ir.types import TensorType

SHAPE = (2, 3)


# --- the oracle: seed 000 section 5, one node at a time through a dict ----------------------
def oracle(g: Graph, *args: Any, limit: int = 100_000) -> Any:
    env: dict[Node, Any] = dict(zip(g.args, args))
    block, edge = g.start_block, -1
    for _ in range(limit):
        order = node_order(block)
        phis = [n for n in order if n.op.kind == "phi"]
        new = [env[p.input(edge)] for p in phis]  # all read before any is written
        env.update(zip(phis, new))
        taken: Node | None = None
        for n in order:
            op = n.op.name
            if n.op.kind == "phi" or op in ("Start", "End") or (op == "Proj" and n.input(0).op.name in
                                                                  ("Cond", "Start")):
                continue
            if op == "Return":
                vals = [env[v] for v in n.inputs]
                return vals[0] if len(vals) == 1 else tuple(vals)
            if op == "Jmp":
                taken = n
            elif op == "Cond":
                k = int(bool(env[n.input(0)]))
                taken = next(u for u in n.users if u.attrs.get("num") == k)
            else:
                attrs = {k: v for k, v in n.attrs.items() if k not in ("device", "machine")}
                env[n] = n.op.kernel(*[env[v] for v in n.inputs], **attrs)  # type: ignore[misc]
        assert taken is not None
        ((block, edge),) = [(u, i) for u, i in taken.uses if isinstance(u, Block)]
    raise AssertionError("oracle: too many blocks")


# --- the generator ---------------------------------------------------------------------
class Gen:
    """Builds a random program over named variables (tensors f32[2, 3] and f32 scalars)."""

    def __init__(self, seed: int):
        self.r = random.Random(seed)
        self.g = Graph(f"rand{seed}", [TensorType("f32", SHAPE), TensorType("f32", ())], ["x", "y"])
        self.cur: Block = self.g.start_block
        self.vars: dict[str, Node] = {"t0": self.g.args[0], "s0": self.g.args[1]}
        self.w = self.const(np.linspace(-1, 1, 9, dtype=np.float32).reshape(3, 3))
        self.loops: list[list[tuple[Node, dict[str, Node]]]] = []  # per open loop: its breaks

    def const(self, value: Any) -> Node:
        return self.g.add("Constant", [], self.cur, {"value": np.asarray(value)})

    def add(self, op: str, *ins: Node, **attrs: Any) -> Node:
        return self.g.add(op, list(ins), self.cur, attrs)

    def pick(self, kind: str) -> str:
        return self.r.choice(sorted(k for k in self.vars if k[0] == kind))

    def assign(self) -> None:
        r = self.r
        kind = r.choice("ts")
        a = self.vars[self.pick("t")] if kind == "t" else self.vars[self.pick("s")]
        choice = r.randrange(6)
        if kind == "t":
            b = self.vars[self.pick(r.choice("ts"))]
            v = [lambda: self.add("Add", a, b), lambda: self.add("Mul", a, self.add("Tanh", b)),
                 lambda: self.add("MatMul", a, self.w), lambda: self.add("Sub", a, b),
                 lambda: self.add("Maximum", a, b), lambda: self.add("Relu", a)][choice]()
        else:
            t = self.vars[self.pick("t")]
            v = [lambda: self.add("ReduceSum", t), lambda: self.add("Mul", a, self.const(np.float32(0.5))),
                 lambda: self.add("Add", a, self.const(np.float32(1.0))), lambda: self.add("Tanh", a),
                 lambda: self.add("ReduceMax", self.add("Add", t, a)), lambda: self.add("Neg", a)][choice]()
        name = r.choice([self.pick(kind)] * 2 + [f"{kind}{len(self.vars)}"])
        self.vars[name] = v

    def condition(self) -> Node:
        s = self.vars[self.pick("s")]
        return self.add("Greater", s, self.const(np.float32(self.r.uniform(-1, 1))))

    def jump(self) -> Node:
        return self.add("Jmp")

    def region(self, depth: int) -> None:
        for _ in range(self.r.randrange(1, 5)):
            k = self.r.random()
            if depth < 3 and k < 0.2:
                self.if_else(depth)
                if self.cur is None:
                    return
            elif depth < 3 and k < 0.35:
                self.loop(depth)
            elif self.loops and k < 0.42:
                self.brk()
                return  # code after break is unreachable
            else:
                self.assign()

    def merge(self, preds: list[tuple[Node, dict[str, Node]]], name: str) -> None:
        """A join block with one Phi per variable defined on every incoming path."""
        self.cur = self.g.new_block(name, [c for c, _ in preds])
        names = [k for k in preds[0][1] if all(k in env for _, env in preds)]
        self.vars = {k: self.g.add("Phi", [env[k] for _, env in preds], self.cur) for k in names}

    def if_else(self, depth: int) -> None:
        c = self.add("Cond", self.condition())
        f, t = self.add("Proj", c, num=0), self.add("Proj", c, num=1)
        before = dict(self.vars)
        ends = []
        for exit_, label in ((t, "then"), (f, "else")):
            self.cur, self.vars = self.g.new_block(label, [exit_]), dict(before)
            n_loops = len(self.loops)
            self.region(depth + 1)
            if self.cur is not None:
                ends.append((self.jump(), self.vars))
            assert len(self.loops) == n_loops
        if ends:
            self.merge(ends, "join")
        else:
            self.cur = None  # type: ignore[assignment]  # both branches broke out

    def loop(self, depth: int) -> None:
        """``for i in range(trips)`` carrying every variable; breaks leave to ``after``."""
        zero = self.const(np.int64(0))
        entry = self.jump()
        head = self.cur = self.g.new_block("header", [entry])
        i = self.add("Phi", zero)
        phis = {k: self.g.add("Phi", [v], head) for k, v in sorted(self.vars.items())}
        c = self.add("Cond", self.add("Less", i, self.const(np.int64(self.r.randrange(0, 4)))))
        f, t = self.add("Proj", c, num=0), self.add("Proj", c, num=1)
        self.loops.append([])
        self.cur, self.vars = self.g.new_block("body", [t]), dict(phis)
        self.region(depth + 1)
        if self.cur is not None:  # the latch; a body that always breaks has none
            i2 = self.add("Add", i, self.const(np.int64(1)))
            head.append_input(self.jump())
            i.append_input(i2)
            for k, p in phis.items():
                p.append_input(self.vars[k])
        breaks = self.loops.pop()
        self.cur = head
        self.merge([(f, dict(phis)), *breaks], "after")

    def brk(self) -> None:
        self.loops[-1].append((self.jump(), dict(self.vars)))
        self.cur = None  # type: ignore[assignment]

    def build(self) -> Graph:
        self.region(0)
        if self.cur is None:
            raise AssertionError("top-level region cannot break")
        t, s = self.vars[self.pick("t")], self.vars[self.pick("s")]
        self.g.end_block.append_input(self.g.add("Return", [t, s], self.cur))
        return self.g


def same(a: Any, b: Any) -> bool:
    return all(np.array_equal(x, y, equal_nan=True) and np.asarray(x).dtype == np.asarray(y).dtype
               for x, y in zip(a, b))


@pytest.mark.parametrize("seed", range(150))
def test_random_programs_match_the_oracle(seed: int) -> None:
    g = Gen(seed).build()
    nx.verify(g)
    rng = np.random.default_rng(seed)
    x, y = rng.normal(size=SHAPE).astype(np.float32), np.float32(rng.normal())
    want = oracle(g, x, y)
    for parallel in (False, True, None):
        got = nx.run(g, x, y, parallel=parallel)
        assert same(got, want), (parallel, nx.print_graph(g))
