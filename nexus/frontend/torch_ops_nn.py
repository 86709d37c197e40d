"""The PyTorch import rules for shapes and indexing, linear algebra and the nn ops
(convolution, pooling, normalisation), and ops with data-dependent sizes (registry and
conventions: :mod:`nexus.frontend.torch_rules`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from nexus.frontend.torch_data import TorchImportError, np_dtype
from nexus.frontend.torch_rules import (
    INT64_MAX,
    as_tensor,
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
    from nexus.frontend.torch_import import Importer

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
    parts = [cast(imp, t, dt) for t in tensors]
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


# --- linear algebra and nn -------------------------------------------------------------------
@rules("aten.mm", "aten.bmm", "aten.matmul")
def _mm(imp: Importer, a: Node, b: Node) -> Node:
    return imp.emit("MatMul", [a, b])


@rules("aten.addmm")
def _addmm(imp: Importer, c: Node, a: Node, b: Node, *, beta: float = 1, alpha: float = 1) -> Node:
    return imp.emit("Gemm", [a, b, c], {"alpha": float(alpha), "beta": float(beta)})


@rules("aten.baddbmm")
def _baddbmm(imp: Importer, c: Node, a: Node, b: Node, *, beta: float = 1, alpha: float = 1) -> Node:
    dt = tensor_type(a).dtype
    p = imp.emit("MatMul", [a, b], name="")
    if alpha != 1:
        p = imp.emit("Mul", [p, as_tensor(imp, alpha, dt)], name="")
    if beta != 1:
        c = imp.emit("Mul", [c, as_tensor(imp, beta, dt)], name="")
    return imp.emit("Add", [p, c])


@rules("aten.linear")
def _linear(imp: Importer, x: Node, w: Node, b: Node | None = None) -> Node:
    y = imp.emit("MatMul", [x, imp.emit("Transpose", [w], name="")], name="" if b is not None else None)
    return imp.emit("Add", [y, b]) if b is not None else y


@rules("aten._softmax", "aten.softmax.int", "aten._log_softmax", "aten.log_softmax.int")
def _softmax(imp: Importer, x: Node, dim: int, half_to_float: Any = False, **kw: Any) -> Node:
    op = "LogSoftmax" if "log_softmax" in str(imp.fx.target) else "Softmax"
    return imp.emit(op, [cast(imp, x, out_dtype(imp))], {"axis": axis(dim, rank(x))})


@rules("aten.convolution")
def _convolution(imp: Importer, x: Node, w: Node, b: Node | None, stride: Sequence[int], padding: Sequence[int],
                 dilation: Sequence[int], transposed: bool, output_padding: Sequence[int], groups: int) -> Node:
    nsp = rank(x) - 2
    full = lambda v: [int(a) for a in v] * (nsp if len(v) == 1 else 1)  # noqa: E731
    attrs: dict[str, Any] = {"strides": tuple(full(stride)), "pads": tuple(full(padding) * 2),
                             "dilations": tuple(full(dilation)), "group": int(groups)}
    ins = [x, w] + ([b] if b is not None else [])
    if transposed:
        attrs["output_padding"] = tuple(full(output_padding))
        return imp.emit("ConvTranspose", ins, attrs)
    return imp.emit("Conv", ins, attrs)


def _pool_attrs(x: Node, kernel: Sequence[int], stride: Sequence[int], padding: Any) -> dict[str, Any]:
    nsp = rank(x) - 2
    full = lambda v: [int(a) for a in (v if isinstance(v, (list, tuple)) else [v])] * (  # noqa: E731
        nsp if not isinstance(v, (list, tuple)) or len(v) == 1 else 1)
    k = full(kernel)
    return {"kernel_shape": tuple(k), "strides": tuple(full(stride) if stride else k),
            "pads": tuple(full(padding) * 2)}


@rules("aten.max_pool2d_with_indices", "aten.max_pool2d", "aten.max_pool1d", "aten.max_pool3d_with_indices")
def _max_pool(imp: Importer, x: Node, kernel_size: Sequence[int], stride: Sequence[int] = (), padding: Any = 0,
              dilation: Any = 1, ceil_mode: bool = False) -> Any:
    attrs = _pool_attrs(x, kernel_size, stride, padding)
    attrs["dilations"] = tuple(_pool_attrs(x, dilation, (), 0)["kernel_shape"])
    attrs["ceil_mode"] = bool(ceil_mode)
    y = imp.emit("MaxPool", [x], attrs)
    return [y, None] if "indices" in str(imp.fx.target) else y


@rules("aten.avg_pool2d", "aten.avg_pool1d", "aten.avg_pool3d")
def _avg_pool(imp: Importer, x: Node, kernel_size: Sequence[int], stride: Sequence[int] = (), padding: Any = 0,
              ceil_mode: bool = False, count_include_pad: bool = True, divisor_override: Any = None) -> Node:
    if divisor_override is not None:
        raise TorchImportError("avg_pool with divisor_override is not supported")
    attrs = _pool_attrs(x, kernel_size, stride, padding)
    attrs.update(ceil_mode=bool(ceil_mode), count_include_pad=bool(count_include_pad))
    return imp.emit("AveragePool", [x], attrs)


@rules("aten._adaptive_avg_pool2d", "aten.adaptive_avg_pool2d", "aten._adaptive_avg_pool1d")
def _adaptive_avg_pool(imp: Importer, x: Node, output_size: Sequence[int]) -> Node:
    shape = tensor_type(x).shape
    assert shape is not None
    out = [int(o) for o in output_size]
    if all(o == 1 for o in out):
        return imp.emit("GlobalAveragePool", [x])
    spatial = shape[2:]
    if not all(isinstance(s, int) and s % o == 0 for s, o in zip(spatial, out)):
        raise TorchImportError("adaptive average pooling needs static sizes divisible by the output size")
    k = tuple(int(s) // o for s, o in zip(spatial, out))  # type: ignore[call-overload]
    return imp.emit("AveragePool", [x], {"kernel_shape": k, "strides": k})


def _ones_or(imp: Importer, v: Node | None, n: Any, dtype: str, fill: float) -> Node:
    if v is not None:
        return v
    return imp.const(np.full(n, fill, np_dtype(dtype)))


@rules("aten._native_batch_norm_legit_no_training", "aten.native_batch_norm", "aten._native_batch_norm_legit",
       "aten.batch_norm")
def _batch_norm(imp: Importer, x: Node, w: Node | None, b: Node | None, mean: Node | None, var: Node | None,
                *args: Any) -> Any:
    name = str(imp.fx.target)
    training = args[0] if ("no_training" not in name and args and isinstance(args[0], bool)) else False
    if training or mean is None or var is None:
        raise TorchImportError("batch norm in training mode is not supported (export in eval mode)")
    eps = args[-1] if "batch_norm.default" not in name else args[2]
    c = tensor_type(x).shape[1]  # type: ignore[index]
    dt = tensor_type(x).dtype
    y = imp.emit("BatchNormalization", [x, _ones_or(imp, w, c, dt, 1), _ones_or(imp, b, c, dt, 0), mean, var],
                 {"epsilon": float(eps)})
    return y if "aten.batch_norm" in name else [y, None, None]


@rules("aten.native_layer_norm", "aten.layer_norm")
def _layer_norm(imp: Importer, x: Node, normalized_shape: Sequence[int], w: Node | None = None,
                b: Node | None = None, eps: float = 1e-5, *args: Any) -> Any:
    n = tuple(int(d) for d in normalized_shape)
    dt = tensor_type(x).dtype
    y = imp.emit("LayerNormalization", [x, _ones_or(imp, w, n, dt, 1), _ones_or(imp, b, n, dt, 0)],
                 {"axis": -len(n), "epsilon": float(eps)})
    return y if "aten.layer_norm" in str(imp.fx.target) else [y, None, None]


# --- data-dependent sizes ----------------------------------------------------------------------
@rules("aten.nonzero")
def _nonzero(imp: Importer, x: Node) -> Node:
    t = imp.emit("NonZero", [x], name="")
    return imp.emit("Transpose", [imp.emit("Proj", [t], {"num": 0}, name="")], {"perm": (1, 0)})
