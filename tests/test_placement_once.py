"""Placement that moves each value once (issue 31): one transfer per value and destination,
at the nearest common dominator of its readers, hoisted out of loops that do not compute
it; ``nx.place(g, machines=True)`` in one process; seed 001's example 2 as one graph of
four replicas (2 machines x 2 devices); comm errors that name their node.  Oracles:
NumPy loops and torch autograd SGD."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import nexus as nx
from nexus.backends.base import NexusRuntimeError
from nexus.ir.analysis import dominators
from nexus.ops import comm
from nexus.passes.loops import loop_forest
from nexus.passes.placement import Place
from nexus.testing.extras import require

torch = require("torch", "torch")

from nexus.backends.python import devices  # noqa: E402  (after the torch check)
from nexus.distributed import examples, partition, place_for_ranks, replicate, sgd_step, spawn  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
R = np.random.default_rng(31)


def _relay_args(steps: int = 5, width: int = 3) -> tuple[np.ndarray, ...]:
    return tuple(R.standard_normal(s).astype(np.float32) for s in ((steps, width), (width, width), (width, width)))


def _ops(g: nx.Graph, name: str) -> list[Any]:
    return [n for n in g.nodes() if n.op.name == name]


def _ok(results: list) -> list:
    errors = [f"rank {r.rank}: {r.error}" for r in results if r.error]
    assert not errors, "\n".join(errors)
    return [r.value for r in results]


class _Counting(comm.Communicator):
    """The world of one rank, counting its messages."""

    def __init__(self) -> None:
        super().__init__()
        self.sent = 0

    def send(self, x: Any, peer: int, tag: int, label: str) -> None:
        self.sent += 1
        super().send(x, peer, tag, label)


# --- the relay: one Send per iteration, one copy of the loop invariant per call -------------
def test_relay_places_one_send_and_hoists_the_invariant_copy() -> None:
    g = examples.relay_graph(5, 3)
    stats = nx.place(g, machines=True)
    nx.verify(g)
    assert stats["send"] == 1 and stats["memcpy"] == 3  # h to stage1; h, w2 to /TORCH:0; acc back
    (send,) = _ops(g, "Send")
    (recv,) = _ops(g, "Recv")
    assert send.block is recv.block and recv.deps == (send,)
    readers = [u for u in recv.users if u.op.name != "Memcpy"] + \
        [u for m in recv.users if m.op.name == "Memcpy" for u in m.users]
    blocks = {u.block for u in readers}
    assert len(blocks) == 3  # the body, and both arms
    dom = dominators(g)
    assert all(dom.dominates(recv.block, b) for b in blocks)
    w2_copy = next(n for n in _ops(g, "Memcpy") if n.input(0).name == "w2")
    assert loop_forest(g).loop_of(w2_copy.block) is None  # hoisted out of the loop
    assert Place(machines=True).apply(g) == {}  # nothing left to move


def test_relay_in_one_process_counts_messages_and_copies(monkeypatch: pytest.MonkeyPatch) -> None:
    """Placed with machines=True, the relay runs here: Send/Recv are copies through the
    world of one rank.  One message per iteration, and w2 copied once per call."""
    xs, w1, w2 = _relay_args()
    g = examples.relay_graph(*xs.shape)
    nx.place(g, machines=True)
    copies: Counter[tuple[str, int]] = Counter()
    to_device = devices.to_device

    def counted(x: Any, device: str) -> Any:
        copies[(device, np.ndim(x))] += 1
        return to_device(x, device)

    monkeypatch.setattr(devices, "to_device", counted)
    counting = _Counting()
    old = comm.set_communicator(counting)
    try:
        g(xs, w1, w2)  # the first call also binds the constants to their devices
        copies.clear()
        counting.sent = 0
        acc, total = g(xs, w1, w2)
    finally:
        comm.set_communicator(old)
    want_acc, want_total = examples.relay_oracle(xs, w1, w2)
    np.testing.assert_allclose(acc, want_acc, rtol=1e-5)
    np.testing.assert_allclose(total, want_total, rtol=1e-5)
    assert counting.sent == 5  # h, once per iteration
    assert copies[("/TORCH:0", 2)] == 1  # w2, once per call
    assert copies[("/TORCH:0", 1)] == 5  # h, once per iteration (the arms share it)
    assert not any(counting.mailbox.values())


@pytest.mark.parametrize("placed_first", [False, True])
def test_relay_on_two_ranks_sends_once_per_iteration(placed_first: bool) -> None:
    xs, w1, w2 = _relay_args()
    want_acc, want_total = examples.relay_oracle(xs, w1, w2)
    (out0, sent0, got0), (out1, sent1, got1) = _ok(spawn(examples.relay_worker, 2, (xs, w1, w2, placed_first),
                                                         timeout=60))
    for acc, total in (out0, out1):
        np.testing.assert_allclose(acc, want_acc, rtol=1e-5)
        np.testing.assert_allclose(total, want_total, rtol=1e-5)
    assert (sent0, got0, sent1, got1) == (5, 0, 0, 5)


def test_a_loop_invariant_message_is_sent_once_per_call_from_the_preheader() -> None:
    """stage0 computes k before the loop; stage1 reads it in every iteration: the
    Send/Recv pair goes, both ends together, into the block before the loop."""
    with nx.function("invariant", x=("f32", (2,)), w=("f32", (2,))) as f:
        x, w = f.args
        with nx.machine("stage0"):
            k = nx.tanh(w, name="k")
        i = nx.constant(0, dtype="i64")
        with nx.while_loop(lambda: nx.less(i, 4)):
            with nx.machine("stage1"):
                x = nx.add(x, k, name="x1")
            i = nx.add(i, 1)
        f.returns(x)
    g = f.graph
    assert nx.place(g, machines=True)["send"] == 1
    nx.verify(g)
    (send,) = _ops(g, "Send")
    (recv,) = _ops(g, "Recv")
    assert send.block is recv.block and loop_forest(g).loop_of(send.block) is None
    x, w = np.array([1.0, 2.0], np.float32), np.array([0.5, -0.25], np.float32)
    counting = _Counting()
    old = comm.set_communicator(counting)
    try:
        got = g(x, w)
    finally:
        comm.set_communicator(old)
    np.testing.assert_allclose(got, x + 4 * np.tanh(w), rtol=1e-6)
    assert counting.sent == 1


# --- the rules on small graphs --------------------------------------------------------------
def test_a_value_read_in_both_arms_is_copied_once_before_the_branch() -> None:
    with nx.function("arms", x=("f32", (3,)), c="bool") as f:
        x, c = f.args
        y = nx.tanh(x, name="y")
        with nx.if_cond(c):
            with nx.then(), nx.device("/TORCH:0"):
                z = nx.mul(y, 2.0)
            with nx.else_(), nx.device("/TORCH:0"):
                z = nx.add(y, 1.0)
        f.returns(z)
    g = f.graph
    x = R.standard_normal(3).astype(np.float32)
    nx.place(g)
    nx.verify(g)
    (copy,) = [n for n in _ops(g, "Memcpy") if n.input(0).name == "y"]
    assert copy.block is g.start_block  # the block of the branch, which dominates both arms
    np.testing.assert_allclose(g(x, np.True_), np.tanh(x) * 2, rtol=1e-6)
    np.testing.assert_allclose(g(x, np.False_), np.tanh(x) + 1, rtol=1e-6)


LOOP_WITHOUT_PREHEADER = """graph @count {
^entry:
  %0 = Start : (f32[2], i64)
  %x = Proj %0 {num = 0} : f32[2]
  %n = Proj %0 {num = 1} : i64
  %zero = Constant {value = tensor<i64: 0>} : i64
  %one = Constant {value = tensor<i64: 1>} : i64
  %acc0 = Constant {value = tensor<f32[2]: [0.0, 0.0]>} : f32[2]
  %go = Less %zero, %n : bool
  %c = Cond %go : (X, X)
  %no = Proj %c {num = 0} : X
  %yes = Proj %c {num = 1} : X
^head(%yes, %back):
  %i = Phi %zero, %i1 : i64
  %acc = Phi %acc0, %acc1 : f32[2]
  %acc1 = Add %acc, %x {device = "/TORCH:0"} : f32[2]
  %i1 = Add %i, %one : i64
  %more = Less %i1, %n : bool
  %c2 = Cond %more : (X, X)
  %done = Proj %c2 {num = 0} : X
  %back = Proj %c2 {num = 1} : X
^out(%no, %done):
  %r = Phi %acc0, %acc1 : f32[2]
  %ret = Return %r : X
^exit(%ret):
  End : X
}"""


def test_a_loop_invariant_copy_gets_a_preheader_when_the_loop_has_none() -> None:
    """The loop is entered from a Cond's exit (no block only jumps to it): the pass
    makes a preheader, and x is copied there, once per call, not once per iteration."""
    g = nx.parse(LOOP_WITHOUT_PREHEADER)
    header = next(b for b in g.blocks if b.name == "head")
    assert next(lp for lp in loop_forest(g).loops if lp.header is header).preheader() is None
    stats = nx.place(g)
    nx.verify(g)
    assert stats["preheaders"] == 1
    (copy,) = [n for n in _ops(g, "Memcpy") if n.input(0).name == "x"]
    assert copy.block is not None and copy.block.succs == [header] and loop_forest(g).loop_of(copy.block) is None
    x = np.array([0.5, -1.5], np.float32)
    for n in (0, 1, 4):
        np.testing.assert_allclose(g(x, np.int64(n)), x * n, rtol=1e-6)


def test_the_group_of_a_collective_on_one_machine_is_derived() -> None:
    """A collective placed on stage0 only spans stage0's rank (stage1 never calls it)."""
    with nx.function("one_sided", x=("f32", (2,))) as f:
        (x,) = f.args
        with nx.machine("stage0"):
            s = nx.all_reduce(x, op="sum", name="s")
        with nx.machine("stage1"):
            t = nx.neg(x)
        f.returns(s, t)
    placed, machines = place_for_ranks(f.graph)
    (red,) = _ops(placed, "AllReduce")
    assert machines == ["stage0", "stage1"] and red.attrs["group"] == "0"


# --- comm errors name their node -------------------------------------------------------------
class _Broken(comm.Communicator):
    def all_reduce(self, x: Any, op: str, group: str, label: str) -> Any:
        raise comm.CommError(f"{label} on rank 0: not every rank of the group joined: rank 1 is gone")


def test_a_comm_error_names_the_node() -> None:
    step = sgd_step(examples.linear_loss(2), 1, 0.1)
    assert sorted(n.name for n in _ops(step, "AllReduce")) == ["grad_w", "loss"]
    old = comm.set_communicator(_Broken())
    try:
        with pytest.raises(NexusRuntimeError, match=r"^AllReduce %(loss|grad_w) in \^\w+ \(created at .*\): "
                                                     r"CommError: AllReduce on rank 0: .*rank 1 is gone"):
            step(np.ones((3, 1), np.float32), np.ones((2, 3), np.float32), np.ones((2, 1), np.float32))
    finally:
        comm.set_communicator(old)


def test_transfers_are_named_after_the_value_they_move() -> None:
    g = examples.relay_graph(3, 2)
    nx.place(g, machines=True)
    assert {n.name for n in g.nodes() if n.op.name in ("Send", "Recv", "Memcpy", "Broadcast")} == \
        {"h", "w2", "acc", "total"}


# --- seed 001's example 2 as one graph ---------------------------------------------------------
def _torch_sgd(params: list[np.ndarray], x: np.ndarray, y: np.ndarray, steps: int, lr: float) -> list[np.ndarray]:
    ps = [torch.tensor(p, requires_grad=True) for p in params]
    xt, yt = torch.tensor(x), torch.tensor(y)
    for _ in range(steps):
        w1, b1, w2, b2 = ps
        loss = (((torch.tanh(xt @ w1 + b1) @ w2 + b2) - yt) ** 2).mean()
        grads = torch.autograd.grad(loss, ps)
        with torch.no_grad():
            ps = [(p - lr * g).requires_grad_(True) for p, g in zip(ps, grads, strict=True)]
    return [p.detach().numpy() for p in ps]


def test_the_one_graph_holds_four_placements_and_partitions_into_four_ranks() -> None:
    g = examples.data_parallel_graph(4, 0.1)
    nx.verify(g)
    wheres = Counter((n.attrs.get("machine"), n.attrs.get("device")) for n in g.nodes() if n.op.name == "AllReduce")
    assert wheres == {p: 5 for p in examples.SEED_PLACEMENTS}
    dot = nx.to_dot(g)
    assert all(f"@{m}{d}" in dot for m, d in examples.SEED_PLACEMENTS)  # the picture names them
    placed, sites = place_for_ranks(g)
    nx.verify(placed)
    assert sites == ["host0/CPU:0", "host0/TORCH:0", "host1/CPU:0", "host1/TORCH:0"]
    assert all(n.attrs["group"] == "" for n in _ops(placed, "AllReduce"))  # every rank: derived, the default
    assert not _ops(placed, "Send") and len(_ops(placed, "Broadcast")) == 5  # rank 0's results to all
    for r, (machine, device) in enumerate(examples.SEED_PLACEMENTS):
        part = partition(placed, r, sites)
        mine = _ops(part, "AllReduce")
        assert len(mine) == 5 and all((n.attrs["machine"], n.attrs["device"]) == (machine, device) for n in mine)
        assert bool(_ops(part, "Memcpy")) == (device != "/CPU:0")
    # in one process (a world of one rank) replica 0 sees only its own rows: its step is
    # plain SGD on its quarter of the batch
    x, y = R.standard_normal((16, 4)).astype(np.float32), R.standard_normal((16, 3)).astype(np.float32)
    params = examples.mlp_params()
    _, *got = g(*params, x, y)
    for a, b in zip(got, _torch_sgd(params, x[:4], y[:4], 1, 0.1), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_seed_example2_as_one_graph_on_4_ranks() -> None:
    x, y = R.standard_normal((16, 4)).astype(np.float32), R.standard_normal((16, 3)).astype(np.float32)
    params = examples.mlp_params()
    out = _ok(spawn(examples.one_graph_worker, 4, (params, x, y, 10, 0.1), timeout=90))
    want = _torch_sgd(params, x, y, 10, 0.1)
    assert [site for _, _, site in out] == ["host0/CPU:0", "host0/TORCH:0", "host1/CPU:0", "host1/TORCH:0"]
    for loss, ps, _ in out:
        assert loss == out[0][0]
        for got, ref, first in zip(ps, want, out[0][1], strict=True):
            np.testing.assert_array_equal(got, first)
            np.testing.assert_allclose(got, ref, rtol=0, atol=1e-5)


def test_the_docs_picture_is_the_example() -> None:
    """docs/_graphs/data_parallel.nx (drawn on docs/devices.md) is what the example builds."""
    g = examples.data_parallel_graph(2, 0.1, loss=examples.linear_loss(2))
    nx.optimize(g, "simplifycfg,dce")
    text = (ROOT / "docs" / "_graphs" / "data_parallel.nx").read_text()
    assert nx.print_graph(g, locs=False) == text


def test_replicate_refuses_a_batch_without_a_static_leading_dim() -> None:
    with nx.function("l", w=("f32", (2,)), x=("f32", ("N", 2))) as f:
        w, x = f.args
        f.returns(nx.reduce_sum(nx.mul(x, w)))
    with pytest.raises(ValueError, match=r"argument 1 of @l.* no static leading dim"):
        replicate(f.graph, examples.SEED_PLACEMENTS, shard=(1,))
