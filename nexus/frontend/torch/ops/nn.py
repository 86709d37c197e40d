"""PyTorch import rules: linear algebra, the nn ops (convolution, pooling, normalisation,
scaled dot-product attention) and ops with data-dependent sizes."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from nexus.frontend.torch.data import TorchImportError, np_dtype
from nexus.frontend.torch.ops import (
    as_tensor,
    axis,
    cast,
    i64_scalar,
    out_dtype,
    rank,
    rules,
    shape_vec,
    tensor_type,
    whole,
)
from nexus.ir.node import Node
from nexus.ir.static import static_value
from nexus.ir.types import TensorType

if TYPE_CHECKING:
    from nexus.frontend.torch.importer import Importer


# --- linear algebra and nn -------------------------------------------------------------------
@rules("aten.mm", "aten.bmm")
@whole("aten.matmul.default")  # torch's decomposition expands a shared weight to every batch for a bmm
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


def _size(imp: Importer, x: Node, a: int) -> Any:
    """Dim ``a`` of ``x``: an int where it is static, else a DimSize node."""
    d = tensor_type(x).shape[a]  # type: ignore[index]
    return int(d) if isinstance(d, int) else imp.emit("DimSize", [x], {"axis": a}, name="")


def _product(imp: Importer, sizes: Sequence[Any]) -> Any:
    """The product of ints and i64 scalar nodes: an int where all are ints."""
    known = 1
    nodes: list[Node] = []
    for d in sizes:
        if isinstance(d, Node):
            nodes.append(d)
        else:
            known *= int(d)
    if not nodes:
        return known
    out = imp.const(known, np.int64)
    for d in nodes:
        out = imp.emit("Mul", [out, cast(imp, d, "i64")], name="")
    return out


@rules("aten.native_group_norm")
def _native_group_norm(imp: Importer, x: Node, w: Node | None, b: Node | None, n: Any, c: Any, hxw: Any,
                       group: int, eps: float) -> list[Any]:
    return [_group_norm(imp, x, int(group), w, b, float(eps)), None, None]  # mean and rstd: not supported


@rules("aten.group_norm")
def _group_norm_op(imp: Importer, x: Node, num_groups: int, w: Node | None = None, b: Node | None = None,
                   eps: float = 1e-5, cudnn_enabled: bool = True) -> Node:
    return _group_norm(imp, x, int(num_groups), w, b, float(eps))


def _group_norm(imp: Importer, x: Node, groups: int, w: Node | None, b: Node | None, eps: float) -> Node:
    """Group norm as a layer norm: x [N, C, *] seen as [N, G, C/G * prod(*)] is normalised
    over its last axis, then gets the per-channel weight and bias."""
    r = rank(x)
    if r < 2:
        raise TorchImportError(f"group norm needs an input of rank 2 or more, got rank {r}")
    c = _size(imp, x, 1)
    if isinstance(c, int) and c % groups:
        raise TorchImportError(f"group norm: {c} channels do not split into {groups} groups")
    per_group = c // groups if isinstance(c, int) else imp.emit("FloorDiv", [c, imp.const(groups, np.int64)], name="")
    # the group size spelled out rather than -1, which an empty batch leaves undetermined
    k = _product(imp, [per_group, *(_size(imp, x, a) for a in range(2, r))])
    dt = tensor_type(x).dtype
    # the types spelled out too: with a symbolic batch the shapes are computed, and the
    # exporter needs the static group count to write an InstanceNormalization
    xt = tensor_type(x)
    gt = TensorType(dt, (xt.shape[0], groups, k)) if isinstance(k, int) and xt.shape is not None else None  # type: ignore[index]
    grouped = imp.emit("Reshape", [x, shape_vec(imp, [_size(imp, x, 0), groups, k])], name="", type=gt)
    y = imp.emit("LayerNormalization", [grouped, imp.const(np.ones(1, np_dtype(dt)))], {"axis": 2, "epsilon": eps},
                 name="")
    shape = shape_vec(imp, [_size(imp, x, a) for a in range(r)])
    y = imp.emit("Reshape", [y, shape], name="" if w is not None or b is not None else None, type=xt)
    per_channel = imp.const([-1] + [1] * (r - 2), np.int64)  # [C, 1, ...]: against x's [N, C, *]
    if w is not None:
        y = imp.emit("Mul", [y, imp.emit("Reshape", [cast(imp, w, dt), per_channel], name="")],
                     name="" if b is not None else None)
    if b is not None:
        y = imp.emit("Add", [y, imp.emit("Reshape", [cast(imp, b, dt), per_channel], name="")])
    return y


# --- attention -------------------------------------------------------------------------------
# torch's decomposition of these cannot always be traced (GPT-2's attention, in torch 2.13):
# the importer keeps them whole and builds them from matmuls and a softmax itself
@whole("aten.scaled_dot_product_attention.default")
def _sdpa(imp: Importer, q: Node, k: Node, v: Node, attn_mask: Node | None = None, dropout_p: float = 0.0,
          is_causal: bool = False, *, scale: float | None = None, enable_gqa: bool = False) -> Node:
    return _attention(imp, q, k, v, attn_mask, dropout_p, is_causal, scale, enable_gqa)[0]


@whole("aten._scaled_dot_product_flash_attention_for_cpu.default")
def _sdpa_flash_cpu(imp: Importer, q: Node, k: Node, v: Node, dropout_p: float = 0.0, is_causal: bool = False, *,
                    attn_mask: Node | None = None, scale: float | None = None) -> list[Any]:
    out = _attention(imp, q, k, v, attn_mask, dropout_p, is_causal, scale, False, additive=True)[0]
    return [out, None]  # no logsumexp


@whole("aten._scaled_dot_product_attention_math.default")
def _sdpa_math(imp: Importer, q: Node, k: Node, v: Node, attn_mask: Node | None = None, dropout_p: float = 0.0,
               is_causal: bool = False, dropout_mask: Node | None = None, *, scale: float | None = None,
               enable_gqa: bool = False) -> list[Any]:
    if dropout_mask is not None:
        raise TorchImportError("scaled dot-product attention with a dropout mask is not supported")
    return list(_attention(imp, q, k, v, attn_mask, dropout_p, is_causal, scale, enable_gqa, weights=True,
                           additive=True))


def _attention(imp: Importer, q: Node, k: Node, v: Node, mask: Node | None, dropout_p: float, is_causal: bool,
               scale: float | None, gqa: bool, weights: bool = False, additive: bool = False) -> tuple[Node, Node]:
    """(output, attention weights) of torch's scaled dot-product attention, as its reference
    defines it: softmax(q k^T * scale + bias) v, the bias -inf where a boolean mask is False
    or the causal mask (lower triangle, aligned at the top left: query i sees keys j <= i)
    hides a key, a float mask added as it is; a query that sees no key gives 0, as torch's
    does (its safe softmax), rather than NaN.  The weights are those of the output only with
    ``weights`` (else a query's that sees no key may be the softmax of its scores).  A row
    is empty by the masks; scores that are -inf by themselves (from infinite inputs) are not
    looked for.  ``additive``: every mask is added, a boolean one as 0 and 1 (what the
    overloads behind ``scaled_dot_product_attention`` do, which converts it first)."""
    if dropout_p:
        raise TorchImportError(f"scaled dot-product attention with dropout_p={dropout_p} is random (it drops "
                               f"whether or not the module is in training): export with dropout_p=0")
    if is_causal and mask is not None:
        raise TorchImportError("scaled dot-product attention takes attn_mask or is_causal, not both")
    if mask is not None and _hides_nothing(mask, additive):
        mask = None  # transformers builds an all-True mask under torch.export: no Where over the scores
    dt = tensor_type(q).dtype
    k, v = cast(imp, k, dt), cast(imp, v, dt)
    rq, rk = rank(q), rank(k)
    if min(rq, rk, rank(v)) < 2:
        raise TorchImportError("scaled dot-product attention needs query, key and value of rank 2 or more")
    if gqa:
        k, v = _repeat_heads(imp, q, k), _repeat_heads(imp, q, v)
    e = _size(imp, q, rq - 1)
    if scale is not None:
        factor = as_tensor(imp, float(scale), dt)
    elif isinstance(e, int):
        factor = as_tensor(imp, 1.0 / float(np.sqrt(e)), dt)
    else:
        factor = imp.emit("Rsqrt", [cast(imp, e, dt)], name="")
    # the scale on q ([..., L, E]) rather than on the scores ([..., L, S]): fewer elements
    # where S > E, as in decoding with a cache
    qs = imp.emit("Mul", [q, factor], name="")
    kt = imp.emit("Transpose", [k], {"perm": (*range(rk - 2), rk - 1, rk - 2)}, name="")
    s = imp.emit("MatMul", [qs, kt], name="")
    neg_inf, zero = as_tensor(imp, float("-inf"), dt), as_tensor(imp, 0.0, dt)
    if is_causal:  # leaves every query its first key: no empty rows
        s = imp.emit("Where", [_causal(imp, q, k), s, neg_inf], name="")
    empty = None
    if mask is not None:
        # a query the mask lets see no key gets 0, as torch's safe softmax gives: found on the
        # mask (smaller than the scores), and kept out of the softmax (no -inf - -inf there)
        if rank(mask) == 0:
            mask = imp.emit("Reshape", [mask, imp.const([1], np.int64)], name="")
        last = rank(mask) - 1
        if tensor_type(mask).dtype == "bool" and not additive:
            sees = imp.emit("ReduceMax", [cast(imp, mask, "i8")], {"axes": (last,), "keepdims": True}, name="")
            empty = imp.emit("Equal", [sees, imp.const(0, np.int8)], name="")
            s = imp.emit("Where", [imp.emit("Or", [mask, empty], name=""), s, neg_inf], name="")
        else:
            bias = cast(imp, mask, dt)
            top = imp.emit("ReduceMax", [bias], {"axes": (last,), "keepdims": True}, name="")
            empty = imp.emit("Equal", [top, neg_inf], name="")
            s = imp.emit("Add", [s, imp.emit("Where", [empty, zero, bias], name="")], name="")
    p = imp.emit("Softmax", [s], {"axis": rank(s) - 1}, name="")
    if empty is None:
        return imp.emit("MatMul", [p, v]), p
    if weights:
        p = imp.emit("Where", [empty, zero, p], name="")
    return imp.emit("Where", [empty, zero, imp.emit("MatMul", [p, v], name="")]), p


_SAME_VALUES = frozenset({"Expand", "Unsqueeze", "Squeeze", "Reshape", "Identity", "Transpose"})


def _hides_nothing(mask: Node, additive: bool) -> bool:
    """Whether an attention mask is known, before the run, to change no score: a boolean
    mask all True or a float mask all 0 (either after any broadcast or reshape, so a mask
    expanded to a symbolic batch counts).  Such a mask is dropped: the scores need no
    Where or Add, and no query can be left without a key."""
    while mask.op.name in _SAME_VALUES:
        mask = mask.input(0)
    v = static_value(mask)
    if v is None or v.size == 0:
        return False
    if v.dtype == np.bool_:
        return not additive and bool(v.all())
    return v.dtype.kind == "f" and not bool(np.any(v))


def _causal(imp: Importer, q: Node, k: Node) -> Node:
    """The [L, S] boolean mask of keys each query sees: j <= i (torch's tril, top-left)."""
    n, m = _size(imp, q, rank(q) - 2), _size(imp, k, rank(k) - 2)
    if isinstance(n, int) and isinstance(m, int):
        return imp.const(np.tril(np.ones((n, m), np.bool_)))
    zero, one = imp.const(0, np.int64), imp.const(1, np.int64)
    rows = imp.emit("Range", [zero, i64_scalar(imp, n), one], name="")
    cols = imp.emit("Range", [zero, i64_scalar(imp, m), one], name="")
    rows = imp.emit("Unsqueeze", [rows], {"axes": (1,)}, name="")
    return imp.emit("GreaterEqual", [rows, cols], name="")


def _repeat_heads(imp: Importer, q: Node, x: Node) -> Node:
    """``x`` [..., Hk, S, E] with each head repeated Hq / Hk times in place, as
    ``repeat_interleave(Hq // Hk, -3)`` (grouped-query attention)."""
    r = rank(x)
    if rank(q) < 3 or r < 3:
        raise TorchImportError("grouped-query attention needs query, key and value of rank 3 or more")
    hq, hk = _size(imp, q, rank(q) - 3), _size(imp, x, r - 3)
    if not (isinstance(hq, int) and isinstance(hk, int)):
        raise TorchImportError("grouped-query attention needs static numbers of heads")
    if hq == hk:
        return x
    if hq % hk:
        raise TorchImportError(f"grouped-query attention: {hq} query heads do not split into {hk} groups")
    wide = imp.emit("Unsqueeze", [x], {"axes": (r - 2,)}, name="")  # [..., Hk, 1, S, E]
    wide = imp.emit("Expand", [wide, imp.const([1] * (r - 2) + [hq // hk, 1, 1], np.int64)], name="")
    sizes = [_size(imp, x, a) for a in range(r)]
    sizes[r - 3] = hq
    return imp.emit("Reshape", [wide, shape_vec(imp, sizes)], name="")


# --- data-dependent sizes ----------------------------------------------------------------------
@rules("aten.nonzero")
def _nonzero(imp: Importer, x: Node) -> Node:
    t = imp.emit("NonZero", [x], name="")
    return imp.emit("Transpose", [imp.emit("Proj", [t], {"num": 0}, name="")], {"perm": (1, 0)})
