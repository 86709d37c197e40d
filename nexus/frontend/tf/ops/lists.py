"""TensorFlow's lists and stacks as Nexus values.

- v1 ``TensorArrayV3`` and TF2 ``TensorList*`` are stacked tensors ``[n, *element]``: a
  write is ``SetItem``, a read ``Gather``, scatter ``ScatterND``, stack/gather the tensor
  itself, push-back a ``Concat``, pop-back a ``Slice`` and a ``Gather``.  A v1
  TensorArray's value is its *flow* tensor (what the while loop carries), its handle is
  only followed back to the TensorArrayV3 node for the dtype and element shape.
- v1 ``StackV2`` (what TF's gradients of while loops push forward values to and pop in
  the backward loop) is a resource: it becomes an SSA variable holding a Nexus stack
  (``StackNew`` / ``StackPush`` / ``StackPop``), assigned by each push and pop.

Where TF leaves a list's element shape unknown until the first write, the first import
pass makes a placeholder of unknown rank, learns the shape from the writes into it (the
placeholder found by following the written list back through Phis and writes), and the
importer builds the graph again with the learned shapes.  A TF2 TensorList whose writes
have different shapes (a push-back of ``tf.range(i + 1)`` in a while loop), or shapes
known only at run time, is a sequence (``seq<...>``) instead: push-back ``SequenceInsert``,
pop-back ``SequenceAt`` and ``SequenceErase``, get-item ``SequenceAt``, set-item an erase
and an insert, length ``SequenceLength``, stack ``ConcatFromSequence`` (the items must
agree then, as TF requires).  A v1 TensorArray stays a stacked tensor (its flow tensor
is what the loop carries).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from nexus.frontend.tf.ops import Outs, _t, attr_type, cast, converts, i64, scalar
from nexus.frontend.tf.proto import TfImportError, TfNode, shape_dims
from nexus.ir.node import Node
from nexus.ir.static import static_value
from nexus.ir.types import STACK, SequenceType, TensorType, TupleType, fresh_dim, numpy_dtype

if TYPE_CHECKING:
    from nexus.frontend.tf.importer import Importer



# --- the stacked tensor --------------------------------------------------------------------------
def new_list(imp: Importer, n: TfNode, size: Node | int, dtype: str, elem: tuple[int, ...] | None) -> Node:
    """Zeros ``[size, *elem]``; with ``elem`` unknown, the learned shape, else a placeholder."""
    key = imp.list_key(n)
    if elem is None or any(d < 0 for d in elem):
        if key in imp.varying and n.op != "TensorArrayV3":  # a TensorArray's flow stays a tensor
            return _new_seq(imp, size, imp.varying[key])
        elem = imp.learned.get(key)
    dt = numpy_dtype(dtype)
    if elem is None:
        if imp.final:
            raise TfImportError("cannot tell the element shape of this list: TF leaves it unknown, and nothing "
                                "of static shape is written into it")
        imp.relearn = True
        marker = imp.g.add("Constant", [], imp.block, {"value": np.zeros((0,), dt)}, type=TensorType(dtype, None))
        imp.markers[marker] = key
        return marker
    count = size if isinstance(size, int) else static_value(size)
    if count is not None:  # a shape known when imported stays a constant (XLA needs static shapes)
        shape = imp.const(np.array([int(np.asarray(count).reshape(-1)[0]), *elem], np.int64))
        return imp.emit("ConstantOfShape", [shape], {"value": np.zeros((), dt)})
    n0 = imp.emit("Reshape", [i64(imp, size), imp.const(np.array([1], np.int64))], name="")  # type: ignore[arg-type]
    shape = imp.emit("Concat", [n0, imp.const(np.array(elem, np.int64))], {"axis": 0}, name="")
    return imp.emit("Expand", [imp.const(np.zeros((), dt)), shape])


def learn(imp: Importer, lst: Node, elem: Node) -> Node | None:
    """Record the shape of ``elem`` written into ``lst`` for the placeholder ``lst`` came from.
    Where the list is a sequence from the next pass on, a new placeholder for the written
    list (this pass cannot build the write)."""
    if not imp.markers:
        return None
    found = None
    seen: set[Node] = set()
    work = [lst]
    while work:
        v = work.pop()
        if v in seen:
            continue
        seen.add(v)
        key = imp.markers.get(v)
        if key is not None:
            t = _t(elem)
            if t.shape is None:
                continue  # not known yet: maybe in the next pass
            if not all(isinstance(d, int) for d in t.shape):
                # known at run time only: a sequence, unless a later pass learns more
                imp.run_time_shapes.setdefault(key, _per_item(t, t))
                continue
            shape = tuple(int(d) for d in t.shape)  # type: ignore[arg-type]
            before = imp.learned.setdefault(key, shape)
            if before != shape and key not in imp.varying:  # writes of two shapes: a sequence
                imp.varying[key] = _per_item(TensorType(t.dtype, before), t)
            if key in imp.varying:
                found = key
            continue
        if v.op.name == "Phi":
            work.extend(v.inputs)
        elif v.op.name in ("SetItem", "ScatterND", "Identity", "Concat", "Slice") and v.inputs:
            work.append(v.inputs[0])
    if found is None:
        return None
    marker = imp.g.add("Constant", [], imp.block, {"value": np.zeros((0,), numpy_dtype(_t(elem).dtype))},
                       type=TensorType(_t(elem).dtype, None))
    imp.markers[marker] = found
    return marker


def _elem_attr(n: TfNode, key: str) -> tuple[int, ...] | None:
    a = n.attr.get(key)
    if a is None or a.WhichOneof("value") != "shape":
        return None
    return shape_dims(a.shape)


def _elem_input(imp: Importer, n: TfNode, i: int) -> tuple[int, ...] | None:
    v = static_value(imp.arg(n, i))
    if v is None:
        return None
    arr = np.asarray(v).reshape(-1) if np.ndim(v) else None
    return None if arr is None else tuple(int(x) for x in arr)


def _set(imp: Importer, lst: Node, index: Node, value: Node) -> Node:
    if isinstance(lst.type, SequenceType):
        i = scalar(imp, i64(imp, index))
        erased = imp.emit("SequenceErase", [lst, i], type=lst.type, name="")  # checks the index
        return imp.emit("SequenceInsert", [erased, value, i], type=_seq_type(lst.type, value))
    placeholder = learn(imp, lst, value)
    if placeholder is not None:
        return placeholder
    return imp.emit("SetItem", [lst, value, scalar(imp, i64(imp, index))], {"kinds": "i"})


def _get(imp: Importer, lst: Node, index: Node) -> Node:
    if isinstance(lst.type, SequenceType):
        return imp.emit("SequenceAt", [lst, scalar(imp, i64(imp, index))])
    return imp.emit("Gather", [lst, scalar(imp, i64(imp, index))], {"axis": 0})


# --- a TensorList of items of different shapes: a sequence ------------------------------------------
def _per_item(a: TensorType, b: TensorType) -> TensorType:
    """The element type of a sequence holding items of types ``a`` and ``b``: the ints they
    share, a symbol (per item) elsewhere; an unknown rank where the ranks differ."""
    if a.shape is None or b.shape is None or len(a.shape) != len(b.shape):
        return TensorType(a.dtype, None)
    return a.with_shape(tuple(x if isinstance(x, int) and x == y else fresh_dim() for x, y in zip(a.shape, b.shape)))


def _seq_type(seq: SequenceType, value: Node) -> SequenceType:
    """The type of ``seq`` with ``value`` written into it: the same where it fits (so loop
    Phis keep one type), else the joined element type."""
    t = _t(value)
    e = seq.elem
    if e.shape is None or t.shape is not None and len(t.shape) == len(e.shape) and all(
            not isinstance(x, int) or x == y for x, y in zip(e.shape, t.shape)):
        return SequenceType(e, None)
    return SequenceType(_per_item(e, t), None)


def _new_seq(imp: Importer, size: Node | int, elem: TensorType) -> Node:
    """An empty sequence, or ``size`` items (a reserved list) that are empty arrays of the
    element rank until written."""
    t = SequenceType(elem, None)
    if isinstance(size, int) and size == 0:
        return imp.emit("SequenceEmpty", [], {"dtype": elem.dtype}, type=t)
    if elem.shape is None:
        raise TfImportError("a reserved list whose items differ in rank is not supported")
    dims = imp.const(np.zeros(len(elem.shape), np.int64))
    n0 = imp.emit("Reshape", [i64(imp, size if isinstance(size, Node) else imp.const(np.int64(size))),
                              imp.const(np.array([1], np.int64))], name="")
    shape = imp.emit("Concat", [n0, dims], {"axis": 0}, name="")
    rows = imp.emit("Expand", [imp.const(np.zeros((), numpy_dtype(elem.dtype))), shape], name="")
    return imp.emit("SplitToSequence", [rows], {"axis": 0, "keepdims": False}, type=t)


# --- v1 TensorArray (value = flow) -----------------------------------------------------------------
def _ta(imp: Importer, n: TfNode) -> TfNode:
    ta = imp.origin(n.inputs[0])
    if ta.op != "TensorArrayV3":
        raise TfImportError(f"the handle comes from {ta.where()}, not from a TensorArrayV3")
    return ta


@converts("TensorArrayV3")
def _ta_new(imp: Importer, n: TfNode) -> Outs:
    if n.attr.get("dynamic_size") is not None and n.attr["dynamic_size"].b:
        raise TfImportError("dynamic_size TensorArrays are not supported")
    size = imp.arg(n, 0)
    return [None, new_list(imp, n, size, attr_type(n, "dtype"), _elem_attr(n, "element_shape"))]


@converts("TensorArrayWriteV3")
def _ta_write(imp: Importer, n: TfNode) -> Outs:
    _ta(imp, n)
    return [_set(imp, imp.arg(n, 3), imp.arg(n, 1), imp.arg(n, 2))]


@converts("TensorArrayReadV3")
def _ta_read(imp: Importer, n: TfNode) -> Outs:
    _ta(imp, n)
    return [_get(imp, imp.arg(n, 2), imp.arg(n, 1))]


@converts("TensorArrayScatterV3")
def _ta_scatter(imp: Importer, n: TfNode) -> Outs:
    _ta(imp, n)
    lst, idx, value = imp.arg(n, 3), imp.arg(n, 1), imp.arg(n, 2)
    if imp.markers:
        row = imp.emit("Gather", [value, imp.const(np.array(0, np.int64))], {"axis": 0}, name="")
        learn(imp, lst, row)
    idx = imp.emit("Unsqueeze", [i64(imp, idx)], {"axes": (-1,)}, name="")
    return [imp.emit("ScatterND", [lst, idx, value])]


@converts("TensorArrayGatherV3")
def _ta_gather(imp: Importer, n: TfNode) -> Outs:
    _ta(imp, n)
    return [imp.emit("Gather", [imp.arg(n, 2), i64(imp, imp.arg(n, 1))], {"axis": 0})]


@converts("TensorArraySizeV3")
def _ta_size(imp: Importer, n: TfNode) -> Outs:
    _ta(imp, n)
    return [cast(imp, imp.emit("DimSize", [imp.arg(n, 1)], {"axis": 0}, name=""), "i32")]


# --- TF2 TensorList -----------------------------------------------------------------------------
@converts("TensorListReserve")
def _tl_reserve(imp: Importer, n: TfNode) -> Outs:
    return [new_list(imp, n, imp.arg(n, 1), attr_type(n, "element_dtype"), _elem_input(imp, n, 0))]


@converts("EmptyTensorList")
def _tl_empty(imp: Importer, n: TfNode) -> Outs:
    return [new_list(imp, n, 0, attr_type(n, "element_dtype"), _elem_input(imp, n, 0))]


@converts("TensorListFromTensor")
def _tl_from(imp: Importer, n: TfNode) -> Outs:
    return [imp.emit("Identity", [imp.arg(n, 0)])]


@converts("TensorListSetItem")
def _tl_set(imp: Importer, n: TfNode) -> Outs:
    lst = imp.arg(n, 0)
    resize = n.attr.get("resize_if_index_out_of_bounds")
    if isinstance(lst.type, SequenceType) and resize is not None and resize.b:
        raise TfImportError("resize_if_index_out_of_bounds on a list whose items differ in shape is not supported "
                            "(a sequence does not grow by an index)")
    return [_set(imp, lst, imp.arg(n, 1), imp.arg(n, 2))]


@converts("TensorListGetItem")
def _tl_get(imp: Importer, n: TfNode) -> Outs:
    return [_get(imp, imp.arg(n, 0), imp.arg(n, 1))]


@converts("TensorListStack")
def _tl_stack(imp: Importer, n: TfNode) -> Outs:
    lst = imp.arg(n, 0)
    if isinstance(lst.type, SequenceType):  # the items must agree now, as TF requires
        return [imp.emit("ConcatFromSequence", [lst], {"axis": 0, "new_axis": True})]
    return [imp.emit("Identity", [lst])]


@converts("TensorListGather")
def _tl_gather(imp: Importer, n: TfNode) -> Outs:
    lst = imp.arg(n, 0)
    if isinstance(lst.type, SequenceType):
        raise TfImportError("TensorListGather on a list whose items differ in shape is not supported")
    return [imp.emit("Gather", [lst, i64(imp, imp.arg(n, 1))], {"axis": 0})]


@converts("TensorListLength")
def _tl_length(imp: Importer, n: TfNode) -> Outs:
    lst = imp.arg(n, 0)
    if isinstance(lst.type, SequenceType):
        return [cast(imp, imp.emit("SequenceLength", [lst], name=""), "i32")]
    return [cast(imp, imp.emit("DimSize", [lst], {"axis": 0}, name=""), "i32")]


@converts("TensorListPushBack")
def _tl_push(imp: Importer, n: TfNode) -> Outs:
    lst, x = imp.arg(n, 0), imp.arg(n, 1)
    if isinstance(lst.type, SequenceType):
        return [imp.emit("SequenceInsert", [lst, x], type=_seq_type(lst.type, x))]
    placeholder = learn(imp, lst, x)
    if placeholder is not None:
        return [placeholder]
    row = imp.emit("Unsqueeze", [x], {"axes": (0,)}, name="")
    return [imp.emit("Concat", [lst, row], {"axis": 0})]


@converts("TensorListPopBack")
def _tl_pop(imp: Importer, n: TfNode) -> Outs:
    lst = imp.arg(n, 0)
    if isinstance(lst.type, SequenceType):
        top = imp.emit("SequenceAt", [lst, imp.const(np.array(-1, np.int64))])
        return [imp.emit("SequenceErase", [lst], type=lst.type, name=""), top]
    c = imp.const
    rest = imp.emit("Slice", [lst, c(np.array([0], np.int64)), c(np.array([-1], np.int64)),
                              c(np.array([0], np.int64))], name="")
    top = imp.emit("Gather", [lst, c(np.array(-1, np.int64))], {"axis": 0})
    return [rest, top]


# --- v1 stacks (a resource: an SSA variable) ---------------------------------------------------------
@converts("StackV2")
def _stack_new(imp: Importer, n: TfNode) -> Outs:
    imp.ssa.set_value(imp.res_key(n), imp.block, imp.emit("StackNew", []))
    return []


def _stack_of(imp: Importer, n: TfNode) -> tuple[TfNode, Node]:
    st = imp.origin(n.inputs[0])
    if st.op != "StackV2":
        raise TfImportError(f"the handle comes from {st.where()}, not from a StackV2")
    s = imp.ssa.get_value(imp.res_key(st), imp.block)
    if s is None:
        raise TfImportError(f"the stack {st.name!r} has no value here")
    return st, s


@converts("StackPushV2")
def _stack_push(imp: Importer, n: TfNode) -> Outs:
    st, s = _stack_of(imp, n)
    x = imp.arg(n, 1)
    imp.stack_types[imp.res_key(st)] = x.type
    imp.ssa.set_value(imp.res_key(st), imp.block, imp.emit("StackPush", [s, x]))
    return [x]


@converts("StackPopV2")
def _stack_pop(imp: Importer, n: TfNode) -> Outs:
    st, s = _stack_of(imp, n)
    t = imp.stack_types.get(imp.res_key(st))
    if not isinstance(t, TensorType):
        raise TfImportError(f"pops the stack {st.name!r} before anything is pushed to it")
    pop = imp.emit("StackPop", [s], {"dtype": t.dtype}, type=TupleType((STACK, t)))
    imp.ssa.set_value(imp.res_key(st), imp.block, imp.emit("Proj", [pop], {"num": 0}, name=""))
    return [imp.emit("Proj", [pop], {"num": 1})]
