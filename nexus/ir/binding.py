"""The call boundary that every backend shares: argument conversion and dim binding.

A graph's :class:`Signature` (``signature(g)``, cached until the graph changes) turns the
Python and NumPy values a caller passes into the runtime representation of the declared
argument types (arrays of the declared dtype; NumPy scalars for 0-d values) and checks
their dims: ints and plain symbols inline, expressions such as ``2*N`` through
:func:`bind_shapes`' solver.  Every problem is a :class:`BindingError` that names the
argument (and, for a symbol bound twice, both arguments, the symbol and the two sizes).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import CodeType
from typing import Any

import numpy as np
import sympy

from nexus.ir.graph import Graph
from nexus.ir.opdef import OpTypeError
from nexus.ir.types import OptionalType, SequenceType, TensorType, format_dim, numpy_dtype

# Python scalars that convert exactly to a NumPy scalar of this dtype kind.
_SCALAR_KINDS: dict[type, str] = {bool: "b", int: "i", float: "f"}


class BindingError(OpTypeError):
    """Arguments whose count, dtypes, ranks or sizes do not fit the graph's argument types."""

    def called(self, name: str) -> BindingError:
        """This error as the caller of function ``name`` sees it: ``f(): argument ...``."""
        return BindingError(f"{name}(): {self}")


def to_value(x: Any, t: TensorType | None = None) -> Any:
    """``x`` as a value of type ``t``: an array of its dtype, or a NumPy scalar for 0-d
    values.  Raises BindingError when the dtype would be narrowed (float to int)."""
    if t is not None and isinstance(x, (np.ndarray, np.generic)) and x.dtype == numpy_dtype(t.dtype):
        return x[()] if x.ndim == 0 else x  # type: ignore[index]  # already right: the common case
    if type(x) is int and t is not None and numpy_dtype(t.dtype).kind in "iu":
        try:
            numpy_dtype(t.dtype).type(x)
        except OverflowError:
            raise BindingError(f"argument {x} is out of bounds for {t}") from None
    arr = np.asarray(x)
    if t is not None:
        want = numpy_dtype(t.dtype)
        if arr.dtype != want:
            if not np.can_cast(arr.dtype, want, casting="same_kind") and not (
                arr.dtype.kind in "iub" and want.kind in "iuf"
            ):
                raise BindingError(f"argument of dtype {arr.dtype} cannot be passed as {t}")
            arr = arr.astype(want)
    return arr[()] if arr.ndim == 0 else arr


def to_container(x: Any, t: SequenceType | OptionalType, what: str) -> Any:
    """``x`` as a value of sequence or optional type ``t``: a list of element values
    (``to_value`` each, their ranks and int dims checked) for a sequence, None or the
    held value for an optional.  Raises BindingError naming ``what``."""
    if isinstance(t, OptionalType):
        if x is None:
            return None
        if isinstance(t.elem, SequenceType):
            return to_container(x, t.elem, what)
        return _element(x, t.elem, what)
    if not isinstance(x, Sequence) or isinstance(x, (str, bytes)):  # a list, a tuple, a backend's own kind
        raise BindingError(f"{what} must be a list of arrays (the graph takes {t}), not {type(x).__name__}")
    if isinstance(t.length, int) and len(x) != t.length:
        raise BindingError(f"{what} holds {len(x)} tensors, the graph takes {t}")
    return [_element(e, t.elem, f"{what}, element {k}") for k, e in enumerate(x)]


def _element(x: Any, t: TensorType, what: str) -> Any:
    try:
        v = to_value(x, t)
    except BindingError as e:
        raise BindingError(f"{what}: {e}") from None
    if t.shape is not None:
        if np.ndim(v) != len(t.shape):
            raise BindingError(f"{what} has rank {np.ndim(v)} (shape {list(np.shape(v))}), the graph takes {t}")
        for k, (d, n) in enumerate(zip(t.shape, np.shape(v))):
            if isinstance(d, int) and d != n:
                raise BindingError(f"{what} has size {n} in dim {k}, the graph takes {t}")
    return v


def _sized(t: Any, a: str) -> list[tuple[Any, str]]:
    """``(dim, the expression of its size)`` for each dim of argument type ``t`` whose
    size the call binds, ``a`` naming the argument: a tensor's dims and a sequence's
    length (its elements' symbols are their own, see SequenceType)."""
    if isinstance(t, TensorType):
        return [(d, f"{a}.shape[{i}]") for i, d in enumerate(t.shape or ())]
    if isinstance(t, SequenceType) and t.length is not None:
        return [(t.length, f"len({a})")]
    return []


class Signature:
    """What a call of one graph version checks and converts.

    ``convert`` is generated once per signature (calls cost about as much as the graph
    itself for small graphs): per argument, one guard that accepts a value that is
    already right (an array of the dtype and rank, a NumPy scalar of the dtype, a Python
    scalar of the dtype's kind) and otherwise the general conversion with its errors."""

    def __init__(self, g: Graph):
        self.graph = g
        self.types: list[TensorType | None] = [t if isinstance(t, TensorType) else None for t in g.arg_types]
        count: dict[Any, int] = {}
        for k, t in enumerate(g.arg_types):
            for d, _ in _sized(t, f"a{k}"):
                if not isinstance(d, int):
                    count[d] = count.get(d, 0) + 1
        # Dims that are expressions (2*N) or symbols sizing several dims need the solver
        # or a cross-check; a symbol sizing one dim needs only the rank, checked per argument.
        shared = any(n > 1 or not isinstance(d, sympy.Symbol) for d, n in count.items())
        self.convert = self._generate(shared)

    def _generate(self, shared: bool) -> Any:
        n = len(self.types)
        ns: dict[str, Any] = {"_nd": np.ndarray, "_slow": self._slow, "_bind": bind_shapes, "_g": self.graph,
                              "_error": self._count_error}
        lines = ["def convert(args):", f"    if len(args) != {n}: _error(args)"]
        if n:
            lines.append(f"    {', '.join(f'a{k}' for k in range(n))}, = args")
        for k, t in enumerate(self.types):
            a = f"a{k}"
            if t is None:
                lines.append(f"    {a} = _slow({k}, {a})")
                continue
            dt = numpy_dtype(t.dtype)
            ns[f"_d{k}"], ns[f"_t{k}"] = dt, dt.type
            if t.shape == ():
                py = next((c for c, kind in _SCALAR_KINDS.items() if kind == dt.kind), None)
                ns[f"_p{k}"] = py
                lines += [f"    if {a}.__class__ is _p{k}:",
                          f"        try: {a} = _t{k}({a})",
                          f"        except OverflowError: {a} = _slow({k}, {a})",
                          f"    elif {a}.__class__ is not _t{k}: {a} = _slow({k}, {a})"]
                continue
            guard = f"{a}.__class__ is _nd and {a}.dtype == _d{k}"
            if t.shape is not None:
                guard += f" and {a}.ndim == {len(t.shape)}"
                guard += "".join(f" and {a}.shape[{i}] == {d}" for i, d in enumerate(t.shape) if isinstance(d, int))
            lines.append(f"    if not ({guard}): {a} = _slow({k}, {a})")
        values = ", ".join(f"a{k}" for k in range(n))
        if shared:
            # A symbol sizing several dims: compare the sizes inline (the solver costs ~7 us
            # a call) and let it name the conflict only when they differ; an expression
            # (2*N) needs the solver every time.
            first: dict[Any, str] = {}
            differ: list[str] = []
            solve = False
            for k, arg_type in enumerate(self.graph.arg_types):
                for d, size in _sized(arg_type, f"a{k}"):
                    if isinstance(d, sympy.Symbol):
                        if d in first:
                            differ.append(f"{size} != {first[d]}")
                        else:
                            first[d] = size
                    elif not isinstance(d, int):
                        solve = True
            if solve:
                lines.append(f"    _bind(_g, [{values}])")
            elif differ:
                lines.append(f"    if {' or '.join(differ)}: _bind(_g, [{values}])")
        lines.append(f"    return [{values}]")
        source = "\n".join(lines)
        code = _CODE.get(source)
        if code is None:  # compiling costs ~0.2 ms; many graphs share a signature's text
            code = _CODE[source] = compile(source, "<nexus signature>", "exec")
        exec(code, ns)  # noqa: S102  (our own generated text)
        return ns["convert"]

    def _count_error(self, args: Sequence[Any]) -> None:
        raise BindingError(f"graph @{self.graph.name} takes {len(self.types)} arguments, got {len(args)}")

    def _slow(self, k: int, x: Any) -> Any:
        """The general conversion of argument ``k``, with the errors naming it."""
        t = self.types[k]
        container = self.graph.arg_types[k]
        if isinstance(container, (SequenceType, OptionalType)):
            node = self.graph.args[k]
            return to_container(x, container, f"graph @{self.graph.name}, argument {k} (%{node.name or k})")
        try:
            v = to_value(x, t)
        except BindingError as e:
            node = self.graph.args[k]
            raise BindingError(f"graph @{self.graph.name}, argument {k} (%{node.name or k}): {e}") from None
        if t is not None and t.shape is not None:
            ints = tuple((i, d) for i, d in enumerate(t.shape) if isinstance(d, int))
            if np.ndim(v) != len(t.shape) or not _sizes_fit(np.shape(v), ints):
                self._rank_or_size_error(k, v)
        return v

    def _rank_or_size_error(self, k: int, value: Any) -> None:
        values: list[Any] = [np.zeros((), np.bool_)] * len(self.types)
        values[k] = value
        bind_shapes(self.graph, values, only=k)

    def check_dims(self, values: Sequence[Any]) -> None:
        """Raise BindingError unless the arguments' sizes fit the declared dims."""
        bind_shapes(self.graph, values)

_CODE: dict[str, CodeType] = {}  # a signature's converter source -> its compiled module


def _sizes_fit(shape: tuple[int, ...], ints: tuple[tuple[int, int], ...]) -> bool:
    return all(shape[k] == d for k, d in ints)


def signature(g: Graph) -> Signature:
    """The call signature of ``g``'s current version."""
    sig: Signature = g.cached("binding.signature", Signature)
    return sig


def bind_shapes(g: Graph, args: Sequence[Any], only: int | None = None) -> dict[sympy.Symbol, int]:
    """Bind the dim symbols of ``g``'s argument types to the sizes of ``args``.

    Returns ``{symbol: size}``.  Raises BindingError naming the argument (and, for a
    conflict, both arguments, the symbol and the two sizes) on a wrong count, dtype
    kind, rank or size.  ``only``: look at that argument alone."""
    if len(args) != len(g.args):
        raise BindingError(f"graph @{g.name} takes {len(g.args)} arguments, got {len(args)}")
    env: dict[sympy.Symbol, int] = {}
    where: dict[sympy.Symbol, tuple[str, int]] = {}
    exprs: list[tuple[str, int, Any, int]] = []
    for i, (node, value) in enumerate(zip(g.args, args)):
        t = g.arg_types[i]
        if only is not None and i != only:
            continue
        name = f"argument {i}" + (f" {node.name!r}" if node.name else "")
        dims: tuple[Any, ...]
        sizes: tuple[int, ...]
        if isinstance(t, SequenceType) and t.length is not None and isinstance(value, Sequence):
            dims, sizes = (t.length,), (len(value),)  # the length binds as a dim; elements bind nothing
            name += " (its length)"
        elif not isinstance(t, TensorType):
            continue
        else:
            arr = np.asarray(value)
            _check_dtype_kind(name, arr, t)
            if t.shape is None:
                continue
            if arr.ndim != len(t.shape):
                raise BindingError(f"{name} has rank {arr.ndim} (shape {list(arr.shape)}), "
                                   f"the graph takes {t} (rank {len(t.shape)})")
            dims, sizes = t.shape, arr.shape
        for k, (d, n) in enumerate(zip(dims, sizes)):
            if isinstance(d, int):
                if d != n:
                    raise BindingError(f"{name} has size {n} in dim {k}, the graph takes {t}")
            elif isinstance(d, sympy.Symbol):
                if d in env and env[d] != n:
                    first, fk = where[d]
                    raise BindingError(
                        f"{name} binds {d} = {n} (dim {k}), but {first} bound {d} = {env[d]} (dim {fk})")
                env.setdefault(d, n)
                where.setdefault(d, (name, k))
            else:
                exprs.append((name, k, d, n))
    for name, k, d, n in exprs:
        value = d.subs(env)
        free = value.free_symbols
        if not free:
            if int(value) != n:
                raise BindingError(f"{name} has size {n} in dim {k}, but {format_dim(d)} = {value} "
                                   f"with {_bindings_text(d, env)}")
            continue
        if len(free) == 1:
            (s,) = free
            sols = [v for v in sympy.solve(sympy.Eq(value, n), s) if v.is_integer and v >= 0]
            if not sols:
                raise BindingError(f"{name} has size {n} in dim {k}: no size of {s} makes {format_dim(d)} = {n}")
            env[s] = int(sols[0])
            where[s] = (name, k)
    return env


def _check_dtype_kind(name: str, arr: np.ndarray, t: TensorType) -> None:
    """Refuse arguments whose kind would be narrowed (float for int, int for bool)."""
    rank = {"b": 0, "u": 1, "i": 1, "f": 2}
    got, want = arr.dtype.kind, numpy_dtype(t.dtype).kind
    if got not in rank or rank[got] > rank[want]:
        raise BindingError(f"{name} has dtype {arr.dtype}, the graph takes {t}; convert it first")


def _bindings_text(d: Any, env: Mapping[Any, int]) -> str:
    return ", ".join(f"{s} = {env[s]}" for s in sorted(d.free_symbols, key=str) if s in env)
