"""Static cost estimates of dataflow nodes, used to decide what runs on the thread pool.

A thread hop (submit, wake a worker, wait for the result) costs tens of microseconds, so
only nodes estimated well above that are worth sending to the pool.  The estimate is a
rough number of nanoseconds from the static shapes: elementwise work ~ 1 ns per element,
matrix products ~ 0.05 ns per flop (a single core's BLAS).  Unknown shapes count as
cheap, except for MatMul, whose operands are rarely tiny.
"""

from __future__ import annotations

import math

from nexus.ir.node import Node
from nexus.ir.types import TensorType

HEAVY_NS = 100_000.0  # nodes estimated above this (100 us) may run on the pool
NS_PER_ELEMENT = 1.0
NS_PER_FLOP = 0.05
UNKNOWN_MATMUL_NS = 10 * HEAVY_NS


def static_elements(node: Node) -> int | None:
    """The number of elements of a node's value, or None if its shape is not static."""
    t = node.type
    if not isinstance(t, TensorType) or t.shape is None:
        return None
    if not all(isinstance(d, int) for d in t.shape):
        return None
    return math.prod(t.shape)


def _matmul_flops(node: Node) -> int | None:
    out = static_elements(node)
    a = node.input(0).type
    if out is None or not isinstance(a, TensorType) or not a.shape or not isinstance(a.shape[-1], int):
        return None
    return 2 * out * a.shape[-1]


def estimate_ns(node: Node) -> float:
    """Rough time of one execution of ``node``, in nanoseconds."""
    if node.op.name == "MatMul":
        flops = _matmul_flops(node)
        return UNKNOWN_MATMUL_NS if flops is None else flops * NS_PER_FLOP
    sizes = [static_elements(node)] + [static_elements(v) for v in node.inputs]
    return sum(s for s in sizes if s is not None) * NS_PER_ELEMENT


def is_heavy(node: Node, blas_parallel: bool = False) -> bool:
    """Worth a thread hop: pure, estimated above HEAVY_NS, and not already multithreaded.
    Kernels that are multithreaded BLAS calls (``OpDef.multithreaded``) stay inline when
    BLAS uses every core: two at once on a pool oversubscribe the machine (measured: 2-5x
    slower under load)."""
    if blas_parallel and node.op.multithreaded:
        return False
    return node.op.pure and estimate_ns(node) >= HEAVY_NS
