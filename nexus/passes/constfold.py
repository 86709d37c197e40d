"""Constant folding, algebraic identities and reassociation of integer constant chains.

Folding runs each op's own reference kernel (``OpDef.kernel``, the table the interpreter
uses) on the constant inputs, so the folded value is exactly what the run would have
computed; there is no second evaluator.  A fold that raises (integer division by zero)
or produces a dtype/shape other than the node's type is left for the run to report.

Identities are applied only where they are exact for every input value:
``x * 1``, ``x / 1``, ``x ** 1`` for all dtypes; ``x + 0``, ``x - 0``, ``x * 0``,
``x // 1`` for integers only (for floats ``-0.0 + 0.0`` is ``+0.0``, ``nan * 0`` is nan);
floats do get ``x + (-0.0)`` and ``x - (+0.0)``, which are exact.  Integer add/sub and
mul chains with constants are reassociated (exact: integer arithmetic wraps modulo
2**bits), so seed 004's ``((input - 2) + 5) + 100`` becomes ``input + 103``.
The adjoint helpers ``SumToLike``, ``BroadcastLike`` and ``ReshapeLike`` of a value that
already has the target's static shape return it unchanged (their kernels do), and so does
a ``Transpose`` of a ``Transpose`` whose permutations compose to the identity (NumPy gives
back the same strides); graph-mode autodiff emits both around symbolic shapes.
Ops that read only their input's shape (``OpDef.shape_only``: ``ShapeOf``, ``DimSize``)
fold once that shape is static (their kernels run on a zero-memory stand-in of it).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from nexus.ir.analysis import block_order, node_order
from nexus.ir.cons import trivial_phi_value
from nexus.ir.graph import Graph
from nexus.ir.kernels import kernel_call
from nexus.ir.node import Node
from nexus.ir.static import evaluate
from nexus.ir.types import INT_DTYPES, TensorType, compatible, dtype_of, numpy_dtype
from nexus.passes.cfgutil import is_movable
from nexus.passes.manager import Pass


def const_value(n: Node) -> np.ndarray | None:
    return n.attrs["value"] if n.op.name == "Constant" else None  # type: ignore[no-any-return]


def _is_int(n: Node) -> bool:
    return isinstance(n.type, TensorType) and n.type.dtype in INT_DTYPES


def _all_equal(n: Node, k: float, *, neg_zero: bool | None = None) -> bool:
    """Whether ``n`` is a constant whose every element equals ``k`` (and, for a zero,
    has the requested sign bit)."""
    v = const_value(n)
    if v is None or v.dtype.kind not in "iuf" or v.size == 0:
        return False
    if not np.all(v == k):
        return False
    if neg_zero is not None and v.dtype.kind == "f":
        return bool(np.all(np.signbit(v) == neg_zero))
    return True


@dataclass(frozen=True)
class ConstFold(Pass):
    """Fold constants with the ops' kernels; exact algebraic identities; integer reassociation."""

    name = "constfold"
    preserves = frozenset({"no_unreachable"})

    identities: bool = True
    reassociate: bool = True
    max_elements: int = 1 << 16  # do not materialise bigger constants

    def apply(self, g: Graph) -> dict[str, int]:
        return _Folder(g, self).run()


class _Folder:
    def __init__(self, g: Graph, opts: ConstFold):
        self.g, self.opts = g, opts
        self.stats = {"folded": 0, "shapes": 0, "identities": 0, "reassociated": 0}

    def run(self) -> dict[str, int]:
        g = self.g
        work = deque(n for b in block_order(g) for n in node_order(b))
        queued = set(work)
        while work:
            n = work.popleft()
            queued.discard(n)
            if n.graph is not g:
                continue
            new = self.visit(n)
            if new is None:
                continue
            for u in [*n.users, new]:
                if u not in queued and u.graph is g:
                    work.append(u)
                    queued.add(u)
            n.replace_all_uses_with(new)
            g.erase(n)
        return {k: v for k, v in self.stats.items() if v}

    def visit(self, n: Node) -> Node | None:
        if not is_movable(n) or not isinstance(n.type, TensorType):
            return None
        if n.op.kind == "phi":
            return self.fold_phi(n)
        if n.op.kind != "data" or n.op.name == "Constant":
            return None
        if n.inputs and all(v.op.name == "Constant" for v in n.inputs):
            return self.fold(n)
        if n.op.shape_only:
            return self.fold_shape(n)
        if self.opts.reassociate:
            r = self.reassociate(n)
            if r is not None:
                self.stats["reassociated"] += 1
                return r
        if self.opts.identities:
            r = self.identity(n)
            if r is not None:
                self.stats["identities"] += 1
                return r
        return None

    # --- folding -----------------------------------------------------------------------
    def constant(self, n: Node, value: np.ndarray, name: str | None = None) -> Node:
        assert n.block is not None
        if not value.flags.c_contiguous:
            # A folded Transpose is a view: C order, as a kernel's own copy of it would be
            # (BLAS runs another kernel on another layout, whose sums round otherwise).
            value = value.copy(order="C")
        return self.g.add("Constant", [], n.block, {"value": value}, name=name)

    def fold(self, n: Node) -> Node | None:
        return self.fold_with(n, [v.attrs["value"] for v in n.inputs])

    def fold_with(self, n: Node, args: list[Any]) -> Node | None:
        value = evaluate(n, args, self.opts.max_elements)  # None: a failing fold is left for the run
        if value is None or value.dtype.kind not in "biuf":
            return None
        if not self.same_type(n, value):
            return None
        self.stats["folded"] += 1
        return self.constant(n, value, n.name)

    def fold_shape(self, n: Node) -> Node | None:
        """An op that reads only its input's shape (``OpDef.shape_only``: ShapeOf, DimSize)
        of a value whose shape is static: run the op's kernel on a zero-memory stand-in
        of that shape (its values are never read)."""
        t = n.input(0).type
        if not isinstance(t, TensorType) or t.shape is None or not all(isinstance(d, int) for d in t.shape):
            return None
        stand_in = np.broadcast_to(np.zeros((), numpy_dtype(t.dtype)), t.shape)  # type: ignore[arg-type]
        folded = self.fold_with(n, [stand_in])
        if folded is not None:
            self.stats["folded"] -= 1
            self.stats["shapes"] += 1
        return folded

    def same_type(self, n: Node, value: np.ndarray) -> bool:
        assert isinstance(n.type, TensorType)
        try:
            t = TensorType(dtype_of(value.dtype), value.shape)
        except ValueError:
            return False
        return t.dtype == n.type.dtype and compatible(t, n.type)

    def fold_phi(self, n: Node) -> Node | None:
        """A Phi of one value is that value; of equal constants, that constant."""
        single = trivial_phi_value(n)
        if single is not None and single.type == n.type:
            self.stats["identities"] += 1
            return single
        vals = [const_value(v) for v in n.inputs if v is not n]
        if not vals or any(v is None for v in vals):
            return None
        first = vals[0]
        assert first is not None
        for v in vals[1:]:
            assert v is not None
            if v.dtype != first.dtype or v.shape != first.shape or v.tobytes() != first.tobytes():
                return None
        self.stats["folded"] += 1
        return self.constant(n, first.copy(), n.name)

    # --- identities --------------------------------------------------------------------
    def identity(self, n: Node) -> Node | None:
        rule = _IDENTITIES.get(n.op.name)
        if rule is None:
            return None
        r = rule(self, n)
        if r is None or r is n:
            return None
        if r.type != n.type and not (r.op.name == "Constant" and compatible(r.type, n.type)):
            if r.op.name == "Constant":
                self.g.erase(r)
            return None
        return r

    def zeros(self, n: Node) -> Node | None:
        assert isinstance(n.type, TensorType)
        shape = n.type.shape
        if shape is None or not all(isinstance(d, int) for d in shape):
            return None
        return self.constant(n, np.zeros(shape, numpy_dtype(n.type.dtype)))

    # --- reassociation -----------------------------------------------------------------
    def reassociate(self, n: Node) -> Node | None:
        if not _is_int(n):
            return None
        if n.op.name == "Mul":
            return self.reassociate_mul(n)
        outer = _affine(n)
        if outer is None:
            return None
        s1, a, c1 = outer
        if a.type != n.type or not is_movable(a):
            return None
        inner = _affine(a)
        if inner is None:
            return None
        s2, x, c2 = inner
        if x.type != n.type:
            return None
        assert isinstance(n.type, TensorType)
        dt = numpy_dtype(n.type.dtype)
        with np.errstate(all="ignore"):
            c = np.asarray((c2 if s1 > 0 else np.negative(c2)) + c1, dtype=dt)
        if s1 * s2 > 0:
            if not c.any():  # x + 0 with x of the result's type: exact for integers
                return x
            return self.g.add("Add", [x, self.constant(n, c)], n.block, name=n.name)  # type: ignore[arg-type]
        return self.g.add("Sub", [self.constant(n, c), x], n.block, name=n.name)  # type: ignore[arg-type]

    def reassociate_mul(self, n: Node) -> Node | None:
        outer = _scaled(n)
        if outer is None:
            return None
        a, c1 = outer
        if a.type != n.type or not is_movable(a) or a.op.name != "Mul":
            return None
        inner = _scaled(a)
        if inner is None or inner[0].type != n.type:
            return None
        x, c2 = inner
        with np.errstate(all="ignore"):
            c = np.asarray(np.multiply(c1, c2), dtype=c1.dtype)
        return self.g.add("Mul", [x, self.constant(n, c)], n.block, name=n.name)  # type: ignore[arg-type]


def _affine(n: Node) -> tuple[int, Node, np.ndarray] | None:
    """``n`` as ``sign * x + c`` when it is an integer Add/Sub with one constant side."""
    if n.op.name not in ("Add", "Sub") or not _is_int(n):
        return None
    a, b = n.inputs
    cb, ca = const_value(b), const_value(a)
    with np.errstate(all="ignore"):
        if cb is not None:
            return (1, a, cb if n.op.name == "Add" else np.negative(cb))
        if ca is not None:
            return (1 if n.op.name == "Add" else -1, b, ca)
    return None


def _scaled(n: Node) -> tuple[Node, np.ndarray] | None:
    if n.op.name != "Mul":
        return None
    a, b = n.inputs
    if (cb := const_value(b)) is not None:
        return a, cb
    if (ca := const_value(a)) is not None:
        return b, ca
    return None


def _other(n: Node, test: Callable[[Node], bool], *, commutative: bool) -> Node | None:
    """The non-constant operand when the other one passes ``test``."""
    a, b = n.inputs
    if test(b):
        return a
    if commutative and test(a):
        return b
    return None


def _mul(f: _Folder, n: Node) -> Node | None:
    one = _other(n, lambda v: _all_equal(v, 1), commutative=True)
    if one is not None:
        return one
    if _is_int(n) and _other(n, lambda v: _all_equal(v, 0), commutative=True) is not None:
        return f.zeros(n)
    return None


def _add(f: _Folder, n: Node) -> Node | None:
    if _is_int(n):
        return _other(n, lambda v: _all_equal(v, 0), commutative=True)
    return _other(n, lambda v: _all_equal(v, 0, neg_zero=True), commutative=True)


def _sub(f: _Folder, n: Node) -> Node | None:
    if _is_int(n):
        return _other(n, lambda v: _all_equal(v, 0), commutative=False)
    return _other(n, lambda v: _all_equal(v, 0, neg_zero=False), commutative=False)


def _div_one(f: _Folder, n: Node) -> Node | None:
    return _other(n, lambda v: _all_equal(v, 1), commutative=False)


def _floordiv(f: _Folder, n: Node) -> Node | None:
    return _div_one(f, n) if _is_int(n) else None


def _involution(n: Node) -> Node | None:
    (x,) = n.inputs
    if x.op is n.op and is_movable(x):
        return x.input(0)
    return None


def _bool_const(v: Node, want: bool) -> bool:
    c = const_value(v)
    return c is not None and c.dtype == np.bool_ and c.size > 0 and bool(np.all(c == want))


def _same_shape(f: _Folder, n: Node) -> Node | None:
    """``SumToLike(x, like)`` and friends where ``x`` has the static shape of ``like``
    (rank 0 excluded: there the kernels turn a 0-d array into a NumPy scalar)."""
    x, like = n.inputs
    tx, tl = x.type, like.type
    if not (isinstance(tx, TensorType) and isinstance(tl, TensorType)):
        return None
    if tx.shape is None or not tx.shape or tx.shape != tl.shape:
        return None
    return x


def _perm(n: Node, rank: int) -> list[int]:
    p = n.attrs.get("perm")
    return list(range(rank))[::-1] if p is None else [int(a) % rank for a in p]


def _transpose(f: _Folder, n: Node) -> Node | None:
    """``Transpose(Transpose(x))`` whose permutations compose to the identity is ``x``."""
    inner = n.input(0)
    t = inner.input(0).type if inner.op is n.op else None
    if not is_movable(inner) or not isinstance(t, TensorType) or t.shape is None:
        return None
    rank = len(t.shape)
    p1, p2 = _perm(inner, rank), _perm(n, rank)
    if len(p1) != rank or len(p2) != rank or [p1[i] for i in p2] != list(range(rank)):
        return None
    return inner.input(0)


_IDENTITIES: dict[str, Callable[[_Folder, Node], Node | None]] = {
    "SumToLike": _same_shape,
    "BroadcastLike": _same_shape,
    "ReshapeLike": _same_shape,
    "Transpose": _transpose,
    "Mul": _mul,
    "Add": _add,
    "Sub": _sub,
    "Div": _div_one,
    "Pow": _div_one,
    "FloorDiv": _floordiv,
    "Identity": lambda f, n: n.input(0),
    "Neg": lambda f, n: _involution(n),
    "Not": lambda f, n: _involution(n),
    "And": lambda f, n: _other(n, lambda v: _bool_const(v, True), commutative=True),
    "Or": lambda f, n: _other(n, lambda v: _bool_const(v, False), commutative=True),
    "Cast": lambda f, n: n.input(0) if n.input(0).type == n.type else None,
}


def fold_value(n: Node) -> Any:
    """The value ``n`` folds to, or None (for tests and other passes)."""
    if n.inputs and all(v.op.name == "Constant" for v in n.inputs) and n.op.kernel is not None:
        return kernel_call(n, [v.attrs["value"] for v in n.inputs])
    return None
