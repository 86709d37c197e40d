"""The seed-000 examples built by hand through the IR API (no frontend involved).

They are the fixtures of the IR tests, the pictures and the CLI demo.  Each builder
returns a verified-to-be-valid graph; the plain-Python programs they mirror are in
``tests/test_ir_seeds.py``.
"""

from __future__ import annotations

import numpy as np

from nexus.ir.graph import Graph
from nexus.ir.node import Block, Node


class _B:
    """A tiny helper for hand-building: constants and ops in a current block."""

    def __init__(self, g: Graph):
        self.g = g
        self.block: Block = g.start_block

    def const(self, value: float | int, dtype: str, name: str | None = None) -> Node:
        arr = np.array(value, dtype={"f32": np.float32, "i32": np.int32, "i64": np.int64}[dtype])
        return self.g.add("Constant", [], self.block, {"value": arr}, name=name)

    def op(self, op: str, *inputs: Node, name: str | None = None) -> Node:
        return self.g.add(op, list(inputs), self.block, name=name)

    def cond(self, c: Node) -> tuple[Node, Node]:
        """Cond on ``c`` in the current block; returns the (true, false) exits."""
        cn = self.g.add("Cond", [c], self.block)
        false = self.g.add("Proj", [cn], self.block, {"num": 0}, name="false")
        true = self.g.add("Proj", [cn], self.block, {"num": 1}, name="true")
        return true, false

    def jmp(self) -> Node:
        return self.g.add("Jmp", [], self.block)

    def ret(self, *values: Node) -> None:
        r = self.g.add("Return", list(values), self.block)
        self.g.end_block.append_input(r)


def ifelse() -> Graph:
    """a=1, b=2; if a < b: c = a + b else: c = a - b; d = c * 2  ->  d = 6."""
    g = Graph("ifelse")
    b = _B(g)
    a, bb, two = b.const(1.0, "f32", "a"), b.const(2.0, "f32", "b"), b.const(2.0, "f32", "two")
    t, f = b.cond(b.op("Less", a, bb, name="p"))
    b.block = g.new_block("then", [t])
    c_then = b.op("Add", a, bb, name="c_then")
    j1 = b.jmp()
    b.block = g.new_block("else", [f])
    c_else = b.op("Sub", a, bb, name="c_else")
    j2 = b.jmp()
    b.block = g.new_block("join", [j1, j2])
    c = g.add("Phi", [c_then, c_else], b.block, name="c")
    b.ret(b.op("Mul", c, two, name="d"))
    return g


def skip5_loop() -> Graph:
    """sum 1..10 skipping 5 (continue), break once sum > 25  ->  31."""
    g = Graph("skip5")
    b = _B(g)
    sum0, i0 = b.const(0, "i32", "sum_init"), b.const(1, "i32", "i_init")
    entry_jmp = b.jmp()
    header = g.new_block("header", [entry_jmp])
    b.block = header
    i = g.add("Phi", [i0], header, name="i")
    s = g.add("Phi", [sum0], header, name="sum")
    ten, five, one, lim = b.const(10, "i32"), b.const(5, "i32"), b.const(1, "i32"), b.const(25, "i32")
    body_t, exit_f = b.cond(b.op("LessEqual", i, ten, name="loop_cond"))
    b.block = g.new_block("body", [body_t])
    skip_t, skip_f = b.cond(b.op("Equal", i, five, name="skip_cond"))
    b.block = g.new_block("skip", [skip_t])
    i_skip = b.op("Add", i, one, name="i_increment_skip")
    cont = b.jmp()
    b.block = g.new_block("update", [skip_f])
    s_new = b.op("Add", s, i, name="sum_update")
    i_new = b.op("Add", i, one, name="i_increment")
    brk_t, brk_f = b.cond(b.op("Greater", s_new, lim, name="break_cond"))
    b.block = g.new_block("latch", [brk_f])
    back = b.jmp()
    # The header's other predecessors: continue and the latch.
    header.append_input(cont)
    i.append_input(i_skip)
    s.append_input(s)
    header.append_input(back)
    i.append_input(i_new)
    s.append_input(s_new)
    b.block = g.new_block("after", [exit_f, brk_t])
    result = g.add("Phi", [s, s_new], b.block, name="result")
    b.ret(result)
    return g


def first_example(y: float = 50.0) -> Graph:
    """Seed 000's first example: x from 5 while x < 100 (float32), with nested
    if/break/continue; returns final_result = x * y after the loop.

    Python::

        x = 5.0
        while x < 100:
            s = x + y; p = x * y
            if s > 50: x = x + 1
            else:
                if p < 30: break
                else: continue
        return x * y
    """
    g = Graph("first_example")
    b = _B(g)
    x0, yv = b.const(5.0, "f32", "x"), b.const(y, "f32", "y")
    limit, step = b.const(100.0, "f32", "limit"), b.const(1.0, "f32", "step")
    fifty, thirty = b.const(50.0, "f32"), b.const(30.0, "f32")
    header = g.new_block("header", [b.jmp()])
    b.block = header
    x = g.add("Phi", [x0], header, name="x")
    body_t, exit_f = b.cond(b.op("Less", x, limit, name="loop_cond"))
    b.block = g.new_block("body", [body_t])
    s = b.op("Add", x, yv, name="sum")
    p = b.op("Mul", x, yv, name="product")
    then_t, else_f = b.cond(b.op("Greater", s, fifty))
    b.block = g.new_block("then", [then_t])
    x_up = b.op("Add", x, step, name="x_update")
    then_j = b.jmp()
    b.block = g.new_block("else", [else_f])
    brk_t, cont_f = b.cond(b.op("Less", p, thirty))
    # continue jumps to the header; the then-branch falls through to the latch.
    latch = g.new_block("latch", [then_j])
    b.block = latch
    back = b.jmp()
    header.append_input(cont_f)
    x.append_input(x)
    header.append_input(back)
    x.append_input(x_up)
    b.block = g.new_block("after", [exit_f, brk_t])
    b.ret(b.op("Mul", x, yv, name="final_result"))
    return g


ALL = {"ifelse": ifelse, "skip5_loop": skip5_loop, "first_example": first_example}
