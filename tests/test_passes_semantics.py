"""Every pass preserves semantics: graphs run before and after each pass alone and after
the default pipeline give the same results (bit for bit, NaN and the sign of zero
included), and verify after every pass.

Graphs: the hand-built seed graphs, and a random generator of our own that builds
straight-line code, if/else diamonds (some on constant conditions) and counted loops with
breaks through the IR API, with constants so that folding, CSE and LICM fire.  Variables
get full Phis at every join and loop header (like SSA construction without trivial-Phi
removal), so the passes have trivial Phis to clean up.
"""

from __future__ import annotations

import random
import warnings
from typing import Any

import numpy as np
import pytest

from nexus.ir import Graph, TensorType, print_graph, verify
from nexus.ir.node import Block, Node
from nexus.passes import DEFAULT_PIPELINE, optimize
from nexus.seeds import ALL as SEEDS

SINGLE_PASSES = ["constfold", "dce", "cse", "simplifycfg", "licm", "inline", "canonicalize"]
PIPELINES = [*SINGLE_PASSES, None, "licm,constfold,cse,dce,simplifycfg"]

INT_OPS = ["Add", "Sub", "Mul", "Maximum", "Minimum", "FloorDiv", "Mod", "Div"]
FLOAT_OPS = ["Add", "Sub", "Mul", "Div", "Maximum", "Minimum"]
FLOAT_UNARY = ["Neg", "Abs", "Tanh", "Sigmoid", "Relu", "Exp"]
INT_CONSTS = [-3, -1, 0, 1, 2, 5, 100]
FLOAT_CONSTS = [0.0, -0.0, 1.0, -1.5, 2.5]


class RandomGraph:
    """Builds one random program over three variables: i (i32), f (f32), v (f32[3])."""

    def __init__(self, seed: int):
        self.rng = random.Random(seed)
        self.g = Graph(f"rand{seed}", [TensorType("i32", ()), TensorType("f32", ()), TensorType("f32", (3,))],
                       ["n", "x", "vec"])
        self.block: Block = self.g.start_block
        n, x, vec = self.g.args
        self.vars: dict[str, Node] = {"i": n, "f": x, "v": vec}
        self.budget = 40
        self._callee: Graph | None = None

    # --- values ---------------------------------------------------------------------------
    def const(self, dtype: str, value: Any = None) -> Node:
        if value is None:
            value = self.rng.choice(INT_CONSTS if dtype == "i32" else FLOAT_CONSTS)
        arr = np.array(value, dtype=np.int32 if dtype == "i32" else np.float32)
        return self.g.add("Constant", [], self.block, {"value": arr})

    def operand(self, var: str) -> Node:
        dtype = "i32" if var == "i" else "f32"
        if self.rng.random() < 0.35 and var != "v":
            return self.const(dtype)
        if var == "v" and self.rng.random() < 0.3:
            return self.g.add("Constant", [], self.block,
                              {"value": np.array([self.rng.choice(FLOAT_CONSTS) for _ in range(3)], np.float32)})
        return self.vars[var]

    def op(self, name: str, *ins: Node) -> Node:
        return self.g.add(name, list(ins), self.block)

    def callee(self) -> Graph:
        """A small graph with a branch and two Returns: ``a * 2 + b if a < b else a - b``."""
        if self._callee is None:
            g = Graph("helper", [TensorType("f32", ()), TensorType("f32", ())], ["a", "b"])
            a, b = g.args
            e = g.start_block
            cn = g.add("Cond", [g.add("Less", [a, b], e)], e)
            lt = g.new_block("lt", [g.add("Proj", [cn], e, {"num": 1})])
            two = g.add("Constant", [], lt, {"value": np.array(2.0, np.float32)})
            r1 = g.add("Return", [g.add("Add", [g.add("Mul", [a, two], lt), b], lt)], lt)
            ge = g.new_block("ge", [g.add("Proj", [cn], e, {"num": 0})])
            r2 = g.add("Return", [g.add("Sub", [a, b], ge)], ge)
            g.end_block.append_input(r1)
            g.end_block.append_input(r2)
            self._callee = verify(g)
        return self._callee

    # --- statements -----------------------------------------------------------------------
    def assign(self) -> None:
        var = self.rng.choice(["i", "i", "f", "f", "v"])
        if var == "i":
            self.vars["i"] = self.op(self.rng.choice(INT_OPS), self.operand("i"), self.operand("i"))
        elif self.rng.random() < 0.3:
            self.vars[var] = self.op(self.rng.choice(FLOAT_UNARY), self.vars[var])
        elif var == "v" and self.rng.random() < 0.3:
            # Mix the scalar into the vector (broadcasting) or reduce the vector into f.
            self.vars["v"] = self.op("Mul", self.vars["v"], self.operand("f"))
        elif var == "f" and self.rng.random() < 0.2:
            self.vars["f"] = self.op("ReduceSum", self.vars["v"])
        elif var == "f" and self.rng.random() < 0.2:
            self.vars["f"] = self.g.add("Call", [self.vars["f"], self.operand("f")], self.block,
                                        {"callee": self.callee()})
        elif var == "f" and self.rng.random() < 0.2:
            as_float = self.g.add("Cast", [self.vars["i"]], self.block, {"to": "f32"})
            self.vars["f"] = self.op("Add", self.vars["f"], as_float)
        else:
            self.vars[var] = self.op(self.rng.choice(FLOAT_OPS), self.operand(var), self.operand(var))

    def condition(self) -> Node:
        r = self.rng.random()
        if r < 0.15:
            return self.g.add("Constant", [], self.block, {"value": np.array(self.rng.random() < 0.5)})
        if r < 0.6:
            return self.op(self.rng.choice(["Less", "Greater", "Equal"]), self.vars["i"], self.operand("i"))
        return self.op(self.rng.choice(["Less", "GreaterEqual"]), self.vars["f"], self.operand("f"))

    def cond(self, c: Node) -> tuple[Node, Node]:
        cn = self.g.add("Cond", [c], self.block)
        return (self.g.add("Proj", [cn], self.block, {"num": 1}), self.g.add("Proj", [cn], self.block, {"num": 0}))

    def stmts(self, depth: int) -> None:
        for _ in range(self.rng.randint(1, 4)):
            if self.budget <= 0:
                return
            self.budget -= 1
            r = self.rng.random()
            if r < 0.2 and depth < 2:
                self.if_else(depth)
            elif r < 0.32 and depth < 2:
                self.loop(depth)
            else:
                self.assign()

    def join(self, name: str, edges: list[tuple[Node, dict[str, Node]]]) -> None:
        block = self.g.new_block(name, [x for x, _ in edges])
        self.block = block
        for var in self.vars:
            vals = [env[var] for _, env in edges]
            self.vars[var] = self.g.add("Phi", vals, block)

    def if_else(self, depth: int) -> None:
        t, f = self.cond(self.condition())
        start = dict(self.vars)
        self.block = self.g.new_block("then", [t])
        self.stmts(depth + 1)
        then_exit = (self.g.add("Jmp", [], self.block), dict(self.vars))
        self.vars = dict(start)
        self.block = self.g.new_block("else", [f])
        if self.rng.random() < 0.6:
            self.stmts(depth + 1)
        else_exit = (self.g.add("Jmp", [], self.block), dict(self.vars))
        self.join("join", [then_exit, else_exit])

    def loop(self, depth: int) -> None:
        g = self.g
        k0 = self.const("i32", 0)
        trip = self.const("i32", self.rng.randint(0, 4))
        entry = (g.add("Jmp", [], self.block), dict(self.vars))
        header = g.new_block("header", [entry[0]])
        self.block = header
        phis = {var: g.add("Phi", [val], header) for var, val in entry[1].items()}
        k = g.add("Phi", [k0], header)
        self.vars = dict(phis)
        body_t, exit_f = self.cond(self.op("Less", k, trip))
        exits = [(exit_f, dict(self.vars))]
        self.block = g.new_block("body", [body_t])
        self.stmts(depth + 1)
        if self.rng.random() < 0.3:
            brk, stay = self.cond(self.condition())
            exits.append((brk, dict(self.vars)))
            self.block = g.new_block("latch", [stay])
        one = self.const("i32", 1)
        k_next = self.op("Add", k, one)
        header.append_input(g.add("Jmp", [], self.block))
        for var, phi in phis.items():
            phi.append_input(self.vars[var])
        k.append_input(k_next)
        self.vars = dict(phis)
        self.join("after", exits)

    def build(self) -> Graph:
        self.stmts(0)
        r = self.g.add("Return", [self.vars["i"], self.vars["f"], self.vars["v"]], self.block)
        self.g.end_block.append_input(r)
        return verify(self.g)


def random_graph(seed: int) -> Graph:
    return RandomGraph(seed).build()


SAMPLES = [
    (3, np.float32(0.5), np.array([1.0, -2.0, 0.25], np.float32)),
    (-7, np.float32(-0.0), np.array([0.0, 3.0, -1.0], np.float32)),
    (0, np.float32(2.0), np.array([-0.5, 0.5, 4.0], np.float32)),
]


def outcome(g: Graph, args: tuple) -> tuple[str, Any]:
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        try:
            return "ok", g(*args, max_iterations=100_000)
        except Exception as e:  # noqa: BLE001  (a failing run is an outcome too)
            return "error", type(e).__name__


def same(a: Any, b: Any) -> bool:
    if isinstance(a, tuple):
        return isinstance(b, tuple) and len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    a, b = np.asarray(a), np.asarray(b)
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    if a.dtype.kind == "f":
        return bool(np.array_equal(a, b, equal_nan=True) and np.array_equal(np.signbit(a), np.signbit(b)))
    return bool(np.array_equal(a, b))


def check_preserved(g: Graph, pipeline: str | None, samples: list[tuple]) -> None:
    before = [outcome(g, s) for s in samples]
    work, _ = g.clone()
    optimize(work, pipeline, verify_each=True)
    for s, want in zip(samples, before):
        got = outcome(work, s)
        if want[0] == "error":
            continue  # a dead failing op may be removed: only successful runs must agree
        assert got[0] == "ok" and same(got[1], want[1]), (
            f"pipeline {pipeline or DEFAULT_PIPELINE} changed the result on {s}: {want} -> {got}\n"
            f"--- before ---\n{print_graph(g)}--- after ---\n{print_graph(work)}")


@pytest.mark.parametrize("seed_name", sorted(SEEDS))
@pytest.mark.parametrize("pipeline", PIPELINES, ids=lambda p: p or "default")
def test_seed_graphs(seed_name: str, pipeline: str | None) -> None:
    check_preserved(SEEDS[seed_name](), pipeline, [()])


@pytest.mark.parametrize("seed", range(40))
def test_random_graphs(seed: int) -> None:
    g = random_graph(seed)
    for pipeline in PIPELINES:
        check_preserved(g, pipeline, SAMPLES)


def test_default_pipeline_shrinks_random_graphs() -> None:
    # The generator's constants and full Phis leave the passes something to do.
    before = after = 0
    for seed in range(10):
        g = optimize(random_graph(seed), "inline")  # count inlined callees in "before" too
        before += g.num_nodes()
        after += optimize(g).num_nodes()
    assert after < before * 0.9
