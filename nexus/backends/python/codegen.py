"""Generates one Python function per graph (as torch.fx does) from its :class:`Plan`.

Values live in local variables (CPython's fast-locals array: the slot array of seed
000), constants are bound once as keyword-only defaults, and blocks become code:

* a block entered by exactly one control edge is emitted inline at that edge (a Cond
  becomes ``if c: ... else: ...``), so straight-line code and if/else trees cost nothing;
* every other block (loop headers, joins) is a *state* of a small state machine,
  ``while True: if st == k: ...``;
* the Phi copies of an edge are emitted where the edge is taken, as a parallel copy
  (sequentialised, with a tuple assignment only for cycles such as ``a, b = b, a``);
* a tensor value is deleted (``del v``) right after its last use, and at an edge when it
  is not live in the block entered, so a loop's memory does not grow with its trip count.

Every generated line that runs a node is recorded, so an exception's traceback line
names the node (:meth:`Generated.node_at`).

A *recording* variant (tape-mode autodiff) takes a second parameter ``_tape``, a callable
given ``(k, value, *inputs)`` after the k-th of the recorded nodes runs; it runs every node
in this thread and never updates a value in place (the tape keeps the values), and a value
that is the same object as one of its inputs (``x if c else y``, a no-op cast) is replaced
by a fresh one (``_fresh``), so that a value's identity names one node's execution.

A *resumable* recording variant (checkpointed tape mode) takes two more, ``_budget`` and
``_from``: it enters at most ``_budget`` states of the state machine, then returns a
:class:`Paused` (the state about to be entered and the variables bound then); called with
``_from=(state, variables)`` it binds them and starts at that state.  It is the same code
with a counter at the top of the state loop, so the interpreter's semantics (Phi copies,
terminators, the iteration limit) exist once.
"""

from __future__ import annotations

import functools
import itertools
import linecache
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from nexus.backends.base import MissingLoweringError, lowering_table
from nexus.backends.python.cost import is_heavy
from nexus.backends.python.devices import constant_on, kernel_for
from nexus.backends.python.lowering import BACKEND, PLANNED
from nexus.backends.python.plan import BlockPlan, Edge, Plan, value_inputs
from nexus.backends.python.pool import blas_threads
from nexus.ir.cfg import role
from nexus.ir.kernels import kernel_attrs
from nexus.ir.node import Block, Node
from nexus.ir.types import TensorType, numpy_dtype
from nexus.ops.index import setitem_owned
from nexus.ops.shape import append_owned

_RULES = lowering_table(BACKEND).rules
# Kernels that may update their first input in place, where it dies at the node and the
# reference counts prove nothing else sees it (the kernel copies otherwise).
_OWNED = {"SetItem": setitem_owned, "Append": append_owned}
MEMO_SIZE = 64  # entries (distinct dims) a shape memo keeps before it starts again
MEMO_ELEMENTS = 64  # the largest integer tensor a shape memo holds
MEMO_MIN = 8  # fewer memoisable nodes than this are run as they are
MAX_INLINE_DEPTH = 40  # CPython refuses more than 100 indentation levels
_GOTO = "@goto "  # placeholder for a state transition, resolved when the states are known
_serial = itertools.count()
_PADS = tuple("    " * i for i in range(MAX_INLINE_DEPTH + 8))  # indentation strings

Line = tuple[int, str, "Node | None"]  # (relative indent, text, node run by the line)


@dataclass
class Generated:
    """A compiled graph: ``fn(limit, *args)``, its source, the line -> node map and the
    variable name -> node map."""

    fn: Callable[..., Any]
    source: str
    filename: str
    line_nodes: dict[int, Node] = field(default_factory=dict)
    variables: dict[str, Node] = field(default_factory=dict)

    def node_at(self, lineno: int) -> Node | None:
        return self.line_nodes.get(lineno)


@dataclass
class _Memo:
    """A block's steps reordered for its shape memo: steps[first:end] are the memoised run,
    ``name`` its dictionary, ``key`` the expression of the dims it is looked up by,
    ``exports`` the run's values read after it."""

    steps: list[list[Node]]
    first: int
    end: int
    name: str
    key: str
    exports: list[Node]


@dataclass
class Paused:
    """What a resumable variant returns when its budget is spent: the state it was about
    to enter and its variables then (name -> value)."""

    state: int
    variables: dict[str, Any]


class _Gen:
    def __init__(self, plan: Plan, count: bool, parallel: str, hooks: dict[str, Any],
                 record: dict[Node, int] | None = None, resumable: bool = False):
        self.plan = plan
        self.count = count
        self.tape = record is not None  # a recording variant
        self.resumable = resumable
        self.record = record or {}
        self.parallel = parallel  # "on", "off" or "auto"
        self.blas_parallel: bool | None = None  # asked on first need (threadpoolctl is slow)
        self.pool_off = False
        self.ns: dict[str, Any] = dict(hooks)
        self.names: dict[Node, str] = {}
        self.states: dict[Block, int] = {}
        self.pending: list[Block] = []
        self.inplace: set[Node] = set()  # nodes that may update their first input in place (_OWNED)
        self.memos: list[str] = []  # the shape memos' dictionaries (see shape_memo)
        self.ns.update({f"_{fn.__name__}": fn for fn in _OWNED.values()})
        self.ns["_fresh"] = fresh
        self.ns["_Paused"] = Paused
        self.ns["_i64"] = np.int64  # lowering rules that must give an i64 scalar (ArgMax)
        for i, a in enumerate(plan.args):
            self.names[a] = f"a{i}"
        for i, c in enumerate(plan.consts):
            self.names[c] = f"k{i}"
            self.ns[f"_K{i}"] = _const_value(c)
            if c.attrs.get("device"):  # a constant materialised on its device once
                self.ns[f"_K{i}"] = constant_on(self.ns[f"_K{i}"], c.attrs["device"])
        start = plan.graph.start_block
        self.prologue = plan.in_edges.get(start, 0) == 0

    # --- names ---------------------------------------------------------------------
    def var(self, n: Node) -> str:
        name = self.names.get(n)
        if name is None:
            name = self.names[n] = f"v{len(self.names)}"
        return name

    def kernel(self, n: Node, pooled: bool = False) -> str:
        """The global name of a callable that runs ``n`` (kernel with attrs bound)."""
        key = f"_f{self.var(n)[1:]}" if not pooled else f"_F{self.var(n)[1:]}"
        if key in self.ns:
            return key
        if n.op.name == "Call":
            run_call = self.ns["_call"]
            self.ns[key] = functools.partial(run_call, n.attrs["callee"])
        elif n.attrs.get("device") and (placed := kernel_for(n)) is not None:
            self.ns[key] = placed  # a node placed on a torch device, or a Memcpy
        elif n.op.kernel is None:
            raise MissingLoweringError(BACKEND, n)
        elif (planned := PLANNED.get(n.op.name)) is not None and (fn := planned(n)) is not None:
            self.ns[key] = fn  # a kernel planned for this node (its weights are constants)
        else:
            attrs = kernel_attrs(n)
            self.ns[key] = functools.partial(n.op.kernel, **attrs) if attrs else n.op.kernel
        return key

    def state(self, b: Block) -> int:
        if b not in self.states:
            self.states[b] = len(self.states)
            self.pending.append(b)
        return self.states[b]

    def freeable(self, v: Node) -> bool:
        """Scalars are not worth a ``del``: a loop overwrites them on every iteration."""
        t = v.type
        return v.op.name != "Constant" and not (isinstance(t, TensorType) and t.shape == ())  # classify: const

    # --- blocks --------------------------------------------------------------------
    def block(self, b: Block, ind: int, out: list[Line]) -> None:
        bp = self.plan.blocks[b]
        if self.count:
            out.append((ind, f"_n += 1\nif _n > _lim: raise _too_many(_lim, {b.name!r})", None))
        steps = self.steps(bp)
        memo = self.shape_memo(bp, steps)
        if memo is not None:
            steps = memo.steps
        last: dict[Node, int] = {}
        for s, nodes in enumerate(steps):
            for n in nodes:
                for v in value_inputs(n):
                    last[v] = s
                last.setdefault(n, s)
        if bp.term is not None:  # the terminator reads last; nothing is freed after it
            for v in value_inputs(bp.term):
                last[v] = len(steps)
        for s, nodes in enumerate(steps):
            n = nodes[0]
            # A subscript assignment or a list append whose old value dies here may write into
            # it (the kernel still copies when another variable, view or the caller holds it).
            if len(nodes) == 1 and n.op.name in _OWNED and last.get(n.input(0)) == s and not self.tape \
                    and n.input(0) not in bp.live_out and n.input(0) not in n.inputs[1:]:
                self.inplace.add(n)
        dead0 = [p for p in bp.phis if p not in last and p not in bp.live_out and self.freeable(p)]
        if dead0:
            out.append((ind, "del " + ", ".join(self.var(p) for p in dead0), None))
        dead_at: dict[int, list[Node]] = {}  # step -> values whose last use it is
        for v, s2 in last.items():
            if v not in bp.live_out and self.freeable(v):
                dead_at.setdefault(s2, []).append(v)
        for s, nodes in enumerate(steps):
            inner = ind
            if memo is not None and memo.first <= s < memo.end:
                inner = ind + 1
                if s == memo.first:
                    out.append((ind, f"_m = {memo.name}.get({memo.key})\nif _m is None:", None))
            self.step(nodes, inner, out)
            dead = dead_at.get(s)
            if dead:
                out.append((inner, "del " + ", ".join(sorted(self.var(v) for v in dead)), None))
            if memo is not None and s == memo.end - 1:
                names = "".join(self.var(v) + ", " for v in memo.exports)
                out.append((ind + 1, f"if len({memo.name}) >= {MEMO_SIZE}: {memo.name}.clear()\n"
                            f"{memo.name}[{memo.key}] = ({names})", None))
                out.append((ind, "else:", None))
                out.append((ind + 1, f"{names} = _m", None))
        self.terminator(bp, ind, out)

    def shape_memo(self, bp: BlockPlan, steps: list[list[Node]]) -> _Memo | None:
        """The shape arithmetic of the entry block, computed once per value of the argument
        dims it reads: the nodes (pure, small integer results) whose inputs are constants,
        each other and ``DimSize`` of arguments.  A graph imported with a symbolic batch
        computes every Reshape's target shape from the batch size at run time (BART: 200 of
        its 500 nodes, ~1.5 us each); the generated code runs them only for a batch size
        not seen before (a dictionary of at most MEMO_SIZE entries, looked up by the dims)
        and reads their values from it otherwise.  None where there is no such run of nodes
        worth it, in the recording variants (each node's execution is recorded) and in
        blocks other than the entry block."""
        if self.tape or bp.block is not self.plan.graph.start_block or not self.prologue:
            return None
        single = [nodes[0] for nodes in steps if len(nodes) == 1]
        sources = [n for n in single if n.op.shape_only and n.op.name == "DimSize" and role(n.input(0)) == "argument"]
        if not sources:
            return None
        used_by_term = set(value_inputs(bp.term)) if bp.term is not None else set()
        chosen: set[Node] = set()
        for n in single:  # steps are in dependence order: one pass closes the set
            t = n.type
            if n in sources or n in used_by_term or any(u.op.name == "Phi" for u in n.users) or not n.op.pure \
                    or n.op.kernel is None or n.op.name == "Call" or (n.attrs and n.attrs.get("device")) \
                    or not isinstance(t, TensorType) or t.shape is None \
                    or not all(isinstance(d, int) for d in t.shape) or math.prod(t.shape) > MEMO_ELEMENTS \
                    or numpy_dtype(t.dtype).kind not in "iub":
                continue
            if all(v in chosen or v in sources for v in value_inputs(n)) and value_inputs(n):
                chosen.add(n)
        if len(chosen) < MEMO_MIN:
            return None
        index = {nodes[0]: i for i, nodes in enumerate(steps) if len(nodes) == 1}
        after = max(index[n] for n in sources) + 1  # the memo's run starts after the last source
        before = [st for st in steps[:after] if st[0] not in chosen or len(st) > 1]
        if any(v in chosen for st in before for n in st for v in n.inputs):
            return None  # a node before the last source reads the arithmetic: left as it is
        run = [st for st in steps if len(st) == 1 and st[0] in chosen]
        rest = [st for st in steps[after:] if st[0] not in chosen or len(st) > 1]
        users = {v for st in rest for n in st for v in n.inputs} | set(bp.live_out)
        exports = sorted((n for n in chosen if n in users), key=lambda n: index[n])
        if not exports:
            return None
        name = f"_memo{len(self.memos)}"
        self.memos.append(name)
        self.ns[name] = {}
        key = ", ".join(self.var(n) for n in sources) + ("," if len(sources) == 1 else "")
        return _Memo(before + run + rest, len(before), len(before) + len(run), name, f"({key})", exports)

    def steps(self, bp: BlockPlan) -> list[list[Node]]:
        """Statements in order: one node each, or a whole group run on the pool."""
        out: list[list[Node]] = []
        for grp in bp.groups:
            if len(self.pooled(grp)) >= 2:
                out.append(grp)
            else:
                out.extend([n] for n in grp)
        return out

    def pooled(self, grp: list[Node]) -> list[Node]:
        if self.parallel == "off" or len(grp) < 2:
            return []
        ok = [n for n in grp if n.op.pure and n.op.kernel is not None and n.op.name != "Call"]
        if self.parallel == "on":
            return ok
        if self.blas_parallel is None:
            # When a multithreaded BLAS already runs this graph's products on every core,
            # our threads only fight its (spinning) workers: W6 with default BLAS threads
            # ran 0.81x of sequential when its elementwise nodes went to the pool.
            blas_graph = any(n.op.multithreaded for b in self.plan.blocks for n in b.members)
            self.blas_parallel = blas_graph and blas_threads() > 1
            self.pool_off = self.blas_parallel
        if self.pool_off:
            return []
        return [n for n in ok if is_heavy(n, self.blas_parallel)]

    def step(self, nodes: list[Node], ind: int, out: list[Line]) -> None:
        """A group: all pooled nodes but the first are submitted; this thread runs the
        first and the light ones, then joins the rest, running any that no worker has
        started yet itself (on a busy machine a worker may take milliseconds to wake)."""
        pooled = self.pooled(nodes) if len(nodes) > 1 else []
        calls = {n: ", ".join([self.kernel(n, pooled=True), *(self.var(v) for v in n.inputs)]) for n in pooled}
        for n in pooled[1:]:
            out.append((ind, f"_p{self.var(n)} = _submit({calls[n]})  # {_label(n)}", n))
        for n in nodes:
            if n not in pooled[1:]:
                out.append((ind, self.inline(n), n))
                if n in self.record:
                    out.append((ind, self.recording(n), n))
        # Join the last submitted first: the workers take the queue from the front, so this
        # thread steals from the back and the two meet in the middle (W6: 1.26x -> see bench).
        for n in reversed(pooled[1:]):
            v = self.var(n)
            out.append((ind, f"{v} = _join(_p{v}, {calls[n]}); del _p{v}", n))

    def inline(self, n: Node) -> str:
        args = [self.var(v) for v in n.inputs]
        if n in self.inplace:
            kws = "".join(f", {k}={v!r}" for k, v in kernel_attrs(n).items())
            return f"{self.var(n)} = _{_OWNED[n.op.name].__name__}({', '.join(args)}{kws})  # {_label(n)}"
        rule = _RULES.get(n.op.name) if not _placed(n) else None
        expr = rule(n, args) if rule is not None else None
        if expr is None:
            if n.op.name == "Call":
                expr = f"{self.kernel(n)}(_lim, _par, {', '.join(args)})"
            else:
                expr = f"{self.kernel(n)}({', '.join(args)})"
        return f"{self.var(n)} = {expr}  # {_label(n)}"

    def recording(self, n: Node) -> str:
        """The lines that hand a recorded node's execution to ``_tape``."""
        v = self.var(n)
        args = [self.var(x) for x in n.inputs]
        same = " or ".join(f"{v} is {a}" for a in dict.fromkeys(args))
        fresh = f"if {same}: {v} = _fresh({v})\n" if same else ""
        return f"{fresh}_tape(({', '.join([str(self.record[n]), v, *args])}))"

    def terminator(self, bp: BlockPlan, ind: int, out: list[Line]) -> None:
        term = bp.term
        if term is None:
            out.append((ind, f"raise _error({'block ^' + str(bp.block.name) + ' has no terminator'!r})", None))
        elif term.op.name == "Return":
            vals = [self.var(v) for v in term.inputs]
            text = vals[0] if len(vals) == 1 else "(" + ", ".join(vals) + ")"
            out.append((ind, f"return {text}", term))
        elif term.op.name == "Jmp":
            self.edge(bp, bp.edges[0], ind, out)
        else:
            out.append((ind, f"if {self.var(term.input(0))}:", term))
            self.edge(bp, bp.edges[1], ind + 1, out)
            out.append((ind, "else:", None))
            self.edge(bp, bp.edges[0], ind + 1, out)

    def edge(self, bp: BlockPlan, e: Edge, ind: int, out: list[Line]) -> None:
        if e.target is None:
            out.append((ind, f"raise _error({e.problem!r})", bp.term))
            return
        target = self.plan.blocks[e.target]
        pairs = [(self.var(p), self.var(p.input(e.index)), p) for p in target.phis]
        for text, node in _parallel_copy(pairs):
            out.append((ind, text, node))
        dead = [v for v in bp.live_out if v not in target.live_in and v not in target.phis and self.freeable(v)]
        if dead:
            out.append((ind, "del " + ", ".join(sorted(self.var(v) for v in dead)), None))
        inline = self.plan.in_edges.get(e.target) == 1 and e.target is not self.plan.graph.start_block
        if inline and ind < MAX_INLINE_DEPTH and e.target not in self.states:
            self.block(e.target, ind, out)
        else:
            k = self.state(e.target)
            out.append((ind, f"{_GOTO}{k}", None))

    # --- the function --------------------------------------------------------------
    def function(self) -> tuple[str, dict[int, Node]]:
        g = self.plan.graph
        body: list[Line] = []
        if self.count:
            body.append((1, "_n = 0", None))
        start = 1
        if self.resumable:  # a fresh run, or a run resumed at a state (bound below)
            body.append((1, "if _from is None:", None))
            start = 2
        if self.prologue:
            self.block(g.start_block, start, body)
        else:
            self.state(g.start_block)
            body.append((start, f"{_GOTO}0", None))
        regions: list[list[Line]] = []
        while len(regions) < len(self.pending):
            region: list[Line] = []
            self.block(self.pending[len(regions)], 0, region)
            regions.append(region)
        if self.resumable:
            body.append((1, "else:", None))
            body.append((2, "st, _env = _from", None))
            bound = {n for b in self.pending for n in (*self.plan.blocks[b].live_in, *self.plan.blocks[b].phis)
                     if n not in self.plan.consts and n not in self.plan.args}
            for name in sorted(self.var(n) for n in bound):
                body.append((2, f"{name} = _env.get({name!r})", None))
        if regions:
            body.append((1, "while True:", None))
            if self.resumable:
                body.append((2, "_budget -= 1\nif _budget < 0: return _Paused(st, locals())", None))
            body.extend(_dispatch(list(range(len(regions))), regions, 2))
        extra = (["_tape"] if self.tape else []) + (["_budget", "_from"] if self.resumable else [])
        params = ", ".join(["_lim", *extra, *(self.names[a] for a in self.plan.args)])
        consts = ", ".join(f"{self.names[c]}=_K{i}" for i, c in enumerate(self.plan.consts))
        header = f"def _nexus_{_ident(g.name)}({params}{', *, ' + consts if consts else ''}):"
        lines = [header]
        line_nodes: dict[int, Node] = {}
        one_state = len(regions) == 1 and not self.resumable  # a resumable one names its states
        for ind, text, node in body:
            if text.startswith(_GOTO):  # with one state the loop needs no state variable
                text = "pass" if one_state else "st = " + text[len(_GOTO):]
            pad = _PADS[ind] if ind < len(_PADS) else "    " * ind
            if "\n" in text:
                for part in text.split("\n"):
                    lines.append(pad + part)
                    if node is not None:
                        line_nodes[len(lines)] = node
            else:
                lines.append(pad + text)
                if node is not None:
                    line_nodes[len(lines)] = node
        return "\n".join(lines) + "\n", line_nodes


def _dispatch(ids: list[int], regions: list[list[Line]], ind: int) -> list[Line]:
    """``if st == k`` chains for few states, a binary tree of ``st < m`` tests for many."""
    if len(ids) == 1:
        return [(ind + i, t, n) for i, t, n in regions[ids[0]]] or [(ind, "pass", None)]
    out: list[Line] = []
    if len(ids) <= 4:
        for j, k in enumerate(ids):
            kw = "if" if j == 0 else "elif"
            out.append((ind, f"{kw} st == {k}:" if j < len(ids) - 1 else "else:", None))
            out.extend(_dispatch([k], regions, ind + 1))
        return out
    mid = len(ids) // 2
    out.append((ind, f"if st < {ids[mid]}:", None))
    out.extend(_dispatch(ids[:mid], regions, ind + 1))
    out.append((ind, "else:", None))
    out.extend(_dispatch(ids[mid:], regions, ind + 1))
    return out


def _parallel_copy(pairs: list[tuple[str, str, Node]]) -> list[tuple[str, Node]]:
    """Phi copies that all read before any writes: plain assignments in a safe order,
    one tuple assignment for what is left (cycles like ``a, b = b, a``)."""
    todo = [p for p in pairs if p[0] != p[1]]
    out: list[tuple[str, Node]] = []
    while todo:
        reads = {src for _, src, _ in todo}
        ready = [p for p in todo if p[0] not in reads]
        if not ready:
            dsts = ", ".join(d for d, _, _ in todo)
            srcs = ", ".join(s for _, s, _ in todo)
            out.append((f"{dsts} = {srcs}  # parallel copy", todo[0][2]))
            break
        out.extend((f"{d} = {s}  # {_label(n)}", n) for d, s, n in ready)
        todo = [p for p in todo if p not in ready]
    return out


def _label(n: Node) -> str:
    """``Op %name`` for a comment in the generated code (names may hold any character)."""
    text = f"{n.op.name} %{n.name or '?'}"
    # A comment ends at a line break and the source may hold no NUL: escape the unprintable.
    return text if not n.name or n.name.isprintable() else ascii(text)[1:-1]


def _placed(n: Node) -> bool:
    """Whether ``n`` runs a device's kernel (its Python operator may mean something else
    on that device's arrays) instead of the ordinary NumPy path."""
    device = n.attrs.get("device") if n.attrs else None
    return bool(device) and (n.op.name == "Memcpy" or not str(device).upper().lstrip("/").startswith("CPU"))


def fresh(v: Any) -> Any:
    """A new object with the value of ``v`` (an array: a view of the same memory)."""
    if isinstance(v, np.ndarray):
        return v.view()
    if isinstance(v, np.generic):
        return v.copy()
    return v * 1.0  # a Python float: float * 1.0 is always a new object, -0.0 and NaN kept


def _const_value(c: Node) -> Any:
    value = c.attrs["value"]
    return value[()] if getattr(value, "ndim", 1) == 0 else value


def _ident(name: str) -> str:
    """A Python identifier part for any graph name: ASCII letters and digits are kept (a
    name such as ``x²`` verifies, but ``²`` is alphanumeric without being an identifier)."""
    return "".join(ch if ch.isascii() and ch.isalnum() else "_" for ch in name)


def generate(plan: Plan, *, count: bool, parallel: str, hooks: dict[str, Any],
             record: dict[Node, int] | None = None, resumable: bool = False) -> Generated:
    """Compile ``plan`` into a Python function.  ``hooks`` are the runtime helpers the
    generated code calls (``_error``, ``_too_many``, ``_call``, ``_submit``, ...);
    ``record`` makes a recording variant (see the module docstring) numbering the nodes
    to record."""
    if record is not None and parallel != "off":
        raise ValueError("a recording variant runs sequentially (parallel='off')")
    if resumable and record is None:
        raise ValueError("only a recording variant is resumable")
    gen = _Gen(plan, count, parallel, hooks, record, resumable)
    source, line_nodes = gen.function()
    filename = f"<nexus @{plan.graph.name} #{next(_serial)}>"
    gen.ns["_par"] = {"on": True, "off": False}.get(parallel)
    exec(compile(source, filename, "exec"), gen.ns)  # noqa: S102  (our own generated code)
    # Tracebacks through the generated code then show its lines (as torch.fx does).
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    fn = next(v for k, v in gen.ns.items() if k.startswith("_nexus_"))
    return Generated(fn, source, filename, line_nodes, {name: n for n, name in gen.names.items()})
