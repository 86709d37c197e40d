"""The text form of graphs.  The printer owns naming and the canonical order of blocks and
nodes; :func:`structurally_equal` compares two graphs in that order.

Format (one node a line; a block header lists its control predecessors)::

    graph @name {
    ^entry:
      %0 = Start : (f32, i64)
      %x = Proj %0 {num = 0} : f32
      ...
      %j = Jmp : X                      # -> ^loop
    ^loop(%j, %back):
      %i = Phi %i0, %i1 : i64
      ...
    ^exit(%r):
      End : X
    }

Tensors in attributes print as ``tensor<f32[2, 2]: [1.0, 2.0, 3.0, 4.0]>``; large ones as
``tensor<f32[512, 512]: @"name">``, a reference into the safetensors payload.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Any

import numpy as np

from nexus.ir.analysis import block_order, node_order
from nexus.ir.graph import Graph
from nexus.ir.node import Block, Node
from nexus.ir.tensorio import storable
from nexus.ir.types import TensorType, dtype_of, format_dim

INLINE_LIMIT = 16  # tensors with more elements go to the payload when one is given
_NAME_OK = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*\Z")


# --- canonical order (nexus.ir.analysis) ---------------------------------------------------
def graph_nodes(g: Graph) -> list[Node]:
    return [n for b in block_order(g) for n in node_order(b)]


# --- naming ------------------------------------------------------------------------------
class Namer:
    def __init__(self) -> None:
        self.names: dict[Node, str] = {}
        self.taken: set[str] = set()
        self.counter = 0

    def unique(self, hint: str | None) -> str:
        if hint and not _NAME_OK.match(hint):
            hint = re.sub(r"[^A-Za-z0-9_.]", "_", hint)
            if not _NAME_OK.match(hint):
                hint = "v" + hint
        if not hint:
            while str(self.counter) in self.taken:
                self.counter += 1
            name = str(self.counter)
            self.counter += 1
        elif hint not in self.taken:
            name = hint
        else:
            base = re.sub(r"\.\d+\Z", "", hint)
            k = 1
            while f"{base}.{k}" in self.taken:
                k += 1
            name = f"{base}.{k}"
        self.taken.add(name)
        return name

    def __getitem__(self, node: Node) -> str:
        return self.names[node]


def value_names(g: Graph) -> dict[Node, str]:
    """Each node of ``g`` by its name in the text form (``%name``): its own made unique, or
    the number the printer gives an unnamed one."""
    return _name_graph(g, block_order(g))[0].names


def _name_graph(g: Graph, blocks: list[Block]) -> tuple[Namer, Namer]:
    values, labels = Namer(), Namer()
    for b in blocks:
        labels.names[b] = labels.unique(b.name or "bb")
    for b in blocks:
        for n in node_order(b):
            values.names[n] = values.unique(n.name or _result_name(n))
    return values, labels


def _result_name(n: Node) -> str | None:
    """An unnamed Proj of a multi-output data op is named after that result
    (``OpDef.results``): ``%nb = Proj %nms {num = 1}``."""
    if n.op.name != "Proj" or not n.inputs:
        return None
    src = n.input(0)
    results = src.op.results if src.op.kind != "control" else ()
    num = n.attrs.get("num")
    return results[num] if isinstance(num, int) and 0 <= num < len(results) else None


def graph_ref(name: str) -> str:
    """``@name``, or ``@"any text"`` for names that are not plain (imported models')."""
    return f"@{name}" if re.fullmatch(r"[A-Za-z0-9_.]+", name) else f"@{json.dumps(name)}"


# --- values ------------------------------------------------------------------------------
def format_scalar(x: Any) -> str:
    if isinstance(x, (bool, np.bool_)):
        return "true" if x else "false"
    if isinstance(x, np.floating) and np.isnan(x) and np.signbit(x):
        return "-nan"  # NumPy prints "nan" for both signs; keep the sign bit
    return str(x)  # NumPy prints the shortest text that round-trips for the dtype


def format_tensor(a: np.ndarray, payload: dict[str, np.ndarray] | None, key: str) -> str:
    t = TensorType(dtype_of(a.dtype), a.shape)
    # Dtypes safetensors lacks (int4, float8 e4m3fnuz...) stay inline.
    if payload is not None and a.size > INLINE_LIMIT and storable(a.dtype):
        if key in payload and payload[key] is not a:  # "g.a" + "b" vs "g" + "a.b": keep both
            k = 2
            while f"{key}#{k}" in payload:
                k += 1
            key = f"{key}#{k}"
        payload[key] = a
        return f"tensor<{t}: @{json.dumps(key)}>"
    flat = ", ".join(format_scalar(x) for x in a.reshape(-1))
    body = flat if a.ndim == 0 else f"[{flat}]"
    return f"tensor<{t}: {body}>"


def format_attr(value: Any, payload: dict[str, np.ndarray] | None, key: str) -> str:
    if isinstance(value, np.ndarray):
        return format_tensor(value, payload, key)
    if isinstance(value, Graph):
        return graph_ref(value.name)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return format_scalar(np.float64(value)) if isinstance(value, float) else str(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, (tuple, list)):
        # Symbolic dims (sympy) print as strings and parse back through parse_dim.
        items = (format_attr(v, payload, key) if isinstance(v, (int, float, str)) else json.dumps(format_dim(v))
                 for v in value)
        return "[" + ", ".join(items) + "]"
    raise TypeError(f"attribute value {value!r} has no text form")


# --- graphs ------------------------------------------------------------------------------
def print_graph(
    g: Graph,
    payload: dict[str, np.ndarray] | None = None,
    *,
    locs: bool = True,
    with_callees: bool = True,
) -> str:
    """The text of ``g`` (and, first, of the graphs it calls)."""
    parts = [print_graph(c, payload, locs=locs, with_callees=False) for c in g.callees()] if with_callees else []
    blocks = block_order(g)
    values, labels = _name_graph(g, blocks)
    lines = [f"graph {graph_ref(g.name)} {{"]
    for b in blocks:
        preds = ", ".join(_ref(values, p) for p in b.inputs)
        lines.append(f"^{labels[b]}({preds}):" if b.inputs else f"^{labels[b]}:")
        for n in node_order(b):
            lines.append("  " + _node_line(n, values, labels, payload, g.name, locs))
    lines.append("}")
    parts.append("\n".join(lines))
    return "\n\n".join(parts) + "\n"


def _ref(values: Namer, node: Node) -> str:
    name = values.names.get(node)
    return f"%{name}" if name is not None else f"%<outside:{node.op.name}>"


def _node_line(n: Node, values: Namer, labels: Namer, payload: dict[str, Any] | None, gname: str, locs: bool) -> str:
    text = f"%{values[n]} = {n.op.name}" if n.op.name != "End" else "End"
    if n.inputs:
        text += " " + ", ".join(_ref(values, v) for v in n.inputs)
    if n.attrs:
        items = ", ".join(
            f"{k} = {format_attr(v, payload, f'{gname}.{values[n]}.{k}')}" for k, v in sorted(n.attrs.items())
        )
        text += f" {{{items}}}"
    if n.deps:
        text += " deps(" + ", ".join(_ref(values, d) for d in n.deps) + ")"
    text += f" : {n.type}"
    if locs and n.loc is not None:
        text += f" loc({json.dumps(n.loc.file)}:{n.loc.line}:{n.loc.col})"
    if n.op.name == "Jmp":
        targets = [labels.names.get(u) for u in n.users if isinstance(u, Block)]
        if targets and targets[0]:
            text += f"  # -> ^{targets[0]}"
    return text


# --- structural equality -------------------------------------------------------------------
def structurally_equal(a: Graph, b: Graph) -> bool:
    """Same blocks, nodes, ops, attributes, types and edges, in canonical order."""
    return not structural_diff(a, b)


def structural_diff(a: Graph, b: Graph) -> str:
    """Empty when equal, else a description of the first difference."""
    ba, bb = block_order(a), block_order(b)
    if len(ba) != len(bb):
        return f"{len(ba)} blocks vs {len(bb)}"
    na = [n for blk in ba for n in node_order(blk)]
    nb = [n for blk in bb for n in node_order(blk)]
    if len(na) != len(nb):
        return f"{len(na)} nodes vs {len(nb)}"
    pos: dict[Node, Node] = dict(zip(ba, bb))
    pos.update(zip(na, nb))
    if a.name != b.name:
        return f"graph names {a.name} vs {b.name}"
    for x, y in zip(ba + na, bb + nb):
        if x.op is not y.op:
            return f"{x!r} vs {y!r}: ops differ"
        if not isinstance(x, Block) and pos.get(x.block) is not y.block:  # type: ignore[arg-type]
            return f"{x!r} vs {y!r}: blocks differ"
        if x.type != y.type:
            return f"{x!r}: types {x.type} vs {y.type}"
        if [pos.get(v) for v in x.inputs] != list(y.inputs):
            return f"{x!r}: inputs differ"
        if [pos.get(v) for v in x.deps] != list(y.deps):
            return f"{x!r}: deps differ"
        if not _attrs_equal(x.attrs, y.attrs):
            return f"{x!r}: attributes differ"
    return ""


def _attrs_equal(x: Any, y: Any) -> bool:
    if set(x) != set(y):
        return False
    for k in x:
        u, v = x[k], y[k]
        if isinstance(u, np.ndarray) or isinstance(v, np.ndarray):
            if not (isinstance(u, np.ndarray) and isinstance(v, np.ndarray)):
                return False
            if u.dtype != v.dtype or u.shape != v.shape or not np.array_equal(u, v, equal_nan=u.dtype.kind == "f"):
                return False
            if u.dtype.kind == "f" and not np.array_equal(np.signbit(u), np.signbit(v)):
                return False
        elif isinstance(u, Graph) or isinstance(v, Graph):
            if not (isinstance(u, Graph) and isinstance(v, Graph) and structurally_equal(u, v)):
                return False
        elif isinstance(u, float) and isinstance(v, float) and u != u and v != v:
            continue
        elif u != v:
            return False
    return True


def iter_blocks(g: Graph) -> Iterable[Block]:
    return block_order(g)
