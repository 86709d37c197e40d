"""Graphs built with the IR API that the autodiff tests and benchmark share: the
seed-001 RNN with a run-time trip count, and a data-dependent while loop with break and
continue."""

from __future__ import annotations

from typing import Any

import numpy as np

from nexus.ir.graph import Graph
from nexus.ir.node import Block, Node
from nexus.ir.types import TensorType, numpy_dtype, sym


class _B:
    def __init__(self, g: Graph):
        self.g = g
        self.block: Block = g.start_block

    def c(self, value: float | int | list, dtype: str) -> Node:
        return self.g.add("Constant", [], self.g.start_block, {"value": np.array(value, dtype=numpy_dtype(dtype))})

    def op(self, name: str, *ins: Node, **attrs: object) -> Node:
        return self.g.add(name, list(ins), self.block, attrs)

    def cond(self, c: Node) -> tuple[Node, Node]:
        cn = self.g.add("Cond", [c], self.block)
        return (self.g.add("Proj", [cn], self.block, {"num": 1}), self.g.add("Proj", [cn], self.block, {"num": 0}))

    def jmp(self) -> Node:
        return self.g.add("Jmp", [], self.block)

    def ret(self, *vals: Node) -> None:
        self.g.end_block.append_input(self.g.add("Return", list(vals), self.block))


def rnn(dtype: str = "f64", batched: bool = False) -> Graph:
    """``h = tanh(W x_t + U h)`` for ``t < T``; returns ``sum(h)``.

    Arguments: ``xs`` [Tmax, D] (or [Tmax, B, D] when ``batched``, then ``h`` is [B, H] and
    the cell is ``tanh(x_t W^T + h U^T)``), ``W`` [H, D], ``U`` [H, H], ``h0`` [H] (or
    [B, H]), ``T`` (i64, the run-time trip count)."""
    T, D, H, Bn = sym("Tmax"), sym("D"), sym("H"), sym("B")
    xs_t = TensorType(dtype, (T, Bn, D) if batched else (T, D))
    h_t = TensorType(dtype, (Bn, H) if batched else (H,))
    g = Graph("rnn", [xs_t, TensorType(dtype, (H, D)), TensorType(dtype, (H, H)), h_t, TensorType("i64", ())],
              ["xs", "W", "U", "h0", "T"])
    b = _B(g)
    xs, W, U, h0, Tn = g.args
    zero, one = b.c(0, "i64"), b.c(1, "i64")
    if batched:
        Wt = b.op("Transpose", W)
        Ut = b.op("Transpose", U)
    header = g.new_block("header", [b.jmp()])
    b.block = header
    t = g.add("Phi", [zero], header, name="t")
    h = g.add("Phi", [h0], header, name="h")
    body_t, exit_f = b.cond(b.op("Less", t, Tn))
    b.block = g.new_block("body", [body_t])
    x = b.op("Gather", xs, t)
    if batched:
        pre = b.op("Add", b.op("MatMul", x, Wt), b.op("MatMul", h, Ut))
    else:
        pre = b.op("Add", b.op("MatMul", W, x), b.op("MatMul", U, h))
    h_new = b.op("Tanh", pre)
    t_new = b.op("Add", t, one)
    header.append_input(b.jmp())
    t.append_input(t_new)
    h.append_input(h_new)
    b.block = g.new_block("after", [exit_f])
    b.ret(b.op("ReduceSum", h))
    return g


def damped_loop(dtype: str = "f64") -> Graph:
    """A while loop whose trip count depends on the data, with continue and break::

        i = 0
        while True:
            i += 1
            x = x * 0.9 + w
            if sum(x*x) > big: continue-with  x = x * 0.5       (continue)
            if sum(x*x) < tol or i >= cap: break
        return sum(x * w)
    Arguments: x [N], w [N], tol (scalar), big (scalar), cap (i64)."""
    N = sym("N")
    g = Graph("damped", [TensorType(dtype, (N,)), TensorType(dtype, (N,)), TensorType(dtype, ()),
                         TensorType(dtype, ()), TensorType("i64", ())], ["x", "w", "tol", "big", "cap"])
    b = _B(g)
    x0, w, tol, big, cap = g.args
    decay, half, one = b.c(0.9, dtype), b.c(0.5, dtype), b.c(1, "i64")
    i0 = b.c(0, "i64")
    head = g.new_block("loop", [b.jmp()])
    b.block = head
    x = g.add("Phi", [x0], head, name="x")
    i = g.add("Phi", [i0], head, name="i")
    i1 = b.op("Add", i, one)
    x1 = b.op("Add", b.op("Mul", x, decay), w)
    n2 = b.op("ReduceSum", b.op("Mul", x1, x1))
    big_t, big_f = b.cond(b.op("Greater", n2, big))
    b.block = g.new_block("shrink", [big_t])
    x_half = b.op("Mul", x1, half)
    cont = b.jmp()
    b.block = g.new_block("check", [big_f])
    small = b.op("Less", n2, tol)
    capped = b.op("GreaterEqual", i1, cap)
    brk_t, brk_f = b.cond(b.op("Or", small, capped))
    b.block = g.new_block("latch", [brk_f])
    back = b.jmp()
    head.append_input(cont)
    x.append_input(x_half)
    i.append_input(i1)
    head.append_input(back)
    x.append_input(x1)
    i.append_input(i1)
    b.block = g.new_block("done", [brk_t])
    b.ret(b.op("ReduceSum", b.op("Mul", x1, w)))
    return g


def damped_python(x: Any, w: Any, tol: float, big: float, cap: int) -> Any:
    """The same program in plain Python (NumPy arrays or torch tensors)."""
    i = 0
    while True:
        i += 1
        x = x * 0.9 + w
        n2 = (x * x).sum()
        if n2 > big:
            x = x * 0.5
            continue
        if n2 < tol or i >= cap:
            break
    return (x * w).sum()
