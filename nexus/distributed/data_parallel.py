"""SPMD data parallelism (seed 001, section 4.2, example 2): the same graph on every
rank, each on its own shard of the batch, gradients averaged by AllReduce nodes.

:func:`data_parallel_grads` takes a loss graph and returns its gradient graph (built by
graph-mode autodiff, as ``nx.grad`` does) with an ``AllReduce`` on each gradient and on
the loss; :func:`sgd_step` adds the parameter update, so one call is one training step.
With equal shards and a loss that is a mean over the shard, the averaged gradient is
the gradient of the full batch's mean loss.

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
from nexus.ir.types import TensorType, numpy_dtype


def data_parallel_grads(loss: Graph, argnums: Sequence[int], *, op: str = "mean", group: str = "") -> Graph:
    """The gradient graph of the scalar ``loss`` w.r.t. ``args[argnums]``, returning the
    loss and the gradients, each through an ``AllReduce`` (``op``: mean averages)."""
    gg = vjp_graph(loss, tuple(argnums), "ones")
    gg.name = f"{loss.name}.data_parallel"
    for ret in gg.returns:
        assert ret.block is not None
        for i, v in enumerate(ret.inputs):
            red = gg.add("AllReduce", [v], ret.block, {"op": op, "group": group}, type=v.type, loc=v.loc)
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
