"""TF2 TensorLists whose items differ in shape import as sequences (``seq<...>``); lists
of one element shape stay stacked tensors.

TensorFlow is not installed here, so these GraphDefs are written node by node with the
protos ``tensorboard`` ships (the same NodeDefs ``tf.compat.v1`` emits for a while loop
pushing ``tf.range(i + 1)`` onto a TensorList: Enter/Merge/Switch/NextIteration/Exit,
EmptyTensorList with an unknown element shape).  The oracle is the same program in plain
Python with NumPy; TensorFlow's semantics of each op (PushBack appends, PopBack takes the
last item, GetItem indexes, Length counts) are what the Python lines spell out."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import nexus as nx
from nexus.testing.extras import require

require("tensorboard", "tf")
from tensorboard.compat.proto import graph_pb2, tensor_pb2, tensor_shape_pb2, types_pb2  # noqa: E402

I32, F32, VARIANT = types_pb2.DT_INT32, types_pb2.DT_FLOAT, types_pb2.DT_VARIANT


def _const(value: Any, dtype: int) -> tensor_pb2.TensorProto:
    a = np.asarray(value)
    t = tensor_pb2.TensorProto(dtype=dtype, tensor_shape=tensor_shape_pb2.TensorShapeProto(
        dim=[tensor_shape_pb2.TensorShapeProto.Dim(size=d) for d in a.shape]))
    t.tensor_content = a.astype(np.int32 if dtype == I32 else np.float32).tobytes()
    return t


class _Graph:
    def __init__(self) -> None:
        self.gd = graph_pb2.GraphDef()

    def node(self, name: str, op: str, inputs: tuple[str, ...] = (), **attrs: Any) -> str:
        n = self.gd.node.add(name=name, op=op, input=list(inputs))
        for k, v in attrs.items():
            a = n.attr[k]
            if k in ("T", "dtype", "element_dtype", "shape_type", "Tidx", "SrcT", "DstT", "Index"):
                a.type = v
            elif k == "value":
                a.tensor.CopyFrom(v)
            elif k == "shape":
                a.shape.CopyFrom(tensor_shape_pb2.TensorShapeProto(
                    unknown_rank=v is None, dim=[tensor_shape_pb2.TensorShapeProto.Dim(size=d) for d in v or ()]))
            elif isinstance(v, bool):
                a.b = v
            elif isinstance(v, int):
                a.i = v
            else:
                a.s = v.encode()
        return name

    def const(self, name: str, value: Any, dtype: int = I32) -> str:
        return self.node(name, "Const", dtype=dtype, value=_const(value, dtype))


def _while_pushing_ranges(n: int | None) -> graph_pb2.GraphDef:
    """``l = []; i = 0; while i < n: l.append(tf.range(i + 1) * scale); i += 1`` (v1 frames),
    then the list's length, its item 1, and a pop-back: the popped item and the new length.
    ``n`` is a constant, or a placeholder when None."""
    g = _Graph()
    nn = g.node("n", "Placeholder", dtype=I32, shape=[]) if n is None else g.const("n", n)
    scale = g.node("scale", "Placeholder", dtype=F32, shape=[])
    shape = g.const("element_shape", -1)
    maxn = g.const("max_num_elements", -1)
    lst = g.node("list", "EmptyTensorList", (shape, maxn), element_dtype=F32, shape_type=I32)
    i0 = g.const("i0", 0)
    frame = {"frame_name": "while/while_context", "parallel_iterations": 10}
    g.node("while/Enter", "Enter", (i0,), T=I32, is_constant=False, **frame)
    g.node("while/Enter_1", "Enter", (lst,), T=VARIANT, is_constant=False, **frame)
    g.node("while/Less/Enter", "Enter", (nn,), T=I32, is_constant=True, **frame)
    g.node("while/scale", "Enter", (scale,), T=F32, is_constant=True, **frame)
    g.node("while/Merge", "Merge", ("while/Enter", "while/NextIteration"), T=I32, N=2)
    g.node("while/Merge_1", "Merge", ("while/Enter_1", "while/NextIteration_1"), T=VARIANT, N=2)
    g.node("while/Less", "Less", ("while/Merge", "while/Less/Enter"), T=I32)
    g.node("while/LoopCond", "LoopCond", ("while/Less",))
    g.node("while/Switch", "Switch", ("while/Merge", "while/LoopCond"), T=I32)
    g.node("while/Switch_1", "Switch", ("while/Merge_1", "while/LoopCond"), T=VARIANT)
    g.node("while/Identity", "Identity", ("while/Switch:1",), T=I32)
    g.node("while/Identity_1", "Identity", ("while/Switch_1:1",), T=VARIANT)
    g.node("while/one", "Const", ("^while/Identity",), dtype=I32, value=_const(1, I32))
    g.node("while/zero", "Const", ("^while/Identity",), dtype=I32, value=_const(0, I32))
    g.node("while/add", "AddV2", ("while/Identity", "while/one"), T=I32)
    g.node("while/range", "Range", ("while/zero", "while/add", "while/one"), Tidx=I32)
    g.node("while/cast", "Cast", ("while/range",), SrcT=I32, DstT=F32)
    g.node("while/mul", "Mul", ("while/cast", "while/scale"), T=F32)
    g.node("while/push", "TensorListPushBack", ("while/Identity_1", "while/mul"), element_dtype=F32)
    g.node("while/NextIteration", "NextIteration", ("while/add",), T=I32)
    g.node("while/NextIteration_1", "NextIteration", ("while/push",), T=VARIANT)
    g.node("while/Exit", "Exit", ("while/Switch",), T=I32)
    g.node("while/Exit_1", "Exit", ("while/Switch_1",), T=VARIANT)
    g.node("length", "TensorListLength", ("while/Exit_1",))
    g.node("item", "TensorListGetItem", ("while/Exit_1", g.const("one", 1), shape), element_dtype=F32)
    g.node("pop", "TensorListPopBack", ("while/Exit_1", shape), element_dtype=F32)
    g.node("length_after", "TensorListLength", ("pop",))
    return g.gd


def _oracle(n: int, scale: float) -> list[Any]:
    items = []
    i = 0
    while i < n:
        items.append(np.arange(i + 1, dtype=np.float32) * np.float32(scale))
        i += 1
    length = np.int32(len(items))
    item = items[1]
    top = items.pop()
    return [length, item, top, np.int32(len(items))]


OUTS = ["length", "item", "pop:1", "length_after"]


@pytest.mark.parametrize("n", [None, 4])
def test_a_loop_pushing_items_of_growing_length_is_a_sequence(n: int | None) -> None:
    gd = _while_pushing_ranges(n)
    ins = ["n", "scale"] if n is None else ["scale"]
    g = nx.from_tf(gd, ins, OUTS)
    nx.verify(g)
    ops = {node.op.name for node in g.nodes()}
    assert {"SequenceEmpty", "SequenceInsert", "SequenceLength", "SequenceAt", "SequenceErase"} <= ops
    assert "Concat" not in ops
    for k in (2, 3, 6):
        if n is not None and k != n:
            continue
        args = [np.int32(k), np.float32(0.5)] if n is None else [np.float32(0.5)]
        got = g(*args)
        for a, b in zip(got, _oracle(k, 0.5)):
            assert np.asarray(a).dtype == np.asarray(b).dtype
            np.testing.assert_array_equal(a, b)
    h = nx.parse(nx.print_graph(g))  # the text form keeps the sequence types
    assert nx.structurally_equal(h, g)


def test_pushes_of_two_static_shapes_are_a_sequence_and_stack_refuses_at_run_time() -> None:
    """Outside a loop: push [0., 1.] then [0., 1., 2.] (ints that differ); TensorListStack of
    them fails as TF does, and GetItem reads each."""
    g = _Graph()
    shape = g.const("element_shape", -1)
    lst = g.node("list", "EmptyTensorList", (shape, g.const("max", -1)), element_dtype=F32, shape_type=I32)
    x = g.node("x", "Placeholder", dtype=F32, shape=[3])
    two = g.node("two", "StridedSlice", (x, g.const("b", [0]), g.const("e", [2]), g.const("s", [1])), T=F32,
                 Index=I32, begin_mask=0, end_mask=0, ellipsis_mask=0, new_axis_mask=0, shrink_axis_mask=0)
    a = g.node("a", "TensorListPushBack", (lst, two), element_dtype=F32)
    b = g.node("b2", "TensorListPushBack", (a, x), element_dtype=F32)
    g.node("first", "TensorListGetItem", (b, g.const("zero", 0), shape), element_dtype=F32)
    g.node("second", "TensorListGetItem", (b, g.const("one", 1), shape), element_dtype=F32)
    g.node("stacked", "TensorListStack", (b, shape), element_dtype=F32)
    x0 = np.array([1.0, 2.0, 3.0], np.float32)
    gr = nx.from_tf(g.gd, ["x"], ["first", "second"])
    first, second = gr(x0)
    np.testing.assert_array_equal(first, x0[:2])
    np.testing.assert_array_equal(second, x0)
    stacked = nx.from_tf(g.gd, ["x"], ["stacked"])
    with pytest.raises(Exception, match="ConcatFromSequence"):
        stacked(x0)


def test_pushes_of_one_shape_stay_a_stacked_tensor() -> None:
    g = _Graph()
    shape = g.const("element_shape", -1)
    lst = g.node("list", "EmptyTensorList", (shape, g.const("max", -1)), element_dtype=F32, shape_type=I32)
    x = g.node("x", "Placeholder", dtype=F32, shape=[3])
    a = g.node("a", "TensorListPushBack", (lst, x), element_dtype=F32)
    b = g.node("b", "TensorListPushBack", (a, x), element_dtype=F32)
    g.node("stacked", "TensorListStack", (b, shape), element_dtype=F32)
    gr = nx.from_tf(g.gd, ["x"], ["stacked"])
    assert not any(n.op.name.startswith("Sequence") for n in gr.nodes())
    x0 = np.array([1.0, 2.0, 3.0], np.float32)
    np.testing.assert_array_equal(gr(x0), np.stack([x0, x0]))
