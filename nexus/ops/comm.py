"""Data movement between devices and machines (seed 001, section 4.2).

``Memcpy`` copies a tensor to the device named by its own ``device`` attribute (``src``
says where it came from).  ``Send``/``Recv`` move a tensor between machines (ranks),
matched by ``peer`` and ``tag``.  The collectives ``AllReduce``, ``AllGather``,
``Broadcast`` and ``ReduceScatter`` are first-class ops over a ``group``: a comma-separated
list of ranks (``"0,2"``) or ``""`` for every rank; a rank outside the group gets its
input back.

The kernels here are the reference semantics of one process: they call the
:class:`Communicator` installed with :func:`set_communicator`.  The default one is a
world of a single rank, which runs every machine of a graph: a collective of one rank
returns its input, and a Send is delivered to the Recv of the same tag in this process
(so a graph placed with ``nx.place(g, machines=True)`` runs here with its transfers as
copies); a Recv that nothing was sent to fails with an error that says how to run on
several ranks.  ``nexus.distributed``
installs one that runs on ``torch.distributed``; the layers below never import it.
All of them are impure: passes never fold, merge, hoist or drop them, so every rank runs
the same collectives in the same order.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from nexus.ir.opdef import Attr, OpTypeError
from nexus.ir.types import DTYPES, TensorType, Type
from nexus.ops._rules import NUMERIC, check_dtype, define, fresh_shape, normalize_axis, tensor

FAMILY = "comm"
REDUCE_OPS = ("sum", "mean", "max", "min", "prod")


class CommError(RuntimeError):
    """A Send, Recv or collective that cannot complete: no peer, a dead or silent rank,
    or ranks that disagree on the collective (its op, shape or dtype)."""


class Communicator:
    """The single-process world (rank 0 of 1).  Subclasses run the real transports; every
    method takes and returns NumPy arrays (or the device's arrays they convert)."""

    rank = 0
    world_size = 1

    def __init__(self) -> None:
        self.mailbox: dict[int, list[Any]] = {}  # tag -> messages sent in this process, not yet received

    def group_ranks(self, group: str) -> list[int]:
        """The ranks of ``group`` (``""``: all), checked against the world."""
        if not group:
            return list(range(self.world_size))
        try:
            ranks = [int(r) for r in group.split(",")]
        except ValueError:
            raise CommError(f"group {group!r} is not a comma-separated list of ranks") from None
        bad = [r for r in ranks if not 0 <= r < self.world_size]
        if bad:
            raise CommError(f"group {group!r} names rank {bad[0]}, but the world has {self.world_size} rank(s)")
        return ranks

    def send(self, x: Any, peer: int, tag: int, label: str) -> None:
        # Every machine is this process: the Recv of this tag, later in the same graph, takes it.
        self.mailbox.setdefault(tag, []).append(np.array(x, copy=True))

    def recv(self, peer: int, tag: int, dtype: str, label: str) -> Any:
        box = self.mailbox.get(tag)
        if not box:
            raise CommError(f"{label}: Recv from rank {peer} needs several ranks (nothing was sent with tag {tag} "
                            "in this process); run the graph with nexus.distributed "
                            "(torchrun --nproc-per-node N -m nexus.distributed.run ...)")
        x = box.pop(0)
        if x.dtype != DTYPES[dtype]:
            raise CommError(f"{label}: expected {dtype}, the Send of tag {tag} sent {x.dtype}")
        return x if x.ndim else x[()]

    def all_reduce(self, x: Any, op: str, group: str, label: str) -> Any:
        self.group_ranks(group)
        return x

    def all_gather(self, x: Any, axis: int, group: str, label: str) -> Any:
        self.group_ranks(group)
        return x

    def broadcast(self, x: Any, root: int, group: str, label: str) -> Any:
        self.group_ranks(group)
        return x

    def reduce_scatter(self, x: Any, op: str, axis: int, group: str, label: str) -> Any:
        self.group_ranks(group)
        return x


_current: list[Communicator] = [Communicator()]


def current() -> Communicator:
    """The communicator the comm kernels of this process use."""
    return _current[0]


def set_communicator(comm: Communicator | None) -> Communicator:
    """Install ``comm`` (None: the single-process world); returns the one it replaces."""
    old = _current[0]
    _current[0] = comm if comm is not None else Communicator()
    return old


def group_size(group: str) -> int | None:
    """How many ranks ``group`` names; None for ``""`` (every rank: known at run time)."""
    return len(group.split(",")) if group else None


# --- type rules ---------------------------------------------------------------------------
def _check_group(op: str, attrs: Mapping[str, Any]) -> None:
    group = attrs.get("group", "")
    if group and not all(p.strip().isdigit() for p in group.split(",")):
        raise OpTypeError(f"{op}: group must be a comma-separated list of ranks or '' (all), got {group!r}")
    reduce = attrs.get("op")
    if reduce is not None and reduce not in REDUCE_OPS:
        raise OpTypeError(f"{op}: op must be one of {', '.join(REDUCE_OPS)}, got {reduce!r}")


def _same_rule(op: str, ins: Sequence[Type], attrs: Mapping[str, Any], _: Sequence[Any]) -> Type:
    t = tensor(op, ins[0], 0)
    _check_group(op, attrs)
    if attrs.get("op") is not None:
        check_dtype(op, t, NUMERIC)
    return t


def _scaled_rule(gather: bool) -> Any:
    def rule(op: str, ins: Sequence[Type], attrs: Mapping[str, Any], _: Sequence[Any]) -> Type:
        t = tensor(op, ins[0], 0)
        _check_group(op, attrs)
        if t.shape is None:
            return t
        axis = normalize_axis(op, attrs["axis"], len(t.shape))
        n = group_size(attrs.get("group", ""))
        d = t.shape[axis]
        if n is None:
            new: Any = fresh_shape(1)[0]  # type: ignore[index]  # the world's size is known at run time
        elif gather:
            new = d * n
        elif isinstance(d, int) and d % n:
            raise OpTypeError(f"{op}: dim {axis} ({d}) is not divisible by the group's {n} ranks")
        else:
            new = d // n if isinstance(d, int) else d / n
        return TensorType(t.dtype, t.shape[:axis] + (new,) + t.shape[axis + 1:])

    return rule


def _send_rule(op: str, ins: Sequence[Type], attrs: Mapping[str, Any], _: Sequence[Any]) -> Type:
    tensor(op, ins[0], 0)
    if attrs["peer"] < 0:
        raise OpTypeError(f"{op}: peer must be a rank (>= 0), got {attrs['peer']}")
    return TensorType("bool", ())


def _recv_rule(op: str, ins: Sequence[Type], attrs: Mapping[str, Any], _: Sequence[Any]) -> Type:
    if attrs["peer"] < 0:
        raise OpTypeError(f"{op}: peer must be a rank (>= 0), got {attrs['peer']}")
    shape = attrs.get("shape")
    if shape is None:
        return TensorType(attrs["dtype"], None)
    return TensorType(attrs["dtype"], tuple(d if d >= 0 else fresh_shape(1)[0] for d in shape))  # type: ignore[index]


# --- kernels (reference semantics on the installed communicator) ---------------------------
def _label(op: str, tag: int = -1) -> str:
    return op if tag < 0 else f"{op} tag {tag}"


def _memcpy(x: Any, src: str = "", **placement: Any) -> Any:
    # The reference semantics: a copy.  The python backend moves between array libraries
    # (nexus/backends/python/devices.py); tape-mode autodiff passes the placement along.
    return np.array(x, copy=True)


def _send(x: Any, peer: int, tag: int = 0) -> Any:
    current().send(x, peer, tag, _label("Send", tag))
    return np.True_


def _recv(peer: int, tag: int = 0, dtype: str = "f32", shape: Any = None) -> Any:
    return current().recv(peer, tag, dtype, _label("Recv", tag))


def _all_reduce(x: Any, op: str = "sum", group: str = "") -> Any:
    return current().all_reduce(x, op, group, "AllReduce")


def _all_gather(x: Any, axis: int = 0, group: str = "") -> Any:
    return current().all_gather(x, axis, group, "AllGather")


def _broadcast(x: Any, root: int = 0, group: str = "") -> Any:
    return current().broadcast(x, root, group, "Broadcast")


def _reduce_scatter(x: Any, op: str = "sum", axis: int = 0, group: str = "") -> Any:
    return current().reduce_scatter(x, op, axis, group, "ReduceScatter")


_GROUP = Attr("str", "", "the ranks taking part: comma-separated (\"0,2\"), or \"\" for every rank")
_REDUCE = Attr("str", "sum", "how values combine: sum, mean, max, min or prod")

define("Memcpy", FAMILY, ("x",), _same_rule, _memcpy, differentiable=True, may_fail=True,
       attrs={"src": Attr("str", "", "the device the input lives on (the node's `device` is the target)")},
       doc="Copies x from device `src` to the node's own `device` (inserted by the placement pass); "
           "fails where that device is missing.")
define("Send", FAMILY, ("x",), _send_rule, _send, pure=False, kind="comm", may_fail=True,
       attrs={"peer": Attr("int", doc="the rank receiving x"),
              "tag": Attr("int", 0, "matches the Recv with the same tag on the peer")},
       doc="Sends x to rank `peer`; returns a bool token (true).")
define("Recv", FAMILY, (), _recv_rule, _recv, pure=False, kind="comm", may_fail=True,
       attrs={"peer": Attr("int", doc="the rank sending"),
              "tag": Attr("int", 0, "matches the Send with the same tag on the peer"),
              "dtype": Attr("dtype", "f32", "the dtype of the tensor received"),
              "shape": Attr("ints", None, "its shape (-1: a dim known only at run time); none: any rank")},
       doc="Receives the tensor rank `peer` sends with the same tag.")
define("AllReduce", FAMILY, ("x",), _same_rule, _all_reduce, pure=False, kind="comm", may_fail=True,
       differentiable=True,
       attrs={"op": _REDUCE, "group": _GROUP},
       doc="Every rank of the group gets the elementwise reduction (sum, mean, ...) of all ranks' x.")
define("AllGather", FAMILY, ("x",), _scaled_rule(True), _all_gather, pure=False, kind="comm", may_fail=True,
       differentiable=True, attrs={"axis": Attr("int", 0, "the axis the pieces are concatenated along"),
                                   "group": _GROUP},
       doc="Every rank of the group gets all ranks' x concatenated along `axis`, in rank order.")
define("Broadcast", FAMILY, ("x",), _same_rule, _broadcast, pure=False, kind="comm", may_fail=True,
       attrs={"root": Attr("int", 0, "the rank whose x everybody gets"), "group": _GROUP},
       doc="Every rank of the group gets rank `root`'s x.")
define("ReduceScatter", FAMILY, ("x",), _scaled_rule(False), _reduce_scatter, pure=False, kind="comm", may_fail=True,
       differentiable=True, attrs={"op": _REDUCE, "axis": Attr("int", 0, "the axis split among the ranks"),
                                   "group": _GROUP},
       doc="The reduction of all ranks' x, split along `axis`: rank i of the group gets piece i.")
