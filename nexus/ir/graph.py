"""The Graph: one function, its blocks and nodes, and the editing operations on them.

Every edit goes through these methods so that use-def lists, block membership and the
analysis cache stay right.  ``version`` counts mutations; cached analyses compare it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

from nexus.ir.node import Block, Node, SourceLoc
from nexus.ir.opdef import Inferred, OpDef, OpTypeError, get_op
from nexus.ir.types import TensorType, TupleType, Type, X


class GraphError(ValueError):
    """An edit that would break the graph's structure."""


def known_value(node: Node) -> Any:
    """The value of a node known at build time (a Constant's array), else None."""
    if node.op.name == "Constant":
        return node.attrs["value"]
    return None


class Graph:
    """One function: a start block holding Start (whose Projs are the arguments) and an
    end block holding End, entered by the Return nodes."""

    def __init__(
        self,
        name: str = "main",
        arg_types: Sequence[Type] = (),
        arg_names: Sequence[str | None] | None = None,
    ):
        self.name = name
        self.blocks: dict[Block, None] = {}
        self.version = 0
        self._cache: dict[str, tuple[int, Any]] = {}
        self.start_block = self.new_block("entry")
        start_type = TupleType(tuple(arg_types))
        self.start = self.add("Start", [], self.start_block, type=start_type)
        names = list(arg_names) if arg_names is not None else [None] * len(arg_types)
        if len(names) != len(arg_types):
            raise GraphError("arg_names and arg_types differ in length")
        # Each Proj's type is the argument's (what the Proj rule would compute from Start).
        self.args: list[Node] = [
            self.add("Proj", [self.start], self.start_block, {"num": i}, type=t, name=names[i])
            for i, t in enumerate(start_type.elems)
        ]
        self.end_block = self.new_block("exit")
        self.end = self.add("End", [], self.end_block)

    def __repr__(self) -> str:
        return f"<Graph @{self.name}: {len(self.blocks)} blocks, {self.num_nodes()} nodes>"

    # --- queries -----------------------------------------------------------------------
    def nodes(self) -> Iterator[Node]:
        """Every node, blocks excluded, block by block."""
        for block in self.blocks:
            yield from block.members

    def num_nodes(self) -> int:
        return sum(len(b.members) for b in self.blocks)

    @property
    def returns(self) -> list[Node]:
        return list(self.end_block.inputs)

    @property
    def arg_types(self) -> tuple[Type, ...]:
        assert isinstance(self.start.type, TupleType)
        return self.start.type.elems

    @property
    def result_types(self) -> tuple[Type, ...]:
        rets = self.returns
        if not rets:
            return ()
        return tuple(v.type for v in rets[0].inputs)

    def touch(self) -> None:
        """Record a mutation: cached analyses become stale."""
        self.version += 1

    def cached(self, key: str, compute: Any) -> Any:
        """An analysis result cached until the next mutation."""
        hit = self._cache.get(key)
        if hit is not None and hit[0] == self.version:
            return hit[1]
        value = compute(self)
        self._cache[key] = (self.version, value)
        return value

    # --- creating ----------------------------------------------------------------------
    def new_block(self, name: str | None = None, preds: Iterable[Node] = ()) -> Block:
        block = Block(get_op("Block"), X, name)
        block.graph = self
        for p in preds:
            block.append_input(p)
        self.blocks[block] = None
        self.touch()
        return block

    def add(
        self,
        op: str | OpDef,
        inputs: Sequence[Node],
        block: Block,
        attrs: Mapping[str, Any] | None = None,
        *,
        type: Type | None = None,
        name: str | None = None,
        loc: SourceLoc | None = None,
        deps: Sequence[Node] = (),
    ) -> Node:
        """Create a node in ``block``.  Without ``type`` the op's type rule computes it."""
        # Hot path of every frontend (the W7 build adds ~25 nodes): plain loops, no
        # generator chains, and the attribute check skipped for ops without attributes
        # called without any (complete_attrs would return {} for them).
        opdef = get_op(op) if isinstance(op, str) else op
        if opdef.name == "Block":
            raise GraphError("create blocks with Graph.new_block")
        if block.graph is not self:
            raise GraphError(f"block ^{block.name} belongs to another graph")
        for v in inputs:
            if v.graph is not self:
                raise GraphError(f"{opdef.name}: input {v!r} belongs to another graph")
        for v in deps:
            if v.graph is not self:
                raise GraphError(f"{opdef.name}: input {v!r} belongs to another graph")
        if not opdef.arity_ok(len(inputs)):
            raise OpTypeError(f"{opdef.name} takes {opdef.arity_text()} inputs, got {len(inputs)}")
        full_attrs = opdef.complete_attrs(attrs or {}) if attrs or opdef.attrs else {}
        if type is None:
            type = infer_type(opdef, [v.type for v in inputs], full_attrs,
                              [v.attrs["value"] if v.op.name == "Constant" else None for v in inputs])
        node = Node(opdef, inputs, full_attrs, type, name, loc)  # type: ignore[arg-type]
        node.graph = self
        for d in deps:
            node.add_dep(d)
        node.block = block
        block.members[node] = None
        self.version += 1  # touch()
        return node

    # --- editing -----------------------------------------------------------------------
    def erase(self, node: Node) -> None:
        """Remove a node that nothing uses any more (blocks: empty ones only)."""
        if node.graph is not self:
            raise GraphError(f"{node!r} is not in graph @{self.name}")
        if node.has_uses():
            users = ", ".join(repr(u) for u in node.users[:3])
            raise GraphError(f"cannot erase {node!r}: still used by {users}")
        if isinstance(node, Block):
            if node.members:
                raise GraphError(f"cannot erase block ^{node.name}: it still has {len(node.members)} nodes")
            del self.blocks[node]
        elif node.block is not None:
            del node.block.members[node]
        node.drop_inputs()
        node.set_deps([])
        node.block = None
        node.graph = None
        self.touch()

    def erase_dead(self, nodes: Iterable[Node]) -> None:
        """Erase a set of nodes that only use each other (e.g. an unreachable region).
        Refused, with nothing changed, when a node outside the set still uses one."""
        doomed = list(dict.fromkeys(nodes))
        inside = set(doomed)
        for n in doomed:
            outside = [u for u in n.users if u not in inside]
            if outside:
                raise GraphError(f"cannot erase {n!r}: still used by {outside[0]!r}, which is not erased with it")
        for n in doomed:
            n.drop_inputs()
            n.set_deps([])
        for n in doomed:
            if not isinstance(n, Block):
                self.erase(n)
        for n in doomed:
            if isinstance(n, Block):
                self.erase(n)

    def replace(self, old: Node, new: Node) -> None:
        """Replace all uses of ``old`` by ``new`` and erase ``old``."""
        old.replace_all_uses_with(new)
        self.erase(old)
        self.touch()

    def move(self, node: Node, block: Block) -> None:
        """Pin ``node`` to another block (the caller keeps dominance right)."""
        if isinstance(node, Block):
            raise GraphError("a block cannot be moved into a block")
        assert node.block is not None
        del node.block.members[node]
        node.block = block
        block.members[node] = None
        self.touch()

    def set_input(self, node: Node, i: int, value: Node) -> None:
        node.set_input(i, value)
        self.touch()

    def split_block(self, node: Node, name: str | None = None) -> Block:
        """Move ``node`` and every member after it in ``node.block`` to a new block, which
        the old block reaches by a Jmp.  Phis stay; successor Phis keep working because the
        terminator (and with it the control edges) moves to the new block.  Members that
        use a moved node move too, so that every use stays dominated."""
        old = node.block
        assert old is not None
        if node.op.kind == "phi":
            raise GraphError("cannot split a block at a Phi")
        if node.op.name == "Start":
            raise GraphError("cannot move Start out of the start block")
        members = list(old.members)
        tail = {n: None for n in members[members.index(node):] if n.op.kind != "phi"}
        term = old.terminator
        if term is not None:
            tail[term] = None
        work = list(tail)
        while work:  # close over users in this block (members need not be in dataflow order)
            for user in work.pop().users:
                if user.block is old and user not in tail and user.op.kind != "phi" and not isinstance(user, Block):
                    tail[user] = None
                    work.append(user)
        if any(n.op.name == "Start" for n in tail):
            raise GraphError("cannot move Start out of the start block")
        new = self.new_block(name)
        for n in members:  # keep the members' order
            if n in tail:
                self.move(n, new)
        jmp = self.add("Jmp", [], old)
        new.append_input(jmp)
        return new

    def clone(self, name: str | None = None) -> tuple[Graph, dict[Node, Node]]:
        """A deep copy of the graph and the map from old nodes (blocks too) to new ones."""
        new = Graph.__new__(Graph)
        new.name = name or self.name
        new.blocks = {}
        new.version = 0
        new._cache = {}
        mapping: dict[Node, Node] = {}
        for b in self.blocks:
            nb = Block(b.op, b.type, b.name)
            nb.graph = new
            new.blocks[nb] = None
            mapping[b] = nb
        for b in self.blocks:
            for n in b.members:
                c = Node(n.op, [], n.attrs, n.type, n.name, n.loc)
                c.graph = new
                c.block = mapping[b]  # type: ignore[assignment]
                mapping[b].members[c] = None  # type: ignore[attr-defined]
                mapping[n] = c
        for old_node, c in mapping.items():
            for v in old_node.inputs:
                c.append_input(mapping[v])
            for d in old_node.deps:
                c.add_dep(mapping[d])
        new.start_block = mapping[self.start_block]  # type: ignore[assignment]
        new.end_block = mapping[self.end_block]  # type: ignore[assignment]
        new.start = mapping[self.start]
        new.end = mapping[self.end]
        new.args = [mapping[a] for a in self.args]
        return new, mapping

    def callees(self) -> list[Graph]:
        """Graphs called from this one, transitively, callees before callers."""
        seen: dict[Graph, None] = {}

        def visit(g: Graph) -> None:
            for n in g.nodes():
                if n.op.name == "Call":
                    callee = n.attrs["callee"]
                    if callee not in seen and callee is not self:
                        visit(callee)
                        seen[callee] = None

        visit(self)
        return list(seen)

    def compile(self, backend: str = "python", **options: Any) -> Any:
        """This graph compiled on ``backend`` (``nx.compile``): an executable to call."""
        if not _COMPILER:
            raise GraphError("no backend is loaded: `import nexus` loads them")
        return _COMPILER[0](self, backend, **options)

    def __call__(self, *args: Any, **options: Any) -> Any:
        """Run on the default backend: ``g(x, max_iterations=100)`` is ``nx.run(g, x, ...)``."""
        if not _RUNNER:
            raise GraphError("no backend is loaded: `import nexus` loads them")
        return _RUNNER[0](self, *args, **options)


# How graphs run is decided above the IR: nexus.backends installs its ``compile`` and
# ``run`` here when it loads (the package facade imports it), so the IR imports no backend.
_COMPILER: list[Callable[..., Any]] = []
_RUNNER: list[Callable[..., Any]] = []


def install_backends(compile: Callable[..., Any], run: Callable[..., Any]) -> None:
    _COMPILER[:] = [compile]
    _RUNNER[:] = [run]


def infer_type(opdef: OpDef, in_types: Sequence[Type], attrs: Mapping[str, Any], values: Sequence[Any]) -> Type:
    out = opdef.rule_output(in_types, attrs, values)
    return out.type if isinstance(out, Inferred) else out


def is_terminator(node: Node) -> bool:
    return node.op.terminator


def tensor_type(t: Type, what: str = "value") -> TensorType:
    if not isinstance(t, TensorType):
        raise OpTypeError(f"{what} must be a tensor, got {t}")
    return t
