"""Where each node of a v1 TensorFlow graph runs: its while-loop frames and cond branches.

TF v1 control flow is data flow with dead values: a ``Switch`` forwards its input to
one of two outputs, ``Merge`` forwards whichever input is alive, ``Enter``/``Exit`` move
values into and out of a while loop's *frame*, and ``NextIteration`` carries them to the
next iteration.  To turn that into blocks, every node gets a *chain*: the path of scopes
it runs under, from the outside in.  A step is ``("loop", frame)`` (inside that while
loop) or ``("br", pred, k)`` (on output ``k`` of the Switches on predicate tensor
``pred``; a loop's body is ``k = 1`` of its LoopCond, the way out ``k = 0``).

Chains follow the data (and control) edges, never node names: a node runs under the
longest chain of its inputs (they must be prefixes of one another), a Switch output adds
its branch step, a cond Merge removes the step its inputs differ in (finding which
input came from which side), an Enter starts its frame, whose place is the longest chain
among the frame's Enter inputs, an Exit leaves it.  ``Frames`` checks the structure as
it goes (frames that do not nest, a loop Merge without its Enter, an Exit outside any
loop) and raises one :class:`TfImportError` naming the node.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Mapping
from typing import Any

from nexus.frontend.tf.proto import TfImportError, TfNode

Step = tuple[Any, ...]
Chain = tuple[Step, ...]
Tensor = tuple[str, int]

IDENTITY_OPS = frozenset({"Identity", "Snapshot", "StopGradient", "PreventGradient"})


class Frames:
    """The frames and chains of the nodes in ``cone`` (what is imported; the ``fed``
    tensors are alive everywhere and their nodes are not looked at)."""

    def __init__(self, nodes: Mapping[str, TfNode], cone: set[str], fed: set[Tensor]):
        self.nodes, self.cone, self.fed = nodes, cone, fed
        self.frame: dict[str, str] = {}  # node -> frame name ("" outside loops)
        self.parent: dict[str, str] = {}  # frame -> enclosing frame
        self.enters: dict[str, list[str]] = {}  # frame -> its Enter nodes
        self.loopcond: dict[str, str] = {}  # frame -> its LoopCond node
        self.place: dict[str, Chain] = {}  # frame -> the chain of the loop in its parent
        self.chain: dict[str, Chain] = {}  # node -> where it runs (grouping chain)
        self.tchain: dict[Tensor, Chain] = {}  # tensor -> where it is alive
        self.loop_merges: dict[str, list[str]] = {}  # frame -> its loop Merges
        self.order = self._order()
        self._frames()
        self._chains()

    # --- helpers --------------------------------------------------------------------------
    def data_inputs(self, n: TfNode) -> list[Tensor]:
        return [t for t in n.inputs if t not in self.fed]

    def is_loop_merge(self, n: TfNode) -> bool:
        return n.op == "Merge" and any(self.nodes[s].op == "NextIteration" for s, _ in self.data_inputs(n))

    def _preds(self, n: TfNode) -> Iterable[str]:
        for s, _ in self.data_inputs(n):
            if not (n.op == "Merge" and self.nodes[s].op == "NextIteration"):
                yield s
        yield from n.controls

    def _edges(self) -> tuple[dict[str, int], dict[str, list[str]]]:
        """In-degree and users of every node of the cone (NextIteration -> Merge left out)."""
        indeg = {name: 0 for name in self.cone}
        users: dict[str, list[str]] = {name: [] for name in self.cone}
        for name in self.cone:
            for s in self._preds(self.nodes[name]):
                indeg[name] += 1
                users[s].append(name)
        return indeg, users

    def _order(self) -> list[str]:
        """The cone in topological order, NextIteration -> Merge edges left out."""
        indeg, users = self._edges()
        ready = sorted((self.nodes[n].index, n) for n, d in indeg.items() if d == 0)
        order: list[str] = []
        heapq.heapify(ready)
        while ready:
            _, n = heapq.heappop(ready)
            order.append(n)
            for u in users[n]:
                indeg[u] -= 1
                if indeg[u] == 0:
                    heapq.heappush(ready, (self.nodes[u].index, u))
        if len(order) != len(self.cone):
            left = min((self.nodes[n] for n, d in indeg.items() if d > 0), key=lambda t: t.index)
            raise TfImportError(f"{left.where()} is on a cycle that does not pass through NextIteration -> Merge")
        return order

    def _deeper(self, n: TfNode, a: str, b: str) -> str:
        """The deeper of frames ``a`` and ``b``, which must be on one line of nesting."""
        if a == b:
            return a
        for x, y in ((a, b), (b, a)):
            f = x
            while f:
                f = self.parent[f]
                if f == y:
                    return x
        raise TfImportError(f"{n.where()} takes values from frames {a!r} and {b!r}, which do not nest")

    # --- frames ---------------------------------------------------------------------------
    def _frames(self) -> None:
        for name in self.order:
            n = self.nodes[name]
            ins = ["" if t in self.fed else self.frame[t[0]] for t in n.inputs
                   if t in self.fed or t[0] in self.frame]  # a NextIteration into a Merge comes later
            if n.op == "Enter":
                if not ins:
                    raise TfImportError(f"{n.where()} has no input")
                fname = _attr_s(n, "frame_name")
                if not fname:
                    raise TfImportError(f"{n.where()} has no frame_name")
                outer = ins[0]
                old = self.parent.setdefault(fname, outer)
                if old != outer or fname == outer:
                    raise TfImportError(f"{n.where()} enters frame {fname!r} from frame {outer!r}, but other Enters "
                                        f"enter it from {old!r}: frames do not nest")
                self.frame[name] = fname
                self.enters.setdefault(fname, []).append(name)
                continue
            f = ""
            for g in [*ins, *(self.frame[c] for c in n.controls)]:
                f = self._deeper(n, f, g)
            if n.op == "Exit":
                if f == "":
                    raise TfImportError(f"{n.where()} is not inside any while loop: its input is in no frame")
                f = self.parent[f]
            self.frame[name] = f
            if n.op == "LoopCond":
                old_lc = self.loopcond.setdefault(f, name)
                if old_lc != name:
                    raise TfImportError(f"{n.where()}: frame {f!r} already has the LoopCond {old_lc!r}")
        for name in self.order:
            n = self.nodes[name]
            if n.op != "Merge":
                continue
            kinds = [self.nodes[s].op for s, _ in self.data_inputs(n)]
            if "NextIteration" in kinds or "Enter" in kinds:
                self._check_loop_merge(n, kinds)

    def _check_loop_merge(self, n: TfNode, kinds: list[str]) -> None:
        f = self.frame[n.name]
        if "Enter" not in kinds:
            nxt = self.data_inputs(n)[kinds.index("NextIteration")][0]
            raise TfImportError(f"{n.where()} takes NextIteration {nxt!r} but no Enter: a loop Merge needs the "
                                f"value entering the loop")
        if "NextIteration" not in kinds:
            raise TfImportError(f"{n.where()} takes an Enter but no NextIteration: a loop Merge needs the value "
                                f"of the next iteration")
        if len(kinds) != 2:
            raise TfImportError(f"{n.where()}: a loop Merge takes one Enter and one NextIteration, got {kinds}")
        for s, _ in self.data_inputs(n):
            if self.frame[s] != f:
                raise TfImportError(f"{n.where()} is in frame {f!r} but its input {s!r} is in frame "
                                    f"{self.frame[s]!r}: frames do not nest")
        if f not in self.loopcond:
            raise TfImportError(f"{n.where()}: the while loop of frame {f!r} has no LoopCond")
        self.loop_merges.setdefault(f, []).append(n.name)

    # --- chains ---------------------------------------------------------------------------
    def _chains(self) -> None:
        """Chains in an order where each frame is placed (all its Enters seen) before any
        node inside it: a second topological sort with an edge Enter -> frame -> nodes."""
        waiting: dict[str, int] = {f: len(es) for f, es in self.enters.items()}
        held: dict[str, list[str]] = {}
        done: set[str] = set()
        indeg, users = self._edges()
        ready = [n for n in self.order if indeg[n] == 0]
        ready.reverse()
        while ready:
            name = ready.pop()
            n = self.nodes[name]
            f = self.frame[name]
            wait = self._unplaced(n)
            if wait is not None:
                held.setdefault(wait, []).append(name)  # until that frame is placed
                continue
            self._chain_of(n)
            done.add(name)
            if n.op == "Enter":
                waiting[f] -= 1
                if waiting[f] == 0:
                    self._place(f)
                    ready.extend(reversed(held.pop(f, [])))
            for u in users[name]:
                indeg[u] -= 1
                if indeg[u] == 0:
                    ready.append(u)
        if len(done) != len(self.cone):
            stuck = min((self.nodes[n] for n in self.cone if n not in done), key=lambda t: t.index)
            raise TfImportError(f"{stuck.where()}: its while loop's values depend on the loop's own results "
                                f"(an Enter fed from an Exit of the same frame): frames do not nest")

    def _unplaced(self, n: TfNode) -> str | None:
        """A frame not placed yet that ``n`` is in or reads an Enter of (None: none)."""
        if n.op == "Enter":
            return None
        f = self.frame[n.name]
        if f and f not in self.place:
            return f
        for s, _ in self.data_inputs(n):
            g = self.frame[s] if self.nodes[s].op == "Enter" else ""
            if g and g not in self.place and not (n.op == "Merge" and self.nodes[s].op == "NextIteration"):
                return g
        return None

    def _place(self, f: str) -> None:
        chains = [self.tin(self.nodes[e].inputs[0]) for e in self.enters[f]]
        place = self.join(self.nodes[self.enters[f][0]], chains)
        self.place[f] = place
        inner = (*place, ("loop", f))
        for e in self.enters[f]:
            self.chain[e] = inner
            self.tchain[(e, 0)] = inner

    def frame_chain(self, f: str) -> Chain:
        return (*self.place[f], ("loop", f)) if f else ()

    def tin(self, t: Tensor) -> Chain:
        """The chain of tensor ``t`` (a fed tensor is alive everywhere)."""
        if t in self.fed:
            return ()
        c = self.tchain.get(t)
        if c is None:
            c = self.chain[t[0]] if self.nodes[t[0]].op == "Switch" else self.tchain.get((t[0], 0), self.chain[t[0]])
        return c

    def ctl(self, name: str) -> Chain:
        n = self.nodes[name]
        if n.op == "Switch":
            return self.chain[name]
        return self.tchain.get((name, 0), self.chain[name])

    def join(self, n: TfNode, chains: Iterable[Chain]) -> Chain:
        best: Chain = ()
        for c in chains:
            short, long_ = (best, c) if len(best) <= len(c) else (c, best)
            if long_[:len(short)] != short:
                i = next(k for k in range(len(short)) if short[k] != long_[k])
                a, b = short[i], long_[i]
                if a[0] == b[0] == "br" and a[1] == b[1]:
                    raise TfImportError(f"{n.where()} takes values from both sides of the Switch on {a[1][0]!r}: "
                                        f"it would never run")
                raise TfImportError(f"{n.where()} takes values from scopes that do not nest "
                                    f"({_show(a)} and {_show(b)})")
            best = long_
        return best

    def pred_key(self, t: Tensor) -> Tensor:
        """The predicate tensor of a Switch, seen through Identity nodes."""
        while t not in self.fed and self.nodes[t[0]].op in IDENTITY_OPS and self.nodes[t[0]].inputs:
            t = self.nodes[t[0]].inputs[0]
        return t

    def _chain_of(self, n: TfNode) -> None:
        name, op = n.name, n.op
        ins = self.data_inputs(n)
        if op == "Enter":
            return  # placed with its frame
        if op == "Merge" and self.is_loop_merge(n):
            f = self.frame[name]
            c = self.frame_chain(f)
            self.chain[name] = self.tchain[(name, 0)] = self.tchain[(name, 1)] = c
            return
        if op == "Merge":
            self._cond_merge(n)
            return
        base = self.join(n, [*(self.tin(t) for t in ins), *(self.ctl(c) for c in n.controls)])
        f = self.frame[name]
        if f and base[:len(self.frame_chain(f))] != self.frame_chain(f):
            base = self.join(n, [base, self.frame_chain(f)])
        self.chain[name] = base
        if op == "Switch":
            if len(n.inputs) != 2:
                raise TfImportError(f"{n.where()} takes data and a predicate, got {len(n.inputs)} inputs")
            p = self.pred_key(n.inputs[1])
            for k in (0, 1):
                self.tchain[(name, k)] = (*base, ("br", p, k))
            return
        if op == "Exit":
            fin = self.frame[ins[0][0]] if ins else ""
            lc = self.loopcond.get(fin)
            inner = self.frame_chain(fin)
            if lc is None or base[:len(inner) + 1] != (*inner, ("br", (lc, 0), 0)):
                raise TfImportError(f"{n.where()} must take the false output of a Switch on its loop's LoopCond")
            self.tchain[(name, 0)] = self.place[fin]
            return
        if op == "NextIteration":
            f = self.frame[name]
            lc = self.loopcond.get(f)
            inner = self.frame_chain(f)
            if lc is None or base[:len(inner) + 1] != (*inner, ("br", (lc, 0), 1)):
                raise TfImportError(f"{n.where()} must run in its loop's body (after the true output of the "
                                    f"Switch on the LoopCond)")
        if op == "LoopCond" and base != self.frame_chain(self.frame[name]):
            raise TfImportError(f"{n.where()} must be computed in its loop's header, from the loop Merges")

    def _cond_merge(self, n: TfNode) -> None:
        ins = self.data_inputs(n)
        chains = [self.tin(t) for t in ins]
        if not ins:
            raise TfImportError(f"{n.where()} has no inputs")
        if len(ins) == 1:
            self.chain[n.name] = self.tchain[(n.name, 0)] = self.tchain[(n.name, 1)] = chains[0]
            n.extra["sides"] = None
            return
        depth = min(len(c) for c in chains) - 1
        prefix = chains[0][:max(depth, 0)]
        steps = [c[depth] if depth >= 0 else None for c in chains]
        ok = depth >= 0 and all(c[:depth] == prefix and len(c) == depth + 1 for c in chains)
        preds = {s[1] for s in steps if s is not None and s[0] == "br"}
        sides = [s[2] for s in steps if s is not None and s[0] == "br"]
        if not ok or len(preds) != 1 or len(sides) != len(ins) or len(set(sides)) != len(sides):
            raise TfImportError(f"{n.where()} does not join the two sides of one Switch: its inputs "
                                f"{', '.join(f'{s}:{k}' for s, k in ins)} run under "
                                f"{'; '.join(' / '.join(map(_show, c)) or 'the graph' for c in chains)}")
        self.chain[n.name] = self.tchain[(n.name, 0)] = self.tchain[(n.name, 1)] = prefix
        n.extra["sides"] = sides
        n.extra["pred"] = next(iter(preds))


def _attr_s(n: TfNode, key: str) -> str:
    a = n.attr.get(key)
    return a.s.decode() if a is not None else ""


def _show(step: Step) -> str:
    if step[0] == "loop":
        return f"while loop {step[1]!r}"
    return f"{'true' if step[2] else 'false'} side of the Switch on {step[1][0]!r}"
