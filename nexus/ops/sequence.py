"""Sequences and optionals: lists of tensors of one dtype, and values that may be absent.

A sequence (:class:`~nexus.ir.types.SequenceType`, ``seq<f32[3, s0], 4>``) holds tensors of
one dtype whose shapes may differ; an optional (:class:`~nexus.ir.types.OptionalType`,
``opt<f32[3]>``) holds a tensor or a sequence, or nothing.  They are ONNX's ``seq`` and
``optional`` values, and the ops are ONNX's, with its semantics (negative positions count
from the back; ``SequenceInsert`` and ``SequenceErase`` default to the back).

Both are immutable values: every op returns a new sequence, so the ops are pure (CSE may
merge two equal inserts, DCE drop an unused one).  The reference kernels hold a sequence
as a :class:`SeqValue` of arrays (0-d elements as NumPy scalars, as the interpreter keeps
scalars), which appends share so that a loop appending T tensors costs O(T); the caller
gets a Python list.  An optional is its value, or None.  Positions out of range, an
empty optional read and shapes that do not concatenate raise (``may_fail``).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, overload

import numpy as np

from nexus.ir.opdef import Attr, OpTypeError
from nexus.ir.types import (
    Dim,
    OptionalType,
    SequenceType,
    TensorType,
    Type,
    fresh_dim,
    join_types,
    scalar,
    simplify_dim,
)
from nexus.ops._rules import define

FAMILY = "sequence"
_POSITION_DTYPES = frozenset({"i32", "i64"})


# --- type rules ------------------------------------------------------------------------------
def _seq(op: str, t: Type, i: int = 0) -> SequenceType:
    if not isinstance(t, SequenceType):
        raise OpTypeError(f"{op}: input {i} must be a sequence, got {t}")
    return t


def _tensor(op: str, t: Type, i: int) -> TensorType:
    if not isinstance(t, TensorType):
        raise OpTypeError(f"{op}: input {i} must be a tensor, got {t}")
    return t


def _position(op: str, ins: Sequence[Type], i: int) -> None:
    """Check the optional position input ``i`` (an i32 or i64 scalar), if present."""
    if len(ins) > i + 1:
        raise OpTypeError(f"{op} takes at most {i + 1} inputs, got {len(ins)}")
    if len(ins) == i + 1:
        p = _tensor(op, ins[i], i)
        if p.dtype not in _POSITION_DTYPES or p.shape not in ((), (1,)):
            raise OpTypeError(f"{op}: the position (input {i}) must be an i32 or i64 scalar, got {p}")


def _element(op: str, seq: SequenceType, t: TensorType, i: int) -> TensorType:
    """The element type of ``seq`` once ``t`` is in it too."""
    if t.dtype != seq.dtype:
        raise OpTypeError(f"{op}: input {i} is {t}, the sequence holds {seq.dtype}")
    if seq.length == 0:  # the empty sequence's element type says nothing yet
        return t
    joined = join_types(seq.elem, t)
    assert isinstance(joined, TensorType)
    return joined


def _add(length: Dim | None, k: int) -> Dim | None:
    return None if length is None else simplify_dim(length + k)


def per_element(t: TensorType) -> TensorType:
    """A read element's type: the symbolic dims of a sequence's element type are per
    element, so each read gets fresh ones (two reads may differ there)."""
    if t.shape is None or all(isinstance(d, int) for d in t.shape):
        return t
    return t.with_shape(tuple(d if isinstance(d, int) else fresh_dim() for d in t.shape))


def _empty_rule(op: str, ins: Sequence[Type], attrs: Mapping[str, Any], _: Sequence[Any]) -> Type:
    return SequenceType(TensorType(attrs["dtype"], None), 0)


def _construct_rule(op: str, ins: Sequence[Type], attrs: Mapping[str, Any], _: Sequence[Any]) -> Type:
    ts = [_tensor(op, t, i) for i, t in enumerate(ins)]
    elem = ts[0]
    for i, t in enumerate(ts[1:], 1):
        if t.dtype != elem.dtype:
            raise OpTypeError(f"{op}: input {i} is {t}, input 0 is {ts[0]}; a sequence holds one dtype")
        joined = join_types(elem, t)
        assert isinstance(joined, TensorType)
        elem = joined
    return SequenceType(elem, len(ts))


def _insert_rule(op: str, ins: Sequence[Type], attrs: Mapping[str, Any], _: Sequence[Any]) -> Type:
    seq = _seq(op, ins[0])
    _position(op, ins, 2)
    return SequenceType(_element(op, seq, _tensor(op, ins[1], 1), 1), _add(seq.length, 1))


def _at_rule(op: str, ins: Sequence[Type], attrs: Mapping[str, Any], _: Sequence[Any]) -> Type:
    seq = _seq(op, ins[0])
    _position(op, ins, 1)
    return per_element(seq.elem)


def _erase_rule(op: str, ins: Sequence[Type], attrs: Mapping[str, Any], _: Sequence[Any]) -> Type:
    seq = _seq(op, ins[0])
    _position(op, ins, 1)
    if seq.length == 0:
        raise OpTypeError(f"{op}: the sequence is empty ({seq})")
    return seq.with_length(_add(seq.length, -1))


def _length_rule(op: str, ins: Sequence[Type], attrs: Mapping[str, Any], _: Sequence[Any]) -> Type:
    _seq(op, ins[0])
    return scalar("i64")


def _axis(op: str, axis: int, rank: int) -> int:
    if not -rank <= axis < rank:
        raise OpTypeError(f"{op}: axis {axis} is out of range for rank {rank}")
    return axis % rank


def _split_rule(op: str, ins: Sequence[Type], attrs: Mapping[str, Any], values: Sequence[Any]) -> Type:
    x = _tensor(op, ins[0], 0)
    if len(ins) > 2:
        raise OpTypeError(f"{op} takes at most 2 inputs, got {len(ins)}")
    if x.shape is None:
        return SequenceType(TensorType(x.dtype, None), None)
    axis = _axis(op, int(attrs["axis"]), len(x.shape))
    size = x.shape[axis]
    shape = list(x.shape)
    if len(ins) == 1:  # pieces of 1
        if not attrs["keepdims"]:
            del shape[axis]
        else:
            shape[axis] = 1
        return SequenceType(TensorType(x.dtype, tuple(shape)), size)
    s = _tensor(op, ins[1], 1)
    if s.dtype not in _POSITION_DTYPES or s.shape is None or len(s.shape) > 1:
        raise OpTypeError(f"{op}: split (input 1) must be an i32 or i64 scalar or vector, got {s}")
    split = values[1] if len(values) > 1 else None
    length: Dim | None = None
    piece: Dim = fresh_dim()
    if split is not None:
        sizes = np.asarray(split).reshape(-1)
        if s.shape == ():
            k = int(sizes[0])
            if k <= 0:
                raise OpTypeError(f"{op}: split must be positive, got {k}")
            if isinstance(size, int):
                length = -(-size // k)
                if size % k == 0:
                    piece = k
        else:
            length = len(sizes)
            if len(sizes) and all(int(v) == int(sizes[0]) for v in sizes):
                piece = int(sizes[0])
    elif s.shape != () and isinstance(s.shape[0], int):
        length = s.shape[0]
    shape[axis] = piece
    return SequenceType(TensorType(x.dtype, tuple(shape)), length)


def _concat_rule(op: str, ins: Sequence[Type], attrs: Mapping[str, Any], _: Sequence[Any]) -> Type:
    seq = _seq(op, ins[0])
    elem = seq.elem
    if elem.shape is None:
        return TensorType(elem.dtype, None)
    shape = list(elem.shape)
    axis = int(attrs["axis"])
    if attrs["new_axis"]:
        axis = _axis(op, axis, len(shape) + 1)
        shape.insert(axis, seq.length if seq.length is not None else fresh_dim())
    else:
        axis = _axis(op, axis, len(shape))
        d = shape[axis]
        shape[axis] = simplify_dim(d * seq.length) if isinstance(d, int) and seq.length is not None else fresh_dim()
    # The other dims must agree between elements; where the element type has a symbol (per
    # element), the result has one unknown size: a fresh symbol.
    return TensorType(elem.dtype, tuple(fresh_dim() if not isinstance(d, int) and k != axis else d
                                        for k, d in enumerate(shape)))


def _optional_rule(op: str, ins: Sequence[Type], attrs: Mapping[str, Any], _: Sequence[Any]) -> Type:
    t = ins[0]
    if not isinstance(t, (TensorType, SequenceType)):
        raise OpTypeError(f"{op}: input 0 must be a tensor or a sequence, got {t}")
    return OptionalType(t)


def _optional_empty_rule(op: str, ins: Sequence[Type], attrs: Mapping[str, Any], _: Sequence[Any]) -> Type:
    elem = TensorType(attrs["dtype"], None)
    return OptionalType(SequenceType(elem) if attrs["sequence"] else elem)


def _opt(op: str, t: Type) -> OptionalType:
    if not isinstance(t, OptionalType):
        raise OpTypeError(f"{op}: input 0 must be an optional, got {t}")
    return t


def _has_rule(op: str, ins: Sequence[Type], attrs: Mapping[str, Any], _: Sequence[Any]) -> Type:
    _opt(op, ins[0])
    return scalar("bool")


def _get_rule(op: str, ins: Sequence[Type], attrs: Mapping[str, Any], _: Sequence[Any]) -> Type:
    return _opt(op, ins[0]).elem


# --- the run-time value -----------------------------------------------------------------------
class SeqValue(Sequence[Any]):
    """A sequence at run time: the first ``n`` items of a list that several values may
    share.  Values are immutable, yet appending is O(1): the first value to append to a
    shared list (``list.append`` is atomic, so one appender wins position ``n``) extends
    it in place, and every other value still sees only its own first items; a second
    append to the same value, an insert elsewhere or an erase in the middle copies
    (as ONNX Runtime copies at every insert).  So a loop that appends T tensors costs
    O(T), not O(T^2).  Graph results and ONNX Runtime get plain lists (``plain``)."""

    __slots__ = ("_items", "_n")

    def __init__(self, items: list[Any], n: int | None = None):
        self._items = items
        self._n = len(items) if n is None else n

    def __len__(self) -> int:
        return self._n

    @overload
    def __getitem__(self, k: int) -> Any: ...

    @overload
    def __getitem__(self, k: slice) -> list[Any]: ...

    def __getitem__(self, k: int | slice) -> Any:
        if isinstance(k, slice):
            return self.tolist()[k]
        if not -self._n <= k < self._n:
            raise IndexError(f"index {k} is out of range for a sequence of {self._n} tensors")
        return self._items[k % self._n]

    def __iter__(self) -> Iterator[Any]:
        return itertools.islice(self._items, self._n)

    def __repr__(self) -> str:
        return f"SeqValue({self.tolist()!r})"

    def tolist(self) -> list[Any]:
        return self._items[:self._n]

    def appended(self, e: Any) -> SeqValue:
        items, n = self._items, self._n
        if len(items) == n:
            items.append(e)
            if items[n] is e:  # this value's append won position n
                return SeqValue(items, n + 1)
        return SeqValue([*items[:n], e])


def plain(value: Any) -> Any:
    """A run-time value as the graph's caller gets it: a sequence as a list of arrays."""
    return value.tolist() if isinstance(value, SeqValue) else value


# --- kernels ---------------------------------------------------------------------------------
def element(x: Any) -> Any:
    """A tensor as a sequence holds it: an array, or a NumPy scalar when 0-d."""
    a = np.asarray(x)
    return a[()] if a.ndim == 0 else a


def _index(seq: Sequence[Any], position: Any, insert: bool = False) -> int:
    n = len(seq)
    p = int(np.asarray(position).reshape(-1)[0])
    hi = n if insert else n - 1
    if not -n <= p <= hi:
        raise IndexError(f"position {p} is out of range for a sequence of {n} tensors "
                         f"([{-n}, {hi}])")
    return p + n if p < 0 else p


def _value(seq: Sequence[Any]) -> SeqValue:
    """``seq`` as a SeqValue (a list from the call boundary is copied once: its caller
    may hold it)."""
    return seq if isinstance(seq, SeqValue) else SeqValue(list(seq))


def _empty(dtype: str) -> SeqValue:
    return SeqValue([])


def _construct(*tensors: Any) -> SeqValue:
    return SeqValue([element(t) for t in tensors])


def _insert(seq: Sequence[Any], tensor: Any, *position: Any) -> SeqValue:
    if not position and seq.__class__ is SeqValue:  # the common case: a loop appending
        return seq.appended(element(tensor))  # type: ignore[attr-defined]
    k = _index(seq, position[0], insert=True) if position else len(seq)
    if k == len(seq):
        return _value(seq).appended(element(tensor))
    items = list(seq)
    items.insert(k, element(tensor))
    return SeqValue(items)


def _at(seq: Sequence[Any], position: Any) -> Any:
    return seq[_index(seq, position)]


def _erase(seq: Sequence[Any], *position: Any) -> SeqValue:
    if not len(seq):
        raise IndexError("erase from an empty sequence")
    k = _index(seq, position[0]) if position else len(seq) - 1
    value = _value(seq)
    if k == len(seq) - 1:  # the last one: a shorter view of the same items
        return SeqValue(value._items, k)
    items = value.tolist()
    del items[k]
    return SeqValue(items)


def _length(seq: Sequence[Any]) -> Any:
    return np.int64(len(seq))


def _split(x: Any, *split: Any, axis: int, keepdims: bool) -> SeqValue:
    a = np.asarray(x)
    axis %= max(a.ndim, 1)
    n = a.shape[axis]
    if not split:
        pieces = np.split(a, n, axis=axis) if n else []
        return SeqValue([element(np.squeeze(p, axis) if not keepdims else p) for p in pieces])
    s = np.asarray(split[0])
    if s.ndim == 0:
        k = int(s)
        if k <= 0:
            raise ValueError(f"split must be positive, got {k}")
        bounds = list(range(k, n, k))
    else:
        sizes = [int(v) for v in s.reshape(-1)]
        if any(v < 0 for v in sizes) or sum(sizes) != n:
            raise ValueError(f"split sizes {sizes} do not add up to the size {n} of axis {axis}")
        bounds = list(np.cumsum(sizes)[:-1])
    return SeqValue([element(p) for p in np.split(a, bounds, axis=axis)])


def _concat(seq: Sequence[Any], axis: int, new_axis: bool) -> Any:
    if not len(seq):
        raise ValueError("cannot concatenate an empty sequence")
    arrays = [np.asarray(t) for t in seq]
    out = np.stack(arrays, axis=axis) if new_axis else np.concatenate(arrays, axis=axis)
    return element(out)


def _optional(value: Any) -> Any:
    return value


def _optional_empty(dtype: str, sequence: bool) -> Any:
    return None


def _has(opt: Any) -> Any:
    return np.bool_(opt is not None)


def _get(opt: Any) -> Any:
    if opt is None:
        raise ValueError("the optional is empty")
    return opt


# --- the ops -----------------------------------------------------------------------------------
_DTYPE = Attr("dtype", doc="the element dtype")
define("SequenceEmpty", FAMILY, (), _empty_rule, _empty, attrs={"dtype": _DTYPE},
       doc="An empty sequence of `dtype` tensors.")
define("SequenceConstruct", FAMILY, ("first", "rest"), _construct_rule, _construct, variadic=True,
       doc="The sequence of its inputs (tensors of one dtype, of any shapes), in order.")
define("SequenceInsert", FAMILY, ("sequence", "tensor", "position"), _insert_rule, _insert, variadic=True,
       may_fail=True,
       doc="A new sequence with `tensor` inserted before `position` (optional: the back; negative counts "
           "from the back).")
define("SequenceAt", FAMILY, ("sequence", "position"), _at_rule, _at, may_fail=True,
       doc="The element at `position` (negative counts from the back).")
define("SequenceErase", FAMILY, ("sequence", "position"), _erase_rule, _erase, variadic=True, may_fail=True,
       doc="A new sequence without the element at `position` (optional: the last).")
define("SequenceLength", FAMILY, ("sequence",), _length_rule, _length,
       doc="The number of elements, an i64 scalar.")
define("SplitToSequence", FAMILY, ("input", "split"), _split_rule, _split, variadic=True, may_fail=True,
       attrs={"axis": Attr("int", 0, "the axis to split"),
              "keepdims": Attr("bool", True, "keep the split axis (pieces of 1, without `split`)")},
       doc="The pieces of `input` along `axis`: of 1 without `split` (squeezed unless `keepdims`), of "
           "`split` each (a scalar: the last one smaller) or of the sizes `split` lists.")
define("ConcatFromSequence", FAMILY, ("sequence",), _concat_rule, _concat, may_fail=True,
       attrs={"axis": Attr("int", doc="the axis to concatenate along (or insert, with `new_axis`)"),
              "new_axis": Attr("bool", False, "stack along a new axis instead")},
       doc="The elements concatenated along `axis` (stacked along a new one with `new_axis`).")
define("Optional", FAMILY, ("value",), _optional_rule, _optional,
       doc="An optional holding `value` (a tensor or a sequence).")
define("OptionalEmpty", FAMILY, (), _optional_empty_rule, _optional_empty,
       attrs={"dtype": _DTYPE, "sequence": Attr("bool", False, "an optional sequence rather than a tensor")},
       doc="An empty optional of a `dtype` tensor (or sequence); the node's type may say more.")
define("OptionalHasElement", FAMILY, ("optional",), _has_rule, _has,
       doc="Whether the optional holds a value (a bool scalar).")
define("OptionalGetElement", FAMILY, ("optional",), _get_rule, _get, may_fail=True,
       doc="The value an optional holds; fails on an empty one.")
