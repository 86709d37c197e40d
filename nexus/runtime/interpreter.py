"""The reference block interpreter of seed 000, section 5 (simple version).

State is the current block and the control edge it was entered by.  Per block:
(1) Phis read the input at the position of that edge, all before any is written;
(2) dataflow nodes run in a topological order; (3) the terminator picks the next edge.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from nexus.ir.graph import Graph
from nexus.ir.node import Block, Node
from nexus.ir.printer import node_order
from nexus.ir.types import TensorType, numpy_dtype


class NexusRuntimeError(RuntimeError):
    """A failure while running a graph; names the node, its op, block and source line."""

    def __init__(self, msg: str, node: Node | None = None):
        self.node = node
        if node is not None:
            where = f"{node.op.name} %{node.name or '?'} in ^{node.block.name if node.block else '?'}"
            if node.loc is not None:
                where += f" (created at {node.loc})"
            msg = f"{where}: {msg}"
        super().__init__(msg)


def to_value(x: Any, t: TensorType | None = None) -> Any:
    """Convert a Python or NumPy argument to the runtime representation of type ``t``."""
    arr = np.asarray(x)
    if t is not None:
        want = numpy_dtype(t.dtype)
        if arr.dtype != want:
            if not np.can_cast(arr.dtype, want, casting="same_kind") and not (
                arr.dtype.kind in "iub" and want.kind in "iuf"
            ):
                raise NexusRuntimeError(f"argument of dtype {arr.dtype} cannot be passed as {t}")
            arr = arr.astype(want)
    return arr[()] if arr.ndim == 0 else arr


def run(g: Graph, *args: Any, max_iterations: int | None = None, parallel: bool | None = None) -> Any:
    """Run ``g`` on ``args``.  One result is returned as is, several as a tuple.

    ``max_iterations`` bounds the number of blocks entered (a guard against endless
    loops); ``parallel`` is accepted for API compatibility and ignored here.
    """
    del parallel
    if len(args) != len(g.args):
        raise NexusRuntimeError(f"graph @{g.name} takes {len(g.args)} arguments, got {len(args)}")
    env: dict[Node, Any] = {}
    arg_types = g.arg_types
    for node, value, t in zip(g.args, args, arg_types):
        env[node] = to_value(value, t if isinstance(t, TensorType) else None)
    block: Block = g.start_block
    edge = -1
    steps = 0
    while True:
        steps += 1
        if max_iterations is not None and steps > max_iterations:
            raise NexusRuntimeError(f"graph @{g.name} entered more than {max_iterations} blocks "
                                    "(max_iterations); is a loop endless?")
        order = node_order(block)
        phis = [n for n in order if n.op.kind == "phi"]
        if phis:
            new = [env[p.input(edge)] for p in phis]
            for p, v in zip(phis, new):
                env[p] = v
        exit_value: Node | None = None
        for n in order:
            name = n.op.name
            if n.op.kind == "phi" or name in ("Start", "End"):
                continue
            if name == "Jmp":
                exit_value = n
            elif name == "Cond":
                taken = int(bool(env[n.input(0)]))
                exit_value = next(u for u in n.users if u.op.name == "Proj" and u.attrs["num"] == taken)
            elif name == "Return":
                results = [env[v] for v in n.inputs]
                return results[0] if len(results) == 1 else tuple(results)
            elif name == "Proj" and n.input(0).op.name in ("Cond", "Start"):
                continue
            elif name == "Call":
                env[n] = run(n.attrs["callee"], *[env[v] for v in n.inputs], max_iterations=max_iterations)
            else:
                env[n] = _apply(n, env)
        if exit_value is None:
            raise NexusRuntimeError(f"block ^{block.name} has no terminator")
        (user, edge), = [(u, i) for u, i in exit_value.uses if isinstance(u, Block)]
        block = user


def _apply(n: Node, env: dict[Node, Any]) -> Any:
    kernel = n.op.kernel
    if kernel is None:
        raise NexusRuntimeError("this op has no kernel", n)
    try:
        return kernel(*[env[v] for v in n.inputs], **{k: v for k, v in n.attrs.items() if k not in ("device", "machine")})
    except NexusRuntimeError:
        raise
    except Exception as e:  # noqa: BLE001  (any kernel failure is reported with its node)
        raise NexusRuntimeError(f"{type(e).__name__}: {e}", n) from e
