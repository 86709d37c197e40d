"""Running a graph on several ranks: set up ``torch.distributed``, partition, run.

Each rank is a process (started by ``torchrun`` or :func:`spawn`) that calls
:func:`init` once, then :func:`run_graph` (or builds a :class:`DistributedGraph` and
calls it many times).  The same graph goes to every rank; each runs its part
(:mod:`nexus.distributed.partition`) on the python backend, its comm ops on the
:class:`~nexus.distributed.torchcomm.TorchCommunicator`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import torch.distributed as dist

from nexus.backends.python import run
from nexus.distributed.partition import groups_of, partition, place_for_ranks
from nexus.distributed.torchcomm import TorchCommunicator
from nexus.ir.graph import Graph
from nexus.ops.comm import CommError, current, set_communicator

DEFAULT_TIMEOUT = 30.0  # seconds; NEXUS_DIST_TIMEOUT overrides it


@dataclass
class Context:
    """This process's place in the run."""

    rank: int
    world_size: int
    comm: TorchCommunicator


_context: list[Context] = []


def init(timeout: float | None = None, backend: str = "gloo", check: bool = True) -> Context:
    """Join the run described by the environment (``RANK``, ``WORLD_SIZE``,
    ``MASTER_ADDR``, ``MASTER_PORT``, as torchrun and :func:`spawn` set them) and install
    the communicator.  ``timeout`` bounds every wait (default ``NEXUS_DIST_TIMEOUT`` or
    30 s); ``check`` compares each collective's signature across ranks first."""
    if _context:
        return _context[0]
    if timeout is None:
        timeout = float(os.environ.get("NEXUS_DIST_TIMEOUT", DEFAULT_TIMEOUT))
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    host, port = os.environ.get("MASTER_ADDR", "127.0.0.1"), int(os.environ["MASTER_PORT"])
    delta = timedelta(seconds=timeout)
    if backend == "nccl":
        import torch

        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)) % max(torch.cuda.device_count(), 1))
    # torchrun's agent (and spawn's parent) hosts the store, so it outlives any rank: the
    # heartbeats of a dead rank stay readable.
    hosted = os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True" or os.environ.get("NEXUS_STORE_HOSTED") == "1"
    store = dist.TCPStore(host, port, world, is_master=not hosted and rank == 0, timeout=delta)
    dist.init_process_group(backend, store=dist.PrefixStore("nexus/pg", store), rank=rank, world_size=world,
                            timeout=delta)
    comm = TorchCommunicator(timeout, store, check)
    comm.start_heartbeat(host, port)
    set_communicator(comm)
    ctx = Context(rank, world, comm)
    _context.append(ctx)
    return ctx


def shutdown() -> None:
    """Complete the pending sends, leave the process group, restore the single-process world."""
    if not _context:
        return
    ctx = _context.pop()
    try:
        ctx.comm.finish()
    finally:
        set_communicator(None)
        dist.destroy_process_group()


class DistributedGraph:
    """``g`` as this rank runs it: placed for its machines (in ``machines`` order, one
    machine per rank; none: every rank runs all of it), partitioned, groups created."""

    def __init__(self, g: Graph, machines: tuple[str, ...] = ()):
        if not _context:
            raise CommError("nexus.distributed.init() must run first (under torchrun or nexus.distributed.spawn)")
        ctx = _context[0]
        self.placed, self.machines = place_for_ranks(g, machines)
        self.graph = partition(self.placed, ctx.rank, self.machines)
        ctx.comm.make_groups(groups_of(self.placed))
        self.comm = ctx.comm

    def __call__(self, *args: Any) -> Any:
        out = run(self.graph, *args)
        self.comm.flush()
        return out


def run_graph(g: Graph, *args: Any, machines: tuple[str, ...] = ()) -> Any:
    """Run ``g`` once on this rank (see :class:`DistributedGraph`)."""
    return DistributedGraph(g, machines)(*args)


def rank() -> int:
    """This process's rank (0 when not distributed)."""
    return current().rank


def world_size() -> int:
    return current().world_size
