"""The block interpreter of seed 000, section 5, prepared once per graph version.

State is the current block and the control edge it was entered by.  Per block:
(1) Phis take the input at the position of that edge, all read before any is written;
(2) dataflow nodes run in Kahn groups (independent heavy nodes of a group on the thread
pool, the rest inline); (3) the terminator picks the next edge.

Preparing a graph (:mod:`nexus.runtime.plan`) and compiling it to a Python function
(:mod:`nexus.runtime.codegen`) happen on the first call and are cached on the graph
until it changes (``g.cached``).  ``run`` converts the arguments, calls the compiled
function and turns any exception into a :class:`NexusRuntimeError` naming the node.
"""

from __future__ import annotations

import types
from collections.abc import Sequence
from concurrent.futures import Future
from typing import Any

import numpy as np
import sympy

from nexus.ir.graph import Graph
from nexus.ir.node import Node
from nexus.ir.types import TensorType, numpy_dtype
from nexus.passes.shapes import bind_shapes
from nexus.runtime.codegen import Generated, generate
from nexus.runtime.plan import PlanError, make_plan
from nexus.runtime.pool import cores, get_pool


class NexusRuntimeError(RuntimeError):
    """A failure while running a graph; names the node, its op, block and source line."""

    def __init__(self, msg: str, node: Node | None = None):
        self.node = node
        if node is not None:
            where = f"{node.op.name} %{node.name or '?'} in ^{node.block.name if node.block else '?'}"
            if node.loc is not None:
                where += f" (created at {node.loc})"
            msg = f"{where}: {msg}"
        super().__init__(msg)


def to_value(x: Any, t: TensorType | None = None) -> Any:
    """Convert a Python or NumPy argument to the runtime representation of type ``t``:
    an array, or a NumPy scalar for 0-d values."""
    if t is not None and isinstance(x, (np.ndarray, np.generic)) and x.dtype == numpy_dtype(t.dtype):
        return x[()] if x.ndim == 0 else x  # type: ignore[index]  # already right: the common case
    arr = np.asarray(x)
    if t is not None:
        want = numpy_dtype(t.dtype)
        if arr.dtype != want:
            if not np.can_cast(arr.dtype, want, casting="same_kind") and not (
                arr.dtype.kind in "iub" and want.kind in "iuf"
            ):
                raise NexusRuntimeError(f"argument of dtype {arr.dtype} cannot be passed as {t}")
            arr = arr.astype(want)
    return arr[()] if arr.ndim == 0 else arr


# --- helpers the generated code calls ---------------------------------------------------
class _IterationLimit(NexusRuntimeError):
    pass


def _too_many(limit: int, block: str) -> NexusRuntimeError:
    return _IterationLimit(f"entered more than {limit} blocks (max_iterations) and was about to enter "
                           f"^{block}; is a loop endless?")


def _call(callee: Graph, limit: int | None, parallel: bool | None, *args: Any) -> Any:
    return run(callee, *args, max_iterations=limit, parallel=parallel)


def _no_kernel(node: Node, *args: Any) -> Any:
    raise NexusRuntimeError("this op has no kernel", node)


def _submit(fn: Any, *args: Any) -> Future[Any]:
    return get_pool().submit(fn, *args)


def _join(fut: Future[Any], fn: Any, *args: Any) -> Any:
    """The result of a submitted node; if no worker has started it, run it here."""
    if fut.cancel():
        return fn(*args)
    return fut.result()


_HOOKS = {"_error": NexusRuntimeError, "_too_many": _too_many, "_call": _call,
          "_no_kernel": _no_kernel, "_submit": _submit, "_join": _join}


class Prepared:
    """A graph's plan and its compiled variants, keyed by (counting, parallel mode)."""

    def __init__(self, g: Graph):
        self.graph = g
        try:
            self.plan = make_plan(g)
        except PlanError as e:
            raise NexusRuntimeError(f"graph @{g.name}: {e}") from None
        self.variants: dict[tuple[bool, str], Generated] = {}
        self.fns: dict[tuple[bool, bool | None], Any] = {}  # (counting, parallel arg) -> function
        self.arg_types = [t if isinstance(t, TensorType) else None for t in g.arg_types]
        # Arguments with dims are checked at the call: sizes against the declared dims, and
        # one size per symbol across arguments (scalars need no check beyond their dtype).
        self.dims = [(i, t.shape) for i, t in enumerate(self.arg_types)
                     if t is not None and t.shape is not None and t.shape != ()]
        # Dims that are ints or plain symbols are checked inline; expressions (2*N) need
        # bind_shapes' solver.
        self.plain_dims = all(isinstance(d, (int, sympy.Symbol)) for _, shape in self.dims for d in shape)

    def check_dims(self, values: Sequence[Any]) -> None:
        """Raise BindingError unless the arguments' sizes fit the declared dims."""
        if self.plain_dims:
            env: dict[Any, int] = {}
            for i, shape in self.dims:
                got = np.shape(values[i])
                if len(got) != len(shape):
                    break
                for d, n in zip(shape, got):
                    if (d != n) if isinstance(d, int) else (env.setdefault(d, n) != n):
                        break
                else:
                    continue
                break
            else:
                return
        bind_shapes(self.graph, values)  # the solver, and the message naming the arguments

    def variant(self, count: bool, parallel: str) -> Generated:
        key = (count, parallel)
        gen = self.variants.get(key)
        if gen is None:
            gen = self.variants[key] = generate(self.plan, count=count, parallel=parallel, hooks=_HOOKS)
        return gen

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
    return g.cached("runtime.prepared", Prepared)  # type: ignore[no-any-return]


def run(g: Graph, *args: Any, max_iterations: int | None = None, parallel: bool | None = None) -> Any:
    """Run ``g`` on ``args``.  One result is returned as is, several as a tuple.

    ``max_iterations`` bounds the number of blocks entered (a guard against endless
    loops).  ``parallel``: True runs every group of independent nodes on the thread
    pool, False runs everything in this thread, None (default) sends only nodes whose
    estimated cost is worth a thread hop, on machines with more than one core.
    """
    p = prepare(g)
    fn = p.fns.get((max_iterations is not None, parallel))
    if fn is None:
        mode = "on" if parallel else "off" if parallel is not None or cores() < 2 else "auto"
        fn = p.fns[(max_iterations is not None, parallel)] = p.variant(max_iterations is not None, mode).fn
    if len(args) != len(p.arg_types):
        raise NexusRuntimeError(f"graph @{g.name} takes {len(p.arg_types)} arguments, got {len(args)}")
    try:
        values = [to_value(x, t) for x, t in zip(args, p.arg_types)] if args else ()
    except NexusRuntimeError as e:
        raise _bad_argument(g, args, p.arg_types, e) from None
    if p.dims:
        p.check_dims(values)  # BindingError names the arguments, the symbol and the sizes
    try:
        return fn(max_iterations, *values)
    except NexusRuntimeError as e:
        if e.node is None and isinstance(e, _IterationLimit):
            raise NexusRuntimeError(f"graph @{g.name}: {e}") from None
        raise
    except Exception as e:  # noqa: BLE001  (any kernel failure is reported with its node)
        raise p.locate(e) from e


def _bad_argument(g: Graph, args: tuple[Any, ...], types_: list[TensorType | None],
                  e: NexusRuntimeError) -> NexusRuntimeError:
    """Name the argument that could not be converted."""
    for k, (x, t, node) in enumerate(zip(args, types_, g.args)):
        try:
            to_value(x, t)
        except NexusRuntimeError:
            return NexusRuntimeError(f"graph @{g.name}, argument {k} (%{node.name or k}): {e}")
    return e


def source(g: Graph, *, max_iterations: bool = False, parallel: bool | None = None) -> str:
    """The Python source the interpreter runs for ``g`` (for debugging and docs)."""
    mode = "on" if parallel else "off" if parallel is not None else "auto"
    return prepare(g).variant(max_iterations, mode).source
