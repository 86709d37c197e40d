"""The block interpreter of seed 000, section 5, prepared once per graph version.

State is the current block and the control edge it was entered by.  Per block:
(1) Phis take the input at the position of that edge, all read before any is written;
(2) dataflow nodes run in Kahn groups (independent heavy nodes of a group on the thread
pool, the rest inline); (3) the terminator picks the next edge.

Preparing a graph (:mod:`nexus.backends.python.plan`) and compiling it to a Python function
(:mod:`nexus.backends.python.codegen`) happen on the first call and are cached on the graph
until it changes (``g.cached``).  A :class:`PythonExecutable` converts the arguments
(``nexus.ir.binding``), calls the compiled function and turns any exception into a
:class:`NexusRuntimeError` naming the node; ``run(g, *args)`` is ``compile_python(g)(*args)``.
"""

from __future__ import annotations

import types
import weakref
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import Any, NoReturn

from nexus.backends.base import Executable, NativeRefused, NexusRuntimeError
from nexus.backends.python.codegen import Generated, generate
from nexus.backends.python.fold import fold_batch_norms, has_foldable
from nexus.backends.python.lowering import BACKEND
from nexus.backends.python.plan import PlanError, make_plan
from nexus.backends.python.pool import cores, get_pool
from nexus.ir.binding import signature
from nexus.ir.graph import Graph
from nexus.ir.node import Node
from nexus.ir.types import is_container
from nexus.ops.sequence import plain
from nexus.passes.placement import Place, PlacementError, needs_placement
from nexus.passes.shapevalues import materialize_shape_values, reads_computed_shapes


# --- helpers the generated code calls ---------------------------------------------------
class _IterationLimit(NexusRuntimeError):
    pass


def _too_many(limit: int, block: str) -> NexusRuntimeError:
    return _IterationLimit(f"entered more than {limit} blocks (max_iterations) and was about to enter "
                           f"^{block}; is a loop endless?")


# Callees another backend compiled (the llvm backend's outlined loops): a Call of one of
# these graphs runs its native executable instead of interpreting it.
NATIVE_CALLS: weakref.WeakKeyDictionary[Graph, Callable[..., Any]] = weakref.WeakKeyDictionary()


def _call(callee: Graph, limit: int | None, parallel: bool | None, *args: Any) -> Any:
    native = NATIVE_CALLS.get(callee)
    if native is not None:
        try:
            return native(*args)
        except NativeRefused:
            pass  # nothing ran: interpret it (a kernel never writes into its arguments)
    return run(callee, *args, max_iterations=limit, parallel=parallel)


def _submit(fn: Any, *args: Any) -> Future[Any]:
    return get_pool().submit(fn, *args)


def _join(fut: Future[Any], fn: Any, *args: Any) -> Any:
    """The result of a submitted node; if no worker has started it, run it here."""
    if fut.cancel():
        return fn(*args)
    return fut.result()


_HOOKS = {"_error": NexusRuntimeError, "_too_many": _too_many, "_call": _call,
          "_submit": _submit, "_join": _join}


class Prepared:
    """A graph's plan and its compiled variants, keyed by (counting, parallel mode)."""

    def __init__(self, g: Graph):
        self.graph = g
        try:
            if needs_placement(g):
                # Values cross devices without a Memcpy: run a placed copy (the caller's
                # graph stays as written; nx.place(g) shows the copies).
                g = g.clone()[0]
                Place().apply(g)
        except PlacementError as e:
            raise NexusRuntimeError(f"graph @{g.name}: {e}") from None
        self.exact = g  # as written (placed): what tape mode records
        self.back: dict[Node, Node] = {}  # a node of the rewritten copy -> the node it copies
        folds, shapes = has_foldable(g), reads_computed_shapes(g)
        if folds or shapes:
            # The generated code runs a copy: batch norms folded into their convolutions,
            # shape arithmetic computed from the arguments' dims (memoised per batch size).
            g, copy = g.clone()
            if folds:
                fold_batch_norms(g)
            if shapes:
                materialize_shape_values(g)
            self.back = {c: n for n, c in copy.items()}
        try:
            self.plan = make_plan(g)
        except PlanError as e:
            raise NexusRuntimeError(f"graph @{g.name}: {e}") from None
        self.variants: dict[tuple[bool, Any], Generated] = {}

    def variant(self, count: bool, parallel: str) -> Generated:
        key = (count, parallel)
        gen = self.variants.get(key)
        if gen is None:
            gen = self.variants[key] = generate(self.plan, count=count, parallel=parallel, hooks=_HOOKS)
            if self.back:  # lines and variables name the graph's own nodes (errors, traces)
                gen.line_nodes = {k: self.back.get(n, n) for k, n in gen.line_nodes.items()}
                gen.variables = {k: self.back.get(n, n) for k, n in gen.variables.items()}
        return gen

    def recording(self, count: bool, nodes: Sequence[Node], resumable: bool = False) -> Generated:
        """The sequential variant ``fn(limit, tape, *args)`` that calls ``tape((k, value,
        *inputs))`` after ``nodes[k]`` runs (tape-mode autodiff); ``resumable``:
        ``fn(limit, tape, budget, start, *args)``, which can pause and resume (checkpointed
        tape mode; see the codegen module)."""
        if self.exact is not self.graph:
            raise NexusRuntimeError(f"graph @{self.graph.name}: a graph that needs placement cannot be recorded")
        key = (count, (tuple(nodes), resumable))
        gen = self.variants.get(key)
        if gen is None:
            # the graph's own nodes, unfolded: the tape names them
            plan = self.plan if self.plan.graph is self.exact else make_plan(self.exact)
            record = {n: k for k, n in enumerate(nodes)}
            gen = self.variants[key] = generate(plan, count=count, parallel="off", hooks=_HOOKS, record=record,
                                                resumable=resumable)
        return gen

    def reraise(self, e: Exception) -> NoReturn:
        """Raise what an exception out of this graph's generated code means: a
        :class:`NexusRuntimeError` naming the node whose line raised it."""
        if isinstance(e, NexusRuntimeError):
            if e.node is None and isinstance(e, _IterationLimit):
                raise NexusRuntimeError(f"graph @{self.graph.name}: {e}") from None
            raise e
        raise self.locate(e) from e

    def locate(self, e: BaseException) -> NexusRuntimeError:
        """Wrap a kernel's exception, naming the node whose generated line raised it."""
        node = None
        files = {gen.filename: gen for gen in self.variants.values()}
        tb: types.TracebackType | None = e.__traceback__
        while tb is not None:
            gen = files.get(tb.tb_frame.f_code.co_filename)
            if gen is not None:
                node = gen.node_at(tb.tb_lineno)
            tb = tb.tb_next
        if isinstance(e, UnboundLocalError):
            msg = ("reads a value that was not computed on the path taken (the graph breaks "
                   "dominance; nx.verify explains)")
        else:
            msg = f"{type(e).__name__}: {e}"
        if node is None:
            msg = f"graph @{self.graph.name}: {msg}"
        return NexusRuntimeError(msg, node)


def prepare(g: Graph) -> Prepared:
    """The cached execution plan of ``g`` (rebuilt after any mutation)."""
    return g.cached("python.prepared", Prepared)  # type: ignore[no-any-return]


class PythonExecutable(Executable):
    """``g`` compiled to a Python function.  It follows the graph: a call after the graph
    changed compiles the new version (nothing goes stale silently)."""

    backend = BACKEND

    def __init__(self, g: Graph, max_iterations: int | None = None, parallel: bool | None = None):
        self.graph = g
        self.max_iterations = max_iterations
        self.parallel = parallel
        self._version = -1
        self._refresh()

    def _refresh(self) -> None:
        g = self.graph
        p = self.prepared = prepare(g)
        self.convert = signature(g).convert
        counting = self.max_iterations is not None
        mode = "on" if self.parallel else "off" if self.parallel is not None or cores() < 2 else "auto"
        self.fn = p.variant(counting, mode).fn
        self._version = g.version
        # Sequences are SeqValues inside; the caller gets lists (see nexus.ops.sequence).
        self._plain = any(is_container(t) for t in g.result_types)

    def __call__(self, *args: Any) -> Any:
        if self.graph.version != self._version:
            self._refresh()
        values = self.convert(args)
        try:
            out = self.fn(self.max_iterations, *values)
        except Exception as e:  # noqa: BLE001  (any kernel failure is reported with its node)
            self.prepared.reraise(e)
        if self._plain:
            return tuple(plain(v) for v in out) if isinstance(out, tuple) else plain(out)
        return out

    def source(self) -> str:
        return source(self.graph, max_iterations=self.max_iterations is not None, parallel=self.parallel)


def compile_python(g: Graph, max_iterations: int | None = None, parallel: bool | None = None) -> PythonExecutable:
    """The python backend's executable for ``g`` (one per graph and options, cached)."""
    exe: PythonExecutable = g.cached(f"python.exe.{max_iterations}.{parallel}",
                                     lambda g: PythonExecutable(g, max_iterations, parallel))
    return exe


def run(g: Graph, *args: Any, max_iterations: int | None = None, parallel: bool | None = None) -> Any:
    """Run ``g`` on ``args``.  One result is returned as is, several as a tuple.

    ``max_iterations`` bounds the number of blocks entered (a guard against endless
    loops).  ``parallel``: True runs every group of independent nodes on the thread
    pool, False runs everything in this thread, None (default) sends only nodes whose
    estimated cost is worth a thread hop, on machines with more than one core.
    """
    if max_iterations is None and parallel is None:  # the common case, without the key's cost
        exe: PythonExecutable = g.cached("python.exe.None.None", PythonExecutable)
        return exe(*args)
    return compile_python(g, max_iterations, parallel)(*args)


def source(g: Graph, *, max_iterations: bool = False, parallel: bool | None = None) -> str:
    """The Python source the interpreter runs for ``g`` (for debugging and docs)."""
    mode = "on" if parallel else "off" if parallel is not None else "auto"
    return prepare(g).variant(max_iterations, mode).source
