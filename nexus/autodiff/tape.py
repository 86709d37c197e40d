"""Tape mode (seed 002): run the graph forward while recording the dataflow nodes that
actually execute, then run reverse mode over that record.

A :class:`Recorder` prepares a graph once per set of differentiated arguments: a copy
with its calls inlined and placement dropped (tape mode runs on the host), the *active*
nodes (float values that depend on a differentiated argument, as graph mode finds them)
and, built on first need, each active node's VJP compiled to a Python function.

The record of a run is a list of flat tuples ``(k, value, *inputs)``: the k-th active
node ran and gave ``value``.  Phis only rename, so the record is the straight-line
program the run performed, and its reverse needs no knowledge of the control flow.
Cotangents are keyed by the identity of the value objects: the record keeps them alive,
and no node's value is the same object as one of its inputs (the recording copies the
value in that case), so a Phi's rename needs no bookkeeping.

Where the time goes (issue 19): the forward is the python backend's generated function
with one tuple appended per active node; the reverse makes, per record, one call of that
node's VJP — the graph-mode rule emitted into a small graph of the node's static types,
folded (``canonicalize``: no ``SumToLike`` of a value already of the target shape) and
compiled by the python backend, so no rule logic runs per step.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from nexus.autodiff.emit import GraphEmitter
from nexus.autodiff.graph_mode import active_values, inline_calls
from nexus.autodiff.vjp import vjp_rule
from nexus.backends.base import NexusRuntimeError
from nexus.backends.python.codegen import Generated, fresh
from nexus.backends.python.codegen import Paused as GeneratedPause
from nexus.backends.python.interpreter import prepare
from nexus.ir.binding import signature
from nexus.ir.graph import Graph
from nexus.ir.node import Node
from nexus.ir.opdef import UNIVERSAL_ATTRS, OpTypeError
from nexus.ir.types import TupleType
from nexus.passes.manager import optimize

Record = tuple[Any, ...]  # (k, value, *inputs)
# A compiled VJP: fn(limit, *inputs, value, cotangent) (a multi-output op: fn(limit, *inputs,
# *cotangents of the parts that have one)), the inputs it gives cotangents to, and whether
# it returns one value rather than a tuple.
Vjp = tuple[Callable[..., Any], tuple[int, ...], bool]


class Recorder:
    """``g`` prepared for tape mode with respect to the arguments ``argnums``."""

    def __init__(self, g: Graph, argnums: tuple[int, ...]):
        h, _ = g.clone()  # errors name the graph as the user knows it
        inline_calls(h)
        for n in h.nodes():
            if n.attrs and UNIVERSAL_ATTRS & n.attrs.keys():
                n.attrs = {k: v for k, v in n.attrs.items() if k not in UNIVERSAL_ATTRS}
        self.graph = h
        self.active = active_values(h, argnums)
        self.argnums = argnums
        self.nodes = [n for n in h.nodes() if n in self.active and n.op.kind != "phi" and n not in h.args]
        self.index = {n: k for k, n in enumerate(self.nodes)}
        self.wants = [tuple(v in self.active for v in n.inputs) for n in self.nodes]
        # For a Proj of a multi-output value: (part, number of parts); else None.
        self.part: list[tuple[int, int] | None] = [
            (n.attrs["num"], len(n.input(0).type.elems))  # type: ignore[attr-defined]
            if n.op.name == "Proj" and isinstance(n.input(0).type, TupleType) else None for n in self.nodes]
        self.vjps: dict[Any, Vjp] = {}  # compiled VJPs by node number (and parts mask), built on first need

    def arguments(self, args: Sequence[Any]) -> list[Any]:
        """The converted arguments; a differentiated one that is the same object as
        another argument is copied, so that each has its own cotangent."""
        values = signature(self.graph).convert(args)
        for i in self.argnums:
            if any(values[i] is v for j, v in enumerate(values) if j != i):
                values[i] = fresh(values[i])
        return values

    def record(self, values: Sequence[Any], max_iterations: int | None) -> tuple[list[Record], list[Any]]:
        """Run the graph on converted ``values``: the record and the results."""
        p = prepare(self.graph)
        gen = p.recording(max_iterations is not None, self.nodes)
        records: list[Record] = []
        try:
            res = gen.fn(max_iterations, records.append, *values)
        except Exception as e:  # noqa: BLE001  (any kernel failure is reported with its node)
            p.reraise(e)
        return records, list(res) if len(self.graph.result_types) != 1 else [res]

    def vjp(self, k: int, mask: tuple[bool, ...] | None = None) -> Vjp:
        """The compiled VJP of the k-th active node (of a multi-output node: for the parts
        ``mask`` says have a cotangent)."""
        key = k if mask is None else (k, mask)
        hit = self.vjps.get(key)
        if hit is None:
            hit = self.vjps[key] = self._build_vjp(self.nodes[k], self.wants[k], mask)
        return hit

    def _build_vjp(self, n: Node, wants: tuple[bool, ...], mask: tuple[bool, ...] | None) -> Vjp:
        ins_t = [v.type for v in n.inputs]
        if mask is not None:
            parts = n.type.elems  # type: ignore[attr-defined]
            types = [*ins_t, *(t for t, m in zip(parts, mask) if m)]
        else:
            types = [*ins_t, n.type, n.type]
        h = Graph(f"vjp_{n.op.name}", types)
        em = GraphEmitter(h, h.start_block)
        ins = h.args[:len(ins_t)]
        out: Any
        gout: Any
        if mask is not None:
            it = iter(h.args[len(ins_t):])
            out, gout = None, [next(it) if m else None for m in mask]  # multi-output rules read no value
        else:
            out, gout = h.args[-2], h.args[-1]
        try:
            grads = vjp_rule(n.op.name)(em, n, ins, out, gout, list(wants))
        except OpTypeError as e:
            raise NexusRuntimeError(f"its VJP rule failed: {e}", n) from e
        targets = tuple(i for i, (gi, w) in enumerate(zip(grads, wants)) if w and gi is not None)
        h.end_block.append_input(h.add("Return", [grads[i] for i in targets], h.start_block))
        optimize(h, "canonicalize")
        return prepare(h).variant(False, "off").fn, targets, len(targets) == 1


def recorder(g: Graph, argnums: Sequence[int]) -> Recorder:
    """The (cached) :class:`Recorder` of ``g`` for ``argnums``."""
    cache: dict[tuple[int, ...], Recorder] = g.cached("autodiff.tape", lambda _: {})
    key = tuple(argnums)
    rec = cache.get(key)
    if rec is None:
        rec = cache[key] = Recorder(g, key)
    return rec


def backward(rec: Recorder, records: Sequence[Record], seeds: Sequence[tuple[Any, Any]], wrt: Sequence[Any],
             zeros: bool = True) -> list[Any]:
    """Reverse mode over ``records``: the cotangents of the values ``wrt`` given the
    cotangents of some values (``seeds``: pairs (value, cotangent or None)); a value that
    got none has zeros, or None when ``zeros`` is false."""
    ct: dict[int, Any] = {}
    for v, c in seeds:
        if c is not None:
            c = np.asarray(c, dtype=np.asarray(v).dtype)
            ct[id(v)] = ct[id(v)] + c if id(v) in ct else c
    pop, get, part, vjps = ct.pop, ct.get, rec.part, rec.vjps
    for r in reversed(records):
        g = pop(id(r[1]), None)
        if g is None:
            continue
        k = r[0]
        p = part[k]
        if p is not None:  # a part of a multi-output value: collect per part
            parts = ct.setdefault(id(r[2]), [None] * p[1])
            parts[p[0]] = g if parts[p[0]] is None else parts[p[0]] + g
            continue
        if isinstance(g, list):  # the parts of a multi-output value
            fn, targets, single = rec.vjp(k, tuple(x is not None for x in g))
            args = (*r[2:], *(x for x in g if x is not None))
        else:
            hit = vjps.get(k)
            fn, targets, single = hit if hit is not None else rec.vjp(k)
            args = (*r[2:], r[1], g)
        try:
            grads = fn(None, *args)
        except Exception as e:  # noqa: BLE001  (a failing VJP is reported with its node)
            raise NexusRuntimeError(f"in its VJP: {type(e).__name__}: {e}", rec.nodes[k]) from e
        if single:
            grads = (grads,)
        for j, gi in zip(targets, grads):
            key = id(r[2 + j])
            old = get(key)
            ct[key] = gi if old is None else old + gi
    out: list[Any] = []
    for v in wrt:
        c = ct.get(id(v))
        if c is None:
            if not zeros:
                out.append(None)
                continue
            c = np.zeros_like(v)
        out.append(np.asarray(c, dtype=np.asarray(v).dtype)[()] if np.ndim(v) == 0 else np.asarray(c))
    return out


def vjp_values(g: Graph, args: Sequence[Any], argnums: Sequence[int], cts: Sequence[Any] | None,
               max_iterations: int | None) -> tuple[list[Any], list[Any]]:
    """Results of ``g(*args)`` and the cotangents of ``args[argnums]`` (``cts=None``: ones
    for every result), by recording one run."""
    rec = recorder(g, argnums)
    values = rec.arguments(args)
    records, outs = rec.record(values, max_iterations)
    seeds = cts if cts is not None else [np.ones_like(o) for o in outs]
    grads = backward(rec, records, list(zip(outs, seeds)), [values[i] for i in argnums])
    for j, i in enumerate(argnums):
        if rec.graph.args[i] not in rec.active:  # not a float: its gradient is zero
            grads[j] = np.zeros_like(grads[j])
    return outs, grads


# --- resumable runs (checkpointed tape mode) ------------------------------------------------
@dataclass
class Paused:
    """Where a run stopped after its budget of state entries (the python backend's
    resumable variant): the state about to be entered and the value of each variable
    then, by node."""

    state: int
    env: dict[Node, Any]


def _discard(_: Record) -> None:
    pass


def run_segment(rec: Recorder, records: list[Record] | None, values: Sequence[Any], resume: Paused | None,
                budget: int | None, max_iterations: int | None) -> list[Any] | Paused:
    """Run ``rec``'s graph on converted ``values`` from the start, or from where ``resume``
    paused, appending to ``records`` (unless None); the results, or where it paused after
    entering ``budget`` states.  The same generated code as :meth:`Recorder.record`."""
    p = prepare(rec.graph)
    gen = p.recording(max_iterations is not None, rec.nodes, resumable=True)
    start = None if resume is None else (resume.state, _names(gen, resume.env))
    try:
        res = gen.fn(max_iterations, records.append if records is not None else _discard,
                     budget if budget is not None else float("inf"), start, *values)
    except Exception as e:  # noqa: BLE001  (any kernel failure is reported with its node)
        p.reraise(e)
    if isinstance(res, GeneratedPause):
        env = {gen.variables[k]: v for k, v in res.variables.items() if k in gen.variables}
        return Paused(res.state, env)
    return list(res) if len(rec.graph.result_types) != 1 else [res]


def _names(gen: Generated, env: dict[Node, Any]) -> dict[str, Any]:
    """``env`` by the generated code's variable names."""
    by_node = {n: name for name, n in gen.variables.items()}
    return {by_node[n]: v for n, v in env.items() if n in by_node}
