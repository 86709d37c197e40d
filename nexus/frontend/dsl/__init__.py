"""The with-statement DSL of seed 000: build a Nexus graph by running Python.

    import nexus as nx

    with nx.function("skip5") as f:
        s = nx.constant(0, dtype="i32", name="sum_init")
        i = nx.constant(1, dtype="i32", name="i_init")
        with nx.while_loop(nx.less_equal(i, 10)):
            with nx.if_cond(nx.equal(i, 5)):
                with nx.then():
                    i = i + 1
                    nx.continue_()
            s = s + i
            i = i + 1
            with nx.if_cond(s > 25):
                with nx.then():
                    nx.break_()
        f.returns(s)
    f.graph()  # -> 31

How values flow: plain Python rebinding.  At every block boundary the builder reads the
variables of the frames that opened a region and, on entering a block, rebinds each
variable holding a graph value to that variable's value in the new block (a loop-header
Phi, an if-join Phi); SSA is built on the fly (Braun et al.), so unchanged variables get
no Phi.  Python numbers are variables too: a Constant is made only when a graph value
needs one (different numbers on two paths, or a number the loop body assigns, which the
builder sees in the source of the ``with`` block).

Loop conditions: one written on the ``with`` line is re-evaluated from its source in the
loop header, exactly like Python's ``while``; a callable (``nx.while_loop(lambda: x <
limit)``) is called there; a value built earlier is re-emitted in the header from its
expression DAG, with each value a variable held at loop entry replaced by that
variable's current value (ambiguous cases are refused with a request for a callable).

Limits: only variables of the frames that open regions (locals, or globals at module
level) are tracked; graph values kept in containers or attributes are snapshots, valid
only inside the region that made them (using one elsewhere is an error).  ``break_``,
``continue_``, ``returns`` and ``return_`` end the Python block like their keywords
(the code after them does not run).  Inside ``@nx.graph`` functions use
``nx.return_(...)``, not ``return``, inside a region (a ``return`` there is reported).
CPython only (frame locals are rebound through the C API before 3.13).
"""

from __future__ import annotations

import ast
import inspect
import textwrap
from collections.abc import Callable
from types import TracebackType
from typing import Any, NoReturn

from nexus.frontend.dsl import control
from nexus.frontend.dsl.builder import (
    BranchRegion,
    Builder,
    DSLError,
    IfRegion,
    LoopRegion,
    Unreachable,
    current_builder,
    reset_current,
    set_current,
)
from nexus.frontend.dsl.frames import user_frame, user_loc
from nexus.frontend.dsl.ops import dtype_name, op_functions
from nexus.frontend.dsl.value import Value
from nexus.frontend.values import to_array
from nexus.ir.graph import Graph
from nexus.ir.types import TensorType, Type, parse_dim

__all__ = [
    "DSLError", "Value", "break_", "constant", "continue_", "device", "else_", "function", "graph", "if_cond",
    "machine", "return_", "then", "while_loop",
]

TypeSpec = Any  # "f32" | np.float32 | TensorType | (dtype, shape)


def _tensor_type(spec: TypeSpec, what: str) -> Type:
    if isinstance(spec, Type):
        return spec
    try:
        if isinstance(spec, tuple) and len(spec) == 2:
            dtype, shape = spec
            dims = tuple(parse_dim(d) if isinstance(d, str) else int(d) for d in shape)
            return TensorType(dtype_name(dtype), dims)
        return TensorType(dtype_name(spec), ())
    except (ValueError, TypeError) as e:
        raise DSLError(f"{what}: bad type {spec!r} ({e}); use a dtype such as 'f32', a (dtype, shape) pair "
                       "or a TensorType", user_loc()) from None


# --- values ----------------------------------------------------------------------------
def constant(value: Any, dtype: Any = None, name: str | None = None) -> Value:
    """A tensor known when the graph is built; Python scalars are weakly typed unless
    ``dtype`` is given (int -> i64, float -> f32, bool -> bool)."""
    b = current_builder("nx.constant")
    b.check_can_emit("nx.constant")
    try:
        arr = to_array(value, None if dtype is None else dtype_name(dtype))
    except (ValueError, TypeError) as e:
        b.fail(f"nx.constant: {e}")
    return b.wrap(b.add("Constant", [], {"value": arr}, name=name, what="nx.constant"))


# --- functions -------------------------------------------------------------------------
class function:  # noqa: N801  (used as `with nx.function(...)`, like a statement)
    """Build a graph: ``with nx.function("name", x="f32") as f: ...; f.returns(v)``,
    then ``f.graph``.  Keyword arguments declare the graph's arguments and their types
    (a dtype, a ``(dtype, shape)`` pair or a TensorType); read them as ``f.args``."""

    def __init__(self, name: str = "main", **args: TypeSpec):
        self.name = name
        self._arg_types = {k: _tensor_type(v, f"argument {k!r}") for k, v in args.items()}
        self._builder: Builder | None = None
        self._token: Any = None
        self._graph: Graph | None = None

    def _start(self, frame: Any) -> Builder:
        loc = user_loc()
        self._builder = Builder(self.name, list(self._arg_types.values()), list(self._arg_types), frame, loc)
        self._token = set_current(self._builder)
        return self._builder

    def __enter__(self) -> function:
        self._start(user_frame())
        return self

    @property
    def args(self) -> tuple[Value, ...]:
        b = self._live("args")
        return tuple(b.wrap(a) for a in b.g.args)

    def arg(self, name: str) -> Value:
        b = self._live("arg")
        if name not in self._arg_types:
            b.fail(f"graph @{self.name} has no argument {name!r} (it has {', '.join(self._arg_types) or 'none'})")
        return b.wrap(b.g.args[list(self._arg_types).index(name)])

    def returns(self, *values: Any) -> NoReturn:
        """Return ``values`` from the graph here; like ``return``, the rest of the block
        does not run."""
        b = self._live("returns")
        b.emit_return(values)
        raise Unreachable()

    def _live(self, what: str) -> Builder:
        if self._builder is None or self._builder.closed:
            raise DSLError(f"{what}: graph @{self.name} is not being built", user_loc())
        return self._builder

    @property
    def graph(self) -> Graph:
        if self._graph is None:
            raise DSLError(f"graph @{self.name} is not finished: read f.graph after the `with` block", user_loc())
        return self._graph

    def __exit__(self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> bool:
        assert self._builder is not None
        try:
            if et is None or et is Unreachable:
                self._graph = self._builder.finish(reachable=et is None)
        finally:
            self._builder.closed = True
            reset_current(self._token)
        return et is Unreachable


def return_(*values: Any) -> NoReturn:
    """Return ``values`` from the graph being built (an early return in a region)."""
    b = current_builder("nx.return_")
    b.emit_return(values)
    raise Unreachable()


def graph(fn: Callable[..., Any] | None = None, *, name: str | None = None,
          **arg_types: TypeSpec) -> Any:
    """Decorator: run a Python builder function once, its parameters being the graph's
    arguments, its return value (a value or a tuple) the results; gives the Graph.
    Types come from keyword arguments (``@nx.graph(x="f32")``) or annotations."""

    def build(f: Callable[..., Any]) -> Graph:
        try:
            sig = inspect.signature(f, eval_str=True)
        except (NameError, SyntaxError, TypeError):
            sig = inspect.signature(f)
        types: dict[str, TypeSpec] = {}
        for p in sig.parameters.values():
            spec = arg_types.get(p.name, p.annotation)
            if spec is inspect.Parameter.empty:
                raise DSLError(f"@nx.graph: argument {p.name!r} of {f.__name__} needs a type, e.g. "
                               f"@nx.graph({p.name}='f32') or `{p.name}: 'f32'`", user_loc())
            types[p.name] = spec
        _check_no_return_in_regions(f)
        fb = function(name or f.__name__, **types)
        b = fb._start(None)
        try:
            try:
                out = f(*fb.args)
                results = () if out is None else tuple(out) if isinstance(out, (tuple, list)) else (out,)
                b.emit_return(results)
                reachable = False
            except Unreachable:
                reachable = False
            g = b.finish(reachable)
        finally:
            b.closed = True
            reset_current(fb._token)
        return g

    if fn is not None:
        return build(fn)
    return build


_REGION_NAMES = frozenset({"while_loop", "if_cond", "then", "else_"})


def _check_no_return_in_regions(f: Callable[..., Any]) -> None:
    """A Python ``return`` inside a DSL region would leave the region as if it ended
    normally, silently dropping the control flow; report it instead."""
    try:
        source = textwrap.dedent(inspect.getsource(f))
        first = f.__code__.co_firstlineno
        tree = ast.parse(source)
    except (OSError, TypeError, SyntaxError):
        return
    fdef = tree.body[0] if tree.body else None
    if not isinstance(fdef, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return

    def region_with(node: ast.AST) -> bool:
        if not isinstance(node, ast.With):
            return False
        for item in node.items:
            call = item.context_expr
            func = call.func if isinstance(call, ast.Call) else None
            fname = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
            if fname in _REGION_NAMES:
                return True
        return False

    def visit(node: ast.AST, inside: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
                continue
            if isinstance(child, ast.Return) and inside:
                from nexus.ir.node import SourceLoc

                raise DSLError("a Python `return` inside a `with nx.while_loop/if_cond/then/else_` block would "
                               "leave the region as if it ended normally; use nx.return_(value)",
                               SourceLoc(f.__code__.co_filename, first + child.lineno - 1))
            visit(child, inside or region_with(child))

    visit(fdef, False)


# --- control flow ----------------------------------------------------------------------
class while_loop:  # noqa: N801
    """``with nx.while_loop(cond):`` runs its body while ``cond`` holds.  ``cond`` is a
    bool scalar value (re-evaluated every iteration from the current values of the
    variables it was computed from), a Python bool, or a callable called in the header."""

    def __init__(self, cond: Value | bool | Callable[[], Any]):
        self.cond = cond
        self._region: LoopRegion | None = None
        self._builder: Builder | None = None

    def __enter__(self) -> while_loop:
        b = current_builder("nx.while_loop")
        self._builder = b
        self._region = control.loop_enter(b, self.cond, user_frame(), user_loc())
        return self

    def __exit__(self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> bool:
        assert self._builder is not None and self._region is not None
        if et is not None and et is not Unreachable:
            self._builder.abandon(self._region)
            return False
        control.loop_exit(self._builder, self._region, reachable=et is None)
        return et is Unreachable


class if_cond:  # noqa: N801
    """``with nx.if_cond(c):`` followed by ``with nx.then():`` and/or ``with nx.else_():``."""

    def __init__(self, cond: Value | bool):
        self.cond = cond
        self._region: IfRegion | None = None
        self._builder: Builder | None = None

    def __enter__(self) -> if_cond:
        b = current_builder("nx.if_cond")
        self._builder = b
        self._region = control.if_enter(b, self.cond, user_frame(), user_loc())
        return self

    def __exit__(self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        assert self._builder is not None and self._region is not None
        if et is not None:
            self._builder.abandon(self._region)
            return
        control.if_exit(self._builder, self._region)


class _Branch:
    kind = ""

    def __init__(self) -> None:
        self._region: BranchRegion | None = None
        self._builder: Builder | None = None

    def __enter__(self) -> _Branch:
        b = current_builder(f"nx.{self.kind}")
        self._builder = b
        self._region = control.branch_enter(b, self.kind, user_frame(), user_loc())
        return self

    def __exit__(self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> bool:
        assert self._builder is not None and self._region is not None
        if et is not None and et is not Unreachable:
            self._builder.abandon(self._region)
            return False
        control.branch_exit(self._builder, self._region, reachable=et is None)
        return et is Unreachable


class then(_Branch):  # noqa: N801
    """The branch of the enclosing ``if_cond`` taken when its condition is true."""

    kind = "then"


class else_(_Branch):  # noqa: N801
    """The branch of the enclosing ``if_cond`` taken when its condition is false."""

    kind = "else_"


class device:  # noqa: N801
    """``with nx.device("/GPU:0"):`` places the data nodes built inside (their ``device``
    and, if given, ``machine`` attributes); nests, the innermost winning.  The placement
    pass (``nexus.passes.placement``) then runs each node there and inserts a Memcpy
    where a value crosses devices (seed 001, section 4.2; docs/devices.md)."""

    def __init__(self, name: str, machine: str | None = None):
        self.placement = {"device": name} if machine is None else {"device": name, "machine": machine}
        self._saved: dict[str, str] = {}
        self._builder: Builder | None = None

    def __enter__(self) -> device:
        b = current_builder("nx.device")
        self._builder, self._saved = b, b.placement
        b.placement = {**b.placement, **self.placement}
        return self

    def __exit__(self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        assert self._builder is not None
        self._builder.placement = self._saved


class machine(device):  # noqa: N801
    """``with nx.machine("host1"):`` places the data nodes built inside on a machine (a rank
    of ``nexus.distributed``); a value crossing machines goes by Send/Recv."""

    def __init__(self, name: str):
        super().__init__("")
        self.placement = {"machine": name}


def break_() -> NoReturn:
    """Leave the innermost ``while_loop``; the rest of the block does not run."""
    control.jump_out(current_builder("nx.break_()"), "nx.break_()", to_header=False)


def continue_() -> NoReturn:
    """Go to the next iteration of the innermost ``while_loop``."""
    control.jump_out(current_builder("nx.continue_()"), "nx.continue_()", to_header=True)


# --- the op functions, generated from the registry -------------------------------------
_OPS: dict[str, Callable[..., Value]] = {}


def __getattr__(name: str) -> Any:
    # Generated lazily and looked up by name, so ops registered later appear too.
    if name not in _OPS:
        _refresh_ops()
    try:
        return _OPS[name]
    except KeyError:
        raise AttributeError(f"module 'nexus.frontend.dsl' has no attribute {name!r}") from None


def op_names() -> list[str]:
    """The public names of every op function, for docs and ``dir``."""
    _refresh_ops()
    return sorted(_OPS)


def _refresh_ops() -> None:
    for public, fn in op_functions().items():
        _OPS.setdefault(public, fn)  # keep the functions already handed out


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(op_names()))

