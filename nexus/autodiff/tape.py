"""Tape mode (seed 002): run the graph forward while recording the dataflow nodes that
actually execute as an acyclic graph, then run reverse mode on that record.

Each executed node becomes one :class:`Record` keyed by ``(node, k)``, ``k`` counting
that node's executions (its loop iteration).  Values are numbered; Phis only rename, so
the record is the straight-line program the run performed, and reverse mode over it
needs no knowledge of the control flow.  Calls are recorded inline.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from nexus.autodiff.emit import EagerEmitter
from nexus.autodiff.vjp import vjp_rule
from nexus.backends.base import NexusRuntimeError
from nexus.ir.analysis import node_order
from nexus.ir.binding import signature
from nexus.ir.graph import Graph
from nexus.ir.node import Block, Node


@dataclass(slots=True)
class Record:
    """One executed dataflow node: ``key = (node, iteration)``, input and output value ids."""

    key: tuple[Node, int]
    ins: tuple[int, ...]
    out: int


@dataclass
class Tape:
    """The acyclic record of one forward run."""

    values: list[Any] = field(default_factory=list)
    active: list[bool] = field(default_factory=list)
    records: list[Record] = field(default_factory=list)
    counts: dict[Node, int] = field(default_factory=dict)

    def new_value(self, value: Any, active: bool) -> int:
        self.values.append(value)
        self.active.append(active)
        return len(self.values) - 1


def _is_float(value: Any) -> bool:
    """Whether a value can carry a gradient (a float tensor, or a tuple holding one)."""
    if isinstance(value, tuple):
        return any(_is_float(v) for v in value)
    return isinstance(value, (np.ndarray, np.generic)) and value.dtype.kind == "f"


def record(g: Graph, args: Sequence[Any], argnums: Sequence[int], *,
           max_iterations: int | None = None) -> tuple[Tape, list[int], list[int]]:
    """Run ``g`` on ``args``; returns the tape, the value ids of the arguments and of the
    results.  Arguments in ``argnums`` (and float values computed from them) are active."""
    tape = Tape()
    arg_ids = []
    for i, v in enumerate(signature(g).convert(args)):
        arg_ids.append(tape.new_value(v, i in argnums and _is_float(v)))
    out = _run(tape, g, arg_ids, max_iterations)
    return tape, arg_ids, out


@dataclass
class Paused:
    """Where a run stopped after its step budget: the block about to be entered, the
    edge it is entered by, and the value ids of every node computed so far."""

    block: Block
    edge: int
    env: dict[Node, int]


def _run(tape: Tape, g: Graph, arg_ids: list[int], max_iterations: int | None) -> list[int]:
    out = run_from(tape, g, dict(zip(g.args, arg_ids)), g.start_block, -1, None, max_iterations)
    assert not isinstance(out, Paused)
    return out


def run_from(tape: Tape, g: Graph, env: dict[Node, int], block: Block, edge: int, max_steps: int | None,
             max_iterations: int | None) -> list[int] | Paused:
    """Run ``g`` from entering ``block`` by ``edge`` with the values ``env``, recording on
    ``tape``; the result ids, or where it paused after entering ``max_steps`` blocks."""
    steps = 0
    orders: dict[Block, list[Node]] = {}
    while True:
        if max_steps is not None and steps >= max_steps:
            return Paused(block, edge, env)
        steps += 1
        if max_iterations is not None and steps > max_iterations:
            raise NexusRuntimeError(f"graph @{g.name} entered more than {max_iterations} blocks (max_iterations)")
        order = orders.get(block)
        if order is None:
            order = orders[block] = node_order(block)
        phis = [n for n in order if n.op.kind == "phi"]
        if phis:
            new = [env[p.input(edge)] for p in phis]
            env.update(zip(phis, new))
        exit_value: Node | None = None
        for n in order:
            name = n.op.name
            if n.op.kind == "phi" or name in ("Start", "End"):
                continue
            if name == "Jmp":
                exit_value = n
            elif name == "Cond":
                taken = int(bool(tape.values[env[n.input(0)]]))
                exit_value = next(u for u in n.users if u.op.name == "Proj" and u.attrs["num"] == taken)
            elif name == "Return":
                return [env[v] for v in n.inputs]
            elif name == "Proj" and n.input(0).op.name in ("Cond", "Start"):
                continue
            elif name == "Call":
                outs = _run(tape, n.attrs["callee"], [env[v] for v in n.inputs], max_iterations)
                if len(outs) == 1:
                    env[n] = outs[0]
                else:  # several results: a tuple value that Projs read (no gradient through it)
                    env[n] = tape.new_value(tuple(tape.values[i] for i in outs), False)
            else:
                env[n] = _apply(tape, n, env)
        if exit_value is None:
            raise NexusRuntimeError(f"block ^{block.name} has no terminator")
        (block, edge), = [(u, i) for u, i in exit_value.uses if isinstance(u, Block)]


def _apply(tape: Tape, n: Node, env: dict[Node, int]) -> int:
    kernel = n.op.kernel
    if kernel is None:
        raise NexusRuntimeError("this op has no kernel", n)
    ins = tuple(env[v] for v in n.inputs)
    try:
        value = kernel(*[tape.values[i] for i in ins],
                       **{k: v for k, v in n.attrs.items() if k not in ("device", "machine")})
    except Exception as e:  # noqa: BLE001  (any kernel failure is reported with its node)
        raise NexusRuntimeError(f"{type(e).__name__}: {e}", n) from e
    active = _is_float(value) and any(tape.active[i] for i in ins)
    out = tape.new_value(value, active)
    if active:
        if not n.op.differentiable and n.op.name != "Proj":
            raise NexusRuntimeError("gradient requested through an op that is not differentiable", n)
        k = tape.counts.get(n, 0)
        tape.counts[n] = k + 1
        tape.records.append(Record((n, k), ins, out))
    return out


def backward(tape: Tape, outs: Sequence[int], cotangents: Sequence[Any], wrt: Sequence[int],
             zeros: bool = True) -> list[Any]:
    """Reverse mode over the tape: the cotangents of the values ``wrt`` given those of
    ``outs`` (those that got none: zeros, or None when ``zeros`` is false)."""
    e = EagerEmitter()
    ct: dict[int, Any] = {}
    for o, c in zip(outs, cotangents):
        if tape.active[o] and c is not None:
            ct[o] = ct[o] + c if o in ct else np.asarray(c, dtype=np.asarray(tape.values[o]).dtype)
    for rec in reversed(tape.records):
        g = ct.pop(rec.out, None)
        if g is None:
            continue
        node = rec.key[0]
        if node.op.name == "Proj":  # a part of a multi-output op: collect per part
            (src,) = rec.ins
            parts = ct.setdefault(src, [None] * len(tape.values[src]))
            k = node.attrs["num"]
            parts[k] = g if parts[k] is None else parts[k] + g
            continue
        wants = [tape.active[i] for i in rec.ins]
        try:
            grads = vjp_rule(node.op.name)(e, node, [tape.values[i] for i in rec.ins], tape.values[rec.out],
                                          g, wants)
        except NexusRuntimeError:
            raise
        except Exception as err:
            raise NexusRuntimeError(f"in its VJP: {type(err).__name__}: {err}", node) from err
        for i, gi in zip(rec.ins, grads):
            if gi is None or not tape.active[i]:
                continue
            ct[i] = ct[i] + gi if i in ct else gi
    out: list[Any] = []
    for i in wrt:
        v = tape.values[i]
        c = ct.get(i)
        if c is None:
            if not zeros:
                out.append(None)
                continue
            c = np.zeros_like(v)
        out.append(np.asarray(c, dtype=np.asarray(v).dtype)[()] if np.ndim(v) == 0 else np.asarray(c))
    return out


