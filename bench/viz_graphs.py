"""Big graphs for the viewer's benchmark (``python -m bench.viz_page``): a loop whose body
is a sequence of if/else diamonds, each arm a layer of parallel chains (a model's
branches), about ``n`` nodes in all."""

from __future__ import annotations

import numpy as np

from nexus.ir.graph import Graph
from nexus.ir.node import Block, Node


def diamonds(n: int = 5000, width: int = 6, depth: int = 8) -> Graph:
    """A loop ``while x < limit`` over if/else diamonds of ``width`` chains ``depth`` ops
    deep per arm (f32 scalars), with about ``n`` nodes."""
    g = Graph(f"diamonds{n}")
    entry = g.start_block

    def const(b: Block, v: float, name: str | None = None) -> Node:
        return g.add("Constant", [], b, {"value": np.array(v, np.float32)}, name=name)

    x0, limit, one, half = const(entry, 0.0, "x0"), const(entry, 3.0, "limit"), const(entry, 1.0, "one"), \
        const(entry, 0.5, "half")
    header = g.new_block("header", [g.add("Jmp", [], entry)])
    x = g.add("Phi", [x0], header, name="x")
    cond = g.add("Cond", [g.add("Less", [x, limit], header, name="loop_cond")], header)
    leave = g.add("Proj", [cond], header, {"num": 0}, name="leave")
    enter = g.add("Proj", [cond], header, {"num": 1}, name="enter")
    v, into, k = x, enter, 0
    while g.num_nodes() < n - 8:
        top = g.new_block(f"d{k}", [into])
        c = g.add("Cond", [g.add("Greater", [v, half], top, name=f"p{k}")], top)
        f = g.add("Proj", [c], top, {"num": 0})
        t = g.add("Proj", [c], top, {"num": 1})
        outs, jumps = [], []
        for arm, ctl in (("a", t), ("b", f)):
            blk = g.new_block(f"d{k}{arm}", [ctl])
            heads = []
            for w in range(width):
                h = v
                for i in range(depth):
                    op = ("Add", "Mul", "Sub", "Tanh")[(w + i) % 4]
                    ins = [h] if op == "Tanh" else [h, one if i % 2 else half]
                    h = g.add(op, ins, blk, name=f"l{k}{arm}_{w}_{i}")
                heads.append(h)
            acc = heads[0]
            for h in heads[1:]:
                acc = g.add("Add", [acc, h], blk)
            outs.append(g.add("Mul", [acc, half], blk, name=f"out{k}{arm}"))
            jumps.append(g.add("Jmp", [], blk))
        join = g.new_block(f"j{k}", jumps)
        v = g.add("Phi", outs, join, name=f"v{k}")
        into = g.add("Jmp", [], join)
        k += 1
    latch = g.new_block("latch", [into])
    x_new = g.add("Add", [x, one], latch, name="x_next")
    header.append_input(g.add("Jmp", [], latch))
    x.append_input(x_new)
    after = g.new_block("after", [leave])
    g.end_block.append_input(g.add("Return", [x], after))
    return g
