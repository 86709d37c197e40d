"""The PyTorch import table: one function per Core ATen op (and the SymInt arithmetic
``torch.export`` leaves in graphs), building Nexus nodes.

``RULES[key](imp, *args, **kwargs)`` gets the importer and the FX node's arguments with
nodes replaced by their values: Nexus nodes for tensors and SymInts (an i64 scalar),
Python numbers, lists, dtypes as torch gives them.  Its parameters mirror the ATen
schema, so Python binds defaults and keywords.  It returns a node, or a list for ops
with several outputs (None where an output is not supported).  Keys are torch's names:
``aten.add.Tensor`` (an overload) or ``aten.add`` (every overload), ``operator.mul``.
Ops Nexus has map one to one; the others are compositions of Nexus ops.  Dtypes follow
torch's promotion: operands are cast to the dtype torch computes in.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from nexus.frontend.torch_control import convert_cond, convert_while
from nexus.frontend.torch_import import TorchImportError, describe, np_dtype, target_name, torch_dtype
from nexus.ir.node import Node
from nexus.ir.types import FLOAT_DTYPES, TensorType

if TYPE_CHECKING:
    from nexus.frontend.torch_import import Importer

Rule = Callable[..., Any]
RULES: dict[str, Rule] = {}
INT64_MAX = int(np.iinfo(np.int64).max)

# Ops that only check or annotate (runtime asserts torch inserts for its symbolic sizes).
_IGNORED = ("aten._assert_tensor_metadata", "aten.sym_constrain_range_for_size", "aten.sym_constrain_range",
            "aten._assert_scalar", "aten._assert_async")


def rules(*keys: str) -> Callable[[Rule], Rule]:
    def add(fn: Rule) -> Rule:
        for k in keys:
            assert k not in RULES, k
            RULES[k] = fn
        return fn

    return add


def rule_for(target: Any) -> Rule | None:
    """The rule of an FX call target: its overload's, else its packet's."""
    key = target_name(target)
    fn = RULES.get(key)
    if fn is None and key.startswith("aten."):
        fn = RULES.get(key.rsplit(".", 1)[0])
    return fn


def unsupported(gm: Any, outer: Any = None) -> list[str]:
    """Every call of the program (subgraphs included) that has no rule, with its source."""
    import operator

    from nexus.frontend.torch_import import source_of

    out: list[str] = []
    for n in gm.graph.nodes:
        if n.op == "get_attr":
            sub = getattr(gm, n.target, None)
            if sub is not None and hasattr(sub, "graph"):
                user = next(iter(n.users), None)
                out.extend(unsupported(sub, source_of(user) if user is not None else outer))
        elif n.op == "call_function" and n.target is not operator.getitem and rule_for(n.target) is None:
            out.append(describe(n, outer))
        elif n.op == "call_module":
            out.append(f"call_module {n.target!r} (node {n.name!r})")
    return out


# --- helpers ---------------------------------------------------------------------------------
def _t(v: Node) -> TensorType:
    t = v.type
    assert isinstance(t, TensorType), f"expected a tensor, got {t}"
    return t


def _rank(v: Node) -> int:
    shape = _t(v).shape
    if shape is None:
        raise TorchImportError("the input's rank must be known")
    return len(shape)


def _axis(a: int, rank: int) -> int:
    if not -max(rank, 1) <= a < max(rank, 1):
        raise TorchImportError(f"dim {a} is out of range for rank {rank}")
    return a % max(rank, 1)


def _cast(imp: Importer, v: Node, dtype: str) -> Node:
    return v if _t(v).dtype == dtype else imp.emit("Cast", [v], {"to": dtype}, name="")


def _out_dtype(imp: Importer, k: int | None = None) -> str:
    """The dtype torch gives the current node's output (``k``-th of a tuple)."""
    val = imp.fx.meta.get("val")
    if k is not None:
        val = val[k]
    if val is None or not hasattr(val, "dtype"):
        raise TorchImportError("the node has no example output (meta['val'])")
    return torch_dtype(val.dtype)


def _tensor(imp: Importer, v: Any, dtype: str) -> Node:
    """``v`` (a node or Python number) as a node of ``dtype``."""
    if isinstance(v, Node):
        return _cast(imp, v, dtype)
    return imp.const(v, np_dtype(dtype))


def _promote(*vals: Any) -> str:
    """torch's result dtype of ``vals`` (nodes by dtype and whether 0-d, Python numbers)."""
    import torch

    from nexus.frontend.torch_import import _NP

    dummies: list[Any] = []
    for v in vals:
        if isinstance(v, Node):
            t = _t(v)
            dummies.append(torch.empty(() if t.shape == () else (1,), dtype=getattr(torch, _NP[t.dtype])))
        else:
            dummies.append(v)
    if len(dummies) == 1:
        d = dummies[0]
        return torch_dtype(d.dtype) if isinstance(d, torch.Tensor) else torch_dtype(torch.tensor(d).dtype)
    dt = torch.result_type(dummies[0], dummies[1])
    for d in dummies[2:]:
        dt = torch.promote_types(dt, torch.result_type(d, d) if not isinstance(d, torch.Tensor) else d.dtype)
    return torch_dtype(dt)


def shape_vec(imp: Importer, sizes: Sequence[Any]) -> Node:
    """A 1-D i64 node of ``sizes`` (ints and SymInt nodes): a constant when all are known."""
    known = [imp.value_of(s) for s in sizes]
    if all(k is not None for k in known):
        return imp.const([int(np.asarray(k)) for k in known], np.int64)
    parts = [imp.emit("Reshape", [_cast(imp, s, "i64"), imp.const([1], np.int64)], name="") if isinstance(s, Node)
             else imp.const([int(s)], np.int64) for s in sizes]
    return imp.emit("Concat", parts, {"axis": 0}, name="")


def _i64(imp: Importer, v: Any) -> Node:
    if isinstance(v, Node):
        v = _cast(imp, v, "i64")
        return v if _t(v).shape == () else imp.emit("Reshape", [v, imp.const([], np.int64)], name="")
    return imp.const(int(v), np.int64)


def _ints(v: Any) -> list[int]:
    return [int(x) for x in (v if isinstance(v, (list, tuple)) else [v])]


# --- pointwise -------------------------------------------------------------------------------
def _unary(op: str, float_only: bool = False) -> Rule:
    def fn(imp: Importer, x: Node, *rest: Any, **kw: Any) -> Node:
        out = _out_dtype(imp)
        return imp.emit(op, [_cast(imp, x, out if float_only or op == "Cast" else _t(x).dtype)])

    return fn


for _k, _op, _f in (
    ("aten.relu", "Relu", False), ("aten.sigmoid", "Sigmoid", True), ("aten.tanh", "Tanh", True),
    ("aten.exp", "Exp", True), ("aten.log", "Log", True), ("aten.sqrt", "Sqrt", True), ("aten.rsqrt", "Rsqrt", True),
    ("aten.abs", "Abs", False), ("aten.neg", "Neg", False), ("aten.sin", "Sin", True), ("aten.cos", "Cos", True),
    ("aten.erf", "Erf", True), ("aten.floor", "Floor", False), ("aten.ceil", "Ceil", False),
    ("aten.round", "Round", False), ("aten.sign", "Sign", False), ("aten.reciprocal", "Reciprocal", True),
):
    RULES[_k] = _unary(_op, _f)


@rules("aten.log1p")
def _log1p(imp: Importer, x: Node) -> Node:
    # log(1 + x) accurate for small x without a new op (Goldberg): with u = 1 + x rounded,
    # log(u) * x / (u - 1) cancels the rounding error of u; x itself where u rounds to 1
    x = _cast(imp, x, _out_dtype(imp))
    one = _tensor(imp, 1, _t(x).dtype)
    u = imp.emit("Add", [one, x], name="")
    exact = imp.emit("Equal", [u, one], name="")
    um1 = imp.emit("Where", [exact, one, imp.emit("Sub", [u, one], name="")], name="")  # no 0/0 where unused
    ratio = imp.emit("Div", [imp.emit("Mul", [imp.emit("Log", [u], name=""), x], name=""), um1], name="")
    return imp.emit("Where", [exact, x, ratio])


@rules("aten.expm1")
def _expm1(imp: Importer, x: Node) -> Node:
    # exp(x) - 1 accurate for small x (Kahan): (u - 1) * x / log(u) with u = exp(x);
    # x where u rounds to 1, -1 where u - 1 is -1 (log(u) would be -inf or its ratio NaN)
    x = _cast(imp, x, _out_dtype(imp))
    dt = _t(x).dtype
    one = _tensor(imp, 1, dt)
    u = imp.emit("Exp", [x], name="")
    um1 = imp.emit("Sub", [u, one], name="")
    exact = imp.emit("Equal", [u, one], name="")
    special = imp.emit("Or", [exact, imp.emit("Equal", [um1, _tensor(imp, -1, dt)], name="")], name="")
    # log(u) is 0 or -inf exactly where the ratio is not used: divide by 1 there instead
    log_u = imp.emit("Where", [special, one, imp.emit("Log", [u], name="")], name="")
    ratio = imp.emit("Div", [imp.emit("Mul", [um1, x], name=""), log_u], name="")
    inf = imp.emit("Equal", [u, _tensor(imp, float("inf"), dt)], name="")
    big = imp.emit("Where", [imp.emit("Or", [special, inf], name=""), um1, ratio], name="")
    return imp.emit("Where", [exact, x, big])


@rules("aten.logical_not", "aten.bitwise_not")
def _not(imp: Importer, x: Node) -> Node:
    if _t(x).dtype == "bool":
        return imp.emit("Not", [x])
    if imp.fx.target.__name__.startswith("logical"):
        return imp.emit("Not", [_cast(imp, x, "bool")])
    return imp.emit("BitwiseNot", [x])


def _binary(op: str, compare: bool = False) -> Rule:
    def fn(imp: Importer, a: Any, b: Any, *, alpha: Any = 1, **kw: Any) -> Node:
        dt = _promote(a, b) if compare else _out_dtype(imp)
        if op == "Div" and dt not in FLOAT_DTYPES:
            dt = _out_dtype(imp)
        x, y = _tensor(imp, a, dt), _tensor(imp, b, dt)
        if alpha != 1:
            y = imp.emit("Mul", [y, _tensor(imp, alpha, dt)], name="")
        return imp.emit(op, [x, y])

    return fn


for _k, _op in (("aten.add", "Add"), ("aten.sub", "Sub"), ("aten.mul", "Mul"), ("aten.maximum", "Maximum"),
                ("aten.minimum", "Minimum"), ("aten.pow", "Pow"), ("aten.remainder", "Mod"),
                ("aten.floor_divide", "FloorDiv")):
    RULES[_k] = _binary(_op)
for _k, _op in (("aten.eq", "Equal"), ("aten.ne", "NotEqual"), ("aten.lt", "Less"), ("aten.le", "LessEqual"),
                ("aten.gt", "Greater"), ("aten.ge", "GreaterEqual")):
    RULES[_k] = _binary(_op, compare=True)


@rules("aten.rsub")
def _rsub(imp: Importer, a: Any, b: Any, alpha: Any = 1) -> Node:
    return _binary("Sub")(imp, b, a if alpha == 1 else imp.emit("Mul", [_tensor(imp, a, _out_dtype(imp)),
                                                                     _tensor(imp, alpha, _out_dtype(imp))], name=""))


@rules("aten.div")
def _div(imp: Importer, a: Any, b: Any, rounding_mode: str | None = None) -> Node:
    dt = _out_dtype(imp)
    if rounding_mode is None:
        return imp.emit("Div", [_tensor(imp, a, dt), _tensor(imp, b, dt)])
    if rounding_mode == "floor":
        return imp.emit("FloorDiv", [_tensor(imp, a, dt), _tensor(imp, b, dt)])
    if dt in FLOAT_DTYPES:  # trunc
        q = imp.emit("Div", [_tensor(imp, a, dt), _tensor(imp, b, dt)], name="")
        return imp.emit("Mul", [imp.emit("Sign", [q], name=""), imp.emit("Floor", [imp.emit("Abs", [q], name="")],
                                                                         name="")])
    return imp.emit("Div", [_tensor(imp, a, dt), _tensor(imp, b, dt)])  # Nexus integer Div truncates


def _logical(op_bool: str, op_int: str, logical: bool) -> Rule:
    def fn(imp: Importer, a: Any, b: Any) -> Node:
        if logical:
            return imp.emit(op_bool, [_tensor(imp, a, "bool"), _tensor(imp, b, "bool")])
        dt = _out_dtype(imp)
        return imp.emit(op_bool if dt == "bool" else op_int, [_tensor(imp, a, dt), _tensor(imp, b, dt)])

    return fn


for _name, _b, _i in (("and", "And", "BitwiseAnd"), ("or", "Or", "BitwiseOr"), ("xor", "Xor", "BitwiseXor")):
    RULES[f"aten.bitwise_{_name}"] = _logical(_b, _i, False)
    RULES[f"aten.logical_{_name}"] = _logical(_b, _i, True)


@rules("aten.where.self", "aten.where.ScalarSelf", "aten.where.ScalarOther", "aten.where.Scalar")
def _where(imp: Importer, c: Node, a: Any, b: Any) -> Node:
    dt = _out_dtype(imp)
    return imp.emit("Where", [_cast(imp, c, "bool"), _tensor(imp, a, dt), _tensor(imp, b, dt)])


@rules("aten.masked_fill.Scalar", "aten.masked_fill.Tensor")
def _masked_fill(imp: Importer, x: Node, mask: Node, value: Any) -> Node:
    dt = _t(x).dtype
    return imp.emit("Where", [_cast(imp, mask, "bool"), _tensor(imp, value, dt), x])


@rules("aten.clamp.default", "aten.clamp.Tensor", "aten.clamp_min", "aten.clamp_max", "aten.hardtanh.default")
def _clamp(imp: Importer, x: Node, min: Any = None, max: Any = None) -> Node:
    name = str(imp.fx.target)
    if "clamp_max" in name:
        min, max = None, min
    if "hardtanh" in name:
        min, max = (-1.0 if min is None else min), (1.0 if max is None else max)
    dt = _out_dtype(imp)
    x = _cast(imp, x, dt)
    if min is not None:
        x = imp.emit("Maximum", [x, _tensor(imp, min, dt)], name="" if max is not None else None)
    if max is not None:
        x = imp.emit("Minimum", [x, _tensor(imp, max, dt)])
    return x


@rules("aten.leaky_relu")
def _leaky_relu(imp: Importer, x: Node, negative_slope: float = 0.01) -> Node:
    return imp.emit("LeakyRelu", [x], {"alpha": float(negative_slope)})


@rules("aten.gelu")
def _gelu(imp: Importer, x: Node, approximate: str = "none") -> Node:
    return imp.emit("Gelu", [x], {"approximate": approximate})


@rules("aten.silu")
def _silu(imp: Importer, x: Node) -> Node:
    return imp.emit("Mul", [x, imp.emit("Sigmoid", [x], name="")])


@rules("aten.softplus")
def _softplus(imp: Importer, x: Node, beta: float = 1, threshold: float = 20) -> Node:
    if beta != 1:
        raise TorchImportError("softplus with beta != 1 is not supported")
    return imp.emit("Softplus", [x])  # Nexus's is exact where torch switches to x past threshold


@rules("aten._to_copy", "aten.to.dtype", "aten.to.dtype_layout", "aten._to_dtype")
def _to_copy(imp: Importer, x: Node, *args: Any, **kw: Any) -> Node:
    return imp.emit("Cast", [x], {"to": _out_dtype(imp)}) if _out_dtype(imp) != _t(x).dtype else \
        imp.emit("Identity", [x])


@rules("aten.clone", "aten.alias", "aten.lift_fresh_copy", "aten.detach", "aten.contiguous", "aten.dropout",
       "aten.native_dropout")
def _identity(imp: Importer, x: Node, *args: Any, **kw: Any) -> Any:
    if "native_dropout" in str(imp.fx.target):
        if len(args) > 1 and args[1]:
            raise TorchImportError("dropout in training mode is not supported (export in eval mode)")
        return [imp.emit("Identity", [x]), None]
    return imp.emit("Identity", [x])


# --- creation --------------------------------------------------------------------------------
def _filled(imp: Importer, sizes: Sequence[Any], value: Any, dtype: str) -> Node:
    shape = shape_vec(imp, sizes)
    k = imp.value_of(shape)
    if k is not None:
        return imp.const(np.full(tuple(int(d) for d in k), value, np_dtype(dtype)))
    fill = np.array(value, np_dtype(dtype))
    return imp.emit("ConstantOfShape", [shape], {"value": fill})


@rules("aten.full.default", "aten.new_full")
def _full(imp: Importer, *args: Any, **kw: Any) -> Node:
    if "new_full" in str(imp.fx.target):
        args = args[1:]
    size, value = args[0], args[1]
    return _filled(imp, size, imp.value_of(value), _out_dtype(imp))


@rules("aten.zeros.default", "aten.ones.default", "aten.new_zeros", "aten.new_ones", "aten.empty.memory_format",
       "aten.new_empty")
def _zeros(imp: Importer, *args: Any, **kw: Any) -> Node:
    name = str(imp.fx.target)
    size = args[1] if ".new_" in name else args[0]
    return _filled(imp, size, 1 if "ones" in name else 0, _out_dtype(imp))


@rules("aten.full_like", "aten.zeros_like", "aten.ones_like", "aten.empty_like")
def _full_like(imp: Importer, x: Node, *args: Any, **kw: Any) -> Node:
    name = str(imp.fx.target)
    value = args[0] if "full_like" in name else (1 if "ones" in name else 0)
    dtype = _out_dtype(imp)
    t = _t(x)
    if t.is_static:
        assert t.shape is not None
        return imp.const(np.full(tuple(int(d) for d in t.shape), imp.value_of(value), np_dtype(dtype)))
    return imp.emit("ConstantOfShape", [imp.emit("ShapeOf", [x], name="")],
                    {"value": np.array(imp.value_of(value), np_dtype(dtype))})


@rules("aten.scalar_tensor")
def _scalar_tensor(imp: Importer, value: Any, **kw: Any) -> Node:
    return _tensor(imp, value, _out_dtype(imp))


@rules("aten.arange.start_step", "aten.arange.default", "aten.arange.start")
def _arange(imp: Importer, *args: Any, **kw: Any) -> Node:
    nums = [a for a in args if not isinstance(a, (str,)) and a is not None]
    start, end, step = (0, nums[0], 1) if len(nums) == 1 else (nums[0], nums[1], nums[2] if len(nums) > 2 else 1)
    dt = _out_dtype(imp)
    vals = [imp.value_of(v) for v in (start, end, step)]
    if all(v is not None for v in vals):
        return imp.const(np.arange(*[np.asarray(v).item() for v in vals], dtype=np_dtype(dt)))
    return imp.emit("Range", [_tensor(imp, start, dt), _tensor(imp, end, dt), _tensor(imp, step, dt)])


# --- shapes ----------------------------------------------------------------------------------
@rules("aten.view", "aten.reshape", "aten._unsafe_view", "aten.view_copy")
def _view(imp: Importer, x: Node, size: Sequence[Any]) -> Node:
    return imp.emit("Reshape", [x, shape_vec(imp, size)])


@rules("aten.permute", "aten.permute_copy")
def _permute(imp: Importer, x: Node, dims: Sequence[int]) -> Node:
    r = _rank(x)
    return imp.emit("Transpose", [x], {"perm": tuple(_axis(d, r) for d in dims)})


@rules("aten.t", "aten.transpose.int", "aten.numpy_T")
def _transpose(imp: Importer, x: Node, d0: int = 0, d1: int = 1) -> Node:
    r = _rank(x)
    if r < 2:
        return imp.emit("Identity", [x])
    perm = list(range(r))
    a, b = _axis(d0, r), _axis(d1, r)
    perm[a], perm[b] = perm[b], perm[a]
    return imp.emit("Transpose", [x], {"perm": tuple(perm)})


@rules("aten.expand", "aten.expand_copy")
def _expand(imp: Importer, x: Node, size: Sequence[Any], *, implicit: bool = False) -> Node:
    # torch's -1 keeps the dim; under ONNX's two-way broadcasting a 1 does the same
    sizes = [1 if (not isinstance(s, Node) and int(s) == -1) else s for s in size]
    return imp.emit("Expand", [x, shape_vec(imp, sizes)])


@rules("aten.unsqueeze")
def _unsqueeze(imp: Importer, x: Node, dim: int) -> Node:
    return imp.emit("Unsqueeze", [x], {"axes": (_axis(dim, _rank(x) + 1),)})


@rules("aten.squeeze.dims", "aten.squeeze.dim", "aten.squeeze.default")
def _squeeze(imp: Importer, x: Node, dims: Any = None) -> Node:
    val = imp.fx.args[0].meta["val"]
    r = _rank(x)
    cand = range(r) if dims is None else [_axis(d, r) for d in _ints(dims)]
    # torch squeezes only the dims of size 1 (the example's sizes say which)
    axes = tuple(a for a in cand if isinstance(val.shape[a], int) and val.shape[a] == 1)
    return imp.emit("Squeeze", [x], {"axes": axes}) if axes else imp.emit("Identity", [x])


@rules("aten.flatten.using_ints")
def _flatten(imp: Importer, x: Node, start_dim: int = 0, end_dim: int = -1) -> Node:
    r = _rank(x)
    s, e = _axis(start_dim, r), _axis(end_dim, r)
    sizes = [imp.emit("DimSize", [x], {"axis": a}, name="") for a in range(r)]
    merged = [*sizes[:s], -1, *sizes[e + 1:]] if r else [1]
    return imp.emit("Reshape", [x, shape_vec(imp, merged)])


@rules("aten.cat")
def _cat(imp: Importer, tensors: Sequence[Node], dim: int = 0) -> Node:
    dt = _out_dtype(imp)
    parts = [_cast(imp, t, dt) for t in tensors]
    return imp.emit("Concat", parts, {"axis": _axis(dim, _rank(parts[0]))})


@rules("aten.stack")
def _stack(imp: Importer, tensors: Sequence[Node], dim: int = 0) -> Node:
    r = _rank(tensors[0]) + 1
    a = _axis(dim, r)
    parts = [imp.emit("Unsqueeze", [t], {"axes": (a,)}, name="") for t in tensors]
    return imp.emit("Concat", parts, {"axis": a})


@rules("aten.slice.Tensor", "aten.slice_copy.Tensor")
def _slice(imp: Importer, x: Node, dim: int = 0, start: Any = None, end: Any = None, step: Any = 1) -> Node:
    a = _axis(dim, _rank(x))
    start = 0 if start is None else start
    end = INT64_MAX if end is None else end
    return imp.emit("Slice", [x, shape_vec(imp, [start]), shape_vec(imp, [end]), imp.const([a], np.int64),
                              shape_vec(imp, [step])])


@rules("aten.select.int", "aten.select_copy.int")
def _select(imp: Importer, x: Node, dim: int, index: Any) -> Node:
    return imp.emit("Gather", [x, _i64(imp, index)], {"axis": _axis(dim, _rank(x))})


@rules("aten.narrow")
def _narrow(imp: Importer, x: Node, dim: int, start: Any, length: Any) -> Node:
    end = imp.emit("Add", [_i64(imp, start), _i64(imp, length)], name="") if isinstance(start, Node) or \
        isinstance(length, Node) else int(start) + int(length)
    return _slice(imp, x, dim, start, end, 1)


@rules("aten.split_with_sizes", "aten.split.Tensor", "aten.split_with_sizes_copy", "aten.split_copy.Tensor",
       "aten.unbind.int", "aten.chunk")
def _split(imp: Importer, x: Node, sizes: Any = None, dim: int = 0) -> list[Any]:
    name = str(imp.fx.target)
    vals = imp.fx.meta["val"]
    if "unbind" in name:
        dim = sizes if sizes is not None else 0
    a = _axis(dim, _rank(x))
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
    return imp.emit("Gather", [x, index], {"axis": _axis(dim, _rank(x))})


@rules("aten.gather")
def _gather(imp: Importer, x: Node, dim: int, index: Node, sparse_grad: bool = False) -> Node:
    return imp.emit("GatherElements", [x, index], {"axis": _axis(dim, _rank(x))})


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
        if _t(idx).dtype == "bool":
            if k != 0:
                raise TorchImportError("a boolean index is supported on the leading dims only")
            t = imp.emit("BooleanMask", [x, idx], name="")
            return imp.emit("Proj", [t], {"num": 0})
        return imp.emit("Gather", [x, idx], {"axis": k})
    if used == list(range(len(used))) and all(_t(i).dtype != "bool" for i in indices if i is not None):
        # x[i0, i1, ...] on the leading dims: one GatherND on the broadcast index tuples
        shape = imp.fx.meta["val"].shape
        parts = [_cast(imp, i, "i64") for i in indices if i is not None]
        bshape = imp.emit("ShapeOf", [imp.emit("Add", parts[:1] + parts[1:2], name="")], name="") \
            if len(parts) == 2 else None
        if bshape is None:
            raise TorchImportError(f"indexing with {len(parts)} index tensors is not supported (one or two)")
        stacked = imp.emit("Concat", [imp.emit("Unsqueeze", [imp.emit("Expand", [p, bshape], name="")],
                                               {"axes": (-1 % (len(_t(p).shape or ()) + 1),)}, name="")
                                      for p in parts], {"axis": -1 % (len(_t(parts[0]).shape or ()) + 1)}, name="")
        del shape
        return imp.emit("GatherND", [x, stacked])
    raise TorchImportError("this form of advanced indexing is not supported (one index tensor, or leading ones)")


@rules("aten.constant_pad_nd")
def _pad(imp: Importer, x: Node, pad: Sequence[int], value: float = 0) -> Node:
    r = _rank(x)
    begins, ends = [0] * r, [0] * r
    for k in range(len(pad) // 2):  # torch lists (begin, end) pairs from the last dim back
        begins[r - 1 - k], ends[r - 1 - k] = int(pad[2 * k]), int(pad[2 * k + 1])
    return imp.emit("Pad", [x, imp.const(begins + ends, np.int64)], {"mode": "constant", "value": float(value)})


@rules("aten.flip")
def _flip(imp: Importer, x: Node, dims: Sequence[int]) -> Node:
    axes = [_axis(d, _rank(x)) for d in dims]
    n = len(axes)
    return imp.emit("Slice", [x, imp.const([-1] * n, np.int64), imp.const([-INT64_MAX] * n, np.int64),
                              imp.const(axes, np.int64), imp.const([-1] * n, np.int64)])


@rules("aten.repeat")
def _repeat(imp: Importer, x: Node, repeats: Sequence[Any]) -> Node:
    extra = len(repeats) - _rank(x)
    if extra > 0:
        x = imp.emit("Reshape", [x, shape_vec(imp, [1] * extra + [imp.emit("DimSize", [x], {"axis": a}, name="")
                                                                  for a in range(_rank(x))])], name="")
    return imp.emit("Tile", [x, shape_vec(imp, repeats)])


@rules("aten.sym_size.int")
def _sym_size(imp: Importer, x: Node, dim: int) -> Node:
    d = _t(x).shape[_axis(dim, _rank(x))]  # type: ignore[index]
    if isinstance(d, int):
        return imp.const(d, np.int64)
    return imp.emit("DimSize", [x], {"axis": _axis(dim, _rank(x))})


@rules("aten.sym_numel")
def _sym_numel(imp: Importer, x: Node) -> Node:
    return imp.emit("ReduceProd", [imp.emit("ShapeOf", [x], name="")], {"axes": (0,)})


# --- reductions ------------------------------------------------------------------------------
def _reduce(op: str) -> Rule:
    def fn(imp: Importer, x: Node, dim: Any = None, keepdim: bool = False, *, dtype: Any = None) -> Node:
        r = _rank(x)
        axes = tuple(range(r)) if dim is None or (isinstance(dim, (list, tuple)) and not dim) else \
            tuple(_axis(d, r) for d in _ints(dim))
        out = _out_dtype(imp)
        if op in ("ReduceSum", "ReduceMean", "ReduceProd"):
            x = _cast(imp, x, out)
        return imp.emit(op, [x], {"axes": axes, "keepdims": bool(keepdim)})

    return fn


RULES["aten.sum.dim_IntList"] = RULES["aten.sum.default"] = _reduce("ReduceSum")
RULES["aten.mean.dim"] = RULES["aten.mean.default"] = _reduce("ReduceMean")
RULES["aten.amax"] = _reduce("ReduceMax")
RULES["aten.amin"] = _reduce("ReduceMin")
RULES["aten.prod.dim_int"] = RULES["aten.prod.default"] = _reduce("ReduceProd")


@rules("aten.any", "aten.all")
def _any(imp: Importer, x: Node, dim: Any = None, keepdim: bool = False) -> Node:
    r = _rank(x)
    axes = tuple(range(r)) if dim is None else tuple(_axis(d, r) for d in _ints(dim))
    as_int = _cast(imp, _cast(imp, x, "bool"), "i8")
    op = "ReduceMax" if "any" in str(imp.fx.target) else "ReduceMin"
    return _cast(imp, imp.emit(op, [as_int], {"axes": axes, "keepdims": bool(keepdim)}, name=""), "bool")


@rules("aten.max.dim", "aten.min.dim")
def _max_dim(imp: Importer, x: Node, dim: int, keepdim: bool = False) -> list[Any]:
    a = _axis(dim, _rank(x))
    big = "max" in str(imp.fx.target)
    v = imp.emit("ReduceMax" if big else "ReduceMin", [x], {"axes": (a,), "keepdims": bool(keepdim)})
    i = imp.emit("ArgMax" if big else "ArgMin", [x], {"axis": a, "keepdims": bool(keepdim)}, name="")
    return [v, i]


@rules("aten.max.default", "aten.min.default")
def _max_all(imp: Importer, x: Node) -> Node:
    return imp.emit("ReduceMax" if "max" in str(imp.fx.target) else "ReduceMin", [x], {"axes": tuple(range(_rank(x)))})


@rules("aten.argmax", "aten.argmin")
def _argmax(imp: Importer, x: Node, dim: int | None = None, keepdim: bool = False) -> Node:
    op = "ArgMax" if "argmax" in str(imp.fx.target) else "ArgMin"
    if dim is None:
        x = imp.emit("Reshape", [x, imp.const([-1], np.int64)], name="")
        dim = 0
    return imp.emit(op, [x], {"axis": _axis(dim, _rank(x)), "keepdims": bool(keepdim)})


@rules("aten.var.correction", "aten.var.dim", "aten.std.correction")
def _var(imp: Importer, x: Node, dim: Any = None, *args: Any, correction: Any = None, keepdim: bool = False) -> Node:
    if args and isinstance(args[0], bool):  # var.dim(x, dim, unbiased, keepdim)
        correction = 1 if args[0] else 0
        keepdim = bool(args[1]) if len(args) > 1 else keepdim
    r = _rank(x)
    axes = tuple(range(r)) if dim is None else tuple(_axis(d, r) for d in _ints(dim))
    mean = imp.emit("ReduceMean", [x], {"axes": axes, "keepdims": True}, name="")
    d = imp.emit("Sub", [x, mean], name="")
    ss = imp.emit("ReduceSum", [imp.emit("Mul", [d, d], name="")], {"axes": axes, "keepdims": bool(keepdim)}, name="")
    n = imp.const(1, np.int64)
    for a in axes:
        n = imp.emit("Mul", [n, imp.emit("DimSize", [x], {"axis": a}, name="")], name="")
    c = 1 if correction is None else correction
    denom = _cast(imp, imp.emit("Sub", [n, imp.const(int(c), np.int64)], name=""), _t(x).dtype)
    var = imp.emit("Div", [ss, denom], name=None if "std" not in str(imp.fx.target) else "")
    return imp.emit("Sqrt", [var]) if "std" in str(imp.fx.target) else var


@rules("aten.cumsum")
def _cumsum(imp: Importer, x: Node, dim: int, *, dtype: Any = None) -> Node:
    return imp.emit("CumSum", [_cast(imp, x, _out_dtype(imp))], {"axis": _axis(dim, _rank(x))})


@rules("aten.topk")
def _topk(imp: Importer, x: Node, k: Any, dim: int = -1, largest: bool = True, sorted: bool = True) -> list[Any]:
    t = imp.emit("TopK", [x, _i64(imp, k)], {"axis": _axis(dim, _rank(x)), "largest": bool(largest),
                                             "sorted": True}, name="")
    return [imp.emit("Proj", [t], {"num": 0}), imp.emit("Proj", [t], {"num": 1}, name="")]


@rules("aten.sort.default", "aten.sort.stable")
def _sort(imp: Importer, x: Node, *args: Any, dim: int = -1, descending: bool = False, stable: Any = None) -> list[Any]:
    if "stable" in str(imp.fx.target):
        stable, dim, descending = (args + (stable, dim, descending))[:3] if args else (stable, dim, descending)
    else:
        dim, descending = (list(args) + [dim, descending][len(args):])[:2]
    a = _axis(dim, _rank(x))
    n = _t(x).shape[a]  # type: ignore[index]
    k = imp.const(n, np.int64) if isinstance(n, int) else imp.emit("DimSize", [x], {"axis": a}, name="")
    t = imp.emit("TopK", [x, k], {"axis": a, "largest": bool(descending), "sorted": True}, name="")
    return [imp.emit("Proj", [t], {"num": 0}), imp.emit("Proj", [t], {"num": 1}, name="")]


# --- linear algebra and nn -------------------------------------------------------------------
@rules("aten.mm", "aten.bmm", "aten.matmul")
def _mm(imp: Importer, a: Node, b: Node) -> Node:
    return imp.emit("MatMul", [a, b])


@rules("aten.addmm")
def _addmm(imp: Importer, c: Node, a: Node, b: Node, *, beta: float = 1, alpha: float = 1) -> Node:
    return imp.emit("Gemm", [a, b, c], {"alpha": float(alpha), "beta": float(beta)})


@rules("aten.baddbmm")
def _baddbmm(imp: Importer, c: Node, a: Node, b: Node, *, beta: float = 1, alpha: float = 1) -> Node:
    dt = _t(a).dtype
    p = imp.emit("MatMul", [a, b], name="")
    if alpha != 1:
        p = imp.emit("Mul", [p, _tensor(imp, alpha, dt)], name="")
    if beta != 1:
        c = imp.emit("Mul", [c, _tensor(imp, beta, dt)], name="")
    return imp.emit("Add", [p, c])


@rules("aten.linear")
def _linear(imp: Importer, x: Node, w: Node, b: Node | None = None) -> Node:
    y = imp.emit("MatMul", [x, imp.emit("Transpose", [w], name="")], name="" if b is not None else None)
    return imp.emit("Add", [y, b]) if b is not None else y


@rules("aten._softmax", "aten.softmax.int", "aten._log_softmax", "aten.log_softmax.int")
def _softmax(imp: Importer, x: Node, dim: int, half_to_float: Any = False, **kw: Any) -> Node:
    op = "LogSoftmax" if "log_softmax" in str(imp.fx.target) else "Softmax"
    return imp.emit(op, [_cast(imp, x, _out_dtype(imp))], {"axis": _axis(dim, _rank(x))})


@rules("aten.convolution")
def _convolution(imp: Importer, x: Node, w: Node, b: Node | None, stride: Sequence[int], padding: Sequence[int],
                 dilation: Sequence[int], transposed: bool, output_padding: Sequence[int], groups: int) -> Node:
    nsp = _rank(x) - 2
    full = lambda v: [int(a) for a in v] * (nsp if len(v) == 1 else 1)  # noqa: E731
    attrs: dict[str, Any] = {"strides": tuple(full(stride)), "pads": tuple(full(padding) * 2),
                             "dilations": tuple(full(dilation)), "group": int(groups)}
    ins = [x, w] + ([b] if b is not None else [])
    if transposed:
        attrs["output_padding"] = tuple(full(output_padding))
        return imp.emit("ConvTranspose", ins, attrs)
    return imp.emit("Conv", ins, attrs)


def _pool_attrs(x: Node, kernel: Sequence[int], stride: Sequence[int], padding: Any) -> dict[str, Any]:
    nsp = _rank(x) - 2
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
    shape = _t(x).shape
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
    c = _t(x).shape[1]  # type: ignore[index]
    dt = _t(x).dtype
    y = imp.emit("BatchNormalization", [x, _ones_or(imp, w, c, dt, 1), _ones_or(imp, b, c, dt, 0), mean, var],
                 {"epsilon": float(eps)})
    return y if "aten.batch_norm" in name else [y, None, None]


@rules("aten.native_layer_norm", "aten.layer_norm")
def _layer_norm(imp: Importer, x: Node, normalized_shape: Sequence[int], w: Node | None = None,
                b: Node | None = None, eps: float = 1e-5, *args: Any) -> Any:
    n = tuple(int(d) for d in normalized_shape)
    dt = _t(x).dtype
    y = imp.emit("LayerNormalization", [x, _ones_or(imp, w, n, dt, 1), _ones_or(imp, b, n, dt, 0)],
                 {"axis": -len(n), "epsilon": float(eps)})
    return y if "aten.layer_norm" in str(imp.fx.target) else [y, None, None]


# --- data-dependent sizes ----------------------------------------------------------------------
@rules("aten.nonzero")
def _nonzero(imp: Importer, x: Node) -> Node:
    t = imp.emit("NonZero", [x], name="")
    return imp.emit("Transpose", [imp.emit("Proj", [t], {"num": 0}, name="")], {"perm": (1, 0)})


# --- SymInt arithmetic and the higher-order ops -----------------------------------------------
def _sym(op: str) -> Rule:
    def fn(imp: Importer, a: Any, b: Any) -> Any:
        if not isinstance(a, Node) and not isinstance(b, Node):
            raise TorchImportError("SymInt arithmetic on two constants")
        dt = "i64" if all(_is_int(v) for v in (a, b)) else "f64"
        return imp.emit(op, [_tensor(imp, a, dt), _tensor(imp, b, dt)])

    return fn


def _is_int(v: Any) -> bool:
    return (isinstance(v, Node) and _t(v).dtype in ("i64", "i32", "bool")) or (isinstance(v, int))


for _k, _op in (("operator.add", "Add"), ("operator.sub", "Sub"), ("operator.mul", "Mul"),
                ("operator.floordiv", "FloorDiv"), ("operator.mod", "Mod"), ("operator.eq", "Equal"),
                ("operator.ne", "NotEqual"), ("operator.lt", "Less"), ("operator.le", "LessEqual"),
                ("operator.gt", "Greater"), ("operator.ge", "GreaterEqual"), ("torch.sym_max", "Maximum"),
                ("torch.sym_min", "Minimum")):
    RULES[_k] = _sym(_op)


@rules("operator.truediv")
def _truediv(imp: Importer, a: Any, b: Any) -> Node:
    return imp.emit("Div", [_tensor(imp, a, "f64"), _tensor(imp, b, "f64")])


@rules("operator.neg")
def _neg(imp: Importer, a: Node) -> Node:
    return imp.emit("Neg", [a])


@rules("torch.sym_not", "operator.not_")
def _sym_not(imp: Importer, a: Node) -> Node:
    return imp.emit("Not", [_cast(imp, a, "bool")])


@rules("torch.sym_float")
def _sym_float(imp: Importer, a: Node) -> Node:
    return _cast(imp, a, "f64")


@rules("aten._local_scalar_dense", "aten.item")
def _item(imp: Importer, x: Node) -> Node:
    return imp.emit("Reshape", [x, imp.const([], np.int64)])


@rules(*_IGNORED)
def _ignored(imp: Importer, *args: Any, **kw: Any) -> None:
    return None


RULES["cond"] = convert_cond
RULES["while_loop"] = convert_while
