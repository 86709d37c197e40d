"""The static evaluator: values known before a graph runs, from its constants and static
shapes.  Constant folding, the importers (an ONNX Reshape's shape input, a TF reduction's
axes) and the backends ask here, so what counts as known is decided in one place.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from nexus.ir.graph import Graph, known_value
from nexus.ir.kernels import KernelError, kernel_call
from nexus.ir.node import Node
from nexus.ir.types import TensorType

MAX_ELEMENTS = 1 << 16  # values needed ahead of the run (axes, pads, sizes) are small
MAX_DEPTH = 64  # a chain of shape arithmetic is short; a long one is data, not shapes


def foldable(node: Node) -> bool:
    """Whether ``node``'s value follows from its inputs' alone: a pure op with a kernel
    and no graph attribute (a Call, a loop body)."""
    op = node.op
    return op.pure and op.kernel is not None and op.kind == "data" and \
        not any(isinstance(a, Graph) for a in node.attrs.values())


def evaluate(node: Node, values: Sequence[Any], max_elements: int = MAX_ELEMENTS) -> np.ndarray | None:
    """``node``'s value from its inputs' known ``values``, or None where it is not known
    before the run: not :func:`foldable`, a kernel that raises (the run reports it), or a
    result of more than ``max_elements`` (a Range is counted before it allocates)."""
    if not foldable(node):
        return None
    if node.op.name == "Range":
        start, limit, delta = (float(np.asarray(a).reshape(-1)[0]) if np.size(a) == 1 else np.nan for a in values)
        if not (np.isfinite(start) and np.isfinite(limit) and np.isfinite(delta)) or delta == 0 \
                or (limit - start) / delta > max_elements:
            return None
    try:
        out = np.array(kernel_call(node, values, fp_errors="ignore"))  # a copy: never an input's alias
    except KernelError:
        return None
    return out if out.size <= max_elements else None


def static_value(node: Node, memo: dict[Node, Any] | None = None, depth: int = 0) -> np.ndarray | None:
    """The value of ``node`` known before the run: a constant, the shape of a static
    tensor, or a foldable op on such values (at most MAX_DEPTH ops deep); else None."""
    v: np.ndarray | None = known_value(node)
    if v is not None or depth > MAX_DEPTH:
        return v
    memo = {} if memo is None else memo
    if node in memo:
        return memo[node]  # type: ignore[no-any-return]
    memo[node] = None
    t = node.type
    if node.op.name == "ShapeOf":
        src = node.inputs[0].type
        if isinstance(src, TensorType) and src.is_static:
            memo[node] = np.array(src.shape, np.int64)
        return memo[node]  # type: ignore[no-any-return]
    if not isinstance(t, TensorType) or t.shape is None or (not t.is_static and node.op.name != "Range") \
            or (t.is_static and int(np.prod(t.shape)) > MAX_ELEMENTS) or not foldable(node):
        return None
    args = []
    for x in node.inputs:
        a = static_value(x, memo, depth + 1)
        if a is None:
            return None
        args.append(a)
    memo[node] = out = evaluate(node, args)
    return out
