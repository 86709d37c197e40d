"""ExecuteGraph: a graph's region tree run on JAX values, emitting lax ops.

:class:`Trace` walks the tree of :mod:`nexus.passes.structurize` (the one structurizer):
a data node runs its rule from the ``xla`` lowering table, an :class:`If` becomes
``lax.cond``, a :class:`Loop` becomes ``lax.while_loop``.  Nothing here knows op names
but ``Call`` (a callee graph is traced inline) and the stack layout.

Values are of two kinds, as in tf2xla's compile-time constants:

* *static*: NumPy values known while tracing (constants, shapes, sizes, and whatever is
  computed from them only).  A pure node whose inputs are all static runs its NumPy
  reference kernel at trace time, so shape arithmetic (``ShapeOf``, ``DimSize``,
  ``Reshape``'s shape input) stays static and XLA sees concrete shapes.
* *traced*: JAX arrays (tracers); the rule emits ``jax.numpy`` / ``lax`` calls.

Regions copy the environment they read, so that values traced inside a branch or loop
body never leak to the enclosing computation.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence, Set
from dataclasses import dataclass, field
from typing import Any, NoReturn

import jax
import jax.numpy as jnp
import numpy as np
import sympy
from jax import lax

from nexus.backends.base import NexusRuntimeError, lowering_table
from nexus.ir.graph import Graph
from nexus.ir.kernels import KernelError, kernel_call
from nexus.ir.node import Node
from nexus.ir.types import StackType, TensorType, TupleType, Type, numpy_dtype
from nexus.passes.regions import Bind, Const, Default, If, Loop, Merge, Name, RegionTree, Seq, Value, Var
from nexus.passes.structurize import structurize

BACKEND = "xla"
RULES = lowering_table(BACKEND)
# Impure ops whose kernel may still run at trace time on static inputs: checks of sizes
# that are static once shapes are specialised (a failure is then a compile-time error).
_STATIC_CHECKS = frozenset({"CheckDims", "Assert"})


class XlaLoweringError(NexusRuntimeError):
    """A node the xla backend cannot lower for these argument shapes (names the node)."""


def is_static(v: Any) -> bool:
    """Whether ``v`` is known while tracing (NumPy values, and tuples or lists of them)."""
    if isinstance(v, (tuple, list)):
        return all(is_static(e) for e in v)
    return isinstance(v, (np.ndarray, np.generic))


def host_callback(fn: Callable[..., tuple[np.ndarray, ...]], shapes: Sequence[Any], *args: Any,
                  live: Any = None, errors: HostErrors | None = None, node: Node | None = None) -> tuple[Any, ...]:
    """``jax.pure_callback(fn, shapes, *args)``, its results carried as bytes.

    ``live`` (a traced bool, :meth:`Trace.live`): where it is false the kernel is not
    called and the results are zeros.  There the code runs on stand-ins (a check failed
    before it, whose error the call raises; an arm of a select that is not taken), on which
    a kernel may raise what Python never would (a SetItem of a stand-in's size).

    ``errors``: where the kernel raises on live values (``w[:k] = v[:2]`` with k = 4), the
    error is kept there for ``node`` and the results are zeros; the executable raises it
    after the call (an exception inside a callback would reach the caller as XLA's
    INTERNAL error, naming nothing).

    JAX checks a callback's results after canonicalising their dtypes under the x64 setting
    of the thread the callback runs on; XLA runs some callbacks on threads of its own,
    where x64 is off, so an f64 result read as f32 and the call failed ("Incorrect output
    dtype"), and an i64 argument reached the kernel as i32 (a slice's stop of 2**63 - 1 read
    as -1).  Bytes are bytes on every thread: each argument goes to the host and each result
    comes back as ``uint8`` with one more axis, bitcast on the device."""
    raw = [jax.ShapeDtypeStruct((*s.shape, np.dtype(s.dtype).itemsize), np.uint8)  # type: ignore[no-untyped-call]
           for s in shapes]
    vals = [jnp.asarray(a) for a in args]
    dtypes = [np.dtype(v.dtype) for v in vals]

    def as_bytes(*a: Any) -> tuple[np.ndarray, ...]:
        if live is not None:
            ok, a = a[0], a[1:]
            if not np.asarray(ok).any():
                return zeros()
        real = [np.ascontiguousarray(x).view(dt)[..., 0] for x, dt in zip(a, dtypes)]
        try:
            outs = fn(*real)
        except Exception as e:
            if errors is None or node is None:
                raise
            errors.record(node, e)
            return zeros()
        # (np.array, not np.ascontiguousarray, which makes a scalar one-dim)
        return tuple(np.array(o, dtype=s.dtype, order="C")[..., None].view(np.uint8)
                     for o, s in zip(outs, shapes))

    def zeros() -> tuple[np.ndarray, ...]:
        return tuple(np.zeros((*s.shape, np.dtype(s.dtype).itemsize), np.uint8) for s in shapes)

    flags = [] if live is None else [jnp.asarray(live, np.bool_).astype(np.uint8)]
    outs = jax.pure_callback(as_bytes, raw, *flags, *(_to_bytes(v) for v in vals))
    return tuple(_from_bytes(o, s.dtype) for o, s in zip(outs, shapes))


def _to_bytes(v: Any) -> Any:
    if v.dtype == np.bool_:
        return v.astype(np.uint8)[..., None]
    b = lax.bitcast_convert_type(v, np.uint8)
    return b if v.dtype.itemsize > 1 else b[..., None]


def _from_bytes(o: Any, dtype: Any) -> Any:
    dt = np.dtype(dtype)
    if dt == np.bool_:
        return o[..., 0] != 0
    return lax.bitcast_convert_type(o, dt) if dt.itemsize > 1 else lax.bitcast_convert_type(o[..., 0], dt)


def regions(g: Graph) -> RegionTree:
    """The region tree of ``g`` (cached on the graph until it changes)."""
    tree: RegionTree = g.cached("xla.regions", structurize)
    return tree


@jax.tree_util.register_pytree_node_class
@dataclass
class Padded:
    """A value whose dim ``axis`` has a run-time size: ``data`` is padded along it to a
    static bound, ``size`` (an i64 scalar) is how much of it is real."""

    data: Any
    size: Any
    axis: int

    def tree_flatten(self) -> tuple[tuple[Any, Any], int]:
        return (self.data, self.size), self.axis

    @classmethod
    def tree_unflatten(cls, axis: int, children: Sequence[Any]) -> Padded:
        return cls(children[0], children[1], axis)

    def mask(self) -> Any:
        """True where ``data`` is real (broadcastable against ``data``)."""
        shape = [1] * jnp.ndim(self.data)
        shape[self.axis] = jnp.shape(self.data)[self.axis]
        return jnp.reshape(jnp.arange(shape[self.axis]) < self.size, shape)

    def sliced(self) -> np.ndarray:
        """The real part, on the host (after the call)."""
        return np.take(np.asarray(self.data), np.arange(int(self.size)), axis=self.axis)


@dataclass(frozen=True)
class PadTo:
    """Where paths disagree on a value's size along one axis (a list appended to in one
    arm of an If, or on every iteration of a loop): every path pads it to ``shape`` (the
    bound along ``axis``) and carries it as a :class:`Padded` with its true size."""

    shape: tuple[int, ...]
    axis: int
    # Whether the bound counts `StackLayout.capacity` trips of a loop whose trip count is
    # known only at run time (see Trace.loop_bound).
    run_time: bool = False


@dataclass
class Unread:
    """A value no path reads (the region tree's :class:`Default`) of a type whose shape is
    not known here: where paths meet, it takes the shape of the others (Trace.agree)."""

    type: TensorType

    def zeros(self, shape: tuple[int, ...] | None = None) -> np.ndarray:
        assert self.type.shape is not None
        if shape is None:  # nothing to agree with: unknown dims as 0
            shape = tuple(d if isinstance(d, int) else 0 for d in self.type.shape)
        return np.zeros(shape, numpy_dtype(self.type.dtype))


# What all paths give a value (see Trace.agree): a shape, a PadTo, or None (stacks, tuples).
Target = tuple[int, ...] | PadTo | None


def _layout(v: Any) -> tuple[tuple[int, ...], int | None] | None:
    """A value's (data shape, padded axis or None); None for stacks and tuples."""
    if isinstance(v, Padded):
        return tuple(v.data.shape), v.axis
    if hasattr(v, "shape"):
        return tuple(v.shape), None
    return None


# The rule for ops reading a Padded value (nexus.backends.xla.dynamic sets it; trace.py is
# below it and cannot import it).  Ops in _PADDED_AS_IS receive Padded values themselves.
PADDED_CONSUMER: Callable[[Trace, Node, list[Any]], Any] | None = None
# Ops whose rule calls back into Python: not run on both arms of a select (costly, and a
# kernel may raise on the untaken arm's values).  rules_shape and dynamic add theirs.
HOST_EFFECTS: set[str] = set()
_PADDED_AS_IS = frozenset({"Proj", "NonMaxSuppression", "NonZero", "Unique", "BooleanMask", "TopK"})


@dataclass
class TripCount:
    """The most trips that a loop growing a list on a run-time trip count ran, in the last
    run of a computation (``used``: whether it has such a loop).  Its list is padded for
    ``StackLayout.capacity`` trips (Trace.loop_bound); more, and the executable compiles
    again with a larger capacity and runs again, as it does for stacks."""

    most: int = 0
    used: bool = False


@dataclass
class HostErrors:
    """The first error a host kernel raised on live values in the last run of a computation
    (see host_callback); ``used``: whether the computation calls a host kernel at all."""

    first: tuple[Node, Exception] | None = None
    used: bool = False

    def record(self, node: Node, error: Exception) -> None:
        if self.first is None:
            self.first = (node, error)

    def raise_first(self) -> None:
        """Raise the python backend's error for the kept failure, if any (and forget it)."""
        if self.first is not None:
            (node, err), self.first = self.first, None
            raise NexusRuntimeError(f"{type(err).__name__}: {err}", node) from err


class NewStackKind(Exception):
    """Tracing met a stack value of a new kind; trace again with the grown layout."""


@dataclass(frozen=True)
class Check:
    """A check that may fail at run time: an ``Assert`` (``error`` None: its message
    says), or another node that raises ``error`` where it fails (see Trace.fail_where)."""

    node: Node
    error: Exception | None = field(default=None, compare=False)
    what: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "what", "" if self.error is None else f"{type(self.error).__name__}: {self.error}")

    def raise_(self) -> NoReturn:
        """The python backend's error for this failure."""
        err = self.error
        if err is None:
            msg = str(self.node.attrs.get("message", ""))
            err = AssertionError(msg)
        raise NexusRuntimeError(f"{type(err).__name__}: {err}", self.node) from err


class NewCheck(Exception):
    """Tracing met a check that may fail at run time (see :meth:`Trace.fail_where`) inside a
    region that does not carry the failure code; trace again with the node in ``failing``,
    so that every region holding it carries the code."""


@dataclass
class StackLayout:
    """How a gradient graph's stacks become fixed-size buffers.

    A stack holds values of several shapes (the values a block's reverse needs, and
    block codes); pushes and pops mirror each other, so each (shape, dtype) gets its own
    LIFO buffer ``[capacity, *shape]`` with a count, and the order within each kind is
    the stack's order.  At run time a stack is ``(peak, ((buffer, count), ...))``, where
    ``peak`` is the largest count reached; a peak past ``capacity`` means pushes were lost
    (the executable then recompiles with the capacity doubled until it holds the peak,
    and runs again; see :mod:`nexus.backends.xla.executable`).

    With one stack per graph (a gradient graph's tape: one ``StackNew``), the buffers
    live apart, in :attr:`Trace.heap`, and a stack is ``(peak, ((None, count), ...))``:
    a ``lax.cond`` or ``lax.while_loop`` carries the buffers only where its region pushes
    (:func:`pushes`).  Regions that only pop (the whole reverse sweep) read them as
    constants instead of copying them through every conditional of every iteration,
    which XLA does for a buffer carried through ``lax.cond``.  Those buffers are then the
    computation's last argument and come back as its last output (donated: the same
    memory): the executable keeps them for the signature's next call, instead of XLA
    filling fresh ones on every call (W4-large: 42 MB, about 8% of the gradient's time)."""

    kinds: list[tuple[tuple[int, ...], str]] = field(default_factory=list)
    capacity: int = 64

    def index(self, shape: tuple[int, ...], dtype: str) -> int:
        """The buffer of values of this kind; a kind not seen before restarts the tracing
        with one more buffer (the layout is learnt while tracing)."""
        key = (tuple(shape), dtype)
        if key not in self.kinds:
            self.kinds.append(key)
            raise NewStackKind(key)
        return self.kinds.index(key)

    def buffers(self) -> list[Any]:
        return [jnp.zeros((self.capacity, *shape), numpy_dtype(dt)) for shape, dt in self.kinds]

    def specs(self) -> tuple[Any, ...]:
        """The buffers' shapes and dtypes, for a computation that receives them."""
        return tuple(jax.ShapeDtypeStruct((self.capacity, *shape), numpy_dtype(dt))  # type: ignore[no-untyped-call]
                     for shape, dt in self.kinds)

    def empty(self, heap: bool = False) -> Any:
        bufs = tuple((None if heap else buf, jnp.zeros((), np.int64)) for buf in self.buffers())
        return (jnp.zeros((), np.int64), bufs)


def pushes(items: Seq | list[Any]) -> bool:
    """Whether running ``items`` (a region's Seq, or a loop's cond nodes) may push to a
    stack, nested regions included."""
    for item in items.items if isinstance(items, Seq) else items:
        if isinstance(item, Node) and item.op.name == "StackPush":
            return True
        if isinstance(item, If) and (pushes(item.then) or pushes(item.orelse)):
            return True
        if isinstance(item, Loop) and (pushes(item.cond) or pushes(item.body)):
            return True
    return False


def checks(items: Seq | list[Any], failing: Set[Node] = frozenset()) -> bool:
    """Whether running ``items`` (a region's Seq, or a loop's cond nodes) may run an
    ``Assert``, or a node of ``failing`` (other nodes with a run-time check, learnt while
    tracing), nested regions and called graphs included (the region then carries the
    failure code, see :meth:`Trace.fail_where`)."""
    for item in items.items if isinstance(items, Seq) else items:
        if isinstance(item, Node) and (item.op.name == "Assert" or item in failing or (
                item.op.name == "Call" and _call_checks(item.attrs["callee"], failing))):
            return True
        if isinstance(item, If) and (checks(item.then, failing) or checks(item.orelse, failing)):
            return True
        if isinstance(item, Loop) and (checks(item.cond, failing) or checks(item.body, failing)):
            return True
    return False


def _graph_checks(g: Graph) -> bool:
    return any(n.op.name == "Assert" for h in (g, *g.callees()) for n in h.nodes())


def _call_checks(g: Graph, failing: Set[Node]) -> bool:
    return g.cached("xla.checks", _graph_checks) or bool(failing) and any(
        n in failing for h in (g, *g.callees()) for n in h.nodes())


def stack_news(g: Graph, seen: set[int] | None = None) -> int:
    """How many StackNew nodes ``g`` and its callees hold."""
    seen = set() if seen is None else seen
    if id(g) in seen:
        return 0
    seen.add(id(g))
    count = 0
    for n in g.nodes():
        if n.op.name == "StackNew":
            count += 1
        elif n.op.name == "Call":
            count += stack_news(n.attrs["callee"], seen)
    return count


class Trace:
    """One tracing of a graph (and its callees) for concrete argument shapes."""

    def __init__(self, layout: StackLayout | None = None, dynamic_bound: int | None = None,
                 heap: Sequence[Any] | None = None, failing: set[Node] | None = None):
        self.layout = layout or StackLayout()
        # The stack buffers when they live apart from the stack values (see StackLayout);
        # ``heap``: the buffers the computation receives (StackLayout.lent), else zeros.
        self.heap: list[Any] | None = None
        self.heap_in = heap
        # Inside a select's arm or an unrolled iteration: where it runs (a traced bool).
        self.predicate: Any = None
        self.dynamic_bound = dynamic_bound  # see nexus.backends.xla.dynamic
        # > 0 inside an If arm or loop body that may not run: a failing check on static
        # values there is not a compile-time error (XLA cannot raise it at run time either).
        self.nested = 0
        self.dims: dict[sympy.Symbol, int] = {}
        self.abstract = 0  # > 0 while looking for a loop's carried shapes (jax.eval_shape)
        self.top: dict[Any, Any] | None = None  # the outermost graph's values (BuildComputation reads it)
        self.trips = TripCount()  # the executable reads it after each run (see loop_bound)
        self.host_errors = HostErrors()  # and this (see host)
        # Run-time checks (Assert): ``status`` is None until the first one, then an i32 scalar,
        # 0 while every check passed, else 1 + the index in ``checks`` of the first that
        # failed; regions that hold an Assert carry it (see :meth:`fail_where`).
        self.status: Any = None
        self.checks: list[Check] = []
        self.failures = 0  # how many times fail_where was traced (see checked_region)
        # Nodes other than Assert found to check at run time (kept by the executable across
        # tracings), and how many enclosing regions do not carry the code (see fail_where).
        self.failing = set() if failing is None else failing
        self.uncarried = 0
        # The innermost loop whose carry JAX refused (padded on entry, plain after the body
        # or the reverse): the error it becomes names that loop's node (see carry_refused).
        self.unsettled: Node | None = None

    # --- the three steps' middle one -------------------------------------------------
    def run(self, g: Graph, args: Sequence[Any]) -> list[Any]:
        """ExecuteGraph: bind ``args`` to ``g``'s arguments, run its region tree, return
        the values of its results."""
        tree = regions(g)
        env: dict[Any, Any] = {}
        if self.top is None:
            self.top = env
            if self.layout.kinds and g.cached("xla.stack_news", stack_news) == 1:
                self.heap = list(self.heap_in) if self.heap_in else self.layout.buffers()
        for node, value in zip(g.args, args):
            env[node] = value
            self.unify(node.type, value)
        self.seq(tree.body, env)
        return [self.value(v, env) for v in tree.results]

    def value(self, v: Value, env: Mapping[Any, Any]) -> Any:
        if isinstance(v, Const):
            return v.value
        if isinstance(v, Default):
            return self.default(v.type)
        return env[v]

    def seq(self, seq: Seq, env: dict[Any, Any]) -> None:
        for item in seq.items:
            if isinstance(item, Node):
                env[item] = self.node(item, [env[i] for i in item.inputs])
            elif isinstance(item, Bind):
                env[item.target] = self.value(item.value, env)
            elif isinstance(item, If):
                self.if_(item, env)
            elif isinstance(item, Loop):
                self.loop(item, env)

    def nested_seq(self, seq: Seq, env: dict[Any, Any]) -> None:
        """``seq`` as a region that may not run (a traced If's arm, a loop body)."""
        self.nested += 1
        try:
            self.seq(seq, env)
        finally:
            self.nested -= 1

    # --- data nodes ----------------------------------------------------------------
    def node(self, n: Node, ins: list[Any]) -> Any:
        if n.op.name == "Call":
            callee: Graph = n.attrs["callee"]
            outs = self.run(callee, ins)
            return outs[0] if len(outs) == 1 else tuple(outs)
        if is_static(tuple(ins)) and n.op.kernel is not None and (n.op.pure or n.op.name in _STATIC_CHECKS):
            out = self._fold(n, ins)
            if out is not None:
                self.unify(n.type, out)
                return out
        if PADDED_CONSUMER is not None and n.op.name not in _PADDED_AS_IS and any(isinstance(i, Padded) for i in ins):
            out = self.guarded(n, lambda: PADDED_CONSUMER(self, n, ins))
        else:
            out = self.apply_rule(n, ins)
        self.unify(n.type, out)
        return out

    def apply_rule(self, n: Node, ins: Sequence[Any]) -> Any:
        """``n``'s rule from the lowering table on ``ins``."""
        rule = RULES.rule(n)
        return self.guarded(n, lambda: rule(self, n, *ins))

    @staticmethod
    def guarded(n: Node, fn: Callable[[], Any]) -> Any:
        try:
            return fn()
        except (XlaLoweringError, NexusRuntimeError, NewStackKind, NewCheck):
            raise
        except Exception as e:  # noqa: BLE001  (a rule's failure is reported with its node)
            raise XlaLoweringError(f"{type(e).__name__}: {e}", n) from e

    def _fold(self, n: Node, ins: list[Any]) -> Any:
        try:
            return kernel_call(n, ins, fp_errors="ignore")
        except KernelError as e:
            if n.op.name == "Assert":
                # A check that fails on static values fails on every run that reaches it: as a
                # run-time failure (the python backend raises it when the call gets there).
                self.fail_where(n, np.bool_(True))
                return np.bool_(False)
            if n.op.name in _STATIC_CHECKS and not self.nested:
                raise XlaLoweringError(f"{e.reason} (a check on static values fails while compiling)", n) \
                    from e.__cause__
            return None  # e.g. an integer division by zero: the rule traces it instead

    # --- run-time checks ------------------------------------------------------------
    def fail_where(self, n: Node, bad: Any, error: Exception | None = None) -> None:
        """Record that the check ``n`` fails where ``bad`` holds (and the code runs there:
        inside a select's arm, where ``predicate`` holds), unless an earlier one failed.

        XLA cannot raise: the first failure's code is carried to the end of the computation,
        and the executable raises the python backend's error for it after the call.  Loops
        stop once it is set (Python would not go on), so a loop after a failed check on its
        step (``range(0, 5, 0)``) ends.  Regions carry the code only where they hold an
        Assert (:func:`checks`), so a graph without one pays nothing.  Another node that
        checks (an elementwise op on sizes known only at run time) found in a region that
        does not carry the code restarts the tracing (:class:`NewCheck`) with it known."""
        if self.uncarried and n not in self.failing:
            self.failing.add(n)
            raise NewCheck(n)
        self.failures += 1
        check = Check(n, error)
        if check not in self.checks:
            self.checks.append(check)
        code = np.int32(self.checks.index(check) + 1)
        bad = jnp.asarray(bad, np.bool_)
        if self.predicate is not None:
            bad = bad & self.predicate
        status = self.status_now()
        self.status = jnp.where((status == 0) & bad, code, status)

    def checked_region(self, holds: bool, run: Callable[[bool], None]) -> None:
        """``run(carry)`` a region; ``carry``: whether it carries the failure code, which it
        does where it ``holds`` a check (:func:`checks`) that did not fold while tracing."""
        if holds:
            heap, status, failures = self.heap, self.status, self.failures
            run(True)
            if self.failures != failures:
                return
            # Every check in it was decided while tracing: trace it again without the code.
            self.heap, self.status = heap, status
        self.uncarried += 1
        try:
            run(False)
        finally:
            self.uncarried -= 1

    def status_now(self) -> Any:
        """The failure code so far (a static 0 before any check)."""
        if self.status is None:
            self.status = np.int32(0)
        return self.status

    def live(self) -> Any:
        """Whether the code traced here runs on real values (a traced bool): no check
        failed before it, and inside a select's arm or an unrolled iteration, its predicate
        holds (see host_callback)."""
        ok = jnp.asarray(True) if self.status is None else jnp.asarray(self.status) == 0
        return ok if self.predicate is None else ok & self.predicate

    def host(self, node: Node, fn: Callable[..., tuple[np.ndarray, ...]], shapes: Sequence[Any],
             *args: Any) -> tuple[Any, ...]:
        """``node``'s kernel ``fn`` run on the host where the code is live (host_callback);
        an error it raises there, the executable raises after the call."""
        self.host_errors.used = True
        return host_callback(fn, shapes, *args, live=self.live(), errors=self.host_errors, node=node)

    def running(self, test: Any) -> Any:
        """A loop's ``test``, false once a check has failed."""
        test = jnp.asarray(test, dtype=np.bool_)
        if self.status is None or is_static(self.status):
            return test
        return test & (self.status == 0)

    # --- shapes --------------------------------------------------------------------
    def unify(self, t: Type | None, v: Any) -> None:
        """Learn the sizes of ``t``'s symbolic dims from the value ``v`` has."""
        if isinstance(t, TupleType) and isinstance(v, tuple):
            for et, ev in zip(t.elems, v):
                self.unify(et, ev)
            return
        if not isinstance(t, TensorType) or t.shape is None or not hasattr(v, "shape"):
            return
        if len(t.shape) != len(v.shape):
            return
        for d, size in zip(t.shape, v.shape):
            if isinstance(d, sympy.Symbol) and d not in self.dims:
                self.dims[d] = int(size)

    def shape(self, t: TensorType) -> tuple[int, ...]:
        """``t``'s shape with its symbols replaced by the sizes seen so far."""
        if t.shape is None:
            raise ValueError(f"type {t} has no known rank")
        out = []
        for d in t.shape:
            if isinstance(d, int):
                out.append(d)
                continue
            size = sympy.sympify(d).subs(self.dims)
            if size.free_symbols or not size.is_integer:
                raise ValueError(f"the size {d} of {t} is not known while tracing")
            out.append(int(size))
        return tuple(out)

    def default(self, t: Type) -> Any:
        """Zeros of ``t``: a value no path reads (the region tree's :class:`Default`)."""
        if isinstance(t, StackType):
            return self.layout.empty(self.heap is not None)
        if isinstance(t, TensorType):
            try:
                return np.zeros(self.shape(t), numpy_dtype(t.dtype))
            except ValueError:
                return Unread(t)  # a shape no value gives here: the other paths' (see agree)
        raise ValueError(f"no default value of type {t}")

    def unread(self, v: Value) -> Unread | None:
        """The :class:`Unread` that ``v`` is (a Default whose shape is not known here), or None."""
        if isinstance(v, Default) and isinstance(v.type, TensorType):
            d = self.default(v.type)
            return d if isinstance(d, Unread) else None
        return None

    def as_jax(self, name: Any, v: Any, shape: tuple[int, ...] | None = None) -> Any:
        """``v`` as a JAX value of ``name``'s type, as lax.cond and lax.while_loop need
        (both arms and every iteration must agree on dtypes and shapes).  ``shape``: the
        shape all paths agree on, where the type leaves it open (see :meth:`widen`)."""
        t = getattr(name, "type", None)
        if isinstance(v, Unread):
            if v.type.shape is None and shape is None:
                raise XlaLoweringError(f"value %{_label(name)} ({v.type}) is unassigned on one path and no other "
                                       "path gives it a shape; XLA needs one shape per value: run this function "
                                       "on the python or llvm backend", name if isinstance(name, Node) else None)
            return jnp.asarray(v.zeros(shape))
        if isinstance(t, StackType) or isinstance(v, (tuple, Padded)):
            return jax.tree_util.tree_map(jnp.asarray, v)  # (None leaves stay None)
        dtype = numpy_dtype(t.dtype) if isinstance(t, TensorType) else None
        if shape is not None and tuple(np.shape(v)) != shape:
            v = self.widen(name, v, shape)
        return jnp.asarray(v, dtype=dtype)

    def widen(self, name: Any, v: Any, shape: tuple[int, ...]) -> Any:
        """A zero of another shape stands for zeros of ``shape``: gradient graphs start
        an adjoint as a scalar zero (type ``f64[...]``) that later paths give its shape.
        XLA needs one shape on every path, so the zero is broadcast; any other value whose
        shape differs between paths is an error."""
        if _is_concrete(v) and not np.any(np.asarray(v)):
            return np.zeros(np.broadcast_shapes(np.shape(v), shape), np.asarray(v).dtype)
        if self.abstract:
            # Only shapes matter while the loop's carried shapes are still being found.
            return jnp.broadcast_to(v, np.broadcast_shapes(np.shape(v), shape))
        raise XlaLoweringError(f"value %{_label(name)} has shape {list(np.shape(v))} on one path and {list(shape)} on "
                               "another; XLA needs one shape per value")

    def agree(self, name: Any, a: Any, b: Any) -> Target:
        """What two paths' values ``a`` and ``b`` of ``name`` (concrete or abstract) become
        where they meet: their shape if they agree; a :class:`PadTo` if they differ along
        one axis of a type whose rank is known (a list is ``[n, *shape]`` and grows along
        axis 0); else their broadcast, which :meth:`widen` allows for zeros only."""
        if isinstance(a, Unread) or isinstance(b, Unread):
            # A value one path never reads takes the other's shape (and padding).
            known = b if isinstance(a, Unread) else a
            lk = _layout(known)
            if lk is None:
                return None
            return lk[0] if lk[1] is None else PadTo(lk[0], lk[1])
        la, lb = _layout(a), _layout(b)
        if la is None or lb is None:
            return None
        (sa, xa), (sb, xb) = la, lb
        if xa is None and xb is None and sa == sb:
            return sa
        # An empty list ([0, ...]) has no element shape yet: the other path's gives it.
        if xa is None and sa[:1] == (0,) and len(sa) == len(sb):
            sa = (0, *sb[1:])
        if xb is None and sb[:1] == (0,) and len(sa) == len(sb):
            sb = (0, *sa[1:])
        t = getattr(name, "type", None)
        ranked = isinstance(t, TensorType) and t.shape is not None and len(t.shape) == len(sa) == len(sb)
        axes = {d for d in range(len(sa)) if sa[d] != sb[d]} if len(sa) == len(sb) else set()
        axes |= {x for x in (xa, xb) if x is not None}
        if ranked and len(axes) == 1:
            return PadTo(tuple(max(p, q) for p, q in zip(sa, sb)), axes.pop())
        if xa is not None or xb is not None:
            raise XlaLoweringError(f"value %{_label(name)} is padded along axis {sorted(axes)} and its paths "
                                   f"disagree on its shape ({list(sa)} and {list(sb)}); XLA needs one shape")
        return _joint(a, b)

    def fit(self, name: Any, v: Any, target: Target) -> Any:
        """``v`` as the JAX value all paths give ``name`` (see :meth:`agree`)."""
        if not isinstance(target, PadTo):
            return self.as_jax(name, v, target)
        if isinstance(v, Unread):
            return Padded(jnp.asarray(v.zeros(target.shape)), jnp.zeros((), np.int64), target.axis)
        t = getattr(name, "type", None)
        dtype = numpy_dtype(t.dtype) if isinstance(t, TensorType) else None
        axis, bound = target.axis, target.shape[target.axis]
        data, size = (v.data, v.size) if isinstance(v, Padded) else (v, np.int64(np.shape(v)[axis]))
        data = jnp.asarray(data, dtype=dtype)
        if not isinstance(v, Padded) and data.shape[:1] == (0,) and data.ndim == len(target.shape):
            data = jnp.zeros((0, *target.shape[1:]), data.dtype)  # an empty list (see agree)
        rest = [d for i, d in enumerate(data.shape) if i != axis]
        if rest != [d for i, d in enumerate(target.shape) if i != axis]:
            raise XlaLoweringError(f"value %{_label(name)} has shape {list(data.shape)} on one path and "
                                   f"{list(target.shape)} on another; XLA needs one shape per value")
        if data.shape[axis] < bound:
            widths = [(0, 0)] * data.ndim
            widths[axis] = (0, bound - data.shape[axis])
            data = jnp.pad(data, widths)
        elif data.shape[axis] > bound:
            # Room that no path fills: the bound was computed for the whole loop.
            data = lax.slice_in_dim(data, 0, bound, axis=axis)
        return Padded(data, jnp.asarray(size, np.int64), axis)

    def open_shape(self, names: Sequence[Any]) -> bool:
        """Whether some of ``names`` have a type whose shape is not known here."""
        for n in names:
            t = getattr(n, "type", None)
            if isinstance(t, TensorType):
                try:
                    self.shape(t)
                except ValueError:
                    return True
        return False

    # --- regions -------------------------------------------------------------------
    def if_(self, r: If, env: dict[Any, Any]) -> None:
        try:
            holds = checks(r.then, self.failing) or checks(r.orelse, self.failing)
            self.checked_region(holds, lambda checked: self._if(r, env, checked))
        except XlaLoweringError as e:
            _locate(e, _grower(r.then) or _grower(r.orelse))

    def _if(self, r: If, env: dict[Any, Any], checked: bool) -> None:
        c = self.value(r.cond, env)
        if is_static(c):
            # A condition known while tracing: only the taken arm exists.
            taken = bool(c)
            self.seq(r.then if taken else r.orelse, env)
            for m in r.outputs:
                env[m.name] = self.value(m.then_value if taken else m.else_value, env)
            self.record_sums(r, env, lambda m, base: self.delta(m.then_value if taken else m.else_value, base, env))
            return

        heap = self.heap
        threads = heap is not None and (pushes(r.then) or pushes(r.orelse))
        if self.light(r.then) and self.light(r.orelse):
            self.select(r, c, env)
            return
        status = self.status_now() if checked else self.status
        sums = self.sums(r, env)

        def arm(body: Seq, picks: list[Value], shapes: list[Any]) -> Callable[[], Any]:
            def fn() -> Any:
                local = dict(env)
                self.heap = None if heap is None else list(heap)
                self.status = status
                self.nested_seq(body, local)
                outs = [self.delta(p, sums[m][0], local) if m in sums else self.fit(m.name, self.value(p, local), s)
                        for m, p, s in zip(r.outputs, picks, shapes)]
                return (outs, self.heap if threads else None,
                        jnp.asarray(self.status, np.int32) if checked else None)
            return fn

        thens, elses = [m.then_value for m in r.outputs], [m.else_value for m in r.outputs]
        shapes: list[Any] = [None] * len(r.outputs)

        def agreed() -> list[Any]:
            """Both arms traced abstractly first, to agree on what the types leave open."""
            a = jax.eval_shape(arm(r.then, thens, shapes))[0]
            b = jax.eval_shape(arm(r.orelse, elses, shapes))[0]
            # A value an arm never reads (it returns early) was traced as zeros with its open
            # dims as 0: it takes the other arm's shape, and is not padded to it.
            a = [self.unread(p) or x for p, x in zip(thens, a)]
            b = [self.unread(p) or y for p, y in zip(elses, b)]
            return [self.agree(m.name, x, y) for m, x, y in zip(r.outputs, a, b)]

        if self.open_shape([m.name for m in r.outputs]) or _sizes_from_data(r.then) or _sizes_from_data(r.orelse):
            sums.clear()  # (a sum's shape is its base's)
            shapes = agreed()
        # XLA:CPU folds a conditional whose test it finds constant into a tuple constant, and
        # then aborts the process compiling it ("Check failed: pointer_size > 0" in
        # shape_util.cc; py_gen seed 3, program 885, whose test is `6 % 2 == 0` of values
        # carried into an arm).  A test that tracing knew was taken above; this one XLA may
        # not fold.
        c = lax.optimization_barrier(c)  # type: ignore[no-untyped-call]
        try:
            outs, after, failed = lax.cond(c, arm(r.then, thens, shapes), arm(r.orelse, elses, shapes))
        except TypeError:
            if any(s is not None for s in shapes):
                raise
            # The arms disagree in a way nothing above foresaw (a padded value from before
            # the If, passed through one arm only): agree on their shapes, trace again.
            sums.clear()
            shapes = agreed()
            outs, after, failed = lax.cond(c, arm(r.then, thens, shapes), arm(r.orelse, elses, shapes))
        self.heap = after if threads else heap
        self.status = failed if checked else status
        for m, v in zip(r.outputs, outs):
            if m in sums:
                base = sums[m][0]
                env[_Delta(m.name, base)] = v  # (an If of other bases is not a sum in an arm)
                keep, d = v
                a = self.value(base, env)
                v = jnp.where(keep, a, jnp.asarray(-0.0, d.dtype)) + d  # -0.0: x + -0.0 is x, for every x
            env[m.name] = v

    def light(self, seq: Seq) -> bool:
        """Whether ``seq`` may run where it is not taken, as an arm of a select or an extra
        unrolled iteration: few nodes (:func:`_flat`) and little arithmetic.  The reverse
        sweep of W4-large's gradient (batch 64, 512 units) has three [64, 512] x [512, 512]
        products in one arm of a chain of Ifs: as selects they ran on every trip, twice the
        products of the sweep, and W4-large took 1.7x the python backend's time."""
        return _flat(seq, self.heap is not None) and self.work(seq) <= _SELECT_WORK

    def sums(self, r: If, env: Mapping[Any, Any]) -> dict[Merge, list[Node]]:
        """The outputs of ``r`` that are, on each path through it, a value ``base`` from
        before it or ``base`` plus something (an ``Add`` of two values of one type, or such
        an output of an If in the arm), each with its ``base``: the accumulators of a
        gradient's reverse sweep, which one block of a chain of Ifs on the block code adds
        to and the others pass on.  As a ``lax.cond``'s results XLA copies them on every
        trip (a branch cannot return its operand's buffer, nor the conditional write into
        the loop's); the cond returns what is added instead (-0.0 on a path that passes
        ``base`` on, and the value with a flag where an arm overwrites ``base``) and
        the sum is taken after it, in place (see :meth:`delta`).  Each
        output maps to every such ``base``, the first the one the cond uses; each If records
        what it adds to each (an enclosing If's arm reads it)."""
        found: dict[Merge, list[Node]] = {}
        for m in r.outputs:
            t = getattr(m.name, "type", None)
            if not (isinstance(t, TensorType) and np.issubdtype(numpy_dtype(t.dtype), np.floating)):
                continue
            try:
                shape = self.shape(t)
            except ValueError:
                continue
            a, b = _sum_bases(m.then_value, r.then), _sum_bases(m.else_value, r.orelse)
            bases = [base for base in [*a, *(k for k in b if k not in a)]
                     if (a.get(base) or b.get(base)) and isinstance(base, Node) and base in env
                     and _dtype(base) == t.dtype
                     and isinstance(env[base], (jax.Array, np.ndarray)) and np.shape(env[base]) == shape]
            if bases:
                found[m] = bases
        return found

    def record_sums(self, r: If, env: dict[Any, Any], delta: Callable[[Merge, Name], tuple[Any, Any]],
                    into: dict[Any, Any] | None = None) -> None:
        """For an If lowered otherwise than as a ``lax.cond`` (a select, a static condition):
        what its sums add (``delta(m, base)``), for an enclosing If's arm to read; ``into``
        (keyed by ``(m, base)``) instead of ``env`` if given.  A value that is not an array
        of the sum's shape (padded, say) records nothing: the enclosing arm then takes the
        output as it is."""
        for m, bases in self.sums(r, env).items():
            for base in bases:
                try:
                    d = delta(m, base)
                except (TypeError, ValueError):
                    continue
                if into is None:
                    env[_Delta(m.name, base)] = d
                else:
                    into[m, base] = d

    def delta(self, v: Value, base: Name, env: Mapping[Any, Any]) -> tuple[Any, Any]:
        """``(keep, d)`` with ``v`` = ``(base if keep else -0.0) + d``, once ``v``'s arm has run
        in ``env`` (see :meth:`sums`): ``base`` is ``(True, -0.0)``, ``base + x`` is
        ``(True, x)``, any other value ``(False, v)``.  Exact, signs of zeros too: adding
        -0.0 gives back every float (adding +0.0 turns -0.0 into +0.0)."""
        t = base.type
        assert isinstance(t, TensorType)
        dtype, shape = numpy_dtype(t.dtype), np.shape(env[base])
        if v is base:
            return jnp.asarray(True), jnp.full(shape, -0.0, dtype)
        if isinstance(v, Node) and v.op.name == "Add" and base in v.inputs:
            x = v.inputs[1] if v.inputs[0] is base else v.inputs[0]
            return jnp.asarray(True), jnp.broadcast_to(jnp.asarray(self.value(x, env), dtype), shape)
        if _Delta(v, base) in env:
            return env[_Delta(v, base)]  # type: ignore[no-any-return]
        # Any other value (also an If's output that did not record a sum on ``base``).
        other = jnp.asarray(self.as_jax(base, self.value(v, env), shape), dtype)
        return jnp.asarray(False), jnp.broadcast_to(other, shape)

    def work(self, seq: Seq) -> float:
        """About how many multiply-adds ``seq`` and its Ifs do: the elements of each node's
        result, times the contracted size of a matrix product or a convolution's window
        (a node whose sizes are not known while tracing counts nothing, as before)."""
        total = 0.0
        for item in seq.items:
            if isinstance(item, If):
                total += self.work(item.then) + self.work(item.orelse)
            elif isinstance(item, Loop):
                return float("inf")
            elif isinstance(item, Node) and isinstance(item.type, TensorType):
                try:
                    n = float(np.prod(self.shape(item.type)))
                    name, ins = item.op.name, [i.type for i in item.inputs]
                    if name in _PRODUCTS and ins and isinstance(ins[0], TensorType):
                        n *= self.shape(ins[0])[-1]
                    elif name in _CONVOLUTIONS and len(ins) > 1 and isinstance(ins[1], TensorType):
                        n *= float(np.prod(self.shape(ins[1])[1:]))
                except (ValueError, IndexError):
                    continue
                total += n
        return total

    def select(self, r: If, c: Any, env: dict[Any, Any]) -> None:
        """A small If without loops or effects as both arms and a select: a ``lax.cond``
        costs a conditional and copies of its operands on every run, more than a few
        small ops computed twice (the reverse sweep of a gradient is a chain of them)."""
        outs = []
        outer = self.predicate
        c = jnp.asarray(c, np.bool_)
        arms = ((r.then, [m.then_value for m in r.outputs], c), (r.orelse, [m.else_value for m in r.outputs], ~c))
        deltas: list[dict[tuple[Merge, Name], Any]] = []
        try:
            for body, picks, taken in arms:
                # Pushes in an arm write only where it is taken (see rules_shape._stack_push).
                self.predicate = taken if outer is None else outer & taken
                local = dict(env)
                self.nested_seq(body, local)
                outs.append([self.value(p, local) for p in picks])
                deltas.append({})
                self.record_sums(r, env, lambda m, base: self.delta(m.then_value if taken is c else m.else_value,
                                                                    base, local), deltas[-1])
        finally:
            self.predicate = outer
        for (m, base), d in deltas[0].items():
            if (m, base) in deltas[1]:  # (XLA drops it where no enclosing If reads it)
                env[_Delta(m.name, base)] = tuple(_pick(c, x, y) for x, y in zip(d, deltas[1][m, base]))
        for m, a, b in zip(r.outputs, *outs):
            target = self.agree(m.name, a, b)
            if isinstance(target, PadTo) or isinstance(a, Unread) or isinstance(b, Unread):
                a, b = self.fit(m.name, a, target), self.fit(m.name, b, target)  # e.g. a list appended to in one arm
            else:
                a, b = self.as_jax(m.name, a), self.as_jax(m.name, b)
            env[m.name] = jax.tree_util.tree_map(lambda x, y: _pick(c, x, y), a, b)

    def loop(self, r: Loop, env: dict[Any, Any]) -> None:
        try:
            holds = checks(r.cond, self.failing) or checks(r.body, self.failing)
            self.checked_region(holds, lambda checked: self._loop(r, env, checked))
        except XlaLoweringError as e:
            _locate(e, _grower(r.body) or (r.test if isinstance(r.test, Node) else None))

    def _loop(self, r: Loop, env: dict[Any, Any], checked: bool) -> None:
        names = [c.var for c in r.carried]
        raw = [self.value(c.init, env) for c in r.carried]
        init = [self.as_jax(c.var, v) for c, v in zip(r.carried, raw)]
        shapes: list[Target] = [None] * len(names)

        heap = self.heap
        # Where the loop pushes, the stack buffers are carried too (after the values), and
        # where it holds a check, the failure code (last).
        threads = heap is not None and (pushes(r.cond) or pushes(r.body))
        status = self.status_now() if checked else self.status
        n_values = len(names)
        if threads:
            assert heap is not None
            init = [*init, *heap]
        if checked:
            init = [*init, jnp.asarray(status, np.int32)]

        def bind(carry: Sequence[Any]) -> dict[Any, Any]:
            local = dict(env)
            local.update(zip(names, carry))
            self.heap = list(carry[n_values:len(carry) - checked]) if threads else heap
            self.status = carry[-1] if checked else status
            for n in r.cond:
                local[n] = self.node(n, [local[i] for i in n.inputs])
            return local

        def cond_fn(carry: list[Any]) -> Any:
            # The barrier hides the induction pattern from XLA's trip-count analysis, which
            # in this jaxlib runs `k = 0; while k < 1: k += 2` zero times instead of once
            # (tests/test_backends_xla.py::test_loop_with_a_step_past_its_bound).
            carry = lax.optimization_barrier(carry)  # type: ignore[no-untyped-call]
            local = bind(carry)
            return self.running(self.value(r.test, local))

        def body_fn(carry: list[Any]) -> list[Any]:
            local = bind(carry)
            self.nested_seq(r.body, local)
            nexts = [self.fit(c.var, self.value(c.next, local), s) for c, s in zip(r.carried, shapes)]
            if threads:
                nexts += self.heap or []
            return [*nexts, jnp.asarray(self.status, np.int32)] if checked else nexts

        trips = self.static_trip_count(r, env, raw)

        def settle() -> None:
            """Iterate abstractly until the carried shapes the types leave open are stable."""
            nonlocal shapes
            for _ in range(8):
                self.abstract += 1
                try:
                    out = jax.eval_shape(body_fn, init)
                finally:
                    self.abstract -= 1
                settled = True
                for k, (n, v, o) in enumerate(zip(names, init[:n_values], out[:n_values])):
                    if isinstance(shapes[k], PadTo):
                        continue  # padded to its bound for the whole loop
                    if isinstance(raw[k], Unread):
                        # No iteration reads the value it enters with: it takes the body's shape.
                        raw[k] = init[k] = self.fit(n, raw[k], self.agree(n, raw[k], o))
                        settled = False
                        continue
                    target = self.agree(n, v, o)
                    if target is None or target == tuple(np.shape(raw[k])):
                        continue
                    settled = False
                    if isinstance(target, PadTo):
                        shapes[k] = self.loop_bound(r, n, v, target, trips)
                        raw[k] = init[k] = self.fit(n, v, shapes[k])
                        continue
                    _refuse_growing(r, n, v, o, target)
                    raw[k] = self.widen(n, raw[k], target)
                    init[k] = self.as_jax(n, raw[k])
                if settled:
                    break
            shapes = [s if isinstance(s, PadTo) else
                      None if isinstance(getattr(n, "type", None), StackType) else tuple(np.shape(v))
                      for n, v, s in zip(names, init, shapes)]

        def execute() -> list[Any]:
            self.heap, self.status = heap, status
            if trips is not None:
                # A counted loop: a scan of known length (no test per iteration, and XLA knows
                # the trip count without analysing the induction).
                final = lax.fori_loop(0, trips, lambda _, carry: body_fn(carry), init)
            elif any(isinstance(t, PadTo) and t.run_time for t in shapes):
                # A list grown on a run-time number of trips, padded for `capacity` of them: the
                # trips are counted and reported to the executable, which compiles again with a
                # larger capacity where they were more (and runs again).
                def counted(carry: list[Any]) -> list[Any]:
                    return [*body_fn(carry[:-1]), carry[-1] + 1]
                *final, trips_run = lax.while_loop(lambda c: cond_fn(c[:-1]), counted, [*init, jnp.zeros((), np.int64)])
                self.trips.used = True
                jax.debug.callback(self.report_trips, trips_run)
            elif _UNROLL > 1 and self.light(r.body) and (threads or _branches(r.body)):
                # A small body without effects that branches or pushes (a gradient's sweeps):
                # _UNROLL iterations per trip of the XLA loop, each after the first computed
                # always and kept where the test still holds.  (Measured: W4-small 2.6x -> 1.7x
                # of JAX; a straight-line body such as W3's gets slower, so it is left alone.
                # 2 runs W4-small as fast as 4 (2.6 vs 2.7 ms CPU; 1: 3.4) and compiles its
                # gradient in 1.65 s of CPU instead of 2.65; W4-large is 403-409 ms for 1, 2, 4.)
                def unrolled(carry: list[Any]) -> list[Any]:
                    carry = body_fn(carry)
                    outer = self.predicate
                    try:
                        for _ in range(_UNROLL - 1):
                            again = self.running(self.value(r.test, bind(carry)))
                            self.predicate = again if outer is None else outer & again
                            nxt = body_fn(carry)
                            carry = [*jax.tree_util.tree_map(lambda x, y, a=again: _pick(a, x, y), nxt[:n_values],
                                                             carry[:n_values]), *nxt[n_values:]]
                    finally:
                        self.predicate = outer
                    return carry
                final = lax.while_loop(cond_fn, unrolled, init)
            else:
                final = lax.while_loop(cond_fn, body_fn, init)
            return list(final)

        foreseen = self.open_shape(names) or _sizes_from_data(r.body)
        if foreseen:
            settle()
        node = _grower(r.body) or (r.test if isinstance(r.test, Node) else None)
        try:
            final = execute()
        except TypeError:
            if foreseen:
                self.unsettled = self.unsettled or node
                raise
            # The carry changes in a way nothing above foresaw (a padded value from before the
            # loop replaced by the body): settle the carried shapes, trace again.
            settle()
            try:
                final = execute()
            except TypeError:
                self.unsettled = self.unsettled or node
                raise
        self.heap = list(final[n_values:len(final) - checked]) if threads else heap
        self.status = final[-1] if checked else status
        after = dict(zip(names, final[:n_values]))
        for res in r.results:
            env[res.name] = after[res.var]

    def loop_bound(self, r: Loop, name: Any, init: Any, target: PadTo, trips: int | None) -> PadTo:
        """The bound of a carried value that grows along ``target.axis`` (a list appended
        to): its size on entry plus the trip count times what one iteration adds at most
        (``target`` is what one iteration gives).  Where the trip count is known only at
        run time, ``capacity`` trips: the loop counts its trips and reports them
        (:class:`TripCount`), and the executable compiles again with a larger capacity
        when they were more."""
        layout = _layout(init)
        assert layout is not None
        before = layout[0][target.axis]
        growth = target.shape[target.axis] - before
        if growth <= 0:
            return target
        run_time = trips is None
        if trips is None:
            trips = self.layout.capacity
        shape = list(target.shape)
        shape[target.axis] = before + trips * growth
        return PadTo(tuple(shape), target.axis, run_time)

    def report_trips(self, trips: Any) -> None:
        """Called back from a run: a loop that grows a list ran ``trips`` times."""
        self.trips.most = max(self.trips.most, int(trips))

    def static_trip_count(self, r: Loop, env: Mapping[Any, Any], raw: Sequence[Any]) -> int | None:
        """How many times ``r`` runs, where that is known while tracing: its test is
        ``i < bound`` (or ``<=``) on a carried ``i`` that starts at a static int and every
        iteration adds 1 to, unconditionally, with a static bound; a loop that leaves from
        its body (``break``) has a flag as its test and is not counted.  Else None."""
        test = r.test
        if not isinstance(test, Node) or test not in r.cond or test.op.name not in ("Less", "LessEqual"):
            return None
        counter, bound_name = test.inputs
        carries = {c.var: (c, v) for c, v in zip(r.carried, raw)}
        if counter not in carries or bound_name in r.cond or bound_name in carries:
            return None
        carry, start = carries[counter]
        bound = env.get(bound_name)
        step = carry.next
        if not (isinstance(step, Node) and step.op.name == "Add" and step in r.body.items):
            return None
        one = [v for v in step.inputs if v is not counter]
        if len(one) != 1 or step.inputs.count(counter) != 1:
            return None
        inc = env.get(one[0]) if one[0] not in r.body.items else None
        if isinstance(one[0], Node) and one[0] in r.body.items and one[0].op.name == "Constant":
            inc = one[0].attrs["value"]
        values: list[Any] = [start, bound, inc]
        if not all(is_static(v) and np.ndim(v) == 0 and np.asarray(v).dtype.kind in "iu" for v in values):
            return None
        lo, hi, by = (int(v) for v in values)
        if by != 1:
            return None
        return max(0, hi + (1 if test.op.name == "LessEqual" else 0) - lo)


# An If whose arms hold at most this many nodes, no region and no op with effects or a host
# callback becomes a select (Trace.select).
_SELECT_NODES = 100
# ... and at most this much arithmetic (Trace.work): a select computes both arms, a
# lax.cond costs a few microseconds, about this many multiply-adds.
_SELECT_WORK = 1 << 16
_PRODUCTS = frozenset({"MatMul", "Gemm", "Einsum"})
_CONVOLUTIONS = frozenset({"Conv", "ConvTranspose"})
_UNROLL = 2


def _branches(seq: Seq) -> bool:
    return any(isinstance(item, If) for item in seq.items)


def _flat(seq: Seq, heap: bool = False) -> bool:
    """Whether ``seq`` may run as part of a select (see Trace.select); ``heap``: pushes
    are allowed (predicated pushes to buffers that live apart)."""
    return _size(seq, heap) <= _SELECT_NODES


def _size(seq: Seq, heap: bool = False) -> int:
    """The nodes in ``seq`` and its nested Ifs; a large number where it holds a loop or an
    op with effects."""
    count = 0
    for item in seq.items:
        if isinstance(item, Loop):
            return _SELECT_NODES + 1
        if isinstance(item, If):
            count += _size(item.then, heap) + _size(item.orelse, heap)
        elif isinstance(item, Node):
            # (StackPop is a read here: the buffers do not change, only the count)
            if item.op.name == "StackPush" and heap:
                count += 1
                continue
            if (not item.op.pure and item.op.name != "StackPop") or item.op.name in ("Call", "StackPush") \
                    or item.op.name in HOST_EFFECTS:
                return _SELECT_NODES + 1
            count += 1
    return count


@dataclass(frozen=True, eq=False)
class _Delta:
    """The key under which an If's output that is a sum (see :meth:`Trace.sums`) keeps
    what it added to ``base``, for an enclosing If's arm."""

    name: Any
    base: Any

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Delta) and other.name is self.name and other.base is self.base

    def __hash__(self) -> int:
        return hash((id(self.name), id(self.base)))


def _dtype(v: Any) -> str | None:
    t = getattr(v, "type", None)
    return t.dtype if isinstance(t, TensorType) else None


def _sum_bases(v: Value, arm: Seq) -> dict[Any, bool]:
    """The values ``base`` that ``v`` (read at the end of ``arm``) is, or is ``base`` plus
    something: ``base`` -> whether something is added (see :meth:`Trace.sums`)."""
    found: dict[Any, bool] = {}
    if isinstance(v, (Node, Var)):
        found[v] = False
    if isinstance(v, Node) and v.op.name == "Add" and len(v.inputs) == 2 \
            and _dtype(v.inputs[0]) == _dtype(v.inputs[1]) == _dtype(v) is not None:
        for i in v.inputs:
            found.setdefault(i, True)  # (Trace.sums checks that its shape is the sum's)
    for item in arm.items:
        if isinstance(item, If):
            for m in item.outputs:
                if m.name is v:
                    a, b = _sum_bases(m.then_value, item.then), _sum_bases(m.else_value, item.orelse)
                    # The first such base, the one that If's cond adds to (Trace.sums).
                    for base in [*a, *(k for k in b if k not in a)]:
                        if (a.get(base) or b.get(base)) and _dtype(base) == _dtype(v):
                            found.setdefault(base, True)
                            break
    return found


def _pick(c: Any, a: Any, b: Any) -> Any:
    if a is None and b is None:
        return None
    a, b = jnp.asarray(a), jnp.asarray(b)
    if a.shape != b.shape:
        shape = np.broadcast_shapes(a.shape, b.shape)
        if 0 in shape and np.size(a) + np.size(b) > 0:
            # [0] and [1] broadcast to [0]: an empty result where one arm has data.
            raise ValueError(f"arms of shapes {list(a.shape)} and {list(b.shape)} have no common shape")
        a, b = jnp.broadcast_to(a, shape), jnp.broadcast_to(b, shape)
    return lax.select(jnp.broadcast_to(jnp.asarray(c, np.bool_), a.shape), a, b.astype(a.dtype))


def _sizes_from_data(seq: Seq) -> bool:
    """Whether ``seq`` or its nested regions hold an op whose result has a data-dependent
    size (a Padded value, which may meet an unpadded one where paths join)."""
    for item in seq.items:
        if isinstance(item, Node) and item.op.size_output is not None:
            return True
        if isinstance(item, If) and (_sizes_from_data(item.then) or _sizes_from_data(item.orelse)):
            return True
        if isinstance(item, Loop) and _sizes_from_data(item.body):
            return True
    return False


def _grower(seq: Seq) -> Node | None:
    """The first Append or Concat in ``seq`` and its nested regions (what makes a loop's
    carried value grow, for the error that names it)."""
    for item in seq.items:
        if isinstance(item, Node) and item.op.name in ("Append", "Concat"):
            return item
        found = None
        if isinstance(item, If):
            found = _grower(item.then) or _grower(item.orelse)
        elif isinstance(item, Loop):
            found = _grower(item.body)
        if found is not None:
            return found
    return None


def carry_refused(e: TypeError, tr: Trace) -> XlaLoweringError:
    """JAX's refusal of a loop carry whose layout the body changes (found by the script
    fuzzer: a value padded on entry that a path of the body replaces by a plain one, with
    variables assigned on some paths only), as the error that names the loop."""
    first = str(e).split("\n")[0]
    return XlaLoweringError(f"a loop-carried value changes layout between iterations ({first}); "
                            "XLA needs one layout per value: run this function on the python or llvm backend",
                            tr.unsettled)


def _locate(e: XlaLoweringError, node: Node | None) -> NoReturn:
    """Raises ``e`` again, naming ``node`` where it names none: paths of a region that
    disagree on a value's shape (Trace.agree) are located by the node that grows it."""
    if e.node is not None or node is None:
        raise e
    raise XlaLoweringError(str(e), node) from e


def _refuse_growing(r: Loop, name: Any, init: Any, out: Any, joint: tuple[int, ...] | None) -> None:
    """A carried value whose shape the body changes in more than one way (not along one
    axis, as a list grows) has no one shape: say so."""
    if joint is None or not hasattr(out, "shape") or tuple(out.shape) == joint:
        return
    node = _grower(r.body) or (r.test if isinstance(r.test, Node) else None)
    raise XlaLoweringError(
        f"loop-carried value %{_label(name)} has shape {list(np.shape(init))} before an iteration and "
        f"{list(out.shape)} after it: a value that grows in a loop in more than one dimension has no "
        "static shape, so XLA cannot compile this loop; run the graph on the python or llvm backend", node)


def _label(name: Any) -> str:
    return str(getattr(name, "hint", None) or getattr(name, "name", None) or "?")


def _is_concrete(v: Any) -> bool:
    return is_static(v) or (isinstance(v, jax.Array) and not isinstance(v, jax.core.Tracer))


def _joint(a: Any, b: Any) -> tuple[int, ...] | None:
    """The shape two paths' values agree on (their broadcast); None for stacks."""
    if not hasattr(a, "shape") or not hasattr(b, "shape"):
        return None
    if tuple(a.shape) == tuple(b.shape):
        return tuple(a.shape)
    try:
        return tuple(np.broadcast_shapes(tuple(a.shape), tuple(b.shape)))
    except ValueError:
        return tuple(a.shape)  # let as_jax report the mismatch
