"""SPMD data parallelism (seed 001, section 4.2, example 2): the same graph on every
rank, each on its own shard of the batch, gradients averaged by AllReduce nodes.

:func:`data_parallel_grads` takes a loss graph and returns its gradient graph (built by
graph-mode autodiff, as ``nx.grad`` does) with an ``AllReduce`` on each gradient and on
the loss; :func:`sgd_step` adds the parameter update, so one call is one training step.
With equal shards and a loss that is a mean over the shard, the averaged gradient is
the gradient of the full batch's mean loss.  :func:`replicate` makes the one graph the
seed draws: a copy of the step per (machine, device), each on its rows of the batch, which
every rank is given whole and runs its own copy of.

Why not AllReduce the loss in the forward graph and differentiate that: the parameters
are replicated, and the adjoint of replication is a sum over ranks, which the per-rank
gradient graph cannot see (AllReduce-sum's VJP is AllReduce-sum, which turns the
cotangents 1/N of N ranks back into 1: each rank would get its local gradient).  The
AllReduce therefore goes on the gradients, where the sum over ranks belongs.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from nexus.autodiff.graph_mode import vjp_graph
from nexus.ir.graph import Graph
from nexus.ir.node import Node
from nexus.ir.opdef import DATAFLOW_KINDS
from nexus.ir.types import TensorType, numpy_dtype
from nexus.passes.inline import Inline


def data_parallel_grads(loss: Graph, argnums: Sequence[int], *, op: str = "mean", group: str = "") -> Graph:
    """The gradient graph of the scalar ``loss`` w.r.t. ``args[argnums]``, returning the
    loss and the gradients, each through an ``AllReduce`` (``op``: mean averages)."""
    gg = vjp_graph(loss, tuple(argnums), "ones")
    gg.name = f"{loss.name}.data_parallel"
    nres = len(loss.result_types)
    names = [f"loss{i}" if nres > 1 else "loss" for i in range(nres)]
    names += [f"grad_{loss.args[k].name or k}" for k in argnums]
    at = loss.returns[0].loc if loss.returns else None  # where the user returned the loss
    for ret in gg.returns:
        assert ret.block is not None
        for i, v in enumerate(ret.inputs):
            # named, so that a failure names it (``AllReduce %grad_w1 in ^...``)
            red = gg.add("AllReduce", [v], ret.block, {"op": op, "group": group}, type=v.type,
                         loc=v.loc or at, name=names[i])
            ret.set_input(i, red)
    gg.touch()
    return gg


def sgd_step(loss: Graph, nparams: int, lr: float, *, op: str = "mean", group: str = "") -> Graph:
    """One step of data-parallel SGD: takes ``loss``'s arguments (the first ``nparams``
    are the parameters) and returns the averaged loss and the updated parameters
    ``p - lr * allreduce(grad p)``."""
    gg = data_parallel_grads(loss, range(nparams), op=op, group=group)
    gg.name = f"{loss.name}.sgd"
    nres = len(loss.result_types)
    for ret in gg.returns:
        assert ret.block is not None
        for k in range(nparams):
            p, grad = gg.args[k], ret.input(nres + k)
            t = p.type
            dtype = t.dtype if isinstance(t, TensorType) else "f32"
            rate = gg.add("Constant", [], gg.start_block, {"value": np.asarray(lr, numpy_dtype(dtype))},
                          type=TensorType(dtype, ()))
            step = gg.add("Mul", [grad, rate], ret.block)
            ret.set_input(nres + k, gg.add("Sub", [p, step], ret.block, name=f"{p.name or 'p' + str(k)}_new"))
    gg.touch()
    return gg


def replicate(step: Graph, placements: Sequence[tuple[str, str]], shard: Sequence[int] = ()) -> Graph:
    """Seed 001's example 2 as the seed draws it: one graph holding a copy of ``step`` per
    placement ``(machine, device)``, every data node of copy k labelled with placement k.

    The arguments are ``step``'s, except that those in ``shard`` are the whole batch:
    copy k reads rows ``[k n, (k + 1) n)`` of it.  The results are copy 0's (with equal
    shards and averaged gradients every copy computes the same parameters).  The copies
    run one after the other in the control flow (ordering edges between their calls), so
    every rank meets its collectives in the same order.  Placed for ranks
    (``nexus.distributed.place_for_ranks``), a machine whose collectives are on two
    devices runs a rank per device, and each rank runs its copy; each rank meets its
    collectives in the same order, and they span the ranks holding collectives (the
    group derived from the placements: every rank)."""
    if not placements:
        raise ValueError("replicate: no placements")
    k = len(placements)
    types = list(step.arg_types)
    rows: dict[int, int] = {}
    for i in shard:
        t = types[i]
        if not isinstance(t, TensorType) or not t.shape or not isinstance(t.shape[0], int):
            raise ValueError(f"replicate: argument {i} of @{step.name} has no static leading dim to shard")
        rows[i] = t.shape[0]
        types[i] = TensorType(t.dtype, (t.shape[0] * k, *t.shape[1:]))
    out = Graph(f"{step.name}.replicas", types, [a.name for a in step.args])
    b = out.start_block
    results: list[Node] = []
    prev: Node | None = None
    consts: dict[int, Node] = {}
    for r, (machine, device) in enumerate(placements):
        where = {"machine": machine, "device": device}
        copy, _ = step.clone(f"{step.name}.{r}")
        for n in copy.nodes():
            if n.op.kind in DATAFLOW_KINDS and n.op.name != "Constant":  # constants: made where used
                n.attrs = {**n.attrs, **where}
        copy.touch()
        ins = [out.args[i] if i not in rows else _rows(out, out.args[i], r * rows[i], rows[i], where, consts)
               for i in range(len(types))]
        call = out.add("Call", ins, b, {"callee": copy}, deps=[prev] if prev is not None else ())
        prev = call
        if r == 0:
            nres = len(step.result_types)
            results = [call] if nres == 1 else [out.add("Proj", [call], b, {"num": j}) for j in range(nres)]
    ret = out.add("Return", results, b)
    out.end_block.append_input(ret)
    Inline().apply(out)
    return out


def _rows(g: Graph, x: Node, start: int, count: int, where: dict[str, str], consts: dict[int, Node]) -> Node:
    """Rows ``[start, start + count)`` of ``x``, computed at ``where`` (``consts``: the
    index constants made so far, shared)."""
    def const(v: int) -> Node:
        if v not in consts:
            consts[v] = g.add("Constant", [], g.start_block, {"value": np.array([v], np.int64)},
                              type=TensorType("i64", (1,)))
        return consts[v]

    return g.add("Slice", [x, const(start), const(start + count), const(0)], g.start_block, where,
                 name=f"{x.name or 'x'}{start // count}")
