"""Ops whose output size depends on the data: NonMaxSuppression, NonZero, Unique,
UniqueSlices, BooleanMask and TopK (whose k may be a runtime value).

Each returns a tuple whose last component is the data-dependent size as an i64 scalar;
the type rule gives that dim a fresh symbol (``fresh_dim``), and shape inference makes
the size value equal to that symbol (``OpDef.size_output``), so later Reshape/Slice/Range
that use the size get exact symbolic shapes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from nexus.ir.opdef import Attr, DimEq, Inferred, OpTypeError, SizeOutput
from nexus.ir.types import FLOAT_DTYPES, INT_DTYPES, TensorType, TupleType, Type, fresh_dim
from nexus.ops._rules import (
    NUMERIC,
    assume_equal,
    assuming,
    check_dtype,
    check_int_scalar,
    define,
    normalize_axis,
    scalar_value,
    tensor,
)

FAMILY = "dynamic"
I64 = TensorType("i64", ())


def _size(n: int) -> np.int64:
    return np.int64(n)


# --- NonMaxSuppression -------------------------------------------------------------------
def _scalar_or_one(op: str, t: TensorType, what: str, allowed: frozenset[str]) -> None:
    if t.dtype not in allowed or (t.shape is not None and t.shape not in ((), (1,))):
        raise OpTypeError(f"{op}: {what} must be a scalar (or [1]) of {', '.join(sorted(allowed))}, got {t}")


def _nms_rule(op: str, ins: Sequence[Type], attrs: Mapping[str, Any], _: Sequence[Any]) -> Type | Inferred:
    boxes, scores, max_out, iou, score_thr = (tensor(op, t, i) for i, t in enumerate(ins))
    check_dtype(op, boxes, FLOAT_DTYPES, 0)
    if scores.dtype != boxes.dtype:
        raise OpTypeError(f"{op}: scores are {scores.dtype}, boxes are {boxes.dtype}; insert a Cast")
    _scalar_or_one(op, max_out, "max_output_boxes_per_class", frozenset(INT_DTYPES))
    _scalar_or_one(op, iou, "iou_threshold", frozenset(FLOAT_DTYPES))
    _scalar_or_one(op, score_thr, "score_threshold", frozenset(FLOAT_DTYPES))
    if attrs["center_point_box"] not in (0, 1):
        raise OpTypeError(f"{op}: center_point_box must be 0 or 1, got {attrs['center_point_box']}")
    rank = boxes.rank
    assumed: list[DimEq] = []
    if rank is not None:
        if rank not in (2, 3) or (isinstance(boxes.shape[-1], int) and boxes.shape[-1] != 4):  # type: ignore[index]
            raise OpTypeError(f"{op}: boxes must be [N, 4] or [B, N, 4], got {boxes}")
        want = 1 if rank == 2 else 3
        if scores.rank is not None and scores.rank != want:
            raise OpTypeError(f"{op}: with boxes {boxes}, scores must have rank {want} "
                              f"({'[N]' if rank == 2 else '[B, C, N]'}), got {scores}")
        if scores.shape is not None and boxes.shape is not None:
            n_box, n_score = boxes.shape[-2], scores.shape[-1]
            if isinstance(n_box, int) and isinstance(n_score, int) and n_box != n_score:
                raise OpTypeError(f"{op}: {n_box} boxes but {n_score} scores")
            assumed += assume_equal(ins, (0, -2, 1, -1))  # N boxes, N scores
            if rank == 3:
                assumed += assume_equal(ins, (0, 0, 1, 0))  # B
    nb = fresh_dim("nb")
    if attrs["select_boxes"]:
        sel = boxes.with_shape((nb, 4))
    elif rank == 2:
        sel = TensorType("i64", (nb,))
    else:
        sel = TensorType("i64", (nb, 3))
    return assuming(TupleType((sel, I64)), assumed)


def _corners(boxes: np.ndarray, center: int) -> tuple[np.ndarray, ...]:
    """(y_min, x_min, y_max, x_max) of boxes in either ONNX encoding."""
    if center:
        xc, yc, w, h = (boxes[:, k] for k in range(4))
        return yc - h / 2, xc - w / 2, yc + h / 2, xc + w / 2
    y1, x1, y2, x2 = (boxes[:, k] for k in range(4))
    return np.minimum(y1, y2), np.minimum(x1, x2), np.maximum(y1, y2), np.maximum(x1, x2)


def nms_single(boxes: np.ndarray, scores: np.ndarray, max_out: int, iou_thr: float, score_thr: float | None,
               center: int = 0) -> np.ndarray:
    """Greedy NMS for one class: indices of the kept boxes in selection order (ONNX
    semantics: score > score_threshold, suppressed when IoU > iou_threshold; boxes with
    no area suppress nothing).

    Only boxes that overlap can suppress each other, so instead of one IoU row per kept
    box (O(kept x N)), the overlapping pairs are found at once by a sweep over the boxes
    sorted by x_min, their IoUs computed in one vectorised step, and the greedy pass
    walks the (sparse) suppression lists."""
    if max_out <= 0 or len(scores) == 0:
        return np.zeros(0, np.int64)
    cand = np.nonzero(scores > score_thr)[0] if score_thr is not None else np.arange(len(scores))
    # Highest score first; equal scores by lower index (as ONNX Runtime).
    order = cand[np.lexsort((cand, -scores[cand].astype(np.float64)))]
    m = len(order)
    if m == 0:
        return np.zeros(0, np.int64)
    y0, x0, y1, x1 = _corners(boxes[order], center)
    area = (y1 - y0) * (x1 - x0)
    # Pairs (i, j) where box j starts inside box i's x-range: every x-overlapping pair
    # once.  Work in x-sorted order, so that max(x_min_i, x_min_j) is x_min_j.
    xs = np.argsort(x0, kind="stable")
    X0, X1, Y0, Y1, A = x0[xs], x1[xs], y0[xs], y1[xs], area[xs]
    starts = np.arange(1, m + 1)
    counts = np.maximum(np.searchsorted(X0, X1, side="left") - starts, 0)
    total = int(counts.sum())
    if total > 4 * 10**6:
        return order[_nms_rows(y0, x0, y1, x1, area, max_out, iou_thr)]
    a = np.repeat(np.arange(m), counts)
    b = np.arange(total) + np.repeat(starts - (np.cumsum(counts) - counts), counts)
    ih = np.minimum(Y1[a], Y1[b]) - np.maximum(Y0[a], Y0[b])
    near = ih > 0  # most x-overlapping pairs do not overlap in y: drop them first
    a, b, ih = a[near], b[near], ih[near]
    inter = ih * np.maximum(np.minimum(X1[a], X1[b]) - X0[b], 0)
    union = A[a] + A[b] - inter
    with np.errstate(divide="ignore", invalid="ignore"):
        hit = (inter > 0) & (A[a] > 0) & (A[b] > 0) & (union > 0) & (inter / union > iou_thr)
    a, b = xs[a[hit]], xs[b[hit]]
    # The higher-scored box of a pair (smaller position) suppresses the other, if kept.
    hi, lo = np.minimum(a, b), np.maximum(a, b)
    by = np.argsort(hi, kind="stable")
    hi, lo = hi[by], lo[by]
    ptr = np.searchsorted(hi, np.arange(m + 1)).tolist()
    suppressed = np.zeros(m, bool)
    keep: list[int] = []
    for p in range(m):
        if suppressed[p]:
            continue
        keep.append(p)
        if len(keep) >= max_out:
            break
        if ptr[p + 1] > ptr[p]:
            suppressed[lo[ptr[p]:ptr[p + 1]]] = True
    return order[np.asarray(keep, np.int64)]


def _nms_rows(y0: np.ndarray, x0: np.ndarray, y1: np.ndarray, x1: np.ndarray, area: np.ndarray, max_out: int,
              iou_thr: float) -> np.ndarray:
    """The plain greedy loop (one IoU row per kept box), for inputs with very many overlaps."""
    rest = np.arange(len(area))
    keep: list[int] = []
    while rest.size:
        i = int(rest[0])
        keep.append(i)
        if len(keep) >= max_out:
            break
        rest = rest[1:]
        ih = np.maximum(np.minimum(y1[i], y1[rest]) - np.maximum(y0[i], y0[rest]), 0)
        iw = np.maximum(np.minimum(x1[i], x1[rest]) - np.maximum(x0[i], x0[rest]), 0)
        inter = ih * iw
        union = area[i] + area[rest] - inter
        with np.errstate(divide="ignore", invalid="ignore"):
            suppressed = (inter > 0) & (area[i] > 0) & (area[rest] > 0) & (union > 0) & (inter / union > iou_thr)
        rest = rest[~suppressed]
    return np.asarray(keep, np.int64)


def _nms(boxes: Any, scores: Any, max_output: Any, iou_threshold: Any, score_threshold: Any,
         center_point_box: int = 0, select_boxes: bool = False) -> tuple[np.ndarray, np.int64]:
    b, s = np.asarray(boxes), np.asarray(scores)
    max_out = int(np.asarray(max_output).reshape(-1)[0])
    iou = float(np.asarray(iou_threshold).reshape(-1)[0])
    thr = np.asarray(score_threshold).reshape(-1)[0]
    if b.ndim == 2:
        keep = nms_single(b, s, max_out, iou, thr, center_point_box)
        out = b[keep] if select_boxes else keep
        return np.ascontiguousarray(out), _size(len(keep))
    rows: list[np.ndarray] = []
    for bi in range(b.shape[0]):
        for ci in range(s.shape[1]):
            keep = nms_single(b[bi], s[bi, ci], max_out, iou, thr, center_point_box)
            rows.append(np.stack([np.full_like(keep, bi), np.full_like(keep, ci), keep], axis=1))
    sel = np.concatenate(rows) if rows else np.zeros((0, 3), np.int64)
    if select_boxes:
        return np.ascontiguousarray(b[sel[:, 0], sel[:, 2]]), _size(len(sel))
    return sel, _size(len(sel))


define("NonMaxSuppression", FAMILY,
       ("boxes", "scores", "max_output_boxes_per_class", "iou_threshold", "score_threshold"),
       _nms_rule, _nms,
       attrs={
           "center_point_box": Attr("int", 0, "0: [y1, x1, y2, x2] corners; 1: [x_center, y_center, w, h]"),
           "select_boxes": Attr("bool", False, "Proj 0 holds the selected boxes [nb, 4] instead of indices"),
       },
       doc="ONNX NonMaxSuppression. boxes [B, N, 4] with scores [B, C, N] give Proj 0 = selected indices "
           "[nb, 3] (batch, class, box); boxes [N, 4] with scores [N] give box indices [nb] (or the boxes "
           "themselves with select_boxes). Proj 1 = nb, an i64 scalar.", may_fail=True,
       results=("selected", "nb"), size_output=SizeOutput("nb", of="selected", dim=0))


# --- NonZero, Unique, BooleanMask ----------------------------------------------------------
def _nonzero_rule(op: str, ins: Sequence[Type], attrs: Mapping[str, Any], _: Sequence[Any]) -> Type:
    x = tensor(op, ins[0], 0)
    check_dtype(op, x, NUMERIC | {"bool"})
    n = fresh_dim("nz")
    rows = x.rank if x.rank is not None else fresh_dim()
    return TupleType((TensorType("i64", (rows, n)), I64))


def _nonzero(x: Any) -> tuple[np.ndarray, np.int64]:
    arr = np.asarray(x)
    if arr.ndim == 0:
        # A scalar has one index tuple, of length 0, when it is non-zero.
        n = int(bool(arr))
        return np.zeros((0, n), np.int64), _size(n)
    idx = np.array(np.nonzero(arr), dtype=np.int64).reshape(arr.ndim, -1)
    return idx, _size(idx.shape[1])


define("NonZero", FAMILY, ("x",), _nonzero_rule, _nonzero,
       doc="Indices of the non-zero elements, [rank, nz] i64 (ONNX NonZero); Proj 1 = nz.", may_fail=True,
       results=("indices", "nz"), size_output=SizeOutput("nz", of="indices", dim=1))


def _unique_rule(op: str, ins: Sequence[Type], attrs: Mapping[str, Any], _: Sequence[Any]) -> Type:
    x = tensor(op, ins[0], 0)
    check_dtype(op, x, NUMERIC | {"bool"})
    u = fresh_dim("u")
    total: Any = None
    if x.shape is not None:
        total = 1
        for d in x.shape:
            total = total * d
    n = total if total is not None else fresh_dim()
    return TupleType((x.with_shape((u,)), TensorType("i64", (u,)), TensorType("i64", (n,)),
                      TensorType("i64", (u,)), I64))


def _unique(x: Any, sorted: bool = True) -> tuple[Any, ...]:
    flat = np.asarray(x).reshape(-1)
    vals, first, inverse, counts = np.unique(flat, return_index=True, return_inverse=True, return_counts=True)
    if not sorted:
        # Order of first occurrence: renumber the sorted uniques.
        perm = np.argsort(first, kind="stable")
        rank = np.empty_like(perm)
        rank[perm] = np.arange(len(perm))
        vals, first, counts, inverse = vals[perm], first[perm], counts[perm], rank[inverse]
    i64 = np.int64
    return vals, first.astype(i64), inverse.reshape(-1).astype(i64), counts.astype(i64), _size(len(vals))


define("Unique", FAMILY, ("x",), _unique_rule, _unique,
       attrs={"sorted": Attr("bool", True, "values ascending; else in order of first occurrence")},
       doc="Unique elements of the flattened x: (values [u], first indices [u], inverse [numel], "
           "counts [u], u) as ONNX Unique without axis.", may_fail=True,
       results=("values", "indices", "inverse", "counts", "u"), size_output=SizeOutput("u", of="values", dim=0))


def _unique_slices_rule(op: str, ins: Sequence[Type], attrs: Mapping[str, Any], _: Sequence[Any]) -> Type:
    x = tensor(op, ins[0], 0)
    check_dtype(op, x, NUMERIC | {"bool"})
    u = fresh_dim("u")
    if x.shape is None:
        return TupleType((x, TensorType("i64", (u,)), TensorType("i64", None), TensorType("i64", (u,)), I64))
    if not x.shape:
        raise OpTypeError(f"{op}: needs rank >= 1, got a scalar")
    axis = normalize_axis(op, attrs["axis"], len(x.shape))
    shape = x.shape[:axis] + (u,) + x.shape[axis + 1:]
    return TupleType((x.with_shape(shape), TensorType("i64", (u,)), TensorType("i64", (x.shape[axis],)),
                      TensorType("i64", (u,)), I64))


def _unique_slices(x: Any, axis: int = 0, sorted: bool = True) -> tuple[Any, ...]:
    arr = np.asarray(x)
    axis = axis % arr.ndim
    rows = np.moveaxis(arr, axis, 0).reshape(arr.shape[axis], -1)
    if rows.shape[0] == 0:
        z = np.zeros(0, np.int64)
        return arr.copy(), z, z, z, _size(0)
    # Sort the rows lexicographically (the first column most significant), as np.unique(axis=).
    order = np.lexsort(rows.T[::-1], axis=-1) if rows.shape[1] else np.arange(rows.shape[0])
    srt = rows[order]
    new = np.ones(len(order), bool)
    if rows.shape[1]:
        new[1:] = np.any(srt[1:] != srt[:-1], axis=1)
    else:
        new[1:] = False
    group = np.cumsum(new) - 1  # the sorted unique slice each sorted row belongs to
    starts = np.flatnonzero(new)
    first = np.minimum.reduceat(order, starts)  # stable sort: the first occurrence is the least index
    counts = np.diff(np.append(starts, len(order)))
    inverse = np.empty(len(order), np.int64)
    inverse[order] = group
    if not sorted:
        perm = np.argsort(first, kind="stable")
        rank = np.empty_like(perm)
        rank[perm] = np.arange(len(perm))
        first, counts, inverse = first[perm], counts[perm], rank[inverse]
    vals = np.take(arr, first, axis=axis)
    i64 = np.int64
    return vals, first.astype(i64), inverse.astype(i64), counts.astype(i64), _size(len(first))


define("UniqueSlices", FAMILY, ("x",), _unique_slices_rule, _unique_slices,
       attrs={"axis": Attr("int", 0, "the axis whose slices are compared"),
              "sorted": Attr("bool", True, "slices in lexicographic order; else in order of first occurrence")},
       doc="Unique slices of x along `axis`: (values with u slices, first indices [u], inverse [x.shape[axis]], "
           "counts [u], u) as ONNX Unique with an axis.", may_fail=True,
       results=("values", "indices", "inverse", "counts", "u"), size_output=SizeOutput("u", of="values", dim="axis"))


def _mask_rule(op: str, ins: Sequence[Type], attrs: Mapping[str, Any], _: Sequence[Any]) -> Type | Inferred:
    x, m = tensor(op, ins[0], 0), tensor(op, ins[1], 1)
    if m.dtype != "bool":
        raise OpTypeError(f"{op}: the mask (input 1) must be bool, got {m.dtype}")
    k = fresh_dim("k")
    if x.shape is None or m.shape is None:
        return TupleType((x.with_shape(None), I64))
    if len(m.shape) > len(x.shape) or not m.shape:
        raise OpTypeError(f"{op}: the mask must have rank 1..{len(x.shape)}, got {m}")
    for i, (a, b) in enumerate(zip(x.shape, m.shape)):
        if isinstance(a, int) and isinstance(b, int) and a != b:
            raise OpTypeError(f"{op}: mask {m} does not match x {x} in dim {i}")
    assumed = assume_equal(ins, *((0, i, 1, i) for i in range(len(m.shape))))
    return assuming(TupleType((x.with_shape((k,) + x.shape[len(m.shape):]), I64)), assumed)


def _boolean_mask(x: Any, mask: Any) -> tuple[np.ndarray, np.int64]:
    out = np.asarray(x)[np.asarray(mask)]
    return out, _size(out.shape[0])


define("BooleanMask", FAMILY, ("x", "mask"), _mask_rule, _boolean_mask, differentiable=True,
       doc="x[mask] for a bool mask over the leading dims of x: [k, rest...]; Proj 1 = k.", may_fail=True,
       results=("selected", "k"), size_output=SizeOutput("k", of="selected", dim=0))


# --- TopK --------------------------------------------------------------------------------
def _topk_rule(op: str, ins: Sequence[Type], attrs: Mapping[str, Any], values: Sequence[Any]) -> Type:
    x, k = tensor(op, ins[0], 0), tensor(op, ins[1], 1)
    check_dtype(op, x, NUMERIC)
    check_int_scalar(op, k, "k")
    if x.shape is None:
        return TupleType((x, TensorType("i64", None), I64))
    axis = normalize_axis(op, attrs["axis"], len(x.shape))
    kv = scalar_value(values[1])
    if isinstance(kv, int):
        d = x.shape[axis]
        if kv < 0 or (isinstance(d, int) and kv > d):
            raise OpTypeError(f"{op}: k = {kv} is out of range for an axis of size {d}")
    dim = kv if kv is not None else fresh_dim("k")
    shape = x.shape[:axis] + (dim,) + x.shape[axis + 1:]
    return TupleType((x.with_shape(shape), TensorType("i64", shape), I64))


def _topk(x: Any, k: Any, axis: int = -1, largest: bool = True, sorted: bool = True) -> tuple[Any, ...]:
    arr = np.asarray(x)
    kk = int(k)
    if not 0 <= kk <= arr.shape[axis]:
        raise ValueError(f"k = {kk} is out of range for an axis of size {arr.shape[axis]}")
    key = arr.astype(np.float64) if arr.dtype.kind in "ub" else arr
    # Stable sort on the negated key: ties keep the lower index first (as ONNX Runtime).
    idx = np.argsort(-key if largest else key, axis=axis, kind="stable")
    idx = np.take(idx, np.arange(kk), axis=axis)
    if not sorted:
        idx = np.sort(idx, axis=axis)
    vals = np.take_along_axis(arr, idx, axis=axis)
    return vals, idx.astype(np.int64), _size(kk)


define("TopK", FAMILY, ("x", "k"), _topk_rule, _topk, differentiable=True,
       attrs={
           "axis": Attr("int", -1, "the axis searched"),
           "largest": Attr("bool", True, "the largest (else the smallest) k"),
           "sorted": Attr("bool", True, "in order of value (else of index)"),
       },
       doc="The k largest (or smallest) along `axis`: (values, indices i64, k); k is an i64 scalar that may "
           "be computed at run time (the dim is then a fresh symbol).", may_fail=True,
       results=("values", "indices", "k"), size_output=SizeOutput("k", of="values", dim="axis"))
