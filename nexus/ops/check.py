"""Run one op through a one-node graph and check its type rule against its kernel.

Used by the op tests: ``apply_op("Slice", x, starts, ends, const=(1, 2))`` builds a graph
whose arguments have the inputs' exact types (inputs listed in ``const`` become Constant
nodes, so rules that read shape values see them), runs it with the interpreter, and
checks that each result has the dtype and the concrete dims the rule promised.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from nexus.ir.graph import Graph
from nexus.ir.types import TensorType, TupleType, Type, dtype_of


class RuleMismatch(AssertionError):
    """The kernel produced a value the op's type rule did not promise."""


def type_of_value(x: Any) -> TensorType:
    arr = np.asarray(x)
    return TensorType(dtype_of(arr.dtype), arr.shape)


def build_op_graph(op: str, inputs: Sequence[Any], const: Sequence[int] = (), **attrs: Any) -> Graph:
    """A graph ``(args...) -> op(inputs...)``; inputs in ``const`` are Constant nodes."""
    args = [i for i in range(len(inputs)) if i not in const]
    g = Graph(f"check_{op}", [type_of_value(inputs[i]) for i in args])
    b = g.start_block
    nodes = []
    for i, x in enumerate(inputs):
        if i in const:
            nodes.append(g.add("Constant", [], b, {"value": np.asarray(x)}))
        else:
            nodes.append(g.args[args.index(i)])
    n = g.add(op, nodes, b, attrs)
    outs = [n]
    if isinstance(n.type, TupleType):
        outs = [g.add("Proj", [n], b, {"num": k}) for k in range(len(n.type.elems))]
    r = g.add("Return", outs, b)
    g.end_block.append_input(r)
    return g


def check_value(op: str, t: Type, value: Any, what: str = "result") -> None:
    """Raise RuleMismatch unless ``value`` fits type ``t`` (dtype exact, int dims equal)."""
    if not isinstance(t, TensorType):
        raise RuleMismatch(f"{op}: {what} has non-tensor type {t}")
    arr = np.asarray(value)
    if dtype_of(arr.dtype) != t.dtype:
        raise RuleMismatch(f"{op}: {what} has dtype {arr.dtype}, the rule says {t.dtype}")
    if t.shape is None:
        return
    if len(t.shape) != arr.ndim:
        raise RuleMismatch(f"{op}: {what} has shape {arr.shape}, the rule says {t}")
    for d, n in zip(t.shape, arr.shape):
        if isinstance(d, int) and d != n:
            raise RuleMismatch(f"{op}: {what} has shape {arr.shape}, the rule says {t}")


def apply_op(op: str, *inputs: Any, const: Sequence[int] = (), **attrs: Any) -> Any:
    """Run ``op`` on ``inputs`` through the interpreter, checking the rule; a tuple for
    multi-output ops."""
    # None means "the default" in tests' parametrisations: leave such attributes out.
    g = build_op_graph(op, inputs, const, **{k: v for k, v in attrs.items() if v is not None})
    args = [x for i, x in enumerate(inputs) if i not in const]
    out = g(*args)
    types = g.result_types
    values = out if len(types) > 1 else (out,)
    for k, (t, v) in enumerate(zip(types, values)):
        check_value(op, t, v, f"result {k}")
    is_tuple = g.returns[0].input(0).op.name == "Proj"
    return tuple(values) if is_tuple else out
