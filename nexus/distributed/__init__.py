"""Distributed execution (seed 001, section 4.2): a graph whose nodes carry ``machine``
attributes, or the same graph on every rank (SPMD), runs on ``torch.distributed``.

    torchrun --nproc-per-node 2 -m nexus.distributed.run model.nx -i x=x.npy -o out/

The placement pass inserts Send/Recv (and Broadcast for values every rank needs); each
rank runs its partition on the python backend; collectives (AllReduce, AllGather,
Broadcast, ReduceScatter) are graph ops.  See docs/devices.md.  torch is imported only
by this package's modules, never by ``import nexus``.
"""

from nexus.distributed.data_parallel import data_parallel_grads, replicate, sgd_step
from nexus.distributed.launch import RankResult, spawn
from nexus.distributed.partition import partition, place_for_ranks
from nexus.distributed.runtime import DistributedGraph, init, rank, run_graph, shutdown, world_size

__all__ = ["DistributedGraph", "RankResult", "data_parallel_grads", "init", "partition", "place_for_ranks", "rank",
           "replicate", "run_graph", "sgd_step", "shutdown", "spawn", "world_size"]
