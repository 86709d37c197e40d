"""VJPs of the data-movement and collective ops (nexus/ops/comm.py).

A Memcpy's cotangent goes back where its input lived.  Under SPMD each rank holds its
own cotangent of a collective's result, so: AllReduce-sum's adjoint is AllReduce-sum
(mean: mean), AllGather's is ReduceScatter-sum along the same axis, ReduceScatter-sum's
is AllGather.  Broadcast has none: only the root's input matters, and no op here knows
which rank it runs on.  Max/min/prod reductions have none either (their adjoint needs
the arg-extremum across ranks).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from nexus.autodiff.emit import Emitter
from nexus.autodiff.vjp import defvjp
from nexus.ir.node import Node


class CommGradError(NotImplementedError):
    """A collective whose adjoint is not defined here."""

@defvjp("Memcpy")
def _memcpy(e: Emitter, n: Node, ins: Sequence[Any], out: Any, g: Any, wants: Sequence[bool]) -> list[Any]:
    attrs: dict[str, Any] = {"src": n.attrs.get("device") or ""}
    if n.attrs.get("src"):
        attrs["device"] = n.attrs["src"]
    return [e.op("Memcpy", g, **attrs)]


def _sum_like(n: Node) -> str:
    op = n.attrs.get("op", "sum")
    if op not in ("sum", "mean"):
        raise CommGradError(f"{n.op.name} with op={op!r} has no VJP (only sum and mean); "
                            "see nexus.autodiff.vjp_comm")
    return str(op)


@defvjp("AllReduce")
def _all_reduce(e: Emitter, n: Node, ins: Sequence[Any], out: Any, g: Any, wants: Sequence[bool]) -> list[Any]:
    return [e.op("AllReduce", g, op=_sum_like(n), group=n.attrs.get("group", ""))]


@defvjp("AllGather")
def _all_gather(e: Emitter, n: Node, ins: Sequence[Any], out: Any, g: Any, wants: Sequence[bool]) -> list[Any]:
    return [e.op("ReduceScatter", g, op="sum", axis=n.attrs.get("axis", 0), group=n.attrs.get("group", ""))]


@defvjp("ReduceScatter")
def _reduce_scatter(e: Emitter, n: Node, ins: Sequence[Any], out: Any, g: Any, wants: Sequence[bool]) -> list[Any]:
    if _sum_like(n) == "mean":
        raise CommGradError("ReduceScatter with op='mean' has no VJP yet; use sum and scale")
    return [e.op("AllGather", g, axis=n.attrs.get("axis", 0), group=n.attrs.get("group", ""))]
