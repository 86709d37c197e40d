"""The examples of seed 001, section 4.2, and the rank functions the tests, the benchmark
and docs/devices.md run (module level, so that :func:`nexus.distributed.spawn` can start
them in other processes).

* :func:`preprocess_then_cnn`: CPU preprocessing (cast, resize, normalise) and a small
  CNN on a second device (``/TORCH:0`` here, ``/GPU:0`` where CUDA is), Memcpy between;
* :func:`mlp_loss` and :func:`data_parallel_worker`: data-parallel SGD, AllReduce of
  the gradients in the graph; :func:`data_parallel_graph` and :func:`one_graph_worker`:
  the same as one graph of four replicas (2 machines x 2 devices), as the seed draws it;
* :func:`pipeline_graph` and :func:`pipeline_worker`: two machines, Send/Recv in a loop;
  :func:`relay_graph` and :func:`relay_worker`: a value read three times on the other
  machine, sent once per iteration;
* :func:`dying_worker`, :func:`silent_worker`, :func:`mismatch_worker`: failures.
"""

from __future__ import annotations

import os
import signal
from typing import Any

import numpy as np

import nexus as nx
from nexus.distributed import runtime
from nexus.distributed.data_parallel import replicate, sgd_step
from nexus.ir.graph import Graph


# --- example 1: CPU preprocessing, then a CNN on another device ------------------------------
def cnn_weights(seed: int = 0, classes: int = 5) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {"w1": (rng.standard_normal((4, 3, 3, 3)) * 0.3).astype(np.float32),
            "b1": (rng.standard_normal(4) * 0.1).astype(np.float32),
            "w2": (rng.standard_normal((4 * 4 * 4, classes)) * 0.2).astype(np.float32),
            "b2": (rng.standard_normal(classes) * 0.1).astype(np.float32)}


def preprocess_then_cnn(raw: np.ndarray, weights: dict[str, np.ndarray], device: str = "/TORCH:0",
                        size: int = 8) -> Graph:
    """Seed 001's example 1: u8 images [N, 3, H, W] resized to ``size`` and scaled to
    [0, 1] on /CPU:0, then conv 3x3 (4 channels), ReLU, 2x2 max pool, a dense layer and
    argmax on ``device``.  Returns (logits, predictions)."""
    n = raw.shape[0]
    with nx.function("preprocess_then_cnn") as f:
        with nx.device("/CPU:0"):
            images = nx.constant(raw, name="raw_images")
            resized = nx.resize(nx.cast(images, to="f32"), nx.constant(np.array([n, 3, size, size], np.int64)),
                                mode="linear", name="resized")
            normalized = nx.div(resized, nx.constant(np.float32(255.0)), name="normalized")
        with nx.device(device):
            h = nx.relu(nx.conv(normalized, nx.constant(weights["w1"]), nx.constant(weights["b1"]),
                                pads=[1, 1, 1, 1]), name="features")
            h = nx.max_pool(h, kernel_shape=[2, 2], strides=[2, 2], name="pooled")
            logits = nx.add(nx.matmul(nx.flatten(h), nx.constant(weights["w2"])), nx.constant(weights["b2"]),
                            name="logits")
            predictions = nx.argmax(logits, axis=1, name="predictions")
        f.returns(logits, predictions)
    return f.graph


# --- example 2: data-parallel training -----------------------------------------------------
PARAM_SHAPES = ((4, 8), (8,), (8, 3), (3,))


def mlp_params(seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [(rng.standard_normal(s) * 0.5).astype(np.float32) for s in PARAM_SHAPES]


def mlp_loss(n: int, features: int = 4, hidden: int = 8, outputs: int = 3, device: str = "/CPU:0") -> Graph:
    """Mean squared error of a 2-layer tanh MLP on a batch of ``n``:
    ``mean((tanh(x w1 + b1) w2 + b2 - y)^2)``; arguments w1, b1, w2, b2, x, y.  The
    forward pass runs on ``device``."""
    with nx.function("mlp_loss", w1=("f32", (features, hidden)), b1=("f32", (hidden,)),
                     w2=("f32", (hidden, outputs)), b2=("f32", (outputs,)),
                     x=("f32", (n, features)), y=("f32", (n, outputs))) as f:
        w1, b1, w2, b2, x, y = f.args
        with nx.device(device):
            h = nx.tanh(nx.add(nx.matmul(x, w1), b1))
            d = nx.sub(nx.add(nx.matmul(h, w2), b2), y)
            loss = nx.reduce_mean(nx.mul(d, d))
        f.returns(loss)
    return f.graph


LOCAL_DEVICES = ("/CPU:0", "/TORCH:0")  # the two devices of each "machine" in example 2


def data_parallel_worker(rank: int, params: list[np.ndarray], x: np.ndarray, y: np.ndarray, steps: int,
                         lr: float) -> tuple[float, list[np.ndarray], dict[str, Any]]:
    """Train on this rank's shard of (x, y) for ``steps`` SGD steps; returns the last
    (averaged) loss, the parameters, and where the rank was: 2 ranks per "machine", the
    first running the forward pass with NumPy, the second on the torch device."""
    world = runtime.world_size()
    n = x.shape[0] // world
    device = LOCAL_DEVICES[rank % 2]
    step = runtime.DistributedGraph(sgd_step(mlp_loss(n, device=device), len(params), lr))
    p = list(params)
    xs, ys = x[rank * n:(rank + 1) * n], y[rank * n:(rank + 1) * n]
    loss = np.nan
    for _ in range(steps):
        loss, *p = step(*p, xs, ys)
    where = {"machine": f"host{rank // 2}", "device": device,
             "allreduce": sum(n.op.name == "AllReduce" for n in step.graph.nodes()),
             "memcpy": sum(n.op.name == "Memcpy" for n in step.graph.nodes())}
    return float(loss), p, where


# --- example 2 as the seed draws it: one graph, 2 machines x 2 devices ----------------------
SEED_PLACEMENTS = (("host0", "/CPU:0"), ("host0", "/TORCH:0"), ("host1", "/CPU:0"), ("host1", "/TORCH:0"))
"""(machine, device) of the four replicas (the seed's /GPU:0 and /GPU:1 of each host; here
NumPy and the torch device, which every machine has)."""


def linear_loss(n: int, features: int = 3) -> Graph:
    """``mean((x w - y)^2)`` on a batch of ``n``; arguments w, x, y (the picture's model)."""
    with nx.function("linear_loss", w=("f32", (features, 1)), x=("f32", (n, features)), y=("f32", (n, 1))) as f:
        w, x, y = f.args
        d = nx.sub(nx.matmul(x, w), y)
        f.returns(nx.reduce_mean(nx.mul(d, d)))
    return f.graph


def data_parallel_graph(n: int, lr: float, placements: tuple[tuple[str, str], ...] = SEED_PLACEMENTS,
                        loss: Graph | None = None) -> Graph:
    """One SGD step of ``loss`` (default :func:`mlp_loss`; its last two arguments are the
    batch x, y, the others the parameters) as one graph: a replica per placement, each on
    its ``n`` rows of the batch (x and y hold every replica's rows), its gradients
    averaged by AllReduce; returns (loss, *parameters)."""
    loss = loss if loss is not None else mlp_loss(n)
    nparams = len(loss.args) - 2
    g = replicate(sgd_step(loss, nparams, lr), placements, shard=(nparams, nparams + 1))
    g.name = "data_parallel"
    return g


def one_graph_worker(rank: int, params: list[np.ndarray], x: np.ndarray, y: np.ndarray, steps: int,
                     lr: float) -> tuple[float, list[np.ndarray], str]:
    """Train with :func:`data_parallel_graph`, the same graph on every rank (each runs its
    replica); returns the last loss, the parameters and this rank's site."""
    world = runtime.world_size()
    step = runtime.DistributedGraph(data_parallel_graph(x.shape[0] // world, lr))
    p = list(params)
    loss = np.nan
    for _ in range(steps):
        loss, *p = step(*p, x, y)
    return float(loss), p, step.machines[rank]


# --- a pipeline over two machines -----------------------------------------------------------
def pipeline_graph(steps: int, width: int) -> Graph:
    """For t < steps: stage0 computes ``h = tanh(xs[t] @ w1)``, stage1 accumulates
    ``acc += tanh(h @ w2)``; h goes from stage0 to stage1 by Send/Recv in every
    iteration.  Returns acc (every rank gets it)."""
    with nx.function("pipeline", xs=("f32", (steps, width)), w1=("f32", (width, width)),
                     w2=("f32", (width, width))) as f:
        xs, w1, w2 = f.args
        acc = nx.constant(np.zeros(width, np.float32), name="acc0")
        t = nx.constant(0, dtype="i64", name="t0")
        with nx.while_loop(lambda: nx.less(t, steps)):
            with nx.machine("stage0"):
                h = nx.tanh(nx.matmul(nx.gather(xs, t), w1), name="h")
            with nx.machine("stage1"):
                acc = nx.add(acc, nx.tanh(nx.matmul(h, w2)), name="acc")
            t = nx.add(t, 1)
        f.returns(acc)
    return f.graph


def pipeline_worker(rank: int, xs: np.ndarray, w1: np.ndarray, w2: np.ndarray) -> tuple[Any, str]:
    dg = runtime.DistributedGraph(pipeline_graph(*xs.shape), machines=("stage0", "stage1"))
    return dg(xs, w1, w2), nx.print_graph(dg.graph)


# --- a relay: one value read three times on the other machine ------------------------------
def relay_graph(steps: int, width: int) -> Graph:
    """For t < steps: stage0 computes ``h = tanh(xs[t] @ w1)``; stage1 reads h three times,
    in the loop body (``total += sum(h)``) and in each arm of a branch on t's parity
    (``acc += h @ w2`` or ``acc -= h @ w2``, on its /TORCH:0 device, where the argument
    w2, loop-invariant, is copied).  Placed, h crosses once per iteration and w2 once per
    call.  Returns (acc, total)."""
    with nx.function("relay", xs=("f32", (steps, width)), w1=("f32", (width, width)),
                     w2=("f32", (width, width))) as f:
        xs, w1, w2 = f.args
        acc = nx.constant(np.zeros(width, np.float32), name="acc0")
        total = nx.constant(np.float32(0.0), name="total0")
        t = nx.constant(0, dtype="i64", name="t0")
        with nx.while_loop(lambda: nx.less(t, steps)):
            with nx.machine("stage0"):
                h = nx.tanh(nx.matmul(nx.gather(xs, t), w1), name="h")
            with nx.machine("stage1"):
                total = nx.add(total, nx.reduce_sum(h), name="total")
            with nx.if_cond(nx.equal(nx.mod(t, 2), 0)):
                with nx.then(), nx.device("/TORCH:0", machine="stage1"):
                    acc = nx.add(acc, nx.matmul(h, w2), name="even")
                with nx.else_(), nx.device("/TORCH:0", machine="stage1"):
                    acc = nx.sub(acc, nx.matmul(h, w2), name="odd")
            t = nx.add(t, 1)
        f.returns(acc, total)
    return f.graph


def relay_oracle(xs: np.ndarray, w1: np.ndarray, w2: np.ndarray) -> tuple[np.ndarray, np.float32]:
    """The relay in NumPy."""
    acc, total = np.zeros(xs.shape[1], np.float32), np.float32(0.0)
    for t in range(xs.shape[0]):
        h = np.tanh(xs[t] @ w1)
        total = total + h.sum()
        acc = acc + h @ w2 if t % 2 == 0 else acc - h @ w2
    return acc, total


def relay_worker(rank: int, xs: np.ndarray, w1: np.ndarray, w2: np.ndarray,
                 placed_first: bool = False) -> tuple[Any, int, int]:
    """Run the relay on 2 ranks (``placed_first``: a graph placed by
    ``nx.place(g, machines=True)`` beforehand, as a single process runs it); returns
    (acc, total), and how many Send and Recv messages this rank's communicator carried
    (collectives not counted)."""
    comm = runtime.current()
    counts = {"send": 0, "recv": 0}
    send, recv = comm.send, comm.recv

    def counted_send(*a: Any) -> None:
        counts["send"] += 1
        send(*a)

    def counted_recv(*a: Any) -> Any:
        counts["recv"] += 1
        return recv(*a)

    comm.send, comm.recv = counted_send, counted_recv  # type: ignore[method-assign,assignment]
    g = relay_graph(*xs.shape)
    if placed_first:
        nx.place(g, machines=True)
    out = runtime.DistributedGraph(g, machines=("stage0", "stage1"))(xs, w1, w2)
    return out, counts["send"], counts["recv"]


# --- failures -------------------------------------------------------------------------------
def _allreduce_graph(shape: tuple[int, ...]) -> Graph:
    with nx.function("sync", x=("f32", shape)) as f:
        (x,) = f.args
        f.returns(nx.all_reduce(x, op="sum", name="total"))
    return f.graph


def dying_worker(rank: int, victim: int, steps: int) -> float:
    """AllReduce ``steps`` times; rank ``victim`` kills itself (SIGKILL) before step 3."""
    dg = runtime.DistributedGraph(_allreduce_graph((4,)))
    total = 0.0
    for k in range(steps):
        if rank == victim and k == 3:
            os.kill(os.getpid(), signal.SIGKILL)
        total += float(np.sum(dg(np.ones(4, np.float32))))
    return total


def silent_worker(rank: int) -> Any:
    """Rank 1 waits for a Recv from rank 0, which never sends (but stays alive)."""
    if rank == 1:
        with nx.function("wait") as f:
            f.returns(nx.recv(peer=0, tag=7, dtype="f32", shape=[3]))
        return runtime.DistributedGraph(f.graph)()
    import time

    time.sleep(runtime.current().timeout + 3)  # type: ignore[attr-defined]  # alive, silent
    return None


def mismatch_worker(rank: int) -> Any:
    """Rank 1 all-reduces a [5] tensor where the others all-reduce [4]."""
    shape = (5,) if rank == 1 else (4,)
    return runtime.DistributedGraph(_allreduce_graph(shape))(np.ones(shape, np.float32))


def collectives_worker(rank: int) -> tuple[Any, ...]:
    """Each rank holds ``x = arange(6).reshape(2, 3) + 10 * rank`` and runs AllReduce
    (sum and max), AllGather along axis 1, ReduceScatter along axis 0, a Broadcast from
    rank 1 and an AllReduce over the group "0,2" (other ranks get their input back)."""
    with nx.function("collectives", x=("f32", (2, 3))) as f:
        (x,) = f.args
        f.returns(nx.all_reduce(x, op="sum"), nx.all_reduce(x, op="max"), nx.all_gather(x, axis=1),
                  nx.reduce_scatter(nx.concat(x, x, x, axis=0), op="sum", axis=0),
                  nx.broadcast(x, root=1), nx.all_reduce(x, op="mean", group="0,2"))
    x = np.arange(6, dtype=np.float32).reshape(2, 3) + 10 * rank
    return tuple(runtime.DistributedGraph(f.graph)(x))


def branching_graph() -> Graph:
    """Control flow decided on one machine: while sum(x) < 100, stage0 doubles x and
    stage1 counts; the condition reads stage0's x, so every rank gets it by Broadcast."""
    with nx.function("grow", x=("f32", (2,))) as f:
        (x,) = f.args
        n = nx.constant(0, dtype="i64", name="n0")
        with nx.while_loop(lambda: nx.less(nx.reduce_sum(x), 100.0)):
            with nx.machine("stage0"):
                x = nx.mul(x, 2.0, name="x2")
            with nx.machine("stage1"):
                n = nx.add(n, 1, name="n1")
        f.returns(x, n)
    return f.graph


def branching_worker(rank: int, x: np.ndarray) -> tuple[Any, Any]:
    return runtime.DistributedGraph(branching_graph(), machines=("stage0", "stage1"))(x)  # type: ignore[no-any-return]
