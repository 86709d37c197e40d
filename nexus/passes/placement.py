"""Placement (seed 001, section 4.2): every value lives on a device of a machine, and a
value used where it does not live is moved there by an explicit node.

``device`` and ``machine`` are attributes any node may carry (``with nx.device(...)``,
``with nx.machine(...)``).  Where a node has none:

* a data node runs on the pass's ``default`` device and on *every* machine (replicated,
  the SPMD reading: the same graph on every rank);
* a Phi lives where its first input that lives somewhere lives (through Phi chains;
  constants and replicated values are skipped); a Proj of a multi-result node lives
  with that node;
* a Constant is materialised where it is used: each device using it gets its own copy
  (moving a constant at run time would only repeat the same copy);
* arguments arrive, and results leave, on the ``default`` device.

:class:`Place` then inserts, in the reader's block (for a Phi: at the end of the
predecessor the input comes from, so a loop's back edge copies in the latch):

* ``Memcpy`` (with ``device`` the target and ``src`` the source) where a value crosses
  devices of one machine;
* ``Send`` on the source machine and ``Recv`` on the target where it crosses machines
  (only with ``machines=True``, which ``nexus.distributed`` asks for; run in one process
  a graph's machines are one).  A value used by a replicated node (a Cond's condition, a
  result, an unplaced node) is sent to every other machine.  Each Send/Recv pair has its
  own ``tag``; the Recv has an ordering edge on its Send so that every rank can follow
  one global order of the messages (``nexus.distributed.partition``).

Device names: ``/CPU:k`` (NumPy), ``/TORCH:k`` (PyTorch tensors on the CPU) and
``/GPU:k`` (PyTorch CUDA tensors); case and the leading slash are optional.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import ClassVar

from nexus.ir.cfg import role
from nexus.ir.graph import Graph
from nexus.ir.node import Block, Node, node_where
from nexus.ir.opdef import DATAFLOW_KINDS
from nexus.ir.types import TensorType
from nexus.passes.manager import Pass

DEFAULT_DEVICE = "/CPU:0"
DEVICE_KINDS = {"CPU": "numpy", "TORCH": "torch", "GPU": "cuda"}
_DEVICE_RE = re.compile(r"^/?(?:device:)?([A-Za-z_]+):(\d+)$")


class PlacementError(ValueError):
    """A device name the runtime does not know, or a placement that cannot be honoured."""


def parse_device(name: str) -> tuple[str, int]:
    """``("CPU" | "TORCH" | "GPU", index)`` of a device name such as ``/GPU:0``."""
    m = _DEVICE_RE.match(name.strip())
    kind = m.group(1).upper() if m else ""
    if not m or kind not in DEVICE_KINDS:
        raise PlacementError(f"unknown device {name!r}: expected /CPU:k (NumPy), /TORCH:k (PyTorch on the CPU) "
                             "or /GPU:k (PyTorch CUDA)")
    return kind, int(m.group(2))


def canonical_device(name: str) -> str:
    kind, index = parse_device(name)
    return f"/{kind}:{index}"


def needs_placement(g: Graph, default: str = DEFAULT_DEVICE) -> bool:
    """Whether ``g`` has a value used on another device than it lives on (so running it
    needs :class:`Place` first).  Cheap for graphs that place nothing."""
    if not any(n.attrs.get("device") for b in g.blocks for n in b.members if n.attrs):
        return False
    p = _Placer(g, default, machines=False)
    return any(p.crossings())


@dataclass(frozen=True)
class Place(Pass):
    """Insert Memcpy (and, with ``machines``, Send/Recv) where values cross devices."""

    name: ClassVar[str] = "place"
    default: str = DEFAULT_DEVICE
    machines: bool = False
    machine_order: tuple[str, ...] = ()  # rank i runs machine_order[i]; () : sorted names

    def apply(self, g: Graph) -> dict[str, int]:
        p = _Placer(g, canonical_device(self.default), self.machines, self.machine_order)
        return p.run()


def machine_names(g: Graph, order: tuple[str, ...] = ()) -> list[str]:
    """The machines of ``g`` in rank order: ``order`` when given (it must name every
    machine the graph uses), else the names sorted."""
    used = sorted({str(n.attrs["machine"]) for n in g.nodes() if n.attrs and n.attrs.get("machine")})
    if not order:
        return used
    missing = [m for m in used if m not in order]
    if missing:
        raise PlacementError(f"machine {missing[0]!r} is used in @{g.name} but not in the machine order {list(order)}")
    return list(order)


class _Placer:
    def __init__(self, g: Graph, default: str, machines: bool, order: tuple[str, ...] = ()):
        self.g = g
        self.default = canonical_device(default)
        self.machines = machines
        self.ranks = {m: i for i, m in enumerate(machine_names(g, order))} if machines else {}
        self.dev: dict[Node, str | None] = {}
        self.mach: dict[Node, str | None] = {}

    # --- where a value lives ----------------------------------------------------------------
    def device(self, n: Node) -> str | None:
        """The device ``n`` lives on (None: a Constant, materialised where used)."""
        if n in self.dev:
            return self.dev[n]
        self.dev[n] = self.default  # a guard for Phi cycles
        d = n.attrs.get("device") if n.attrs else None
        if d:
            try:
                out: str | None = canonical_device(d)
            except PlacementError as e:
                raise PlacementError(f"{node_where(n)}: {e}") from None
        elif n.op.name == "Constant":
            out = None
        elif n.op.name == "Proj" and role(n) == "data":  # a part of a tuple lives with it
            out = self.device(n.input(0))
        elif n.op.kind == "phi":
            out = self._phi_source(n, self.device) or self.default
        else:
            out = self.default
        self.dev[n] = out
        return out

    def machine(self, n: Node) -> str | None:
        """The machine ``n`` runs on (None: every machine)."""
        if not self.machines:
            return None
        if n in self.mach:
            return self.mach[n]
        self.mach[n] = None
        m = n.attrs.get("machine") if n.attrs else None
        if m:
            out: str | None = str(m)
        elif n.op.name == "Proj" and role(n) == "data":
            out = self.machine(n.input(0))
        elif n.op.kind == "phi":
            out = self._phi_source(n, self.machine)
        else:
            out = None
        self.mach[n] = out
        return out

    @staticmethod
    def _phi_source(n: Node, where: object) -> str | None:
        """Where the first input of Phi ``n`` that lives somewhere lives (through Phi
        chains; constants and replicated values live everywhere and are skipped)."""
        seen = {n}
        work = list(n.inputs)
        while work:
            v = work.pop(0)
            if v in seen:
                continue
            seen.add(v)
            if v.op.kind == "phi":
                work.extend(v.inputs)
                continue
            found = where(v)  # type: ignore[operator]
            if found is not None:
                return found  # type: ignore[no-any-return]
        return None

    def wanted(self, user: Node, i: int) -> tuple[str | None, str | None]:
        """(device, machine) where ``user`` reads input ``i``; device None: anywhere."""
        name = user.op.name
        if name == "Return":
            return self.default, None
        if name == "Cond":
            return None, None
        if name == "Broadcast":  # the root's value; the others only receive
            return self.device(user), self.machine(user.input(i))
        if name == "Memcpy":
            src = user.attrs.get("src")
            return (canonical_device(src) if src else self.device(user)), self.machine(user)
        return self.device(user), self.machine(user)

    # --- the edges that cross ----------------------------------------------------------------
    def crossings(self) -> list[tuple[Node, int, Node]]:
        """``(user, input index, value)`` for each tensor input read elsewhere than it lives."""
        out = []
        for b in self.g.blocks:
            for user in list(b.members):
                if user.op.kind not in (*DATAFLOW_KINDS, "phi") and not user.op.terminator:
                    continue
                for i, v in enumerate(user.inputs):
                    if not isinstance(v.type, TensorType) or v.op.name == "Send":
                        continue
                    dev, mach = self.wanted(user, i)
                    if v.op.name == "Constant":  # replicated; copied only to another device
                        if dev is not None and (self.device(v) or self.default) != dev:
                            out.append((user, i, v))
                        continue
                    vd, vm = self.device(v), self.machine(v)
                    if (mach != vm and vm is not None) or (dev is not None and vd != dev):
                        out.append((user, i, v))
        return out

    def run(self) -> dict[str, int]:
        stats = {"memcpy": 0, "send": 0, "broadcast": 0, "constants": 0}
        copies: dict[tuple[Node, str | None, str | None, Block], Node] = {}
        tag = [max([int(n.attrs.get("tag", 0)) for n in self.g.nodes() if n.op.name in ("Send", "Recv")] or [-1]) + 1]
        for user, i, v in self.crossings():
            dev, mach = self.wanted(user, i)
            block = self.where(user, i)
            key = (v, dev, mach, block)
            new = copies.get(key)
            if new is None:
                new = copies[key] = self.move(v, dev, mach, block, stats, tag)
            if new is not v:
                user.set_input(i, new)
        if any(stats.values()):
            self.g.touch()
        return {k: v for k, v in stats.items() if v}

    @staticmethod
    def where(user: Node, i: int) -> Block:
        """The block a copy for ``user``'s input ``i`` goes in: the user's own, or for a
        Phi the predecessor the input arrives from (a loop's latch, not its header)."""
        assert user.block is not None
        if user.op.kind == "phi":
            pred = user.block.input(i).block
            assert pred is not None
            return pred
        return user.block

    def move(self, v: Node, dev: str | None, mach: str | None, block: Block, stats: dict[str, int],
             tag: list[int]) -> Node:
        """``v`` as seen on ``dev`` of ``mach`` (None: wherever the reader is), in ``block``."""
        vm = self.machine(v)
        if v.op.name == "Constant":
            return self.constant_on(v, dev, mach, stats)
        if vm is not None and mach != vm:
            v = self.send_recv(v, vm, mach, block, stats, tag)
        vd = self.device(v)
        if dev is None or vd == dev:
            return v
        attrs = {"device": dev, "src": vd or self.default}
        if mach is not None:
            attrs["machine"] = mach
        node = self.g.add("Memcpy", [v], block, attrs, type=v.type, loc=v.loc)
        self.dev[node], self.mach[node] = dev, mach
        stats["memcpy"] += 1
        return node

    def constant_on(self, c: Node, dev: str | None, mach: str | None, stats: dict[str, int]) -> Node:
        attrs = dict(c.attrs)
        attrs.pop("machine", None)
        if dev is None or dev == self.default:
            attrs.pop("device", None)
        else:
            attrs["device"] = dev
        if attrs == dict(c.attrs):
            return c
        assert c.block is not None
        node = self.g.add("Constant", [], c.block, attrs, type=c.type, name=c.name, loc=c.loc)
        self.dev[node], self.mach[node] = dev, None
        stats["constants"] += 1
        return node

    def send_recv(self, v: Node, src: str, dst: str | None, block: Block, stats: dict[str, int],
                  tag: list[int]) -> Node:
        """``v`` (computed on machine ``src``) on machine ``dst``: a Send there and a Recv
        here; for ``dst`` None (a replicated reader) a Broadcast from ``src``'s rank, whose
        input the other ranks do not have (``nexus.distributed.partition`` gives them a
        placeholder: a broadcast's receivers learn the shape from the root)."""
        assert v.block is not None and isinstance(v.type, TensorType)
        for m in (src, dst):
            if m is not None and m not in self.ranks:
                raise PlacementError(f"{v!r}: machine {m!r} has no rank")
        dev = self.device(v) or self.default
        if dst is None:
            node = self.g.add("Broadcast", [v], block, {"root": self.ranks[src], "device": dev},
                              type=v.type, loc=v.loc)
            self.dev[node], self.mach[node] = dev, None
            stats["broadcast"] += 1
            return node
        t = v.type
        shape = tuple(d if isinstance(d, int) else -1 for d in t.shape) if t.shape is not None else None
        send = self.g.add("Send", [v], block, {"peer": self.ranks[dst], "tag": tag[0], "machine": src,
                                                  "device": dev}, loc=v.loc)
        attrs = {"peer": self.ranks[src], "tag": tag[0], "dtype": t.dtype, "machine": dst, "device": self.default}
        if shape is not None:
            attrs["shape"] = shape
        recv = self.g.add("Recv", [], block, attrs, type=t, loc=v.loc, deps=[send])
        self.dev[send], self.mach[send] = dev, src
        self.dev[recv], self.mach[recv] = self.default, dst
        tag[0] += 1
        stats["send"] += 1
        return recv


def place(g: Graph, default: str = DEFAULT_DEVICE) -> dict[str, int]:
    """Insert the Memcpy nodes ``g`` needs (in place); what changed, by kind."""
    return Place(default=default).apply(g)


def machines_of(g: Graph, order: tuple[str, ...] = ()) -> dict[Node, str | None]:
    """The machine of every node of ``g`` (None: replicated), by the rules above."""
    p = _Placer(g, DEFAULT_DEVICE, machines=True, order=order)
    return {n: p.machine(n) for n in g.nodes()}
