"""Graphs the llvm backend cannot compile whole: compiled loops inside the python backend.

When some op has no llvm rule (or types the backend does not take), the graph runs on the
python backend, but each loop the backend *can* compile is outlined first: its blocks move
into a graph of their own (arguments: the values the loop reads from outside; results:
the values read after it), which is compiled to native code, and the loop's place in a
copy of the graph becomes a block that ``Call``s it.  The python backend runs that Call
through the native executable (``nexus.backends.python.interpreter.NATIVE_CALLS``).

Loops are tried outermost first; a loop that does not compile (an op without a rule
inside, several exits, ordering edges that cross its border) is split into its inner
loops.  An inner loop that updates arrays stays in Python with its outer loop: a
kernel never writes into its arguments, so each call would copy the arrays in and out.
Straight-line code outside loops stays in Python: there a native call would cost more
than it saves, except for the rare big fused array expression.

:class:`Partitioned` reports which ops stayed out (``stayed_out``: op name -> count of
the nodes the python backend runs, the kernels' Calls not counted), which of them have no
llvm rule (``missing``), the kernels (``kernels``: the outlined graphs' executables) and
why the whole graph did not compile (``reason``).

With ``max_iterations`` the python backend bounds the host graph and each kernel bounds its
own loop, counting from 0 on each call, as the python backend counts a ``Call``'s callee:
the outlined loop's entries are not added to the host's count.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import sympy

from nexus.backends.base import Executable, MissingLoweringError, lowering_table
from nexus.backends.llvm.dtypes import Unsupported
from nexus.backends.llvm.rules import BACKEND
from nexus.ir.cfg import role
from nexus.ir.graph import Graph
from nexus.ir.node import Block, Node
from nexus.ir.types import TensorType, X, sym
from nexus.passes.loops import Loop, loop_forest

if TYPE_CHECKING:
    from nexus.backends.llvm.backend import LLVMExecutable


def _native(n: Node) -> bool:
    """Whether the emitter handles ``n`` itself, with no lowering rule: control, Phis,
    constants, arguments and every Proj."""
    return role(n) != "data" or n.op.name == "Proj"


def unsupported_ops(g: Graph) -> dict[str, int]:
    """Op name -> number of nodes of ``g`` the llvm lowering table has no rule for."""
    table = lowering_table(BACKEND)
    out: dict[str, int] = {}
    for n in g.nodes():
        if n.op.name not in table and not _native(n):
            out[n.op.name] = out.get(n.op.name, 0) + 1
    return out


def _outline(g: Graph, lp: Loop, k: int) -> tuple[Graph, Node, list[Node], list[Node], Node, Block, int] | None:
    """The loop ``lp`` of ``g`` as a graph of its own, or None where it cannot be cut out.
    Returns (callee, entry control, live-ins, live-outs, exit control, exit block, its
    input index); ``g`` is not changed."""
    entries, exits = lp.entry_edges(), lp.exits()
    if len(entries) != 1 or len(exits) != 1:
        return None
    inside = lp.blocks
    members = [n for b in inside for n in b.members]
    mset = set(members)
    live_in: dict[Node, None] = {}
    live_out: dict[Node, None] = {}
    for n in members:
        if any(d not in mset for d in n.deps):
            return None
        for v in n.inputs:
            if v not in mset and v.type is not X:
                live_in[v] = None
        for u, i in n.uses:
            if u not in mset and u not in inside:
                if i < 0:
                    return None
                if n.type is not X:
                    live_out[n] = None
    consts = [v for v in live_in if v.op.name == "Constant"]
    args = [v for v in live_in if v.op.name != "Constant"]
    callee = Graph(f"{g.name}.loop{k}", [_plain(v.type, f"{k}_{i}") for i, v in enumerate(args)],
                   [v.name for v in args])
    m: dict[Node, Node] = dict(zip(args, callee.args))
    for c in consts:
        m[c] = callee.add("Constant", [], callee.start_block, c.attrs, type=c.type, name=c.name)
    for b in inside:
        m[b] = callee.new_block(b.name)
    for n in members:
        c = Node(n.op, [], n.attrs, n.type, n.name, n.loc)
        c.graph = callee
        c.block = m[n.block]  # type: ignore[index, assignment]
        m[n.block].members[c] = None  # type: ignore[index, attr-defined]
        m[n] = c
    entry_ctrl, _ = entries[0]
    m[entry_ctrl] = callee.add("Jmp", [], callee.start_block)
    for n in [*inside, *members]:
        for v in n.inputs:
            m[n].append_input(m[v])
        for d in n.deps:
            m[n].add_dep(m[d])
    exit_ctrl, exit_block = exits[0]
    done = callee.new_block("done", [m[exit_ctrl]])
    ret = callee.add("Return", [m[v] for v in live_out], done)
    callee.end_block.append_input(ret)
    callee.touch()
    index = next(i for i, p in enumerate(exit_block.inputs) if p is exit_ctrl)
    return callee, entry_ctrl, args, list(live_out), exit_ctrl, exit_block, index


def _plain(t: Any, tag: str) -> Any:
    """An argument type whose dims are ints or symbols: a dim expression (``ceil(n / 2) - 3``
    from a slice) becomes a fresh symbol, since the argument binding solves only for bare
    symbols.  Nodes inside that still name the expression make the kernel unsupported
    (the loop stays in Python), never wrong."""
    if not isinstance(t, TensorType) or not t.shape:
        return t
    shape = []
    for j, d in enumerate(t.shape):
        e = sympy.sympify(d)
        shape.append(int(e) if e.is_Integer else d if e.is_Symbol else sym(f"_kernel{tag}_{j}"))
    return t.with_shape(tuple(shape))


def _replace(g: Graph, lp: Loop, callee: Graph, entry_ctrl: Node, args: list[Node], outs: list[Node],
             exit_block: Block, index: int) -> None:
    """Put a block that calls ``callee`` where ``lp`` was, and erase the loop."""
    blk = g.new_block(f"{callee.name}.call", [entry_ctrl])
    call = g.add("Call", args, blk, {"callee": callee})
    results = [call] if len(outs) == 1 else [g.add("Proj", [call], blk, {"num": i}) for i in range(len(outs))]
    jmp = g.add("Jmp", [], blk)
    inside = lp.blocks
    members = [n for b in inside for n in b.members]
    mset = set(members)
    for v, r in zip(outs, results):
        for u, i in v.uses:
            if u not in mset and u not in inside:
                g.set_input(u, i, r)
    g.set_input(exit_block, index, jmp)
    g.erase_dead([*members, *inside])


def _carries_arrays(g: Graph) -> bool:
    """Whether ``g`` updates arrays in a loop (tensor Phis): a kernel gets its arrays as
    arguments, which it never writes, so it copies each one in and the result out."""
    return any(n.op.kind == "phi" and isinstance(n.type, TensorType) and bool(n.type.shape) for n in g.nodes())


def outline_loops(host: Graph, max_iterations: int | None = None, cache_dir: Path | None = None,
                  accept: Callable[[Graph], bool] = lambda callee: True,
                  opt_level: int | None = None) -> list[LLVMExecutable]:
    """Outline each loop of ``host`` (changed in place) that compiles to native code, and
    that ``accept`` takes, as a ``Call`` of a kernel the python backend runs natively;
    the kernels' executables (at ``opt_level``, None: by size), outermost loops first."""
    from nexus.backends.llvm.backend import LLVMExecutable
    from nexus.backends.python.interpreter import NATIVE_CALLS

    kernels: list[LLVMExecutable] = []
    todo = list(loop_forest(host).top_level) if _reducible(host) else []
    while todo:
        lp = todo.pop(0)
        cut = _outline(host, lp, len(kernels))
        exe = None
        if cut is not None and lp.parent is not None and _carries_arrays(cut[0]):
            cut = None  # called from a Python loop, it would copy its arrays in and out each time
        if cut is not None and not unsupported_ops(cut[0]) and accept(cut[0]):
            try:
                exe = LLVMExecutable(cut[0], max_iterations, cache_dir, opt_level)
            except (Unsupported, MissingLoweringError):
                exe = None
        if exe is None or cut is None:
            todo = list(lp.children) + todo
            continue
        callee, entry_ctrl, args, outs, _x, exit_block, index = cut
        exe.outlined = tuple(n for b in lp.blocks for n in b.members)
        _replace(host, lp, callee, entry_ctrl, args, outs, exit_block, index)
        NATIVE_CALLS[callee] = exe
        kernels.append(exe)
    return kernels


def _reducible(g: Graph) -> bool:
    try:
        return loop_forest(g).reducible
    except Exception:  # noqa: BLE001  (no loops to outline; the python backend runs it whole)
        return False


class Partitioned(Executable):
    """``g`` on the python backend, its compilable loops as native kernels; the ops that
    kept the whole graph from LLVM are named in ``stayed_out``."""

    backend = BACKEND

    def __init__(self, g: Graph, reason: str = "", max_iterations: int | None = None,
                 cache_dir: Path | None = None, opt_level: int | None = None):
        import time

        from nexus.backends.python.interpreter import compile_python

        t0 = time.perf_counter()
        self.graph = g
        self.reason = reason
        host, _ = g.clone()
        self.kernels = outline_loops(host, max_iterations, cache_dir, opt_level=opt_level)
        self.host = host
        kernel_calls = {k.graph for k in self.kernels}
        self.missing = unsupported_ops(g)
        self.stayed_out: dict[str, int] = {}
        for n in host.nodes():
            if _native(n) or (n.op.name == "Call" and n.attrs["callee"] in kernel_calls):
                continue
            self.stayed_out[n.op.name] = self.stayed_out.get(n.op.name, 0) + 1
        try:
            self._run = compile_python(host, max_iterations)
        except Exception as e:  # noqa: BLE001  (an outlining bug must not cost the user the program)
            self.reason += f"; outlining failed ({type(e).__name__}: {e}), ran whole in Python"
            self.host, self.kernels, self.stayed_out = g, [], dict(self.missing)
            self._run = compile_python(g, max_iterations)
        self.compile_time = time.perf_counter() - t0

    def __call__(self, *args: Any) -> Any:
        return self._run(*args)

    def source(self) -> str:
        head = f"# ran by the python backend: {self.stayed_out}; without an llvm rule: {self.missing} {self.reason}\n"
        for k in self.kernels:
            head += f"# native kernel @{k.graph.name}\n"
        return head + self._run.source()
