"""``@nx.script``: a plain Python function with real control flow becomes a Nexus graph.

::

    @nx.script
    def accumulate(x: Tensor, n: int) -> Tensor:
        y = x
        for i in range(n):
            y = y + i
        return y

    accumulate(np.ones(3, np.float32), 4)   # runs the graph on the interpreter
    accumulate.graph                        # the graph of the last signature used

The source is parsed with ``ast`` and turned into SSA directly (Braun et al., CC 2013; see
:mod:`nexus.frontend.script.ssa`).  Supported: assignments (tuple unpacking, ``+=``),
arithmetic, bitwise operators (``& | ^ ~ << >>`` on ints; ``& | ^`` on two bools are
logical), comparisons (chained), ``and``/``or``/``not`` (short-circuit, with Python's
value semantics), conditional expressions, ``if``/``elif``/``else``, ``while`` and ``for``
over ``range(...)`` or a tensor's first axis (both with ``else``), ``break``,
``continue``, any number of ``return``s, ``assert`` (a runtime check), ``raise`` (an
exception class, or a call of one with constant arguments: the call raises that exception
where Python would), subscripts and
slices, ``nx.<op>`` calls, ``math``/NumPy functions, ``abs/min/max/float/int/bool/len/
round``, calls to other scripts (a ``Call`` node) and to undecorated helpers (inlined).
Subscript assignment (``x[i] = v``, ``x[i, j] += v``, ``x[a:b] = v``, ``x[mask] = v``,
``x[idx] = v``) rebinds ``x`` to a ``SetItem`` of its old value, as JAX's
``x.at[...].set(v)``, with NumPy's broadcasting, negative and repeated indices.
**Aliasing: a write works on a copy.**  Writing into an argument never changes the
caller's array, and after ``b = a; b[0] = 1`` only ``b`` sees the write (in NumPy ``a``
would too); the python backend still updates in place whenever the old value is dead and
nothing else holds its buffer, so a loop writing one element per step is O(1) per step.
NumPy as model code uses it, with NumPy's defaults and keywords: creation (``zeros``,
``ones``, ``full``, ``empty``, ``*_like``, ``arange``, ``linspace``, ``eye``, ``array`` of
literals), shapes (``reshape`` with -1, ``transpose``/``.T``, ``swapaxes``, ``moveaxis``,
``squeeze``, ``expand_dims``, ``stack``, ``concatenate``, ``split``, ``broadcast_to``,
``flip``, ``roll``, ``tile``, ``repeat``, ``pad`` (constant, edge, reflect), ``where``,
``take``, ``take_along_axis``, ``x[:, None]``, ``x[mask]``), math (``clip``, ``isnan``,
``log1p``, ``power``, ``logical_*`` ... beside the ufuncs), reductions with
``axis``/``keepdims`` (``sum``, ``mean``, ``var``, ``std``, ``max``, ``prod``, ``any``,
``all``, ``argmax``, ``cumsum``, ``cumprod``, ``sort``, ``argsort``), ``einsum``, ``outer``,
``linalg.norm`` (vector norms, and the Frobenius norm), the matching array methods,
``.shape``/``.ndim``/``.size``/``.dtype``, list literals as arguments, and ``return (x,)``.
**Lists** (``xs = []``, ``xs = [a, b]``, ``xs.append(v)``, also inside loops) hold values of
one dtype and rank.  Items of one shape (the same ints and symbols) are kept as their stacked
tensor ``[len, *shape]``: ``np.stack(xs)``, ``np.concatenate(xs)``, ``len(xs)``, ``xs[i]`` and
``for v in xs`` read it as NumPy reads an array (so a script returning ``xs`` returns that
tensor, not a Python list).  Items whose shapes may differ (a slice to a bound computed in
a loop) make the list a sequence (``seq<...>``, see :mod:`nexus.frontend.script.lists`),
read as Python reads a list and returned as a Python list of arrays; a second name for
a list (``zs = xs``) is refused, since Python's names would share one list and a script's
list is a value (``zs = xs[:]`` copies the items so far).  On the python backend an append costs what a
Python ``list.append`` does (amortised O(1): the stacked tensor has spare rows).
Module globals and closure variables that are numbers or arrays become constants.
Anything else fails at decoration or first call with a :class:`ScriptError` quoting the
line, with a caret at the column and what to write instead.

Types follow Python, because a script promises the function's Python meaning: ``int`` is
i64 and ``float`` is **f64** (Python floats are doubles; DESIGN's weak typing makes a lone
float f32, which is right for the DSL but would change the results of a Python function);
``/`` on ints gives a float, ``//`` and ``%`` floor.  Python numbers next to a tensor take
its dtype (NumPy's rule).  Known differences from Python: ints are 64-bit (they wrap
instead of growing: ``a << b`` keeps the low 64 bits, so it is 0 once ``b >= 64``), float
division by zero gives inf/nan instead of raising, ``math`` functions run as NumPy
kernels (``math.tanh`` and ``np.tanh`` may differ in the last bit), ``max``/``min``
propagate NaN, ``x += y`` on a tensor rebinds ``x`` (a script
never mutates an array), and every i64/f64/bool scalar acts as a Python number: NumPy 2
treats ``np.float64`` scalars (``x[0]`` of a float64 array, ``np.tanh(1.0)``) as strong,
so ``float32_array + x[0]`` is float64 in NumPy but float32 in a script.  A variable
must keep one dtype (shapes may change: a loop whose tensor grows gets a symbolic dim),
and a read where it is unassigned on the path taken raises UnboundLocalError at run time,
as in Python (a read no path assigns ends its path there, as ``raise`` does).

Arguments may be annotated ``int``, ``float``, ``bool``, ``Tensor`` or ``Tensor["T", "D"]``
(named dims become symbols, checked for consistency at each call).  Unannotated ones take
the type of the first call's values.  A graph is built per signature: the dtypes and ranks
of the arguments, never their sizes.
"""

from __future__ import annotations

import ast
import functools
import itertools
import linecache
import types
from collections.abc import Hashable, Sequence
from typing import Any

import numpy as np

from nexus.frontend.dsl.state import State
from nexus.frontend.script.annotations import python_converter
from nexus.frontend.script.control import RAISE, raised_error
from nexus.frontend.script.errors import ScriptError, error_at
from nexus.frontend.script.source import (
    ParsedFunction,
    check_supported,
    parse_function,
    source_from_text,
)
from nexus.frontend.script.ssa import LoopTypeRetry
from nexus.frontend.script.visitor import NO_RETURN, NONE_USE, UNBOUND, build_graph, returns_none
from nexus.ir.binding import BindingError
from nexus.ir.graph import Graph
from nexus.ir.node import Node, SourceLoc
from nexus.ir.types import Dim, DimSyntaxError, TensorType, Type, dtype_of, parse_dim, sym

__all__ = ["ScriptError", "ScriptFunction", "Tensor", "script", "script_source"]

# A build is retried with one more type hint per loop variable or list that needed one; a
# variable whose type still changes after this many hints of its own does not settle.
_MAX_RETRIES = 8


def _python_error(e: RuntimeError, parsed: ParsedFunction) -> Exception | None:
    """What Python does where the script ``parsed``'s Assert failed: raise the exception
    of a ``raise`` statement (its class and arguments, the line as a note); raise
    UnboundLocalError for a read of a variable not assigned on the path taken; return None
    (this gives None) where the function fell off its end; raise TypeError where a script
    it calls did (Python would go on with None, which a script cannot hold); else raise
    ``e`` itself (a backend's ``NexusRuntimeError`` names the failing node)."""
    node = getattr(e, "node", None)
    if not isinstance(node, Node) or node.op.name != "Assert":
        return e
    msg = str(node.attrs.get("message", ""))
    raised = raised_error(msg) if msg.startswith(RAISE) else None
    if raised is not None:  # a `raise` statement
        return raised
    if msg.startswith(UNBOUND):
        return UnboundLocalError(msg[len(UNBOUND):])
    if msg.startswith(NONE_USE):
        return TypeError(msg[len(NONE_USE):])
    if returns_none(msg, parsed):
        return None
    if msg.startswith(NO_RETURN):
        return TypeError(f"{msg[len(NO_RETURN):]}; the script {parsed.fdef.name} calling it needs a value")
    return e


class TensorSpec:
    """The annotation ``Tensor["T", "D"]``: a tensor of that rank with those dims."""

    __slots__ = ("dims",)

    def __init__(self, dims: tuple[Dim, ...] | None):
        self.dims = dims

    def __repr__(self) -> str:
        return "Tensor" if self.dims is None else f"Tensor{list(self.dims)}"


class Tensor:
    """Annotation for tensor arguments: ``Tensor`` (any rank) or ``Tensor["N", 4]``."""

    def __class_getitem__(cls, dims: Any) -> TensorSpec:
        items = dims if isinstance(dims, tuple) else (dims,)
        return TensorSpec(tuple(_dim(d) for d in items))


def _dim(d: Any) -> Dim:
    if isinstance(d, bool) or not isinstance(d, (int, str)):
        raise TypeError(f"Tensor dims are ints or names, got {d!r}")
    return d if isinstance(d, int) else parse_dim(d)


# A parameter's annotation: ("int" | "float" | "bool" | "tensor", dims or None), or None.
Spec = tuple[str, tuple[Dim, ...] | None] | None
_SCALAR_SPECS = {"int": "i64", "float": "f64", "bool": "bool"}


class ScriptFunction:
    """A function compiled by ``@nx.script``.  Calling it runs the graph for the arguments'
    signature (built on first use); ``graph`` is the graph of the last signature used."""

    __nexus_script__ = True

    def __init__(self, fn: types.FunctionType, parsed: ParsedFunction | None = None, *,
                 max_iterations: int | None = None):
        functools.update_wrapper(self, fn)
        self.fn = fn
        self.max_iterations = _check_limit(max_iterations)
        self.parsed = parsed or parse_function(fn)
        fdef = self.parsed.fdef
        self.params = [a.arg for a in fdef.args.args]
        self.specs: list[Spec] = [self._spec(a) for a in fdef.args.args]
        self._graphs: dict[Hashable, Graph] = {}
        # the fast paths of a call and of nx.compile's specialize, keyed by _fast_key
        self._entries: dict[Hashable, tuple[Graph, Any, Any]] = {}
        self._signatures: dict[Hashable, tuple[Graph, Any]] = {}
        self._one_tuple = _returns_one_tuple(fdef)
        self._hints: dict[Hashable, dict[Hashable, Type]] = {}
        self._building: set[Hashable] = set()
        self._last: Graph | None = None
        self._closure = dict(zip(fn.__code__.co_freevars, [c.cell_contents for c in fn.__closure__ or ()]))
        self._closure.update(_state_params(fn, fdef, self.parsed))

    def __repr__(self) -> str:
        return f"<nx.script {self.fn.__name__}: {len(self._graphs)} graphs>"

    def with_options(self, *, max_iterations: int | None) -> ScriptFunction:
        """The same script, called with other run options: ``f.with_options(max_iterations=
        10_000)(x)`` stops with a ``NexusRuntimeError`` after entering that many blocks, as
        ``nx.run(g, x, max_iterations=...)`` does.  The graphs built so far are shared."""
        other = ScriptFunction(self.fn, self.parsed, max_iterations=max_iterations)
        other._graphs, other._hints = self._graphs, self._hints  # same signatures, same graphs
        return other

    # --- annotations ------------------------------------------------------------------------
    def _spec(self, arg: ast.arg) -> Spec:
        ann = arg.annotation
        if ann is None:
            return None
        if isinstance(ann, ast.Constant) and isinstance(ann.value, str):
            try:
                ann = ast.parse(ann.value, mode="eval").body
            except SyntaxError:
                return None
        if isinstance(ann, ast.Name) and ann.id in _SCALAR_SPECS:
            return (ann.id, ())
        base = ann.value if isinstance(ann, ast.Subscript) else ann
        base_name = base.id if isinstance(base, ast.Name) else base.attr if isinstance(base, ast.Attribute) else ""
        if base_name != "Tensor":
            return None  # np.ndarray and friends: inferred from the value
        if not isinstance(ann, ast.Subscript):
            return ("tensor", None)
        items = ann.slice.elts if isinstance(ann.slice, ast.Tuple) else [ann.slice]
        dims: list[Dim] = []
        for it in items:
            if not isinstance(it, ast.Constant) or isinstance(it.value, bool) or not isinstance(it.value, (int, str)):
                raise error_at(self.parsed.src, it, "Tensor dims must be int or string constants",
                               'write Tensor["N", 4]')
            try:
                dims.append(_dim(it.value))
            except DimSyntaxError as e:
                raise error_at(self.parsed.src, it, f"bad dim {it.value!r}: {e}", 'write Tensor["N", "2*N"]') from None
        return ("tensor", tuple(dims))

    # --- signatures ---------------------------------------------------------------------------
    def _key_of(self, args: Sequence[Any]) -> tuple[tuple[str, int], ...]:
        key = []
        for p, spec, a in zip(self.params, self.specs, args):
            if spec is not None and spec[0] in _SCALAR_SPECS:
                key.append((_SCALAR_SPECS[spec[0]], 0))
                continue
            k = _PY_KEYS.get(type(a)) or _value_key(a, p)
            if spec is not None and spec[1] is not None and k[1] != len(spec[1]):
                raise ScriptError(f"argument `{p}` is annotated with {len(spec[1])} dims {list(spec[1])} but "
                                  f"the value has rank {k[1]}", self.parsed.src.file, self.parsed.src.line_offset + 1,
                                  func=self.fn.__name__)
            key.append(k)
        return tuple(key)

    def _types_for(self, key: tuple[tuple[str, int], ...]) -> list[Type]:
        out: list[Type] = []
        for p, spec, (dtype, rank) in zip(self.params, self.specs, key):
            if spec is not None and spec[1] is not None and len(spec[1]) == rank:
                out.append(TensorType(dtype, spec[1]))
            else:
                out.append(TensorType(dtype, tuple(_dim_symbol(f"{p}_{i}") for i in range(rank))))
        return out

    def graph_for(self, *args: Any) -> Graph:
        """The graph for the signature of ``args`` (built if needed)."""
        self._check_arity(args)
        return self._graph(self._key_of(args))

    def specialize_types(self, arg_types: Sequence[Type]) -> Graph:
        """The graph for arguments of these types (used by calls from other scripts)."""
        key = []
        for t in arg_types:
            if not isinstance(t, TensorType) or t.shape is None:
                raise ScriptError(f"cannot call `{self.fn.__name__}` with an argument of type {t} (unknown rank)",
                                  self.parsed.src.file, self.parsed.src.line_offset + 1)
            key.append((t.dtype, len(t.shape)))
        return self._graph(tuple(key))

    def _graph(self, key: tuple[tuple[str, int], ...]) -> Graph:
        g = self._graphs.get(key)
        if g is None:
            g = self._build(key)
        self._last = g
        return g

    def _build(self, key: tuple[tuple[str, int], ...]) -> Graph:
        if key in self._building:
            raise ScriptError(f"`{self.fn.__name__}` calls itself; recursive scripts are not supported",
                              self.parsed.src.file, self.parsed.src.line_offset + 1,
                              hint="write the recursion as a loop")
        hints = self._hints.setdefault(key, {})
        self._building.add(key)
        retries: dict[Hashable, int] = {}
        try:
            while True:
                try:
                    g = build_graph(self.parsed, self.fn.__globals__, self._closure, self._types_for(key), hints,
                                    _build_callee, self.fn.__name__)
                    break
                except LoopTypeRetry as r:
                    for rkey, hint in r.hints():
                        retries[rkey] = retries.get(rkey, 0) + 1
                        if retries[rkey] > _MAX_RETRIES:
                            what = rkey[1] if isinstance(rkey, tuple) and len(rkey) == 2 else rkey
                            raise ScriptError(f"the type of `{what}` in `{self.fn.__name__}` does not settle: each "
                                              f"iteration of its loop makes it more general (last: {hint})",
                                              self.parsed.src.file, self.parsed.src.line_offset + 1) from None
                        hints[rkey] = hint
        finally:
            self._building.discard(key)
        self._graphs[key] = g
        return g

    @property
    def graph(self) -> Graph:
        """The graph of the last signature called; before any call, the graph the
        annotations describe (tensors default to f32)."""
        if self._last is not None:
            return self._last
        key = []
        for p, spec in zip(self.params, self.specs):
            if spec is None or spec[0] == "tensor" and spec[1] is None:
                raise ScriptError(f"`{self.fn.__name__}` has no graph yet: argument `{p}` has no annotation that "
                                  "fixes its rank", self.parsed.src.file, self.parsed.src.line_offset + 1,
                                  hint=f"call it first, or use {self.fn.__name__}.graph_for(*example_args)")
            key.append((_SCALAR_SPECS.get(spec[0], "f32"), len(spec[1] or ())))
        return self._graph(tuple(key))

    @property
    def source_map(self) -> dict[Node, SourceLoc]:
        """Where each node of :attr:`graph` came from (file, line, column)."""
        return {n: n.loc for n in self.graph.nodes() if n.loc is not None}

    @property
    def graphs(self) -> dict[Hashable, Graph]:
        """Every specialised graph, by signature (dtype and rank per argument)."""
        return dict(self._graphs)

    # --- calling ------------------------------------------------------------------------------
    def _check_arity(self, args: Sequence[Any]) -> None:
        if len(args) != len(self.params):
            raise TypeError(f"{self.fn.__name__}() takes {len(self.params)} arguments, got {len(args)}")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if kwargs:
            args = self._bind(args, kwargs)
        fast_key = _fast_key(args)
        entry = self._entries.get(fast_key) if fast_key is not None else None
        if entry is None:
            g, convert = self._signature(args, fast_key)
            exe = g.compile() if self.max_iterations is None else g.compile(max_iterations=self.max_iterations)
            entry = (g, exe, convert)
            if fast_key is not None:
                self._entries[fast_key] = entry
        g, exe, convert = entry
        self._last = g
        try:
            return convert(exe(*args))
        except BindingError as e:  # the call boundary checks dtypes and dims, named or not
            raise e.called(self.fn.__name__) from None
        except RuntimeError as e:  # a read of an unassigned variable, a path returning None
            err = self.run_error(e)
            if err is None:
                return None
            if err is e:
                raise
            raise err from e

    def run_error(self, e: RuntimeError) -> Exception | None:
        """The error Python raises where the script's run failed with ``e``, or None where
        Python returns None (see :func:`_python_error`); ``nx.compile(script,
        backend=...)`` asks it too."""
        return _python_error(e, self.parsed)

    def _signature(self, args: tuple[Any, ...], fast_key: Hashable | None) -> tuple[Graph, Any]:
        """The graph and result conversion for ``args``' signature, built on first use."""
        hit = self._signatures.get(fast_key) if fast_key is not None else None
        if hit is not None:
            return hit
        if len(args) != len(self.params):
            self._check_arity(args)
        g = self._graph(self._key_of(args))
        hit = (g, _converter(g, self._one_tuple))
        if fast_key is not None:
            self._signatures[fast_key] = hit
        return hit

    def specialize(self, args: tuple[Any, ...]) -> tuple[Graph, Any]:
        """The graph for ``args``' signature and the conversion of its results to what
        the Python function returns (``nx.compile`` compiles one graph per signature).
        A signature seen before costs a dict lookup, as a call does."""
        return self._signature(args, _fast_key(args))

    def _bind(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, ...]:
        out = list(args)
        for p in self.params[len(args):]:
            if p not in kwargs:
                raise TypeError(f"{self.fn.__name__}() missing argument {p!r}")
            out.append(kwargs.pop(p))
        if kwargs:
            raise TypeError(f"{self.fn.__name__}() got unexpected keyword arguments {sorted(kwargs)}")
        return tuple(out)

_PY_KEYS = {bool: ("bool", 0), int: ("i64", 0), float: ("f64", 0)}


def _fast_key(args: tuple[Any, ...]) -> tuple[Any, ...] | None:
    """What names ``args``' specialisation without building its type: the arguments'
    classes, and dtype and rank of arrays; None for anything else (a list, say), whose
    signature :meth:`ScriptFunction._key_of` works out."""
    key: list[Any] = []
    for a in args:
        cls = a.__class__
        if cls is np.ndarray:
            key.append((a.dtype, a.ndim))
        elif cls in _PY_KEYS or issubclass(cls, np.generic):
            key.append(cls)
        else:
            return None
    return tuple(key)
_SYMBOLS: dict[str, Any] = {}


def _state_params(fn: types.FunctionType, fdef: ast.FunctionDef, parsed: ParsedFunction) -> dict[str, State]:
    """The states declared as keyword-only parameters (``*, h=nx.state(...)``): the body
    sees them as it sees a module-level State."""
    out: dict[str, State] = {}
    defaults = fn.__kwdefaults__ or {}
    for a in fdef.args.kwonlyargs:
        value = defaults.get(a.arg)
        if not isinstance(value, State):
            raise error_at(parsed.src, a, f"keyword-only parameter `{a.arg}` must declare a state "
                                          f"(its default is {type(value).__name__}, not nx.state(...))",
                           "use plain positional parameters for tensors")
        out[a.arg] = value
    return out


def _dim_symbol(name: str) -> Any:
    """``sym(name)``, memoised: sympy would return an equal (usually the same, from its
    own cache) Symbol, but asking it costs more than the rest of a small argument's type."""
    s = _SYMBOLS.get(name)
    if s is None:
        s = _SYMBOLS[name] = sym(name)
    return s


def _returns_one_tuple(fdef: ast.FunctionDef) -> bool:
    """Whether the function returns ``(x,)``: a graph's one result is then a 1-tuple."""
    return any(isinstance(n, ast.Return) and isinstance(n.value, ast.Tuple) and len(n.value.elts) == 1
               for n in ast.walk(fdef))


def _converter(g: Graph, one_tuple: bool = False) -> Any:
    """A function turning the graph's result into what the Python function returns."""
    types_ = g.result_types
    if not types_:
        return lambda out: None
    if len(types_) == 1:
        conv = python_converter(types_[0])
        return (lambda out: (conv(out),)) if one_tuple else conv
    convs = [python_converter(t) for t in types_]
    return lambda out: tuple(c(v) for c, v in zip(convs, out))


def _value_key(a: Any, param: str) -> tuple[str, int]:
    if isinstance(a, bool):
        return ("bool", 0)
    if isinstance(a, int):
        return ("i64", 0)
    if isinstance(a, float):
        return ("f64", 0)
    if isinstance(a, np.ndarray | np.generic):
        try:
            return (dtype_of(a.dtype), a.ndim)
        except ValueError:
            raise TypeError(f"argument `{param}` has dtype {a.dtype}, which Nexus does not have") from None
    if isinstance(a, (list, tuple)):
        return _value_key(np.asarray(a), param)
    raise TypeError(f"argument `{param}` is a {type(a).__name__}; scripts take numbers and NumPy arrays")


def _build_callee(fn: Any, arg_types: Sequence[Type], node: ast.AST) -> Graph:
    return fn.specialize_types(arg_types)  # type: ignore[no-any-return]


def script(fn: Any = None, *, max_iterations: int | None = None) -> Any:
    """Decorator: compile ``fn`` (a plain Python function) to Nexus graphs.  Unsupported
    constructs raise ScriptError here; type errors at the first call.

    ``@nx.script(max_iterations=N)`` bounds every call: a call that enters more than ``N``
    blocks (loop iterations, roughly) raises ``NexusRuntimeError``, as ``nx.run`` does with
    the same option; without it a call runs until its loops end (Ctrl-C raises
    KeyboardInterrupt).  ``f.with_options(max_iterations=N)`` gives a bounded copy of a
    script."""
    if fn is None:
        _check_limit(max_iterations)
        return lambda f: script(f, max_iterations=max_iterations)
    if isinstance(fn, ScriptFunction):
        return fn if max_iterations is None else fn.with_options(max_iterations=max_iterations)
    if not isinstance(fn, types.FunctionType):
        raise TypeError(f"@nx.script takes a function, got {type(fn).__name__}")
    return ScriptFunction(fn, max_iterations=max_iterations)


def _check_limit(max_iterations: Any) -> int | None:
    if max_iterations is not None and (isinstance(max_iterations, bool) or not isinstance(max_iterations, int)
                                       or max_iterations < 0):
        raise TypeError(f"max_iterations is a non-negative int or None, got {max_iterations!r}")
    return max_iterations  # type: ignore[no-any-return]


_counter = itertools.count()


def script_source(text: str, name: str, globals: dict[str, Any] | None = None) -> ScriptFunction:
    """Script a function given as source text (``def name(...): ...``), e.g. a generated
    program.  The text is registered with ``linecache`` so errors and tracebacks quote it;
    the plain Python function is ``result.fn``."""
    file = f"<nexus-script-{next(_counter)}>"
    lines = text.splitlines(keepends=True)
    linecache.cache[file] = (len(text), None, lines, file)
    namespace: dict[str, Any] = dict(globals or {})
    exec(compile(text, file, "exec"), namespace)  # noqa: S102  (the caller's own source text)
    fn = namespace[name]
    src, fdef = source_from_text(text, name, file)
    parsed = ParsedFunction(src, fdef, frozenset(check_supported(fdef, src)))
    return ScriptFunction(fn, parsed)
