"""Checkpointed tape mode: memory for long loops.

The forward run keeps no tape.  Every ``every`` state entries (loop headers and joins of
the python backend's generated code) it stores a *checkpoint*: the state about to be
entered and the current value of every node (one value per node, and only for values
used outside their own block, so a checkpoint is the size of the loop-carried state, not
of the history).  Segments run the python backend's resumable variant, so the
interpreter's semantics exist once.  The
reverse pass re-runs one segment at a time from its checkpoint, records it, and
differentiates it; cotangents cross segment boundaries keyed by node, because a later
segment only ever reads the current value of a node.  With ``every`` about sqrt(steps),
peak memory is O(sqrt(T)) states instead of O(T), for one extra forward run.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from nexus.autodiff.tape import Paused, Record, backward, recorder, run_segment
from nexus.ir.graph import Graph
from nexus.ir.node import Node

State = dict[Node, Any]  # node -> its current value


def checkpointed_vjp(g: Graph, args: Sequence[Any], argnums: Sequence[int], cotangents: Sequence[Any] | None,
                     every: int, max_iterations: int | None = None) -> tuple[list[Any], list[Any]]:
    """Results of ``g(*args)`` and the cotangents of ``args[argnums]`` (``cotangents=None``:
    ones for every result), keeping a checkpoint every ``every`` state entries."""
    if every < 1:
        raise ValueError(f"checkpoint must be a positive number of state entries, got {every}")
    rec = recorder(g, argnums)
    h = rec.graph
    values = rec.arguments(args)
    state: State = dict(zip(h.args, values))
    # A run pauses at a state's entry after the Phi copies of its edge: the Phis and the
    # values used outside their own block are what it needs; a value used only in its own
    # block is recomputed there before any use, so checkpoints need not keep it.
    live = {n for n in h.nodes() if n.op.kind == "phi" or any(u.block is not n.block for u in n.users)}
    live.update(h.args)

    # Forward: segment by segment, keeping only the checkpoints.
    checkpoints: list[tuple[Paused | None, State]] = []
    at: Paused | None = None  # None: the start
    while True:
        checkpoints.append((at, state))
        res = run_segment(rec, None, values, at, every, max_iterations)
        if not isinstance(res, Paused):
            outs = res
            break
        state = {n: v for n, v in res.env.items() if n in live}
        at = Paused(res.state, state)
    seeds = list(cotangents) if cotangents is not None else [np.ones_like(o) for o in outs]

    # Reverse: re-run each segment from its checkpoint, last first.
    ct_by_node: dict[Node, Any] = {}
    n_segments = len(checkpoints)
    for k in range(n_segments - 1, -1, -1):
        at, state = checkpoints.pop()
        records: list[Record] = []
        last = k == n_segments - 1
        res = run_segment(rec, records, values, at, None if last else every, max_iterations)
        if last:
            assert not isinstance(res, Paused)
            pairs = list(zip(res, seeds))
        else:
            assert isinstance(res, Paused)
            pairs = [(res.env[n], c) for n, c in ct_by_node.items()]
        # Nodes holding one object (a Phi and its input) share its cotangent: one of them carries it.
        leaves: dict[int, tuple[Node, Any]] = {}
        for n, v in state.items():
            if n in rec.active:
                leaves.setdefault(id(v), (n, v))
        wrt = list(leaves.values())
        grads = backward(rec, records, pairs, [v for _, v in wrt], zeros=False)
        ct_by_node = {n: c for (n, _), c in zip(wrt, grads) if c is not None}
        del records, state
    grads_out = []
    for i in argnums:
        c = ct_by_node.get(h.args[i]) if h.args[i] in rec.active else None
        grads_out.append(np.zeros_like(values[i]) if c is None else c)
    return outs, grads_out
