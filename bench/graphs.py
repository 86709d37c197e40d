"""The benchmark workloads as Nexus graphs, built with the IR API (no frontend)."""

from __future__ import annotations

import numpy as np

from nexus.ir.graph import Graph
from nexus.ir.node import Node
from nexus.ir.types import TensorType, sym
from nexus.seeds import skip5_loop

MOD = 1000003


def w1_seed() -> Graph:
    """Seed 000's loop: sum 1..10 skipping 5, break once sum > 25 (= 31)."""
    return skip5_loop()


def _const(g: Graph, block: object, value: object, dtype: str) -> Node:
    return g.add("Constant", [], block, {"value": np.array(value, dtype=dtype)})  # type: ignore[arg-type]


def w2_count() -> Graph:
    """``s = (s + i*i) % 1000003 for i in range(n)``, n an i64 argument."""
    g = Graph("w2_count", [TensorType("i64", ())], ["n"])
    e = g.start_block
    s0, i0 = _const(g, e, 0, "int64"), _const(g, e, 0, "int64")
    one, mod = _const(g, e, 1, "int64"), _const(g, e, MOD, "int64")
    head = g.new_block("header", [g.add("Jmp", [], e)])
    s = g.add("Phi", [s0], head, name="s")
    i = g.add("Phi", [i0], head, name="i")
    c = g.add("Cond", [g.add("Less", [i, g.args[0]], head)], head)
    body = g.new_block("body", [g.add("Proj", [c], head, {"num": 1})])
    exit_ = g.new_block("exit", [g.add("Proj", [c], head, {"num": 0})])
    sq = g.add("Mul", [i, i], body)
    s2 = g.add("Mod", [g.add("Add", [s, sq], body), mod], body, name="s_next")
    i2 = g.add("Add", [i, one], body, name="i_next")
    head.append_input(g.add("Jmp", [], body))
    s.append_input(s2)
    i.append_input(i2)
    g.end_block.append_input(g.add("Return", [s], exit_))
    return g


def w3_rnn(d: int, h: int, batch: int) -> Graph:
    """``for t in range(T): h = tanh(x[t] @ W + h @ U)``; args xs[T, batch, d], W[d, h],
    U[h, h], h0[batch, h], T (i64); returns h."""
    T = sym("T")
    g = Graph("w3_rnn", [TensorType("f32", (T, batch, d)), TensorType("f32", (d, h)),
                         TensorType("f32", (h, h)), TensorType("f32", (batch, h)), TensorType("i64", ())],
              ["xs", "W", "U", "h0", "T"])
    xs, w, u, h0, steps = g.args
    e = g.start_block
    t0, one = _const(g, e, 0, "int64"), _const(g, e, 1, "int64")
    head = g.new_block("header", [g.add("Jmp", [], e)])
    t = g.add("Phi", [t0], head, name="t")
    hv = g.add("Phi", [h0], head, name="h")
    c = g.add("Cond", [g.add("Less", [t, steps], head)], head)
    body = g.new_block("body", [g.add("Proj", [c], head, {"num": 1})])
    exit_ = g.new_block("exit", [g.add("Proj", [c], head, {"num": 0})])
    xt = g.add("Gather", [xs, t], body, {"axis": 0}, name="x_t")
    pre = g.add("Add", [g.add("MatMul", [xt, w], body), g.add("MatMul", [hv, u], body)], body)
    h2 = g.add("Tanh", [pre], body, name="h_next")
    t2 = g.add("Add", [t, one], body, name="t_next")
    head.append_input(g.add("Jmp", [], body))
    t.append_input(t2)
    hv.append_input(h2)
    g.end_block.append_input(g.add("Return", [hv], exit_))
    return g


def w6_chains(n: int = 512, chains: int = 4, depth: int = 3) -> Graph:
    """One block: ``chains`` independent chains of ``depth`` x (matmul + relu), summed.
    Args: x[n, n] and one weight [n, n] per (chain, layer)."""
    ws = [TensorType("f32", (n, n))] * (chains * depth)
    g = Graph("w6_chains", [TensorType("f32", (n, n)), *ws], ["x"] + [f"w{c}_{k}" for c in range(chains)
                                                                     for k in range(depth)])
    e = g.start_block
    outs = []
    for c in range(chains):
        v = g.args[0]
        for k in range(depth):
            v = g.add("Relu", [g.add("MatMul", [v, g.args[1 + c * depth + k]], e)], e)
        outs.append(v)
    total = outs[0]
    for v in outs[1:]:
        total = g.add("Add", [total, v], e)
    g.end_block.append_input(g.add("Return", [total], e))
    return g
