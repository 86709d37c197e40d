"""The verifier: structure first, then SSA dominance, then each op's type rule.

Each violation is one message naming the node, its block and the rule broken, followed
by the node's line in the text form.  ``verify`` raises :class:`VerifyError` with all of
them; ``problems`` returns them as a list.
"""

from __future__ import annotations

from nexus.ir import cfg
from nexus.ir.analysis import block_order, dominators
from nexus.ir.graph import Graph, infer_type, known_value
from nexus.ir.node import Block, Node
from nexus.ir.opdef import OpTypeError
from nexus.ir.printer import _name_graph, _node_line
from nexus.ir.types import TupleType, X, compatible


class VerifyError(ValueError):
    """A graph breaks an invariant of the IR; ``problems`` lists every violation."""

    def __init__(self, graph_name: str, problems: list[str]):
        self.problems = problems
        shown = "\n".join(f"- {p}" for p in problems[:20])
        more = f"\n... and {len(problems) - 20} more" if len(problems) > 20 else ""
        super().__init__(f"graph @{graph_name} is invalid ({len(problems)} problems):\n{shown}{more}")


def verify(g: Graph) -> Graph:
    """Raise VerifyError unless ``g`` is valid; returns ``g`` for chaining."""
    found = problems(g)
    if found:
        raise VerifyError(g.name, found)
    return g


def problems(g: Graph) -> list[str]:
    checker = _Checker(g)
    checker.structure()
    if not checker.errors:  # dominance and types presume a sound structure
        checker.dominance()
        checker.types()
    return checker.errors


class _Checker:
    def __init__(self, g: Graph):
        self.g = g
        self.errors: list[str] = []
        blocks = block_order(g)
        self.values, self.labels = _name_graph(g, blocks)

    def where(self, n: Node) -> str:
        if isinstance(n, Block):
            return f"block ^{self.labels.names.get(n, n.name)}"
        name = self.values.names.get(n, n.name or "?")
        label = self.labels.names.get(n.block, "?") if n.block is not None else "none"
        return f"{n.op.name} %{name} in ^{label}"

    def fail(self, n: Node, rule: str) -> None:
        msg = f"{self.where(n)}: {rule}"
        if not isinstance(n, Block) and n in self.values.names:
            try:
                line = _node_line(n, self.values, self.labels, None, self.g.name, False)
                msg += f"\n    {line}"
            except Exception:  # noqa: BLE001  (printing an invalid node must not hide the error)
                pass
        if n.loc is not None:
            msg += f"\n    created at {n.loc}"
        self.errors.append(msg)

    # --- structure ---------------------------------------------------------------------
    def structure(self) -> None:
        g = self.g
        if g.start.block is not g.start_block or g.start_block not in g.blocks:
            self.errors.append(f"graph @{g.name}: Start is not in the start block")
        if g.end.block is not g.end_block or g.end_block not in g.blocks:
            self.errors.append(f"graph @{g.name}: End is not in the end block")
        if g.start_block.inputs:
            self.fail(g.start_block, "the start block must have no predecessors")
        for b in g.blocks:
            self.block(b)
            for n in b.members:
                self.node(n, b)

    def block(self, b: Block) -> None:
        g = self.g
        if b.graph is not g:
            self.fail(b, "belongs to another graph")
        for i, p in enumerate(b.inputs):
            if p.graph is not g or p.block is None:
                self.fail(b, f"predecessor {i} is a node that was erased or belongs to another graph")
            elif p.type != X:
                self.fail(b, f"predecessor {i} ({self.where(p)}) is not a control value (X)")
            elif not cfg.is_control_value(p):
                self.fail(b, f"predecessor {i} ({self.where(p)}) is no exit; blocks are entered by a Jmp, "
                             "a Proj of a Cond or (the end block) a Return")
            elif b is g.end_block and p.op.name != "Return":
                self.fail(b, f"the end block is entered by {p.op.name}; only Return may enter it")
            elif b is not g.end_block and p.op.name == "Return":
                self.fail(b, "Return must enter the end block")
        terms = [n for n in b.members if n.op.terminator]
        if b is g.end_block:
            others = [n for n in b.members if n.op.name != "End"]
            for n in others:
                self.fail(n, "the end block holds only End (no data nodes)")
            return
        if not terms:
            self.fail(b, "has no terminator (Jmp, Cond or Return)")
        elif len(terms) > 1:
            self.fail(b, f"has {len(terms)} terminators ({', '.join(t.op.name for t in terms)}); exactly one allowed")

    def node(self, n: Node, b: Block) -> None:
        g = self.g
        if n.graph is not g or n.block is not b:
            self.fail(n, "its block membership is inconsistent")
        for i, v in enumerate(n.inputs):
            if v.graph is not g or v.block is None:
                self.fail(n, f"input {i} is a node that was erased or belongs to another graph")
                return
        for v in n.deps:
            if v.graph is not g or v.block is None:
                self.fail(n, "an ordering dep is a node that was erased or belongs to another graph")
                return
        if not n.op.arity_ok(n.num_inputs):
            self.fail(n, f"{n.op.name} takes {n.op.arity_text()} inputs, has {n.num_inputs}")
            return
        try:
            n.op.complete_attrs(n.attrs)
        except OpTypeError as e:
            self.fail(n, str(e))
        for i, v in enumerate(n.inputs):
            if v.type == X:
                self.fail(n, f"input {i} is a control value ({v.op.name}); control values only feed blocks")
            elif isinstance(v.type, TupleType) and n.op.name != "Proj":
                self.fail(n, f"input {i} is a tuple ({v.op.name}); read its parts with Proj")
        name = n.op.name
        if name == "Start" and b is not g.start_block:
            self.fail(n, "Start must be in the start block")
        if name == "Start" and not isinstance(n.type, TupleType):
            self.fail(n, f"Start must have a tuple type (the argument types), has {n.type}")
        if name == "End" and b is not g.end_block:
            self.fail(n, "End must be in the end block")
        if name == "Phi":
            if b is g.start_block:
                self.fail(n, "the start block cannot hold a Phi")
            elif n.num_inputs != b.num_inputs:
                self.fail(n, f"Phi has {n.num_inputs} inputs but its block has {b.num_inputs} predecessors")
        if n.type == X and name != "End":
            self.exits(n, b)
        if cfg.is_exit(n) and n.input(0).block is not b:
            self.fail(n, f"a Proj of a {n.input(0).op.name} must be in the {n.input(0).op.name}'s block")
        if n.op.forking:
            nums = sorted((u.attrs.get("num") for u, i in n.uses if i >= 0 and u.op.name == "Proj"), key=str)
            if nums != list(range(len(n.op.results))):
                named = "num " + ", ".join(f"{i} = {r}" for i, r in enumerate(n.op.results))
                self.fail(n, f"a {name} needs exactly one Proj per exit ({named}); has {nums}")

    def exits(self, n: Node, b: Block) -> None:
        targets = cfg.entries(n)
        if len(targets) != n.num_uses:
            return  # reported as "control value used as data" at the user
        if not targets:
            self.fail(n, "this control value enters no block (a dangling exit)")
        elif len(targets) > 1:
            self.fail(n, f"this control value enters {len(targets)} block inputs; exactly one allowed")

    # --- SSA -----------------------------------------------------------------------------
    def dominance(self) -> None:
        dom = dominators(self.g)
        for b in self.g.blocks:
            if not dom.reachable(b):
                continue
            self.block_cycles(b)
            for n in b.members:
                for i, v in enumerate(n.inputs):
                    self.dominated(dom, n, i, v)
                for v in n.deps:
                    self.dominated(dom, n, None, v)

    def dominated(self, dom, n: Node, i: int | None, v: Node) -> None:  # type: ignore[no-untyped-def]
        b, vb = n.block, v.block
        assert b is not None and vb is not None
        what = f"input {i}" if i is not None else "ordering dep"
        if n.op.name == "Phi" and i is not None:
            pred = b.input(i).block
            if pred is not None and dom.reachable(pred) and not dom.dominates(vb, pred):
                self.fail(n, f"{what} ({self.where(v)}) does not dominate predecessor {i} "
                             f"(^{self.labels.names.get(pred, pred.name)})")
            return
        if vb is not b and not dom.dominates(vb, b):
            self.fail(n, f"{what} ({self.where(v)}) is used where its definition does not dominate")

    def block_cycles(self, b: Block) -> None:
        # Within a block, data (non-Phi) and dep edges must be acyclic.
        try:
            cfg.kahn_groups([n for n in b.members if n.op.kind != "phi"], b)
        except cfg.CycleError as e:
            self.fail(e.stuck[0], "is part of a cycle of data edges inside its block (only Phis may close loops)")

    # --- types ---------------------------------------------------------------------------
    def types(self) -> None:
        rets = self.g.returns
        if rets:
            first = rets[0]
            for r in rets[1:]:
                if r.num_inputs != first.num_inputs:
                    self.fail(r, f"returns {r.num_inputs} values; another Return returns {first.num_inputs}")
                elif not all(compatible(a.type, b.type) for a, b in zip(r.inputs, first.inputs)):
                    self.fail(r, "returns types that differ from another Return's")
        for n in self.g.nodes():
            if n.op.type_rule is None or n.op.name in ("Start", "Block"):
                continue
            try:
                expected = infer_type(n.op, [v.type for v in n.inputs], n.attrs, [known_value(v) for v in n.inputs])
            except OpTypeError as e:
                self.fail(n, f"type rule: {e}")
                continue
            if not compatible(expected, n.type):
                self.fail(n, f"has type {n.type} but its op's rule gives {expected}")
