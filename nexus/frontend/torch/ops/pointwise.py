"""PyTorch import rules: pointwise ops and tensor creation.  Ops Nexus has map one to one;
the others are compositions of Nexus ops.  Dtypes follow torch's promotion: operands are cast
to the dtype torch computes in (registry and conventions: :mod:`nexus.frontend.torch.ops`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from nexus.frontend.torch.data import TorchImportError, np_dtype
from nexus.frontend.torch.ops import (
    Rule,
    as_tensor,
    cast,
    out_dtype,
    promote,
    rules,
    shape_vec,
    tensor_type,
    whole,
)
from nexus.ir.node import Node
from nexus.ir.types import FLOAT_DTYPES

if TYPE_CHECKING:
    from nexus.frontend.torch.importer import Importer


# --- pointwise -------------------------------------------------------------------------------
def _unary(op: str, float_only: bool = False) -> Rule:
    def fn(imp: Importer, x: Node, *rest: Any, **kw: Any) -> Node:
        out = out_dtype(imp)
        return imp.emit(op, [cast(imp, x, out if float_only or op == "Cast" else tensor_type(x).dtype)])

    return fn


for _k, _op, _f in (
    ("aten.relu", "Relu", False), ("aten.sigmoid", "Sigmoid", True), ("aten.tanh", "Tanh", True),
    ("aten.exp", "Exp", True), ("aten.log", "Log", True), ("aten.sqrt", "Sqrt", True), ("aten.rsqrt", "Rsqrt", True),
    ("aten.abs", "Abs", False), ("aten.neg", "Neg", False), ("aten.sin", "Sin", True), ("aten.cos", "Cos", True),
    ("aten.erf", "Erf", True), ("aten.floor", "Floor", False), ("aten.ceil", "Ceil", False),
    ("aten.round", "Round", False), ("aten.sign", "Sign", False), ("aten.reciprocal", "Reciprocal", True),
):
    rules(_k)(_unary(_op, _f))


@rules("aten.log1p")
def _log1p(imp: Importer, x: Node) -> Node:
    # log(1 + x) accurate for small x without a new op (Goldberg): with u = 1 + x rounded,
    # log(u) * x / (u - 1) cancels the rounding error of u; x itself where u rounds to 1
    x = cast(imp, x, out_dtype(imp))
    one = as_tensor(imp, 1, tensor_type(x).dtype)
    u = imp.emit("Add", [one, x], name="")
    exact = imp.emit("Equal", [u, one], name="")
    um1 = imp.emit("Where", [exact, one, imp.emit("Sub", [u, one], name="")], name="")  # no 0/0 where unused
    ratio = imp.emit("Div", [imp.emit("Mul", [imp.emit("Log", [u], name=""), x], name=""), um1], name="")
    return imp.emit("Where", [exact, x, ratio])


@rules("aten.expm1")
def _expm1(imp: Importer, x: Node) -> Node:
    # exp(x) - 1 accurate for small x (Kahan): (u - 1) * x / log(u) with u = exp(x);
    # x where u rounds to 1, -1 where u - 1 is -1 (log(u) would be -inf or its ratio NaN)
    x = cast(imp, x, out_dtype(imp))
    dt = tensor_type(x).dtype
    one = as_tensor(imp, 1, dt)
    u = imp.emit("Exp", [x], name="")
    um1 = imp.emit("Sub", [u, one], name="")
    exact = imp.emit("Equal", [u, one], name="")
    special = imp.emit("Or", [exact, imp.emit("Equal", [um1, as_tensor(imp, -1, dt)], name="")], name="")
    # log(u) is 0 or -inf exactly where the ratio is not used: take log(e) = 1 there instead
    log_u = imp.emit("Log", [imp.emit("Where", [special, as_tensor(imp, np.e, dt), u], name="")], name="")
    ratio = imp.emit("Div", [imp.emit("Mul", [um1, x], name=""), log_u], name="")
    inf = imp.emit("Equal", [u, as_tensor(imp, float("inf"), dt)], name="")
    big = imp.emit("Where", [imp.emit("Or", [special, inf], name=""), um1, ratio], name="")
    return imp.emit("Where", [exact, x, big])


@rules("aten.logical_not", "aten.bitwise_not")
def _not(imp: Importer, x: Node) -> Node:
    if tensor_type(x).dtype == "bool":
        return imp.emit("Not", [x])
    if imp.fx.target.__name__.startswith("logical"):
        return imp.emit("Not", [cast(imp, x, "bool")])
    return imp.emit("BitwiseNot", [x])


def _binary(op: str, compare: bool = False) -> Rule:
    def fn(imp: Importer, a: Any, b: Any, *, alpha: Any = 1, **kw: Any) -> Node:
        dt = promote(a, b) if compare else out_dtype(imp)
        if op == "Div" and dt not in FLOAT_DTYPES:
            dt = out_dtype(imp)
        x, y = as_tensor(imp, a, dt), as_tensor(imp, b, dt)
        if alpha != 1:
            y = imp.emit("Mul", [y, as_tensor(imp, alpha, dt)], name="")
        return imp.emit(op, [x, y])

    return fn


for _k, _op in (("aten.add", "Add"), ("aten.sub", "Sub"), ("aten.mul", "Mul"), ("aten.maximum", "Maximum"),
                ("aten.minimum", "Minimum"), ("aten.pow", "Pow"), ("aten.remainder", "Mod"),
                ("aten.floor_divide", "FloorDiv")):
    rules(_k)(_binary(_op))
for _k, _op in (("aten.eq", "Equal"), ("aten.ne", "NotEqual"), ("aten.lt", "Less"), ("aten.le", "LessEqual"),
                ("aten.gt", "Greater"), ("aten.ge", "GreaterEqual")):
    rules(_k)(_binary(_op, compare=True))


@rules("aten.rsub")
def _rsub(imp: Importer, a: Any, b: Any, alpha: Any = 1) -> Node:
    return _binary("Sub")(imp, b, a if alpha == 1 else imp.emit("Mul", [as_tensor(imp, a, out_dtype(imp)),
                                                                     as_tensor(imp, alpha, out_dtype(imp))], name=""))


@rules("aten.div")
def _div(imp: Importer, a: Any, b: Any, rounding_mode: str | None = None) -> Node:
    dt = out_dtype(imp)
    if rounding_mode is None:
        return imp.emit("Div", [as_tensor(imp, a, dt), as_tensor(imp, b, dt)])
    if rounding_mode == "floor":
        return imp.emit("FloorDiv", [as_tensor(imp, a, dt), as_tensor(imp, b, dt)])
    if dt in FLOAT_DTYPES:  # trunc
        q = imp.emit("Div", [as_tensor(imp, a, dt), as_tensor(imp, b, dt)], name="")
        return imp.emit("Mul", [imp.emit("Sign", [q], name=""), imp.emit("Floor", [imp.emit("Abs", [q], name="")],
                                                                         name="")])
    return imp.emit("Div", [as_tensor(imp, a, dt), as_tensor(imp, b, dt)])  # Nexus integer Div truncates


def _logical(op_bool: str, op_int: str, logical: bool) -> Rule:
    def fn(imp: Importer, a: Any, b: Any) -> Node:
        if logical:
            return imp.emit(op_bool, [as_tensor(imp, a, "bool"), as_tensor(imp, b, "bool")])
        dt = out_dtype(imp)
        return imp.emit(op_bool if dt == "bool" else op_int, [as_tensor(imp, a, dt), as_tensor(imp, b, dt)])

    return fn


for _name, _b, _i in (("and", "And", "BitwiseAnd"), ("or", "Or", "BitwiseOr"), ("xor", "Xor", "BitwiseXor")):
    rules(f"aten.bitwise_{_name}")(_logical(_b, _i, False))
    rules(f"aten.logical_{_name}")(_logical(_b, _i, True))


@rules("aten.where.self", "aten.where.ScalarSelf", "aten.where.ScalarOther", "aten.where.Scalar")
def _where(imp: Importer, c: Node, a: Any, b: Any) -> Node:
    dt = out_dtype(imp)
    return imp.emit("Where", [cast(imp, c, "bool"), as_tensor(imp, a, dt), as_tensor(imp, b, dt)])


@rules("aten.masked_fill.Scalar", "aten.masked_fill.Tensor")
def _masked_fill(imp: Importer, x: Node, mask: Node, value: Any) -> Node:
    dt = tensor_type(x).dtype
    return imp.emit("Where", [cast(imp, mask, "bool"), as_tensor(imp, value, dt), x])


@rules("aten.clamp.default", "aten.clamp.Tensor", "aten.clamp_min", "aten.clamp_max", "aten.hardtanh.default")
def _clamp(imp: Importer, x: Node, min: Any = None, max: Any = None) -> Node:
    name = str(imp.fx.target)
    if "clamp_max" in name:
        min, max = None, min
    if "hardtanh" in name:
        min, max = (-1.0 if min is None else min), (1.0 if max is None else max)
    dt = out_dtype(imp)
    x = cast(imp, x, dt)
    if min is not None:
        x = imp.emit("Maximum", [x, as_tensor(imp, min, dt)], name="" if max is not None else None)
    if max is not None:
        x = imp.emit("Minimum", [x, as_tensor(imp, max, dt)])
    return x


@rules("aten.leaky_relu")
def _leaky_relu(imp: Importer, x: Node, negative_slope: float = 0.01) -> Node:
    return imp.emit("LeakyRelu", [x], {"alpha": float(negative_slope)})


@rules("aten.gelu")
def _gelu(imp: Importer, x: Node, approximate: str = "none") -> Node:
    return imp.emit("Gelu", [x], {"approximate": approximate})


@whole("aten.hardsigmoid.default")  # whole, for a runtime to fuse into the convolution before it
def _hardsigmoid(imp: Importer, x: Node) -> Node:
    return imp.emit("HardSigmoid", [x], {"alpha": 1 / 6, "beta": 0.5})


@whole("aten.hardswish.default")
def _hardswish(imp: Importer, x: Node) -> Node:
    return imp.emit("HardSwish", [x])


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
    return imp.emit("Cast", [x], {"to": out_dtype(imp)}) if out_dtype(imp) != tensor_type(x).dtype else \
        imp.emit("Identity", [x])


@rules("aten.clone", "aten.alias", "aten.lift_fresh_copy", "aten.detach", "aten.contiguous", "aten.dropout",
       "aten.native_dropout")
def _identity(imp: Importer, x: Node, *args: Any, **kw: Any) -> Any:
    name = str(imp.fx.target)
    if "dropout" in name and len(args) > 1 and args[1]:  # (p, train): an un-decomposed program's too
        raise TorchImportError("dropout in training mode is not supported (export in eval mode)")
    if "native_dropout" in name:
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
    return _filled(imp, size, imp.value_of(value), out_dtype(imp))


@rules("aten.zeros.default", "aten.ones.default", "aten.new_zeros", "aten.new_ones", "aten.empty.memory_format",
       "aten.new_empty")
def _zeros(imp: Importer, *args: Any, **kw: Any) -> Node:
    name = str(imp.fx.target)
    size = args[1] if ".new_" in name else args[0]
    return _filled(imp, size, 1 if "ones" in name else 0, out_dtype(imp))


@rules("aten.full_like", "aten.zeros_like", "aten.ones_like", "aten.empty_like")
def _full_like(imp: Importer, x: Node, *args: Any, **kw: Any) -> Node:
    name = str(imp.fx.target)
    value = args[0] if "full_like" in name else (1 if "ones" in name else 0)
    dtype = out_dtype(imp)
    t = tensor_type(x)
    if t.is_static:
        assert t.shape is not None
        return imp.const(np.full(tuple(int(d) for d in t.shape), imp.value_of(value), np_dtype(dtype)))
    return imp.emit("ConstantOfShape", [imp.emit("ShapeOf", [x], name="")],
                    {"value": np.array(imp.value_of(value), np_dtype(dtype))})


@rules("aten.scalar_tensor")
def _scalar_tensor(imp: Importer, value: Any, **kw: Any) -> Node:
    return as_tensor(imp, value, out_dtype(imp))


@rules("aten.arange.start_step", "aten.arange.default", "aten.arange.start")
def _arange(imp: Importer, *args: Any, **kw: Any) -> Node:
    nums = [a for a in args if not isinstance(a, (str,)) and a is not None]
    start, end, step = (0, nums[0], 1) if len(nums) == 1 else (nums[0], nums[1], nums[2] if len(nums) > 2 else 1)
    dt = out_dtype(imp)
    vals = [imp.value_of(v) for v in (start, end, step)]
    if all(v is not None for v in vals):
        return imp.const(np.arange(*[np.asarray(v).item() for v in vals], dtype=np_dtype(dt)))
    return imp.emit("Range", [as_tensor(imp, start, dt), as_tensor(imp, end, dt), as_tensor(imp, step, dt)])


