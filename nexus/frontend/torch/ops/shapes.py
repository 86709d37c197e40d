"""PyTorch import rules: shapes and indexing."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from nexus.frontend.torch.data import TorchImportError
from nexus.frontend.torch.ops import (
    INT64_MAX,
    axis,
    cast,
    i64_scalar,
    int_list,
    out_dtype,
    rank,
    rules,
    shape_vec,
    tensor_type,
)
from nexus.ir.node import Node

if TYPE_CHECKING:
    from nexus.frontend.torch.importer import Importer


# --- shapes ----------------------------------------------------------------------------------
@rules("aten.view", "aten.reshape", "aten._unsafe_view", "aten.view_copy")
def _view(imp: Importer, x: Node, size: Sequence[Any]) -> Node:
    return imp.emit("Reshape", [x, shape_vec(imp, size)])


@rules("aten.permute", "aten.permute_copy")
def _permute(imp: Importer, x: Node, dims: Sequence[int]) -> Node:
    r = rank(x)
    return imp.emit("Transpose", [x], {"perm": tuple(axis(d, r) for d in dims)})


@rules("aten.t", "aten.transpose.int", "aten.numpy_T")
def _transpose(imp: Importer, x: Node, d0: int = 0, d1: int = 1) -> Node:
    r = rank(x)
    if r < 2:
        return imp.emit("Identity", [x])
    perm = list(range(r))
    a, b = axis(d0, r), axis(d1, r)
    perm[a], perm[b] = perm[b], perm[a]
    return imp.emit("Transpose", [x], {"perm": tuple(perm)})


@rules("aten.expand", "aten.expand_copy")
def _expand(imp: Importer, x: Node, size: Sequence[Any], *, implicit: bool = False) -> Node:
    # torch's -1 keeps the dim; under ONNX's two-way broadcasting a 1 does the same
    sizes = [1 if (not isinstance(s, Node) and int(s) == -1) else s for s in size]
    return imp.emit("Expand", [x, shape_vec(imp, sizes)])


@rules("aten.unsqueeze")
def _unsqueeze(imp: Importer, x: Node, dim: int) -> Node:
    return imp.emit("Unsqueeze", [x], {"axes": (axis(dim, rank(x) + 1),)})


@rules("aten.squeeze.dims", "aten.squeeze.dim", "aten.squeeze.default")
def _squeeze(imp: Importer, x: Node, dims: Any = None) -> Node:
    val = imp.fx.args[0].meta["val"]
    r = rank(x)
    cand = range(r) if dims is None else [axis(d, r) for d in int_list(dims)]
    # torch squeezes only the dims of size 1 (the example's sizes say which)
    axes = tuple(a for a in cand if isinstance(val.shape[a], int) and val.shape[a] == 1)
    return imp.emit("Squeeze", [x], {"axes": axes}) if axes else imp.emit("Identity", [x])


@rules("aten.flatten.using_ints")
def _flatten(imp: Importer, x: Node, start_dim: int = 0, end_dim: int = -1) -> Node:
    r = rank(x)
    s, e = axis(start_dim, r), axis(end_dim, r)
    sizes = [imp.emit("DimSize", [x], {"axis": a}, name="") for a in range(r)]
    merged = [*sizes[:s], -1, *sizes[e + 1:]] if r else [1]
    return imp.emit("Reshape", [x, shape_vec(imp, merged)])


@rules("aten.cat")
def _cat(imp: Importer, tensors: Sequence[Node], dim: int = 0) -> Node:
    dt = out_dtype(imp)
    # torch skips 1-D empty tensors whatever the others' rank (an empty KV cache's first update)
    kept = [t for t in tensors if tensor_type(t).shape != (0,)] or list(tensors[:1])
    parts = [cast(imp, t, dt) for t in kept]
    return imp.emit("Concat", parts, {"axis": axis(dim, rank(parts[0]))})


@rules("aten.stack")
def _stack(imp: Importer, tensors: Sequence[Node], dim: int = 0) -> Node:
    r = rank(tensors[0]) + 1
    a = axis(dim, r)
    parts = [imp.emit("Unsqueeze", [t], {"axes": (a,)}, name="") for t in tensors]
    return imp.emit("Concat", parts, {"axis": a})


@rules("aten.slice.Tensor", "aten.slice_copy.Tensor")
def _slice(imp: Importer, x: Node, dim: int = 0, start: Any = None, end: Any = None, step: Any = 1) -> Node:
    a = axis(dim, rank(x))
    start = 0 if start is None else start
    end = INT64_MAX if end is None else end
    return imp.emit("Slice", [x, shape_vec(imp, [start]), shape_vec(imp, [end]), imp.const([a], np.int64),
                              shape_vec(imp, [step])])


@rules("aten.select.int", "aten.select_copy.int")
def _select(imp: Importer, x: Node, dim: int, index: Any) -> Node:
    return imp.emit("Gather", [x, i64_scalar(imp, index)], {"axis": axis(dim, rank(x))})


@rules("aten.narrow")
def _narrow(imp: Importer, x: Node, dim: int, start: Any, length: Any) -> Node:
    end = imp.emit("Add", [i64_scalar(imp, start), i64_scalar(imp, length)], name="") if isinstance(start, Node) or \
        isinstance(length, Node) else int(start) + int(length)
    return _slice(imp, x, dim, start, end, 1)


@rules("aten.split_with_sizes", "aten.split.Tensor", "aten.split_with_sizes_copy", "aten.split_copy.Tensor",
       "aten.unbind.int", "aten.chunk")
def _split(imp: Importer, x: Node, sizes: Any = None, dim: int = 0) -> list[Any]:
    name = str(imp.fx.target)
    vals = imp.fx.meta["val"]
    if "unbind" in name:
        dim = sizes if sizes is not None else 0
    a = axis(dim, rank(x))
    widths = [v.shape[a] for v in vals]
    if not all(isinstance(w, int) for w in widths):
        raise TorchImportError("split into parts of symbolic sizes is not supported")
    t = imp.emit("Split", [x], {"axis": a, "split": tuple(int(w) for w in widths)}, name="")
    parts = [imp.emit("Proj", [t], {"num": k}) for k in range(len(widths))]
    if "unbind" in name:
        parts = [imp.emit("Squeeze", [p], {"axes": (a,)}) for p in parts]
    return parts


@rules("aten.index_select")
def _index_select(imp: Importer, x: Node, dim: int, index: Node) -> Node:
    return imp.emit("Gather", [x, index], {"axis": axis(dim, rank(x))})


@rules("aten.gather")
def _gather(imp: Importer, x: Node, dim: int, index: Node, sparse_grad: bool = False) -> Node:
    return imp.emit("GatherElements", [x, index], {"axis": axis(dim, rank(x))})


@rules("aten.embedding")
def _embedding(imp: Importer, weight: Node, indices: Node, *args: Any) -> Node:
    return imp.emit("Gather", [weight, indices], {"axis": 0})


@rules("aten.index.Tensor")
def _index(imp: Importer, x: Node, indices: Sequence[Node | None]) -> Node:
    used = [k for k, i in enumerate(indices) if i is not None]
    if len(used) == 1:
        k = used[0]
        idx = indices[k]
        assert idx is not None
        if tensor_type(idx).dtype == "bool":
            if k != 0:
                raise TorchImportError("a boolean index is supported on the leading dims only")
            t = imp.emit("BooleanMask", [x, idx], name="")
            return imp.emit("Proj", [t], {"num": 0})
        return imp.emit("Gather", [x, idx], {"axis": k})
    if used == list(range(len(used))) and all(tensor_type(i).dtype != "bool" for i in indices if i is not None):
        # x[i0, i1, ...] on the leading dims: GatherND on the index tuples, broadcast together
        parts = [cast(imp, i, "i64") for i in indices if i is not None]
        total = parts[0]
        for p in parts[1:]:
            total = imp.emit("Add", [total, p], name="")
        r = max(rank(p) for p in parts)
        shape = imp.emit("ShapeOf", [total], name="")
        cols = [imp.emit("Unsqueeze", [imp.emit("Expand", [p, shape], name="")], {"axes": (r,)}, name="")
                for p in parts]
        return imp.emit("GatherND", [x, imp.emit("Concat", cols, {"axis": r}, name="")])
    raise TorchImportError("this form of advanced indexing is not supported (one index tensor, or leading ones)")


@rules("aten.constant_pad_nd")
def _pad(imp: Importer, x: Node, pad: Sequence[int], value: float = 0) -> Node:
    r = rank(x)
    begins, ends = [0] * r, [0] * r
    for k in range(len(pad) // 2):  # torch lists (begin, end) pairs from the last dim back
        begins[r - 1 - k], ends[r - 1 - k] = int(pad[2 * k]), int(pad[2 * k + 1])
    return imp.emit("Pad", [x, imp.const(begins + ends, np.int64)], {"mode": "constant", "value": float(value)})


@rules("aten.flip")
def _flip(imp: Importer, x: Node, dims: Sequence[int]) -> Node:
    axes = [axis(d, rank(x)) for d in dims]
    n = len(axes)
    return imp.emit("Slice", [x, imp.const([-1] * n, np.int64), imp.const([-INT64_MAX] * n, np.int64),
                              imp.const(axes, np.int64), imp.const([-1] * n, np.int64)])


@rules("aten.repeat")
def _repeat(imp: Importer, x: Node, repeats: Sequence[Any]) -> Node:
    extra = len(repeats) - rank(x)
    if extra > 0:
        x = imp.emit("Reshape", [x, shape_vec(imp, [1] * extra + [imp.emit("DimSize", [x], {"axis": a}, name="")
                                                                  for a in range(rank(x))])], name="")
    return imp.emit("Tile", [x, shape_vec(imp, repeats)])


@rules("aten.sym_size.int")
def _sym_size(imp: Importer, x: Node, dim: int) -> Node:
    d = tensor_type(x).shape[axis(dim, rank(x))]  # type: ignore[index]
    if isinstance(d, int):
        return imp.const(d, np.int64)
    return imp.emit("DimSize", [x], {"axis": axis(dim, rank(x))})


@rules("aten.sym_numel")
def _sym_numel(imp: Importer, x: Node) -> Node:
    return imp.emit("ReduceProd", [imp.emit("ShapeOf", [x], name="")], {"axes": (0,)})


