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

:class:`Place` then moves each value once per destination, as a compiler places a copy:

* ``Memcpy`` (with ``device`` the target and ``src`` the source) where a value crosses
  devices of one machine;
* ``Send`` on the source machine and ``Recv`` on the target where it crosses machines
  (with ``machines=True``; without it a graph's machines are one).  A value used by a
  replicated node (a Cond's condition, a result, an unplaced node) goes to every machine
  by one ``Broadcast``, which then also serves that value's other remote readers.  Each
  Send/Recv pair has its own ``tag``; the Recv has an ordering edge on its Send so that
  every rank can follow one global order of the messages
  (``nexus.distributed.partition``).

Where the transfer goes: one per value and destination (machine, then device), in the
nearest block that dominates all its readers (a Phi reads at the end of the predecessor
its input comes from, so a loop's back edge copies in the latch), hoisted out of every
loop that does not compute the value, into that loop's preheader (made when missing).
So a value read by a loop body and both arms of a branch in it moves once per
iteration, and a loop-invariant value once per call.  Both ends of a Send/Recv go to the
same block, so both ranks run them at the same point of the control skeleton.  The
price of hoisting: a transfer out of a loop runs even when the loop runs zero times.

A machine whose collectives (AllReduce, ...) are on several devices runs one rank per
such device (a collective is one call per process): its *sites* are
``machine + device`` (``host0/GPU:1``), each a rank; a node of that machine on another
device belongs to its first site.  Every other machine is one site and one rank.  A
placed collective without a ``group`` spans the ranks that hold placed collectives (all
of them, for the replicas of one step).

Device names: ``/CPU:k`` (NumPy), ``/TORCH:k`` (PyTorch tensors on the CPU) and
``/GPU:k`` (PyTorch CUDA tensors); case and the leading slash are optional.
"""
from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import ClassVar

from nexus.ir.analysis import DomTree, dominators
from nexus.ir.cfg import role
from nexus.ir.graph import Graph
from nexus.ir.node import Block, Node, node_where
from nexus.ir.opdef import DATAFLOW_KINDS
from nexus.ir.types import TensorType
from nexus.passes.licm import ensure_preheader
from nexus.passes.loops import LoopForest, loop_forest
from nexus.passes.manager import Pass

DEFAULT_DEVICE = "/CPU:0"
DEVICE_KINDS = {"CPU": "numpy", "TORCH": "torch", "GPU": "cuda"}
_DEVICE_RE = re.compile(r"^/?(?:device:)?([A-Za-z_]+):(\d+)$")
TRANSFERS = ("Send", "Recv")  # point to point; the other comm ops are collectives


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
    machine_order: tuple[str, ...] = ()  # rank i runs site machine_order[i]; () : sorted names

    def apply(self, g: Graph) -> dict[str, int]:
        p = _Placer(g, canonical_device(self.default), self.machines, self.machine_order)
        return p.run()


def is_collective(n: Node) -> bool:
    return n.op.kind == "comm" and n.op.name not in TRANSFERS


def _split_machines(g: Graph) -> dict[str, list[str]]:
    """Machines whose collectives are on several devices, and those devices (sorted)."""
    devs: dict[str, set[str]] = {}
    for n in g.nodes():
        if n.attrs and n.attrs.get("machine") and is_collective(n):
            try:
                device = canonical_device(n.attrs.get("device") or DEFAULT_DEVICE)
            except PlacementError as e:
                raise PlacementError(f"{node_where(n)}: {e}") from None
            devs.setdefault(str(n.attrs["machine"]), set()).add(device)
    return {m: sorted(d) for m, d in devs.items() if len(d) > 1}


def machine_names(g: Graph, order: tuple[str, ...] = ()) -> list[str]:
    """The sites of ``g`` (machines, or ``machine/device`` for a machine split into a rank
    per device) in rank order: ``order`` when given (it must name every site or its
    machine), else sorted by machine, then device."""
    split = _split_machines(g)
    used = sorted({str(n.attrs["machine"]) for n in g.nodes() if n.attrs and n.attrs.get("machine")})

    def sites(m: str) -> list[str]:
        return [f"{m}{d}" for d in split[m]] if m in split else [m]

    if not order:
        return [s for m in used for s in sites(m)]
    out = [s for m in order for s in (sites(m) if m in split else [m])]
    missing = [s for m in used for s in sites(m) if s not in out]
    if missing:
        raise PlacementError(f"machine {missing[0]!r} is used in @{g.name} but not in the machine order {list(order)}")
    return out


def common_dominator(dom: DomTree, blocks: Sequence[Block]) -> Block:
    """The nearest block that dominates every one of ``blocks`` (all reachable)."""
    a = blocks[0]
    for b in blocks[1:]:
        while a is not b:
            while dom.order[a] > dom.order[b]:
                a = dom.idom[a]
            while dom.order[b] > dom.order[a]:
                b = dom.idom[b]
    return a


Use = tuple[Node, int]  # (reader, input index)


class _Placer:
    def __init__(self, g: Graph, default: str, machines: bool, order: tuple[str, ...] = ()):
        self.g = g
        self.default = canonical_device(default)
        self.machines = machines
        self.split = _split_machines(g) if machines else {}
        self.ranks = {m: i for i, m in enumerate(machine_names(g, order))} if machines else {}
        self.dev: dict[Node, str | None] = {}
        self.mach: dict[Node, str | None] = {}
        self.dom: DomTree | None = None
        self.loops: LoopForest | None = None

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
        """The site ``n`` runs on (None: every site): its machine, or for a machine split
        per device the site of its device."""
        if not self.machines:
            return None
        if n in self.mach:
            return self.mach[n]
        self.mach[n] = None
        m = n.attrs.get("machine") if n.attrs else None
        if m:
            out: str | None = self.site(str(m), self.device(n))
        elif n.op.name == "Proj" and role(n) == "data":
            out = self.machine(n.input(0))
        elif n.op.kind == "phi":
            out = self._phi_source(n, self.machine)
        else:
            out = None
        self.mach[n] = out
        return out

    def site(self, machine: str, device: str | None) -> str:
        devices = self.split.get(machine)
        if not devices:
            return machine
        return f"{machine}{device if device in devices else devices[0]}"

    def site_parts(self, site: str) -> tuple[str, str]:
        """(machine, device) of a site: a split site's device, else the default."""
        for m, devices in self.split.items():
            for d in devices:
                if site == f"{m}{d}":
                    return m, d
        return site, self.default

    @staticmethod
    def _phi_source(n: Node, where: Callable[[Node], str | None]) -> str | None:
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
            found = where(v)
            if found is not None:
                return found
        return None

    def wanted(self, user: Node, i: int) -> tuple[str | None, str | None]:
        """(device, site) where ``user`` reads input ``i``; device None: anywhere."""
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
        stats = {"memcpy": 0, "send": 0, "broadcast": 0, "constants": 0, "preheaders": 0, "groups": 0}
        uses = self.crossings()
        if self.machines:
            stats["groups"] = self.derive_groups()
        if uses:
            stats["preheaders"] = self.make_preheaders(uses)
            if stats["preheaders"]:  # header Phis have new inputs: read the crossings again
                self.dev.clear()
                self.mach.clear()
                uses = self.crossings()
            self.dom, self.loops = dominators(self.g), loop_forest(self.g)  # the CFG is final now
            tag = max([int(n.attrs.get("tag", 0)) for n in self.g.nodes() if n.op.name in TRANSFERS] or [-1]) + 1
            device_uses = self.cross_machines(uses, stats, tag)
            self.cross_devices(device_uses, stats)
        if any(stats.values()):
            self.g.touch()
        return {k: v for k, v in stats.items() if v}

    def cross_machines(self, uses: list[tuple[Node, int, Node]], stats: dict[str, int],
                       tag: int) -> list[tuple[Node, int, Node]]:
        """One Send/Recv (or Broadcast) per value and destination site; the uses left,
        now reading what arrived, for :meth:`cross_devices`."""
        remote: dict[tuple[Node, str | None], list[Use]] = {}
        broadcast = {v for user, i, v in uses
                     if v.op.name != "Constant" and self.machine(v) is not None and self.wanted(user, i)[1] is None}
        rest = []
        for user, i, v in uses:
            vm, mach = self.machine(v), self.wanted(user, i)[1]
            if v.op.name == "Constant" or vm is None or mach == vm:
                rest.append((user, i, v))
            else:  # a Broadcast reaches every site: it serves all remote readers of v
                remote.setdefault((v, None if v in broadcast else mach), []).append((user, i))
        for (v, mach), reads in remote.items():
            for block, group in self.placements(v, reads):
                moved = self.send_recv(v, self.machine(v) or "", mach, block, stats, tag)
                if moved.op.name == "Recv":  # each pair its own tag
                    tag += 1
                rest.extend((user, i, moved) for user, i in group)
        return rest

    def cross_devices(self, uses: list[tuple[Node, int, Node]], stats: dict[str, int]) -> None:
        """One Memcpy per value and destination device (a Constant: one copy made once)."""
        copies: dict[tuple[Node, str | None, str | None], list[Use]] = {}
        constants: dict[tuple[Node, str | None], Node] = {}
        for user, i, v in uses:
            dev, mach = self.wanted(user, i)
            if v.op.name == "Constant":
                c = constants.get((v, dev))
                if c is None:
                    c = constants[(v, dev)] = self.constant_on(v, dev, stats)
                if c is not v:
                    user.set_input(i, c)
            elif dev is None or self.device(v) == dev:
                if user.input(i) is not v:
                    user.set_input(i, v)
            else:
                copies.setdefault((v, dev, mach), []).append((user, i))
        for (v, dev, mach), reads in copies.items():
            assert dev is not None
            for block, group in self.placements(v, reads):
                node = self.memcpy(v, dev, mach, block, stats)
                for user, i in group:
                    user.set_input(i, node)

    # --- where a transfer goes ---------------------------------------------------------------
    @staticmethod
    def read_block(user: Node, i: int) -> Block:
        """The block where ``user`` reads input ``i``: its own, or for a Phi the
        predecessor the input arrives from (a loop's latch, not its header)."""
        assert user.block is not None
        if user.op.kind == "phi":
            pred = user.block.input(i).block
            assert pred is not None
            return pred
        return user.block

    def placements(self, v: Node, reads: list[Use]) -> list[tuple[Block, list[Use]]]:
        """Where the one transfer of ``v`` for ``reads`` goes, and the reads it serves:
        the nearest common dominator of the reads, hoisted out of loops that do not
        compute ``v``.  Reads in unreachable blocks get a transfer in their own block."""
        assert self.dom is not None
        dom = self.dom
        live = [(u, i) for u, i in reads if dom.reachable(self.read_block(u, i))]
        out: dict[Block, list[Use]] = {}
        for u, i in reads:
            if (u, i) not in live:
                out.setdefault(self.read_block(u, i), []).append((u, i))
        if live:
            block = common_dominator(dom, [self.read_block(u, i) for u, i in live])
            assert v.block is not None
            out.setdefault(self.hoisted(block, v.block), []).extend(live)
        return list(out.items())

    def outer_loops(self, block: Block, home: Block) -> list[Block]:
        """Headers of the loops around ``block`` that do not hold ``home``, innermost first."""
        assert self.loops is not None
        out = []
        lp = self.loops.loop_of(block)
        while lp is not None and home not in lp.blocks:
            out.append(lp.header)
            lp = lp.parent
        return out

    def hoisted(self, block: Block, home: Block) -> Block:
        """``block``, or the preheader of the outermost loop around it that does not hold
        ``home`` (where a loop-invariant transfer runs once per entry of the loop)."""
        assert self.loops is not None
        headers = self.outer_loops(block, home)
        if not headers:
            return block
        lp = next(lp for lp in self.loops.loops if lp.header is headers[-1])
        ph = lp.preheader()
        assert ph is not None, "make_preheaders made it"
        return ph

    def make_preheaders(self, uses: list[tuple[Node, int, Node]]) -> int:
        """Give every loop a transfer may be hoisted out of a preheader, before anything
        is placed (a preheader changes the CFG, so the dominators are computed after)."""
        forest = loop_forest(self.g)
        headers: dict[Block, None] = {}
        for user, i, v in uses:
            if v.block is None:
                continue
            b = self.read_block(user, i)
            lp = forest.loop_of(b)
            while lp is not None and v.block not in lp.blocks:
                headers[lp.header] = None
                lp = lp.parent
        made = 0
        for header in headers:  # innermost first: an outer loop then holds the new block
            loop = next(lp for lp in loop_forest(self.g).loops if lp.header is header)
            made += ensure_preheader(self.g, loop)[1]
        return made

    # --- the transfers -------------------------------------------------------------------------
    def memcpy(self, v: Node, dev: str, mach: str | None, block: Block, stats: dict[str, int]) -> Node:
        attrs = {"device": dev, "src": self.device(v) or self.default}
        if mach is not None:
            attrs["machine"] = self.site_parts(mach)[0]
        node = self.g.add("Memcpy", [v], block, attrs, type=v.type, loc=v.loc, name=v.name)
        self.dev[node], self.mach[node] = dev, mach
        stats["memcpy"] += 1
        return node

    def constant_on(self, c: Node, dev: str | None, stats: dict[str, int]) -> Node:
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

    def send_recv(self, v: Node, src: str, dst: str | None, block: Block, stats: dict[str, int], tag: int) -> Node:
        """``v`` (computed on site ``src``) on site ``dst``: a Send there and a Recv here,
        named after ``v``; for ``dst`` None (a replicated reader) a Broadcast from
        ``src``'s rank, whose input the other ranks do not have
        (``nexus.distributed.partition`` gives them a placeholder: a broadcast's receivers
        learn the shape from the root)."""
        assert v.block is not None and isinstance(v.type, TensorType)
        for m in (src, dst):
            if m is not None and m not in self.ranks:
                raise PlacementError(f"{node_where(v)}: machine {m!r} has no rank")
        dev = self.device(v) or self.default
        if dst is None:
            node = self.g.add("Broadcast", [v], block, {"root": self.ranks[src], "device": dev},
                              type=v.type, loc=v.loc, name=v.name)
            self.dev[node], self.mach[node] = dev, None
            stats["broadcast"] += 1
            return node
        t = v.type
        shape = tuple(d if isinstance(d, int) else -1 for d in t.shape) if t.shape is not None else None
        src_machine = self.site_parts(src)[0]
        dst_machine, dst_device = self.site_parts(dst)
        send = self.g.add("Send", [v], block, {"peer": self.ranks[dst], "tag": tag, "machine": src_machine,
                                                  "device": dev}, loc=v.loc, name=v.name)
        attrs = {"peer": self.ranks[src], "tag": tag, "dtype": t.dtype, "machine": dst_machine, "device": dst_device}
        if shape is not None:
            attrs["shape"] = shape
        recv = self.g.add("Recv", [], block, attrs, type=t, loc=v.loc, deps=[send], name=v.name)
        self.dev[send], self.mach[send] = dev, src
        self.dev[recv], self.mach[recv] = dst_device, dst
        stats["send"] += 1
        return recv

    # --- collectives ----------------------------------------------------------------------------
    def derive_groups(self) -> int:
        """Give each placed collective without a ``group`` the ranks that hold placed
        collectives (left ``""`` when that is every rank): a rank that runs none would
        never join, and the others would wait for it."""
        placed = [n for n in self.g.nodes() if is_collective(n) and not n.attrs.get("group")
                  and self.machine(n) is not None]
        ranks = sorted({self.ranks[self.machine(n) or ""] for n in placed})
        if len(ranks) == len(self.ranks):
            return 0
        for n in placed:
            n.attrs = {**n.attrs, "group": ",".join(str(r) for r in ranks)}
        return len(placed)


def place(g: Graph, default: str = DEFAULT_DEVICE, machines: bool = False,
          machine_order: tuple[str, ...] = ()) -> dict[str, int]:
    """Insert the Memcpy nodes ``g`` needs (in place) and, with ``machines``, the Send/Recv
    and Broadcast nodes between its machines (ranks in ``machine_order``, or sorted); what
    changed, by kind.  In one process the transfers run as copies (a world of one rank
    delivers each Send to its Recv); under ``nexus.distributed`` as real messages."""
    return Place(default=default, machines=machines, machine_order=tuple(machine_order)).apply(g)


def machines_of(g: Graph, order: tuple[str, ...] = ()) -> dict[Node, str | None]:
    """The site of every node of ``g`` (None: replicated), by the rules above."""
    p = _Placer(g, DEFAULT_DEVICE, machines=True, order=order)
    return {n: p.machine(n) for n in g.nodes()}
