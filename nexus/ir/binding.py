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
from typing import Any

import numpy as np
import sympy

from nexus.ir.graph import Graph
from nexus.ir.opdef import OpTypeError
from nexus.ir.types import TensorType, format_dim, numpy_dtype


class BindingError(OpTypeError):
    """Arguments whose count, dtypes, ranks or sizes do not fit the graph's argument types."""


def to_value(x: Any, t: TensorType | None = None) -> Any:
    """``x`` as a value of type ``t``: an array of its dtype, or a NumPy scalar for 0-d
    values.  Raises BindingError when the dtype would be narrowed (float to int)."""
    if t is not None and isinstance(x, (np.ndarray, np.generic)) and x.dtype == numpy_dtype(t.dtype):
        return x[()] if x.ndim == 0 else x  # type: ignore[index]  # already right: the common case
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


class Signature:
    """What a call of one graph version checks and converts."""

    def __init__(self, g: Graph):
        self.graph = g
        self.types: list[TensorType | None] = [t if isinstance(t, TensorType) else None for t in g.arg_types]
        # Scalars need no check beyond their dtype; arguments with dims are checked.
        self.dims = [(i, t.shape) for i, t in enumerate(self.types)
                     if t is not None and t.shape is not None and t.shape != ()]
        # Ints and plain symbols are checked inline; expressions need the solver.
        self.plain_dims = all(isinstance(d, (int, sympy.Symbol)) for _, shape in self.dims for d in shape)

    def convert(self, args: Sequence[Any]) -> list[Any]:
        """The arguments as runtime values, dims checked.  Raises BindingError."""
        if len(args) != len(self.types):
            raise BindingError(f"graph @{self.graph.name} takes {len(self.types)} arguments, got {len(args)}")
        try:
            values = [to_value(x, t) for x, t in zip(args, self.types)]
        except BindingError as e:
            raise self._name_argument(args, e) from None
        if self.dims:
            self.check_dims(values)
        return values

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

    def _name_argument(self, args: Sequence[Any], e: BindingError) -> BindingError:
        g = self.graph
        for k, (x, t, node) in enumerate(zip(args, self.types, g.args)):
            try:
                to_value(x, t)
            except BindingError:
                return BindingError(f"graph @{g.name}, argument {k} (%{node.name or k}): {e}")
        return e


def signature(g: Graph) -> Signature:
    """The call signature of ``g``'s current version."""
    sig: Signature = g.cached("binding.signature", Signature)
    return sig


def bind_shapes(g: Graph, args: Sequence[Any]) -> dict[sympy.Symbol, int]:
    """Bind the dim symbols of ``g``'s argument types to the sizes of ``args``.

    Returns ``{symbol: size}``.  Raises BindingError naming the argument (and, for a
    conflict, both arguments, the symbol and the two sizes) on a wrong count, dtype
    kind, rank or size."""
    if len(args) != len(g.args):
        raise BindingError(f"graph @{g.name} takes {len(g.args)} arguments, got {len(args)}")
    env: dict[sympy.Symbol, int] = {}
    where: dict[sympy.Symbol, tuple[str, int]] = {}
    exprs: list[tuple[str, int, Any, int]] = []
    for i, (node, value) in enumerate(zip(g.args, args)):
        t = g.arg_types[i]
        name = f"argument {i}" + (f" {node.name!r}" if node.name else "")
        if not isinstance(t, TensorType):
            continue
        arr = np.asarray(value)
        _check_dtype_kind(name, arr, t)
        if t.shape is None:
            continue
        if arr.ndim != len(t.shape):
            raise BindingError(f"{name} has rank {arr.ndim} (shape {list(arr.shape)}), "
                               f"the graph takes {t} (rank {len(t.shape)})")
        for k, (d, n) in enumerate(zip(t.shape, arr.shape)):
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
