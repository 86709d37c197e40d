"""PyTorch import rules: linear algebra, the nn ops (convolution, pooling, normalisation) and
ops with data-dependent sizes."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from nexus.frontend.torch.data import TorchImportError, np_dtype
from nexus.frontend.torch.ops import (
    as_tensor,
    axis,
    cast,
    out_dtype,
    rank,
    rules,
    tensor_type,
)
from nexus.ir.node import Node

if TYPE_CHECKING:
    from nexus.frontend.torch.importer import Importer


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
