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

# One executed active node: (node, input value ids, output value id).  A plain tuple:
# the forward appends one per active node, so a class instance there cost a third of
# the forward's time on small tensors.
Record = tuple[Node, tuple[int, ...], int]


@dataclass
class Tape:
    """The acyclic record of one forward run."""

    values: list[Any] = field(default_factory=list)
    active: list[bool] = field(default_factory=list)
    records: list[Record] = field(default_factory=list)

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


# How run_from treats a node: skipped, a jump, a branch, a return, a call, a kernel.
_SKIP, _JMP, _COND, _RET, _CALL, _KERNEL = range(6)
Step = tuple[int, Node, Any, dict[str, Any], tuple[Node, ...]]


def _steps(block: Block) -> tuple[list[Node], list[Step]]:
    """The Phis of ``block`` and what to do for each of its other nodes, in order."""
    order = node_order(block)
    phis = [n for n in order if n.op.kind == "phi"]
    steps: list[Step] = []
    for n in order:
        name = n.op.name
        if n.op.kind == "phi" or name in ("Start", "End") or (
                name == "Proj" and n.input(0).op.name in ("Cond", "Start")):
            continue
        kind = {"Jmp": _JMP, "Cond": _COND, "Return": _RET, "Call": _CALL}.get(name, _KERNEL)
        attrs = {k: v for k, v in n.attrs.items() if k not in ("device", "machine")}
        steps.append((kind, n, n.op.kernel, attrs, tuple(n.inputs)))
    return phis, steps


def run_from(tape: Tape, g: Graph, env: dict[Node, int], block: Block, edge: int, max_steps: int | None,
             max_iterations: int | None) -> list[int] | Paused:
    """Run ``g`` from entering ``block`` by ``edge`` with the values ``env``, recording on
    ``tape``; the result ids, or where it paused after entering ``max_steps`` blocks."""
    steps = 0
    plans: dict[Block, tuple[list[Node], list[Step]]] = {}
    values, active, records = tape.values, tape.active, tape.records
    while True:
        if max_steps is not None and steps >= max_steps:
            return Paused(block, edge, env)
        steps += 1
        if max_iterations is not None and steps > max_iterations:
            raise NexusRuntimeError(f"graph @{g.name} entered more than {max_iterations} blocks (max_iterations)")
        plan = plans.get(block)
        if plan is None:
            plan = plans[block] = _steps(block)
        phis, todo = plan
        if phis:
            new = [env[p.input(edge)] for p in phis]
            env.update(zip(phis, new))
        exit_value: Node | None = None
        for kind, n, kernel, attrs, inputs in todo:
            if kind == _KERNEL:
                ins = tuple([env[v] for v in inputs])
                if kernel is None:
                    raise NexusRuntimeError("this op has no kernel", n)
                try:
                    value = kernel(*[values[i] for i in ins], **attrs)
                except Exception as e:  # noqa: BLE001  (any kernel failure is reported with its node)
                    raise NexusRuntimeError(f"{type(e).__name__}: {e}", n) from e
                values.append(value)
                out = env[n] = len(values) - 1
                if any([active[i] for i in ins]) and _is_float(value):
                    active.append(True)
                    if not n.op.differentiable and n.op.name != "Proj":
                        raise NexusRuntimeError("gradient requested through an op that is not differentiable", n)
                    records.append((n, ins, out))
                else:
                    active.append(False)
            elif kind == _JMP:
                exit_value = n
            elif kind == _COND:
                taken = int(bool(values[env[n.input(0)]]))
                exit_value = next(u for u in n.users if u.op.name == "Proj" and u.attrs["num"] == taken)
            elif kind == _RET:
                return [env[v] for v in n.inputs]
            else:
                outs = _run(tape, n.attrs["callee"], [env[v] for v in n.inputs], max_iterations)
                if len(outs) == 1:
                    env[n] = outs[0]
                else:  # several results: a tuple value that Projs read (no gradient through it)
                    env[n] = tape.new_value(tuple(values[i] for i in outs), False)
        if exit_value is None:
            raise NexusRuntimeError(f"block ^{block.name} has no terminator")
        (block, edge), = [(u, i) for u, i in exit_value.uses if isinstance(u, Block)]


def backward(tape: Tape, outs: Sequence[int], cotangents: Sequence[Any], wrt: Sequence[int],
             zeros: bool = True) -> list[Any]:
    """Reverse mode over the tape: the cotangents of the values ``wrt`` given those of
    ``outs`` (those that got none: zeros, or None when ``zeros`` is false)."""
    e = EagerEmitter()
    ct: dict[int, Any] = {}
    for o, c in zip(outs, cotangents):
        if tape.active[o] and c is not None:
            ct[o] = ct[o] + c if o in ct else np.asarray(c, dtype=np.asarray(tape.values[o]).dtype)
    values, active = tape.values, tape.active
    rules: dict[str, Any] = {}
    for node, rins, rout in reversed(tape.records):
        g = ct.pop(rout, None)
        if g is None:
            continue
        name = node.op.name
        if name == "Proj":  # a part of a multi-output op: collect per part
            (src,) = rins
            parts = ct.setdefault(src, [None] * len(values[src]))
            k = node.attrs["num"]
            parts[k] = g if parts[k] is None else parts[k] + g
            continue
        wants = [active[i] for i in rins]
        rule = rules.get(name)
        if rule is None:
            rule = rules[name] = vjp_rule(name)
        try:
            grads = rule(e, node, [values[i] for i in rins], values[rout], g, wants)
        except NexusRuntimeError:
            raise
        except Exception as err:
            raise NexusRuntimeError(f"in its VJP: {type(err).__name__}: {err}", node) from err
        for i, gi in zip(rins, grads):
            if gi is None or not active[i]:
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


