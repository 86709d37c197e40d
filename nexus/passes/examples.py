"""Graphs the pass tests, the CLI demo and ``bench/w3_licm.py`` share, built with the IR API.

- :func:`seed004`: ``output = ((input - 2) + 5) + 100`` on an int32 argument.
- :func:`rnn`: the W3 RNN ``h = tanh(W x_t + U h)`` over ``t < T``, written the way a
  naive frontend emits a PyTorch-style cell (``x @ W.T + h @ U.T + (b_ih + b_hh)``) inside
  the loop body: the transposes, the bias sum and the constants are loop-invariant.
"""

from __future__ import annotations

import numpy as np

from nexus.ir.graph import Graph
from nexus.ir.node import Block, Node
from nexus.ir.types import TensorType


def _const(g: Graph, block: Block, value: object, dtype: str, name: str | None = None) -> Node:
    return g.add("Constant", [], block, {"value": np.array(value, dtype=dtype)}, name=name)


def _ret(g: Graph, block: Block, *values: Node) -> None:
    r = g.add("Return", list(values), block)
    g.end_block.append_input(r)


def seed004() -> Graph:
    """Seed 004's TensorFlow graph: ``output = ((input - 2) + 5) + 100``, int32."""
    g = Graph("seed004", [TensorType("i32", ())], ["input"])
    b = g.start_block
    (x,) = g.args
    s = g.add("Sub", [x, _const(g, b, 2, "int32")], b)
    a = g.add("Add", [s, _const(g, b, 5, "int32")], b)
    out = g.add("Add", [a, _const(g, b, 100, "int32")], b, name="output")
    _ret(g, b, out)
    return g


def rnn(steps: int, input_size: int, hidden: int) -> Graph:
    """The W3 RNN: arguments ``xs[T, I], W_ih[H, I], W_hh[H, H], b_ih[H], b_hh[H], h0[H]``;
    returns the last hidden state."""
    f32 = "f32"
    g = Graph(
        "rnn",
        [TensorType(f32, (steps, input_size)), TensorType(f32, (hidden, input_size)),
         TensorType(f32, (hidden, hidden)), TensorType(f32, (hidden,)), TensorType(f32, (hidden,)),
         TensorType(f32, (hidden,))],
        ["xs", "W_ih", "W_hh", "b_ih", "b_hh", "h0"],
    )
    xs, w_ih, w_hh, b_ih, b_hh, h0 = g.args
    entry = g.start_block
    t0 = _const(g, entry, 0, "int64", "t0")
    header = g.new_block("header", [g.add("Jmp", [], entry)])
    t = g.add("Phi", [t0], header, name="t")
    h = g.add("Phi", [h0], header, name="h")
    limit = _const(g, header, steps, "int64", "T")
    cond = g.add("Cond", [g.add("Less", [t, limit], header, name="more")], header)
    exit_f = g.add("Proj", [cond], header, {"num": 0})
    body_t = g.add("Proj", [cond], header, {"num": 1})
    body = g.new_block("body", [body_t])
    x_t = g.add("Gather", [xs, t], body, {"axis": 0}, name="x_t")
    w_t = g.add("Transpose", [w_ih], body, name="W_ih_T")
    u_t = g.add("Transpose", [w_hh], body, name="W_hh_T")
    xw = g.add("MatMul", [x_t, w_t], body, name="xW")
    hu = g.add("MatMul", [h, u_t], body, name="hU")
    bias = g.add("Add", [b_ih, b_hh], body, name="bias")
    pre = g.add("Add", [g.add("Add", [xw, hu], body), bias], body, name="pre")
    h_new = g.add("Tanh", [pre], body, name="h_new")
    t_next = g.add("Add", [t, _const(g, body, 1, "int64", "one")], body, name="t_next")
    header.append_input(g.add("Jmp", [], body))
    t.append_input(t_next)
    h.append_input(h_new)
    after = g.new_block("after", [exit_f])
    _ret(g, after, h)
    return g


def rnn_inputs(steps: int, input_size: int, hidden: int, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    scale = 1.0 / np.sqrt(hidden)
    shapes = [(steps, input_size), (hidden, input_size), (hidden, hidden), (hidden,), (hidden,), (hidden,)]
    return [(rng.standard_normal(s) * (scale if i else 1.0)).astype(np.float32) for i, s in enumerate(shapes)]


def rnn_reference(xs: np.ndarray, w_ih: np.ndarray, w_hh: np.ndarray, b_ih: np.ndarray, b_hh: np.ndarray,
                  h0: np.ndarray) -> np.ndarray:
    """Plain NumPy, the oracle."""
    h = h0
    for x in xs:
        h = np.tanh((x @ w_ih.T + h @ w_hh.T) + (b_ih + b_hh))
    return h
