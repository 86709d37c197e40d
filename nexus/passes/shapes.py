"""Shape inference over the whole CFG.

``infer_shapes(g)`` recomputes every node's type from the argument types with the ops'
type rules, in reverse postorder, iterating to a fixpoint around loops.  A Phi's type is
the join of its inputs: equal dims stay, different dims become a symbol of that Phi (the
same symbol on every round, so a growing loop value gets one symbolic dim and the
iteration ends).  Integer values built from shapes (ShapeOf, DimSize, the size outputs of
NonMaxSuppression and friends, and small arithmetic on them) are tracked symbolically and
handed to the rules, so ``Slice(x, 0, nb)`` and ``Reshape(x, [nb, 4])`` get exact dims.

A Call's result types are the callee's inferred ones with the callee's argument symbols
replaced by the caller's dims.

Path sensitivity: a block entered only through the true exit of ``Cond(Equal(a, b))``
(or the false exit of ``NotEqual``), where ``a`` is a dim symbol, learns ``a = b`` for
itself and the blocks it dominates; the fact is applied there and nowhere else (not in
the other branch, not after the join).

Type rules report the dim equalities they assumed without proof (``OpDef.infer``:
``Add(f32[N], f32[M])`` takes N and M to broadcast); :func:`assumed_dims` returns them
per node, under the path facts of the node's block, for the run-time checks of
``nexus.passes.shapechecks``.  Binding argument dims at call time is ``nexus.ir.binding``.

Unification: an equality a rule assumes without broadcasting (MatMul's contraction dims,
Concat's other axes: ``DimEq.broadcast`` false) holds wherever the op has run, since the
op fails otherwise (its check, or its kernel, raises NumPy's error).  So the two dims are
unified, as a path fact, in the op's own result and in every block its block strictly
dominates (not before it, not on paths that skip it: a loop whose body never runs, a
branch not taken).  A class of unified dims is named by an int where it has one, else by
the first argument's symbol (in argument order), else by a symbol of its own: after
``U @ h`` in a loop body, the loop-carried ``h``'s Phi symbol reads as ``U``'s second dim
in the blocks that follow.  Argument types are never rewritten (binding checks them).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import sympy

from nexus.ir.analysis import dominators, node_order, reverse_postorder
from nexus.ir.cfg import is_exit
from nexus.ir.graph import Graph, known_value
from nexus.ir.node import Block, Node, node_where
from nexus.ir.opdef import DimEq, OpTypeError
from nexus.ir.static import evaluate
from nexus.ir.types import (
    OptionalType,
    SequenceType,
    TensorType,
    TupleType,
    Type,
    dim_is_zero,
    fresh_dim,
    shape_str,
    simplify_dim,
)
from nexus.ops.index import _slice as slice_kernel

_MAX_VALUE_SIZE = 64  # larger integer tensors are not shape values; do not track them
_MAX_ROUNDS = 30


class ShapeInferenceError(OpTypeError):
    """A type rule rejected a node during inference; names the node, op, block and line."""


def infer_shapes(g: Graph, arg_types: Sequence[Type] | None = None) -> Graph:
    """Annotate every reachable node of ``g`` with its inferred type (in place) and
    return ``g``.  ``arg_types`` replaces the argument types first (e.g. to specialise
    a graph to concrete shapes).  Raises ShapeInferenceError when a rule rejects a node."""
    _infer(g, arg_types)
    return g


def assumed_dims(g: Graph, arg_types: Sequence[Type] | None = None) -> dict[Node, tuple[DimEq, ...]]:
    """Infer shapes as :func:`infer_shapes` does and return, for each node whose type
    rule assumed dim equalities it could not prove, those equalities."""
    return _infer(g, arg_types).assumed


def shape_values(g: Graph) -> tuple[dict[Node, np.ndarray], dict[Node, tuple[DimEq, ...]]]:
    """Infer shapes as :func:`infer_shapes` does (in place) and return what is known of each
    integer node's value (an object array of ints and dims, for nodes whose value follows
    from the argument types and constants: ``ShapeOf``, ``DimSize`` and small arithmetic on
    them), and the dim equalities each node's type rule assumed (:func:`assumed_dims`)."""
    inference = _infer(g, None)
    return inference.values, inference.assumed


def _infer(g: Graph, arg_types: Sequence[Type] | None) -> _Inference:
    if arg_types is not None:
        if len(arg_types) != len(g.args):
            raise ShapeInferenceError(f"graph @{g.name} takes {len(g.args)} arguments, got {len(arg_types)} types")
        g.start.type = TupleType(tuple(arg_types))
        for a, t in zip(g.args, arg_types):
            a.type = t
    inference = _Inference(g)
    inference.run()
    g.touch()
    return inference


# --- the fixpoint ----------------------------------------------------------------------
class _Inference:
    def __init__(self, g: Graph):
        self.g = g
        self.types: dict[Node, Type] = {}
        self.values: dict[Node, Any] = {}
        self.node_syms: dict[Node, list[sympy.Symbol]] = {}
        self.phi_syms: dict[tuple[Node, int], sympy.Symbol] = {}
        self.facts: dict[Block, dict[sympy.Symbol, Any]] = {}
        self.assumed: dict[Node, tuple[DimEq, ...]] = {}
        self.dom = dominators(g)
        self.rpo = reverse_postorder(g)
        self.arg_syms: set[Any] = set().union(*(_type_syms(t) for t in g.arg_types))
        # the argument symbols in argument order: the first names a class of unified dims
        self.arg_rank: dict[Any, int] = {}
        for t in g.arg_types:
            for s in _ordered_syms(t):
                self.arg_rank.setdefault(s, len(self.arg_rank))
        self.forced: dict[Node, dict[sympy.Symbol, Any]] = {}  # what running a node proves
        self.exits: dict[Block, dict[sympy.Symbol, Any]] = {}  # what holds when a block is left

    def run(self) -> None:
        widen: set[Node] = set()
        for rounds in range(_MAX_ROUNDS + 3):
            changed: list[Node] = []
            for b in self.rpo:
                self.facts[b] = self._block_facts(b)
                for n in node_order(b):
                    if self._visit(n, n in widen):
                        changed.append(n)
                self.exits[b] = self._exit_facts(b)
            if not changed:
                break
            if rounds >= _MAX_ROUNDS:
                # No fixpoint yet: forget the rank of the changing Phis (top) and go on.
                widen |= {n for n in changed if n.op.kind == "phi"}
        else:
            n = changed[0]
            raise ShapeInferenceError(f"{node_where(n)}: shape inference did not converge")
        for n, t in self.types.items():
            n.type = t

    # --- one node ----------------------------------------------------------------------
    def _visit(self, n: Node, widen: bool) -> bool:
        """Recompute ``n``'s type and value; True when its type changed."""
        name = n.op.name
        if n.op.kind == "control" or n.op.type_rule is None:  # control types never change
            self.types.setdefault(n, n.type)
            return False
        block = n.block
        assert block is not None
        facts = self.facts.get(block, {})
        try:
            if n.op.kind == "phi":
                new = self._phi_type(n, widen)
                if new is None:
                    return False
            else:
                ins = [_subs_type(self._type(v), facts) for v in n.inputs]
                # Constants of any dtype and size, as Graph.add gives them to rules.
                vals = [known_value(v) if v.op.name == "Constant"
                        else _for_rules(_subs_value(self.values.get(v), facts)) for v in n.inputs]
                inferred = n.op.infer(ins, n.attrs, vals)
                new = inferred.type
                if inferred.assumed:
                    self.assumed[n] = inferred.assumed
                else:
                    self.assumed.pop(n, None)
                if name == "Call":
                    new = _call_type(n.attrs["callee"], ins, new)
                new = self._stabilize(n, new, ins, vals)
                forced = self._forced(ins, inferred.assumed)
                if forced:
                    self.forced[n] = forced
                    new = _subs_type(new, forced)  # the op's result holds only where it ran
                else:
                    self.forced.pop(n, None)
        except OpTypeError as e:
            raise ShapeInferenceError(f"{node_where(n)}: {e}") from None
        except Exception as e:  # noqa: BLE001  (a rule that crashed: still name the node)
            raise ShapeInferenceError(f"{node_where(n)}: the type rule failed: {type(e).__name__}: {e}") from e
        old = self.types.get(n)
        self.types[n] = new
        self.values[n] = self._value(n, new, facts)
        return old != new

    def _type(self, v: Node) -> Type:
        t = self.types.get(v)
        return t if t is not None else v.type

    def _forced(self, ins: Sequence[Type], assumed: Sequence[DimEq]) -> dict[sympy.Symbol, Any]:
        """The dims that the node's running proves equal (its assumed equalities without
        broadcasting), as substitutions: each symbol to the name of its class."""
        out: dict[sympy.Symbol, Any] = {}
        for eq in assumed:
            if eq.broadcast:
                continue  # N against M may be 1 against 5: NumPy broadcasts, nothing is forced
            a, b = ins[eq.i], ins[eq.j]
            assert isinstance(a, TensorType) and isinstance(b, TensorType) and a.shape and b.shape
            self._unify(out, a.shape[eq.a], b.shape[eq.b])
        return out

    def _unify(self, facts: dict[sympy.Symbol, Any], x: Any, y: Any) -> None:
        """Add ``x = y`` to ``facts`` (symbol -> its class's name, kept resolved): the
        union of the two classes, named by an int, else by the first argument symbol."""
        x, y = _resolved(x, facts), _resolved(y, facts)
        if x is None or y is None or x == y:
            return  # an expression (a grown dim, 2 * N) names no class and joins none
        if isinstance(x, int) and isinstance(y, int):
            return  # two sizes that differ: the op always fails here
        rep, loser = (x, y) if self._name_rank(x) <= self._name_rank(y) else (y, x)
        for k, v in facts.items():
            if v == loser:
                facts[k] = rep
            elif isinstance(v, sympy.Basic) and loser in v.free_symbols:
                facts[k] = simplify_dim(v.xreplace({loser: rep}))
        facts[loser] = rep

    def _name_rank(self, d: Any) -> tuple[int, int, str]:
        """Which dim names a class: ints first, then argument symbols in argument order."""
        if isinstance(d, int):
            return (0, 0, "")
        if d in self.arg_rank:
            return (1, self.arg_rank[d], "")
        return (2, 0, str(d))

    def _exit_facts(self, b: Block) -> dict[sympy.Symbol, Any]:
        """What holds when control leaves ``b``: its path facts and what its nodes' running
        proved (every node of a block runs before its terminator)."""
        facts = self.facts.get(b, {})
        proved = [f for n in b.members if (f := self.forced.get(n))]
        if not proved:
            return facts
        facts = dict(facts)
        for f in proved:
            for s, d in f.items():
                self._unify(facts, s, d)
        return facts

    def _phi_type(self, n: Node, widen: bool) -> Type | None:
        block = n.block
        assert block is not None
        seen: list[Type] = []
        for k, v in enumerate(n.inputs):
            if v not in self.types and v.op.kind != "control":
                continue  # a back edge not visited yet: bottom
            pred = block.input(k).block
            facts = self.exits.get(pred, {}) if pred is not None else {}
            seen.append(_subs_type(self._type(v), facts))
        if not seen:
            return None
        first = seen[0]
        if isinstance(first, (SequenceType, OptionalType)):
            return self._container_phi(n, seen, widen)
        if not isinstance(first, TensorType):
            return first
        tensors: list[TensorType] = []
        for t in seen:
            if not isinstance(t, TensorType) or t.dtype != first.dtype:
                raise OpTypeError(f"Phi: input types {first} and {t} differ in kind or dtype")
            tensors.append(t)
        if widen or any(t.shape is None or len(t.shape) != len(first.shape or ()) for t in tensors):
            return first.with_shape(None)
        assert first.shape is not None
        dims: list[Any] = []
        for k, d in enumerate(first.shape):
            others = [t.shape[k] for t in tensors if t.shape is not None]
            if all(_dim_eq(d, o) for o in others):
                dims.append(d)
                continue
            # One symbol per Phi dim, reused on every round so that the loop converges;
            # the one from a previous run when it is the Phi's own (idempotence).
            if (n, k) not in self.phi_syms:
                prev = n.type.shape[k] if isinstance(n.type, TensorType) and n.type.shape and \
                    len(n.type.shape) == len(first.shape) else None
                inputs_syms = set().union(*(_type_syms(t) for t in tensors))
                own = isinstance(prev, sympy.Symbol) and prev not in inputs_syms and prev not in self.arg_syms
                self.phi_syms[(n, k)] = prev if own else fresh_dim()
            dims.append(self.phi_syms[(n, k)])
        return first.with_shape(tuple(dims))

    def _container_phi(self, n: Node, seen: list[Type], widen: bool) -> Type:
        """A Phi of sequences or optionals: the join of its inputs (the Phi's own type
        rule), the symbols the join makes up renamed to the Phi's own on every round (so
        the loop converges); widened, the element's rank and the length become unknown."""
        new = n.op.infer(seen, n.attrs, [None] * len(seen)).type
        if widen:
            new = _widen_container(new)
        return self._stabilize(n, new, seen, [])

    def _stabilize(self, n: Node, new: Type, ins: Sequence[Type], vals: Sequence[Any]) -> Type:
        """Rename the symbols a rule made up (fresh dims) to this node's own symbols, so
        that visiting the node again gives the same type."""
        known: set[Any] = set()
        for t in ins:
            known |= _type_syms(t)
        for v in vals:
            if isinstance(v, np.ndarray) and v.dtype == object:  # only symbolic values hold symbols
                for x in v.reshape(-1):
                    if isinstance(x, sympy.Basic):
                        known |= x.free_symbols
        made = [s for s in _ordered_syms(new) if s not in known]
        if not made:
            return new
        if n not in self.node_syms:
            # Start from the symbols of the node's type before this run (idempotence).
            before = [x for x in _ordered_syms(n.type) if x not in known and x not in self.arg_syms]
            self.node_syms[n] = before if _same_structure(n.type, new) else []
        own = self.node_syms[n]
        mapping = {}
        for i, s in enumerate(made):
            if i < len(own):
                mapping[s] = own[i]
            else:
                own.append(s)
        return _subs_type(new, mapping) if mapping else new

    # --- symbolic values ---------------------------------------------------------------
    def _value(self, n: Node, t: Type, facts: Mapping[Any, Any]) -> Any:
        """What is known of ``n``'s value: an object array of ints and dims, or None."""
        name = n.op.name
        if name == "Constant":
            v = n.attrs["value"]
            return v if v.dtype.kind in "iu" and v.size <= _MAX_VALUE_SIZE else None
        if name == "ShapeOf":
            x = self._type(n.input(0))
            x = _subs_type(x, facts)
            if isinstance(x, TensorType) and x.shape is not None:
                return np.array(list(x.shape), dtype=object)
            return None
        if name == "DimSize":
            x = _subs_type(self._type(n.input(0)), facts)
            if isinstance(x, TensorType) and x.shape:
                return np.array(x.shape[n.attrs["axis"]], dtype=object)
            return None
        if name == "SequenceLength":  # a sequence's length is part of its type, as a dim
            x = _subs_type(self._type(n.input(0)), facts)
            if isinstance(x, SequenceType) and x.length is not None:
                return np.array(x.length, dtype=object)
            return None
        if name == "Proj":
            return self._proj_value(n)
        if name == "Phi":
            vals = [self.values.get(v) for v in n.inputs]
            if vals and all(v is not None for v in vals) and all(_same_value(vals[0], v) for v in vals[1:]):
                return vals[0]
            return None
        if not isinstance(t, TensorType) or t.dtype not in ("i32", "i64", "bool") or not n.op.pure:
            return None
        ins = [_subs_value(self.values.get(v), facts) for v in n.inputs]
        if any(v is None for v in ins):
            return None
        try:
            return _eval_symbolic(n, ins)
        except Exception:  # noqa: BLE001  (a value we cannot follow is simply unknown)
            return None

    def _proj_value(self, n: Node) -> Any:
        """The data-dependent size output of an op (``OpDef.size_output``) is the
        symbol of the dim it sizes."""
        src = n.input(0)
        spec = src.op.size_spec(src.attrs)
        if spec is None or n.attrs["num"] != spec[0]:
            return None
        t = self.types.get(src)
        if not isinstance(t, TupleType):
            return None
        data = t.elems[spec[1]]
        if not isinstance(data, TensorType) or data.shape is None:
            return None
        rank = len(data.shape)
        dim = spec[2] + rank if spec[2] < 0 else spec[2]
        return np.array(data.shape[dim], dtype=object) if 0 <= dim < rank else None

    # --- path facts --------------------------------------------------------------------
    def _block_facts(self, b: Block) -> dict[sympy.Symbol, Any]:
        parent = self.dom.idom.get(b)
        base = dict(self.exits.get(parent, {})) if parent is not None and parent is not b else {}
        if len(b.inputs) != 1:
            return base
        edge = b.input(0)
        if not is_exit(edge) or edge.input(0).op.name != "Cond":  # facts of a Cond's exits only
            return base
        cond = edge.input(0).input(0)
        taken = bool(edge.attrs["num"])
        if (cond.op.name == "Equal" and taken) or (cond.op.name == "NotEqual" and not taken):
            a, c = (_scalar_dim(_subs_value(self.values.get(v), base)) for v in cond.inputs)
            if isinstance(a, sympy.Symbol) and c is not None and a not in _free(c):
                base[a] = c
            elif isinstance(c, sympy.Symbol) and a is not None and c not in _free(a):
                base[c] = a
        return base


# --- calls -----------------------------------------------------------------------------
_IN_PROGRESS: set[int] = set()  # graphs being inferred (recursive calls keep their types)


def _call_type(callee: Graph, ins: Sequence[Type], declared: Type) -> Type:
    """The callee's inferred result types with its argument symbols replaced by the
    caller's dims (``f(x: f32[N]) -> f32[2*N]`` called on ``f32[T]`` gives ``f32[2*T]``)."""
    if id(callee) not in _IN_PROGRESS:
        _IN_PROGRESS.add(id(callee))
        try:
            infer_shapes(callee)
        finally:
            _IN_PROGRESS.discard(id(callee))
    env: dict[Any, Any] = {}
    for want, got in zip(callee.arg_types, ins):
        if isinstance(want, TensorType) and isinstance(got, TensorType) and want.shape is not None \
                and got.shape is not None and len(want.shape) == len(got.shape):
            for dw, dg in zip(want.shape, got.shape):
                if isinstance(dw, sympy.Symbol):
                    env.setdefault(dw, dg)
    results = tuple(_xreplace_type(t, env) for t in callee.result_types)
    if not results:
        return declared
    return results[0] if len(results) == 1 else TupleType(results)


def _xreplace_type(t: Type, env: Mapping[Any, Any]) -> Type:
    """Substitute all symbols at once (caller and callee may both use ``N``)."""
    if isinstance(t, TupleType):
        return TupleType(tuple(_xreplace_type(e, env) for e in t.elems))
    if isinstance(t, TensorType) and t.shape is not None and env:
        return t.with_shape(tuple(d if isinstance(d, int) else simplify_dim(d.xreplace(env)) for d in t.shape))
    return t


# --- helpers ---------------------------------------------------------------------------
def _dim_eq(a: Any, b: Any) -> bool:
    if isinstance(a, int) and isinstance(b, int):
        return a == b
    if isinstance(a, int) != isinstance(b, int):
        return False
    return bool(a == b) or dim_is_zero(a - b)


def _resolved(d: Any, facts: Mapping[Any, Any]) -> int | sympy.Symbol | None:
    """A dim as an int or the symbol naming its class in ``facts``; None for an expression."""
    if isinstance(d, int):
        return d
    if isinstance(d, sympy.Symbol):
        d = facts.get(d, d)
        if isinstance(d, (int, sympy.Symbol)):
            return d
    if isinstance(d, sympy.Basic) and d.is_Integer:
        return int(d)
    return None


def _free(x: Any) -> set[Any]:
    return x.free_symbols if isinstance(x, sympy.Basic) else set()


def _same_structure(a: Type, b: Type) -> bool:
    if isinstance(a, TupleType) and isinstance(b, TupleType):
        return len(a.elems) == len(b.elems) and all(_same_structure(x, y) for x, y in zip(a.elems, b.elems))
    if isinstance(a, TensorType) and isinstance(b, TensorType):
        return a.dtype == b.dtype and a.rank == b.rank
    if isinstance(a, SequenceType) and isinstance(b, SequenceType):
        return _same_structure(a.elem, b.elem) and (a.length is None) == (b.length is None)
    if isinstance(a, OptionalType) and isinstance(b, OptionalType):
        return _same_structure(a.elem, b.elem)
    return a == b  # X, stack: no dims to compare


def _widen_container(t: Type) -> Type:
    """A sequence or optional type with its elements' rank and its length unknown."""
    if isinstance(t, SequenceType):
        return SequenceType(t.elem.with_shape(None))
    if isinstance(t, OptionalType):
        inner = _widen_container(t.elem) if isinstance(t.elem, SequenceType) else t.elem.with_shape(None)
        assert isinstance(inner, (TensorType, SequenceType))
        return OptionalType(inner)
    return t


def _type_syms(t: Type) -> set[Any]:
    return set(_ordered_syms(t))


def _ordered_syms(t: Type) -> list[Any]:
    out: list[Any] = []
    if isinstance(t, TupleType):
        for e in t.elems:
            out += [s for s in _ordered_syms(e) if s not in out]
    elif isinstance(t, TensorType) and t.shape is not None:
        for d in t.shape:
            if isinstance(d, sympy.Basic):
                out += [s for s in sorted(d.free_symbols, key=str) if s not in out]
    elif isinstance(t, SequenceType):
        out = _ordered_syms(t.elem)
        if isinstance(t.length, sympy.Basic):
            out += [s for s in sorted(t.length.free_symbols, key=str) if s not in out]
    elif isinstance(t, OptionalType):
        out = _ordered_syms(t.elem)
    return out


def _subs_type(t: Type, facts: Mapping[Any, Any]) -> Type:
    if not facts:
        return t
    if isinstance(t, TupleType):
        return TupleType(tuple(_subs_type(e, facts) for e in t.elems))
    if isinstance(t, TensorType) and t.shape is not None:
        return t.with_shape(tuple(d if isinstance(d, int) else simplify_dim(d.subs(facts)) for d in t.shape))
    if isinstance(t, SequenceType):
        elem = _subs_type(t.elem, facts)
        assert isinstance(elem, TensorType)
        length = t.length if t.length is None or isinstance(t.length, int) else simplify_dim(t.length.subs(facts))
        return SequenceType(elem, length)
    if isinstance(t, OptionalType):
        inner = _subs_type(t.elem, facts)
        assert isinstance(inner, (TensorType, SequenceType))
        return OptionalType(inner)
    return t


def _subs_value(v: Any, facts: Mapping[Any, Any]) -> Any:
    if v is None or not facts or v.dtype != object:
        return v
    flat = [x if not isinstance(x, sympy.Basic) else simplify_dim(x.subs(facts)) for x in v.reshape(-1)]
    return np.array(flat, dtype=object).reshape(v.shape)


def _same_value(a: Any, b: Any) -> bool:
    a, b = np.asarray(a, dtype=object), np.asarray(b, dtype=object)
    return a.shape == b.shape and all(_dim_eq(x, y) for x, y in zip(a.reshape(-1), b.reshape(-1)))


def _scalar_dim(v: Any) -> Any:
    if v is None:
        return None
    arr = np.asarray(v, dtype=object)
    if arr.size != 1:
        return None
    x = arr.reshape(-1)[0]
    return x if isinstance(x, sympy.Basic) else int(x)


def _eval_symbolic(n: Node, ins: list[Any]) -> Any:
    """Evaluate a small integer op on values that may hold dims."""
    arrs = [_plain(np.asarray(v)) for v in ins]
    if all(a.dtype.kind in "iub" for a in arrs) and n.op.kernel is not None:
        return evaluate(n, arrs, _MAX_VALUE_SIZE)  # plain integers: the static evaluator
    rule = SYMBOLIC_RULES.get(n.op.name)
    if rule is None:
        return None
    out = np.asarray(rule(n, [a.astype(object) for a in arrs], arrs), dtype=object)
    flat: list[Any]
    if isinstance(n.type, TensorType) and n.type.dtype == "bool":  # True, False or None (not known)
        flat = [x if x is None or isinstance(x, _IsZero) else bool(x) for x in out.reshape(-1)]
    else:
        flat = [simplify_dim(x) if isinstance(x, sympy.Basic) else int(x) for x in out.reshape(-1)]
    return np.array(flat, dtype=object).reshape(out.shape)


def _for_rules(v: Any) -> Any:
    """A value as type rules take it: ints and dims; a bool value only where every
    element is known (the Equal of dims that may or may not be equal is ours alone)."""
    if v is None or v.dtype != object:
        return v
    flat = v.reshape(-1)
    if any(x is None or isinstance(x, _IsZero) for x in flat):
        return None
    return v.astype(np.bool_) if flat.size and all(isinstance(x, (bool, np.bool_)) for x in flat) else v


def _plain(a: np.ndarray) -> np.ndarray:
    """An object array of plain ints (or of bools) as an int64 (bool) array: no symbol in it."""
    if a.dtype != object:
        return a
    flat = a.reshape(-1)
    if all(isinstance(x, (bool, np.bool_)) for x in flat):
        return a.astype(np.bool_)
    if all(isinstance(x, (int, np.integer)) and not isinstance(x, (bool, np.bool_)) for x in flat):
        return a.astype(np.int64)
    return a


# How ops compute on values that hold dims (object arrays of ints and sympy expressions),
# keyed by op: ``rule(node, object arrays, the inputs as given)``.  Integer inputs holding
# no symbol run the op's kernel instead.
SymbolicRule = Callable[[Node, list[np.ndarray], list[np.ndarray]], Any]


def _elementwise(fn: Callable[[Any, Any], Any]) -> SymbolicRule:
    ufunc = np.frompyfunc(fn, 2, 1)
    return lambda n, objs, arrs: ufunc(*objs)


class _IsZero:
    """An Equal whose answer depends on the dims' values: whether ``diff`` is 0."""

    __slots__ = ("diff",)

    def __init__(self, diff: Any):
        self.diff = diff


def _equal(a: Any, b: Any) -> bool | _IsZero | None:
    """Whether two dims are equal: an :class:`_IsZero` where that depends on the symbols."""
    if a is None or b is None or isinstance(a, _IsZero) or isinstance(b, _IsZero):
        return None
    diff = simplify_dim(a - b)
    if isinstance(diff, int):
        return diff == 0
    zero = diff.is_zero  # dims are nonnegative: batch == -1 is known false
    return _IsZero(diff) if zero is None else bool(zero)


def _where(n: Node, objs: list[np.ndarray], arrs: list[np.ndarray]) -> Any:
    """Where, element by element.  A condition that depends on the dims picks the second
    side where the first equals it whenever the condition holds: ONNX's Reshape reads a 0
    as "copy the input's dim", which an importer spells ``Where(Equal(t, 0),
    ShapeOf(x)[:k], t)``; with ``t = [batch, 16]`` and ``x`` of dims ``[16*batch]``,
    batch == 0 is not known, but where it holds, 16*batch is batch."""
    c, x, y = np.broadcast_arrays(*objs)
    out = np.empty(c.shape, dtype=object)
    for i, (ci, xi, yi) in enumerate(zip(c.flat, x.flat, y.flat)):
        if isinstance(ci, _IsZero):
            if not (_dim_eq(xi, yi) or _equal_where_zero(ci.diff, xi, yi)):
                raise ValueError("a condition that depends on the dims' values")
            ci = False
        elif ci is None:
            raise ValueError("an unknown condition")
        out.flat[i] = xi if ci else yi
    return out


def _equal_where_zero(diff: Any, x: Any, y: Any) -> bool:
    """Whether dims ``x`` and ``y`` are equal wherever ``diff`` (of one symbol) is 0."""
    free = diff.free_symbols
    if len(free) != 1 or isinstance(x, _IsZero) or isinstance(y, _IsZero):
        return False
    s = next(iter(free))
    roots = sympy.solve(diff, s)
    at = [(simplify_dim(sympy.sympify(x).subs(s, r)), simplify_dim(sympy.sympify(y).subs(s, r))) for r in roots]
    return bool(at) and all(_dim_eq(a, b) for a, b in at)


def _unsqueeze(n: Node, objs: list[np.ndarray], arrs: list[np.ndarray]) -> Any:
    out = objs[0]
    for a in sorted(n.attrs["axes"]):
        out = np.expand_dims(out, a)
    return out


SYMBOLIC_RULES: dict[str, SymbolicRule] = {
    "Add": _elementwise(lambda a, b: a + b),
    "Sub": _elementwise(lambda a, b: a - b),
    "Mul": _elementwise(lambda a, b: a * b),
    "FloorDiv": _elementwise(lambda a, b: a // b),
    "Maximum": _elementwise(lambda a, b: sympy.Max(a, b)),
    "Minimum": _elementwise(lambda a, b: sympy.Min(a, b)),
    "Neg": lambda n, objs, arrs: -objs[0],
    "Identity": lambda n, objs, arrs: objs[0],
    "Cast": lambda n, objs, arrs: objs[0],
    "Concat": lambda n, objs, arrs: np.concatenate(objs, axis=n.attrs["axis"]),
    "Unsqueeze": _unsqueeze,
    "Squeeze": lambda n, objs, arrs: np.squeeze(objs[0], axis=n.attrs.get("axes")),
    "Reshape": lambda n, objs, arrs: objs[0].reshape(tuple(int(d) for d in arrs[1])),
    "Gather": lambda n, objs, arrs: np.take(objs[0], arrs[1].astype(np.int64), axis=n.attrs["axis"]),
    "Equal": _elementwise(_equal),
    "Where": _where,
    "Slice": lambda n, objs, arrs: slice_kernel(objs[0], *[a.astype(np.int64) for a in arrs[1:]]),
}


__all__ = ["SYMBOLIC_RULES", "ShapeInferenceError", "assumed_dims", "infer_shapes", "shape_str", "shape_values"]
