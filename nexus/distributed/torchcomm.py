"""The comm ops on ``torch.distributed`` (gloo on CPU tensors, NCCL for CUDA tensors).

Every wait has a deadline (``timeout`` seconds): a dead rank or a peer that never sends
ends the others with a :class:`~nexus.ops.comm.CommError` that names the rank, never a
hang.  Which rank is gone comes from heartbeats: each rank writes the time into the
rendezvous store every ``HEARTBEAT`` seconds from a thread of its own, so when a wait
fails the stale (or finished) ranks are named.

Before each collective the ranks exchange a small signature (the op, reduction, dtype,
shape and a sequence number), so a collective that differs between ranks (a shape, an
op, a missing call) is reported naming the ranks and what each had, instead of
returning garbage or hanging; ``check=False`` skips it (Broadcast still sends the
root's shape that way: the receivers need it).  A Send is preceded by a header with its
tag, dtype and shape, which the Recv checks against its own.
"""

from __future__ import annotations

import threading
import time
from datetime import timedelta
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from nexus.ir.types import DTYPES
from nexus.ops.comm import CommError, Communicator

HEARTBEAT = 0.1  # seconds between heartbeats
STALE = 1.0  # a heartbeat older than this: the rank is gone
MAX_DIMS = 8  # dims carried by a signature or header
_DTYPES = sorted(DTYPES)
_KINDS = ("AllReduce", "AllGather", "Broadcast", "ReduceScatter")
_REDUCE = {"sum": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX, "min": dist.ReduceOp.MIN,
           "prod": dist.ReduceOp.PRODUCT, "mean": dist.ReduceOp.SUM}
_REDUCE_CODES = ("", "sum", "mean", "max", "min", "prod")
_MAGIC = 0x4E58  # "NX"


# Where the transport wants tensors: the CPU for gloo, this rank's GPU for NCCL (set by
# TorchCommunicator from the process group's backend).
_WIRE: list[torch.device] = [torch.device("cpu")]


def _as_tensor(x: Any) -> tuple[torch.Tensor, Any]:
    """``x`` as a contiguous torch tensor on the wire's device (sharing a NumPy array's
    memory under gloo) and where it came from: True for NumPy, else its torch device
    (:func:`_back` returns the result there)."""
    if isinstance(x, torch.Tensor):
        return x.contiguous().to(_WIRE[0]), x.device
    arr = np.asarray(x)  # (np.ascontiguousarray would make a scalar 1-d)
    if not arr.flags.c_contiguous or not arr.flags.writeable:
        arr = arr.copy()
    return torch.from_numpy(arr).to(_WIRE[0]), True


def _control(values: list[int]) -> torch.Tensor:
    """A small int64 tensor (header, signature) on the wire's device."""
    return torch.tensor(values, dtype=torch.int64, device=_WIRE[0])


def _back(t: torch.Tensor, numpy: Any) -> Any:
    if numpy is not True:
        return t.to(numpy)
    out = t.cpu().numpy()
    return out if out.ndim else out[()]


def _dtype_code(dtype: str) -> int:
    return _DTYPES.index(dtype)


def _nx_dtype(t: torch.Tensor) -> str:
    np_dtype = torch.empty((), dtype=t.dtype).numpy().dtype
    return next(k for k, v in DTYPES.items() if np.dtype(v) == np_dtype)


def _describe(sig: list[int]) -> str:
    kind, red, dt, ndim = _KINDS[sig[0]], _REDUCE_CODES[sig[1]], _DTYPES[sig[2]], sig[3]
    dims = ", ".join(str(d) for d in sig[4:4 + ndim])
    return f"{kind}{' ' + red if red else ''} {dt}[{dims}] (collective #{sig[-1]})"


class TorchCommunicator(Communicator):
    """The comm ops of this process on the default process group (set up by
    :func:`nexus.distributed.runtime.init`)."""

    def __init__(self, timeout: float, store: Any = None, check: bool = True):
        self.rank = dist.get_rank()
        self.world_size = dist.get_world_size()
        if dist.get_backend() == "nccl":  # NCCL moves CUDA tensors only
            _WIRE[0] = torch.device("cuda", torch.cuda.current_device())
        self.timeout = float(timeout)
        self.check = check
        self.store = store
        self.seq: dict[str, int] = {}  # per group: a rank outside a group skips its collectives
        self.pending: list[tuple[Any, torch.Tensor, torch.Tensor]] = []
        self.groups: dict[str, Any] = {}
        self._stop = threading.Event()
        self._beat: threading.Thread | None = None

    # --- groups and heartbeats -------------------------------------------------------------
    def make_groups(self, groups: list[str]) -> None:
        """Create the process groups ``groups`` names (every rank, in the same order)."""
        for grp in groups:
            if grp not in self.groups:
                ranks = self.group_ranks(grp)
                self.groups[grp] = dist.new_group(ranks, timeout=timedelta(seconds=self.timeout))

    def _pg(self, group: str, label: str) -> Any:
        if not group:
            return None
        if group not in self.groups:
            raise CommError(f"{label}: group {group!r} was not created on this rank "
                            "(nexus.distributed creates the groups a graph names before it runs)")
        return self.groups[group]

    def start_heartbeat(self, host: str, port: int) -> None:
        client = dist.TCPStore(host, port, is_master=False, timeout=timedelta(seconds=self.timeout))

        def beat() -> None:
            while not self._stop.is_set():
                try:
                    client.set(f"nexus/beat/{self.rank}", repr(time.time()))
                except Exception:  # noqa: BLE001  (the store is gone: nothing left to tell)
                    return
                self._stop.wait(HEARTBEAT)

        client.set(f"nexus/beat/{self.rank}", repr(time.time()))
        self._beat = threading.Thread(target=beat, name="nexus-heartbeat", daemon=True)
        self._beat.start()

    def finish(self) -> None:
        """Wait for this rank's sends to complete, then stop the heartbeat (marking the
        rank as finished, so that a peer still waiting for it is told so)."""
        self.flush()
        self._stop.set()
        if self.store is not None:
            try:
                self.store.set(f"nexus/done/{self.rank}", "1")
            except Exception:  # noqa: BLE001
                pass

    def suspects(self, ranks: list[int]) -> str:
        """Which of ``ranks`` are gone or finished, from their heartbeats (polled for up
        to STALE seconds: a rank that died a moment ago still looks alive)."""
        if self.store is None:
            return ""
        deadline = time.time() + STALE + 2 * HEARTBEAT
        while True:
            found = []
            for r in ranks:
                if r == self.rank:
                    continue
                try:
                    if self.store.check([f"nexus/done/{r}"]):
                        found.append(f"rank {r} finished its run")
                        continue
                    last = float(self.store.get(f"nexus/beat/{r}"))
                except Exception:  # noqa: BLE001
                    found.append(f"rank {r} is unreachable")
                    continue
                age = time.time() - last
                if age > STALE:
                    found.append(f"rank {r} is gone (no heartbeat for {age:.1f} s)")
            if found or time.time() > deadline:
                return "; ".join(found)
            time.sleep(HEARTBEAT)

    def _wait(self, work: Any, label: str, ranks: list[int], what: str) -> None:
        try:
            ok = work.wait(timeout=timedelta(seconds=self.timeout))
            if ok is False:
                raise RuntimeError("timed out")
        except Exception as e:  # noqa: BLE001  (every transport failure is named below)
            who = self.suspects(ranks)
            detail = f": {who}" if who else \
                f" within {self.timeout:g} s ({type(e).__name__}: {str(e).splitlines()[0][:200]})"
            raise CommError(f"{label} on rank {self.rank}: {what}{detail}") from None

    def flush(self) -> None:
        pending, self.pending = self.pending, []
        for work, _, _ in pending:
            self._wait(work, "Send", list(range(self.world_size)), "a send did not complete")

    # --- point to point ----------------------------------------------------------------------
    def send(self, x: Any, peer: int, tag: int, label: str) -> None:
        t, _ = _as_tensor(x)
        if t.ndim > MAX_DIMS:
            raise CommError(f"{label}: tensors of more than {MAX_DIMS} dims cannot be sent yet")
        head = _control([_MAGIC, tag, _dtype_code(_nx_dtype(t)), t.ndim, *t.shape, *([0] * (MAX_DIMS - t.ndim))])
        self._check_peer(peer, label)
        w1 = dist.isend(head, peer, tag=2 * tag)
        w2 = dist.isend(t, peer, tag=2 * tag + 1)
        # keep the buffers alive until the sends complete (waited for at the end)
        self.pending += [(w1, head, t), (w2, head, t)]

    def recv(self, peer: int, tag: int, dtype: str, label: str) -> Any:
        self._check_peer(peer, label)
        head = _control([0] * (4 + MAX_DIMS))
        work = dist.irecv(head, peer, tag=2 * tag)
        self._wait(work, label, [peer], f"nothing arrived from rank {peer}")
        h = head.tolist()
        if h[0] != _MAGIC or h[1] != tag:
            raise CommError(f"{label} on rank {self.rank}: rank {peer} sent a message that is not tag {tag} "
                            f"(header {h[:4]}); the ranks run different graphs")
        got = _DTYPES[h[2]]
        if got != dtype:
            raise CommError(f"{label} on rank {self.rank}: expected {dtype}, rank {peer} sent {got}")
        shape = h[4:4 + h[3]]
        out = torch.from_numpy(np.empty(shape, DTYPES[got])).to(_WIRE[0])
        work = dist.irecv(out, peer, tag=2 * tag + 1)
        self._wait(work, label, [peer], f"the data did not arrive from rank {peer}")
        return _back(out, True)

    def _check_peer(self, peer: int, label: str) -> None:
        if not 0 <= peer < self.world_size or peer == self.rank:
            raise CommError(f"{label}: rank {self.rank} cannot talk to rank {peer} (world of {self.world_size})")

    # --- collectives ---------------------------------------------------------------------------
    def _signature(self, kind: str, red: str, t: torch.Tensor, group: str, label: str) -> list[list[int]]:
        """Exchange (kind, op, dtype, shape, sequence) with the group; raise if they differ."""
        ranks = self.group_ranks(group)
        seq = self.seq[group] = self.seq.get(group, 0) + 1
        if t.ndim > MAX_DIMS:
            raise CommError(f"{label}: tensors of more than {MAX_DIMS} dims are not supported yet")
        sig = _control([_KINDS.index(kind), _REDUCE_CODES.index(red), _dtype_code(_nx_dtype(t)), t.ndim,
                        *t.shape, *([0] * (MAX_DIMS - t.ndim)), seq])
        sigs = [torch.zeros_like(sig) for _ in ranks]
        work = dist.all_gather(sigs, sig, group=self._pg(group, label), async_op=True)
        self._wait(work, f"{label} (collective #{seq})", ranks, "not every rank of the group joined")
        rows = [s.tolist() for s in sigs]
        ref = rows[0]
        for r, row in zip(ranks, rows, strict=True):
            same = row[:3] == ref[:3] and row[-1] == ref[-1]
            if kind != "Broadcast":
                same = same and row == ref
            if not same:
                raise CommError(f"{label}: mismatched collective: rank {ranks[0]} runs {_describe(ref)}, "
                                f"rank {r} runs {_describe(row)}")
        return rows

    def _outside(self, group: str) -> bool:
        """Whether this rank is not in ``group``: the collective leaves its input as is."""
        return self.rank not in self.group_ranks(group)

    def all_reduce(self, x: Any, op: str, group: str, label: str, kind: str = "AllReduce") -> Any:
        if self._outside(group):
            return x
        t, numpy = _as_tensor(x)
        if self.check:
            self._signature(kind, op, t, group, label)
        t = t.clone()
        work = dist.all_reduce(t, _REDUCE[op], group=self._pg(group, label), async_op=True)
        self._wait(work, label, self.group_ranks(group), "not every rank of the group joined")
        if op == "mean":
            t = t / len(self.group_ranks(group)) if t.is_floating_point() else t // len(self.group_ranks(group))
        return _back(t, numpy)

    def all_gather(self, x: Any, axis: int, group: str, label: str) -> Any:
        if self._outside(group):
            return x
        t, numpy = _as_tensor(x)
        if self.check:
            self._signature("AllGather", "", t, group, label)
        ranks = self.group_ranks(group)
        parts = [torch.empty_like(t) for _ in ranks]
        work = dist.all_gather(parts, t, group=self._pg(group, label), async_op=True)
        self._wait(work, label, ranks, "not every rank of the group joined")
        return _back(torch.cat(parts, dim=axis if t.ndim else 0) if t.ndim else torch.stack(parts), numpy)

    def broadcast(self, x: Any, root: int, group: str, label: str) -> Any:
        if self._outside(group):
            return x
        t, numpy = _as_tensor(x)
        ranks = self.group_ranks(group)
        if root not in ranks:
            raise CommError(f"{label}: root {root} is not in group {group or 'of all ranks'}")
        rows = self._signature("Broadcast", "", t, group, label)
        row = rows[ranks.index(root)]
        shape = row[4:4 + row[3]]
        buf = t.clone() if self.rank == root else torch.empty(shape, dtype=t.dtype, device=t.device)
        work = dist.broadcast(buf, root, group=self._pg(group, label), async_op=True)
        self._wait(work, label, ranks, f"rank {root} did not send")
        return _back(buf, numpy)

    def reduce_scatter(self, x: Any, op: str, axis: int, group: str, label: str) -> Any:
        if self._outside(group):
            return x
        # gloo has no reduce_scatter: an all-reduce, then this rank's piece
        ranks = self.group_ranks(group)
        full = self.all_reduce(x, op, group, label, kind="ReduceScatter")
        t, numpy = _as_tensor(full)
        n = len(ranks)
        if t.shape[axis] % n:
            raise CommError(f"{label}: dim {axis} ({t.shape[axis]}) is not divisible by the group's {n} ranks")
        piece = t.chunk(n, dim=axis)[ranks.index(self.rank)].contiguous()
        return _back(piece, numpy)
