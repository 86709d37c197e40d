"""Type rules on symbolic dims and unknown ranks (expected shapes written by hand)."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pytest
import sympy

from nexus.ir.graph import infer_type
from nexus.ir.opdef import OpTypeError, all_ops, get_op
from nexus.ir.types import DTYPES, TensorType, TupleType, Type, parse_dim, sym
from nexus.ops import FAMILIES
from nexus.ops.doc import PROBE_ATTRS

N, M, D, B, K, H, W, C = (sym(s) for s in "N M D B K H W C".split())


def f32(*dims: Any) -> TensorType:
    return TensorType("f32", tuple(parse_dim(d) if isinstance(d, str) else d for d in dims))


def i64(*dims: Any) -> TensorType:
    return TensorType("i64", dims)


def rule(op: str, ins: list[Type], values: list[Any] | None = None, **attrs: Any) -> Type:
    o = get_op(op)
    return infer_type(o, ins, o.complete_attrs(attrs), values or [None] * len(ins))


CASES = [
    ("Add", [f32(N, 1), f32(1, M)], {}, None, f32(N, M)),
    ("MatMul", [f32(B, N, K), f32(K, M)], {}, None, f32(B, N, M)),
    ("Gemm", [f32(K, N), f32(M, K)], {"transA": True, "transB": True}, None, f32(N, M)),
    ("Einsum", [f32(B, N, K), f32(B, K, M)], {"equation": "bij,bjk->bik"}, None, f32(B, N, M)),
    ("Concat", [f32(N, 3), f32(M, 3), f32(2, 3)], {"axis": 0}, None, f32("N+M+2", 3)),
    ("Flatten", [f32(N, C, H, W)], {"axis": 1}, None, f32(N, "C*H*W")),
    ("Transpose", [f32(N, D)], {}, None, f32(D, N)),
    ("Unsqueeze", [f32(N, D)], {"axes": (0, -1)}, None, f32(1, N, D, 1)),
    ("Squeeze", [f32(N, 1, D)], {"axes": (1,)}, None, f32(N, D)),
    ("Softmax", [f32(N, D)], {"axis": 0}, None, f32(N, D)),
    ("ReduceSum", [f32(N, D)], {"axes": (1,), "keepdims": True}, None, f32(N, 1)),
    ("ArgMax", [f32(N, D)], {"axis": 1}, None, i64(N)),
    ("CumSum", [f32(N, D)], {"axis": 1}, None, f32(N, D)),
    ("Gather", [f32(N, D), i64(K)], {"axis": 0}, None, f32(K, D)),
    ("GatherND", [f32(B, N, D), i64(B, K, 1)], {"batch_dims": 1}, None, f32(B, K, D)),
    ("Where", [TensorType("bool", (N, 1)), f32(1, D), f32(1, D)], {}, None, f32(N, D)),
    ("Pad", [f32(N, D), i64(4)], {}, [None, np.array([1, 2, 3, 4])], f32("N+4", "D+6")),
    ("Tile", [f32(N, D), i64(2)], {}, [None, np.array([2, 3])], f32("2*N", "3*D")),
    ("Expand", [f32(N, 1), i64(3)], {}, [None, np.array([B, 1, D], dtype=object)], f32(B, N, D)),
    ("Slice", [f32(N, D), i64(1), i64(1), i64(1), i64(1)], {},
     [None, np.array([0]), np.array([K], dtype=object), np.array([1]), np.array([1])], f32(N, "Min(D, K)")),
    ("Range", [i64(), i64(), i64()], {}, [np.array(0), np.array(N, dtype=object), np.array(2)],
     i64(sympy.ceiling(N / 2))),
    ("ConstantOfShape", [i64(2)], {}, [np.array([N, 3], dtype=object)], f32(N, 3)),
    ("ShapeOf", [f32(N, D)], {}, None, i64(2)),
    ("Conv", [f32(N, 3, H, W), f32(8, 3, 3, 3)], {"strides": (2, 2), "pads": (1, 1, 1, 1)}, None,
     f32(N, 8, "floor((H-1)/2)+1", "floor((W-1)/2)+1")),
    ("ConvTranspose", [f32(N, 4, H, W), f32(4, 2, 3, 3)], {"strides": (2, 2)}, None, f32(N, 2, "2*H+1", "2*W+1")),
    ("MaxPool", [f32(N, C, H, W)], {"kernel_shape": (2, 2), "strides": (2, 2)}, None,
     f32(N, C, "floor((H-2)/2)+1", "floor((W-2)/2)+1")),
    ("GlobalAveragePool", [f32(N, C, H, W)], {}, None, f32(N, C, 1, 1)),
    ("LayerNormalization", [f32(N, D), f32(D)], {}, None, f32(N, D)),
    ("Resize", [f32(N, C, H, W), i64(4)], {}, [None, np.array([N, C, 2 * H, 2 * W], dtype=object)],
     f32(N, C, "2*H", "2*W")),
    ("OneHot", [i64(N), i64(), f32(2)], {}, [None, np.array(10), None], f32(N, 10)),
]


@pytest.mark.parametrize("op,ins,attrs,values,want", CASES, ids=[c[0] for c in CASES])
def test_symbolic_rule(op: str, ins: list, attrs: dict, values: list | None, want: Type) -> None:
    assert rule(op, ins, values, **attrs) == want


def test_split_symbolic_halves() -> None:
    got = rule("Split", [f32("2*N", D)], num_outputs=2)
    assert got == TupleType((f32(N, D), f32(N, D)))


def test_unique_inverse_is_numel() -> None:
    got = rule("Unique", [f32(N, M)])
    assert isinstance(got, TupleType) and got.elems[2] == i64(N * M)


def test_topk_static_and_runtime_k() -> None:
    got = rule("TopK", [f32(N, D), i64()], [None, np.array(3)])
    assert isinstance(got, TupleType) and got.elems[0] == f32(N, 3)
    got = rule("TopK", [f32(N, D), i64()])
    assert isinstance(got, TupleType)
    k = got.elems[0].shape[1]  # type: ignore[union-attr]
    assert isinstance(k, sympy.Symbol) and k not in (N, D)


def test_nms_fresh_symbols_differ_per_node() -> None:
    ins = [f32(N, 4), f32(N), i64(), f32(), f32()]
    a, b = rule("NonMaxSuppression", ins), rule("NonMaxSuppression", ins)
    assert a != b  # each node gets its own count symbol


FAMILY_OPS = sorted((o for o in all_ops().values() if o.family in FAMILIES), key=lambda o: o.name)


@pytest.mark.parametrize("op", FAMILY_OPS, ids=lambda o: o.name)
def test_unknown_rank_inputs_never_crash(op) -> None:  # type: ignore[no-untyped-def]
    """With every input of unknown rank a rule either answers or raises OpTypeError."""
    if not op.inputs:
        return
    attrs = op.complete_attrs(PROBE_ATTRS.get(op.name, {}))
    answered = False
    for d in DTYPES:
        for rest in itertools.product((d, "i64", "bool"), repeat=len(op.inputs) - 1):
            ins = [TensorType(d, None)] + [TensorType(r, None) for r in rest]
            try:
                out = op.type_rule(ins, attrs, [None] * len(ins))
            except OpTypeError:
                continue
            assert isinstance(out, (TensorType, TupleType))
            answered = True
    assert answered, f"{op.name} accepts no inputs of unknown rank"
