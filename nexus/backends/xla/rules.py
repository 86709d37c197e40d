"""The xla lowering table, part 1: elementwise ops, reductions, linear algebra, activations.

A rule is ``rule(trace, node, *inputs) -> value``: it receives JAX or NumPy values and
returns what ``jax.numpy`` / ``lax`` compute; attributes come from ``node.attrs``.  Op
families share one rule through a table op -> function (registered for all of them at
once), as the python backend does with ``OpDef.operator``.  The semantics are the NumPy
reference kernels'; where XLA cannot raise (an integer division by zero), the module
docstring of :mod:`nexus.backends.xla` says what happens instead.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from nexus.backends.base import register_lowering
from nexus.backends.xla.trace import BACKEND, Trace, is_static
from nexus.ir.node import Node
from nexus.ir.types import TensorType, numpy_dtype


def out_dtype(node: Node) -> Any:
    t = node.type
    assert isinstance(t, TensorType)
    return numpy_dtype(t.dtype)


def _is_int(x: Any) -> bool:
    return jnp.issubdtype(jnp.result_type(x), jnp.integer)


def _div(a: Any, b: Any) -> Any:
    if _is_int(a):
        a, b = jnp.broadcast_arrays(a, b)
        return lax.div(a, b)  # truncates toward zero, as the kernel (and C, ONNX)
    return jnp.true_divide(a, b)


def _tanh(x: Any) -> Any:
    """XLA's tanh is not correctly rounded: tanh(19.75) is 1 - 8e-16 where NumPy's is
    exactly 1.0, and a comparison (``tanh(v) < 1.0``) turns that ulp into another path.
    Past the point where the correctly rounded tanh is +-1 (19.1 for f64, 9.1 for f32),
    give +-1 exactly."""
    x = jnp.asarray(x)
    limit = 19.1 if x.dtype == jnp.float64 else 9.1
    return jnp.where(jnp.abs(x) >= limit, jnp.sign(x), jnp.tanh(x))


UNARY: dict[str, Callable[[Any], Any]] = {
    "Identity": lambda x: x,
    "Neg": jnp.negative, "Abs": jnp.abs, "Exp": jnp.exp, "Log": jnp.log, "Tanh": _tanh,
    "Sigmoid": lambda x: 1 / (1 + jnp.exp(-x)),
    "Relu": lambda x: jnp.maximum(x, jnp.zeros((), jnp.result_type(x))),
    "Sqrt": jnp.sqrt, "Rsqrt": lambda x: 1 / jnp.sqrt(x), "Reciprocal": lambda x: 1 / x,
    "Sin": jnp.sin, "Cos": jnp.cos, "Erf": jax.scipy.special.erf, "Asin": jnp.arcsin, "Acos": jnp.arccos,
    "Atan": jnp.arctan, "Asinh": jnp.arcsinh, "Acosh": jnp.arccosh, "Atanh": jnp.arctanh,
    "Floor": jnp.floor, "Ceil": jnp.ceil, "Round": jnp.round, "Sign": jnp.sign,
    "Not": jnp.logical_not, "BitwiseNot": jnp.invert,
    "Softplus": lambda x: jnp.maximum(x, 0) + jnp.log1p(jnp.exp(-jnp.abs(x))),
}

BINARY: dict[str, Callable[[Any, Any], Any]] = {
    "Add": jnp.add, "Sub": jnp.subtract, "Mul": jnp.multiply, "Div": _div,
    "FloorDiv": jnp.floor_divide, "Mod": jnp.mod, "Pow": jnp.power,
    "Maximum": jnp.maximum, "Minimum": jnp.minimum,
    "Less": jnp.less, "LessEqual": jnp.less_equal, "Greater": jnp.greater,
    "GreaterEqual": jnp.greater_equal, "Equal": jnp.equal, "NotEqual": jnp.not_equal,
    "And": jnp.logical_and, "Or": jnp.logical_or, "Xor": jnp.logical_xor,
    "BitwiseAnd": jnp.bitwise_and, "BitwiseOr": jnp.bitwise_or, "BitwiseXor": jnp.bitwise_xor,
    "LeftShift": jnp.left_shift, "RightShift": jnp.right_shift,
    "MatMul": jnp.matmul,
}


@register_lowering(BACKEND, *UNARY)
def _unary(tr: Trace, node: Node, x: Any) -> Any:
    return UNARY[node.op.name](x)


@register_lowering(BACKEND, *BINARY)
def _binary(tr: Trace, node: Node, a: Any, b: Any) -> Any:
    if node.op.name in _INT_DIVISIONS and _is_int(a) and (not is_static(b) or np.any(np.asarray(b) == 0)):
        # Integer division by zero raises, as on the python backend (XLA gives a number).
        tr.fail_where(node, jnp.any(jnp.asarray(b) == 0), ZeroDivisionError("integer division by zero"))
    if node.op.name in _SHIFTS and (not is_static(b) or np.any(np.asarray(b) < 0)):
        tr.fail_where(node, jnp.any(jnp.asarray(b) < 0), ValueError(f"{node.op.name}: negative shift count"))
    if node.op.name == "MatMul" and _transposed(node.inputs[0]) and jnp.ndim(a) == jnp.ndim(b) == 2 \
            and np.prod(np.shape(a)) * np.shape(b)[-1] >= _LIBRARY_WORK:
        # A large matrix product of a transposed matrix (the reverse sweep's x^T @ dz):
        # the transpose is materialised, so that XLA:CPU hands the product to its library
        # (YNNPACK) as it does a plain one, rather than folding the transpose into the
        # product's dimensions and running its slower Eigen kernel (W4-large's gradient,
        # [512, 64] x [64, 512] products: 1.03x -> 0.99x the python backend's time; for
        # small ones, W4-small's [32, 1] x [1, 32], the copy costs more than it saves).
        a = lax.optimization_barrier(a)  # type: ignore[no-untyped-call]
    return BINARY[node.op.name](a, b)


_INT_DIVISIONS = frozenset({"Div", "FloorDiv", "Mod"})
_SHIFTS = frozenset({"LeftShift", "RightShift"})
_LIBRARY_WORK = 2**20  # multiply-adds


def _transposed(v: Any) -> bool:
    return isinstance(v, Node) and v.op.name == "Transpose"


@register_lowering(BACKEND, "Where")
def _where(tr: Trace, node: Node, c: Any, a: Any, b: Any) -> Any:
    return jnp.where(c, a, b)


@register_lowering(BACKEND, "Clip")
def _clip(tr: Trace, node: Node, x: Any, lo: Any, hi: Any) -> Any:
    return jnp.minimum(jnp.maximum(x, lo), hi)


@register_lowering(BACKEND, "Constant")
def _constant(tr: Trace, node: Node) -> Any:
    return node.attrs["value"]


# --- reductions -------------------------------------------------------------------------
REDUCE: dict[str, Callable[..., Any]] = {"ReduceSum": jnp.sum, "ReduceMean": jnp.mean, "ReduceMax": jnp.max,
                                         "ReduceMin": jnp.min, "ReduceProd": jnp.prod}


@register_lowering(BACKEND, *REDUCE)
def _reduce(tr: Trace, node: Node, x: Any) -> Any:
    axes = node.attrs.get("axes")
    extra: dict[str, Any] = {}
    if node.op.name in ("ReduceMax", "ReduceMin") and jnp.size(x) == 0:  # shapes are static here
        dt = np.dtype(jnp.asarray(x).dtype)
        high = node.op.name == "ReduceMin"
        extra["initial"] = (np.inf if high else -np.inf) if dt.kind == "f" else (
            np.iinfo(dt).max if high else np.iinfo(dt).min)
    out = REDUCE[node.op.name](x, axis=None if axes is None else tuple(axes), keepdims=bool(node.attrs["keepdims"]),
                               **extra)
    return out.astype(out_dtype(node))


@register_lowering(BACKEND, "CumProd")
def _cumprod(tr: Trace, node: Node, x: Any) -> Any:
    x = jnp.asarray(x)
    return jnp.cumprod(x, axis=int(node.attrs["axis"]), dtype=x.dtype)


@register_lowering(BACKEND, "CumProdGrad")
def _cumprod_grad(tr: Trace, node: Node, x: Any, g: Any) -> Any:
    # dx_i = prod(x[:i]) * s_i, s_i = g_i + x_{i+1} s_{i+1}: a reverse scan (exact at zeros).
    axis = int(node.attrs["axis"])
    xs, gs = jnp.moveaxis(jnp.asarray(x), axis, 0), jnp.moveaxis(jnp.asarray(g), axis, 0)
    if xs.shape[0] == 0:
        return jnp.moveaxis(gs, 0, axis)
    nxt = jnp.concatenate([xs[1:], jnp.zeros_like(xs[:1])])

    def step(s: Any, xg: tuple[Any, Any]) -> tuple[Any, Any]:
        s = xg[1] + xg[0] * s
        return s, s

    _, s = lax.scan(step, jnp.zeros_like(gs[0]), (nxt, gs), reverse=True)
    before = jnp.concatenate([jnp.ones_like(xs[:1]), jnp.cumprod(xs[:-1], axis=0, dtype=xs.dtype)])
    return jnp.moveaxis(before * s, 0, axis)


@register_lowering(BACKEND, "Append")
def _append(tr: Trace, node: Node, lst: Any, x: Any) -> Any:
    x = jnp.asarray(x)[None]
    return x if jnp.shape(lst)[0] == 0 else jnp.concatenate([jnp.asarray(lst), x])  # shapes are static here


@register_lowering(BACKEND, "ArgMax", "ArgMin")
def _arg(tr: Trace, node: Node, x: Any) -> Any:
    fn = jnp.argmax if node.op.name == "ArgMax" else jnp.argmin
    axis, keep = int(node.attrs["axis"]), bool(node.attrs["keepdims"])
    if node.attrs["select_last_index"]:
        n = jnp.shape(x)[axis]
        return ((n - 1) - fn(jnp.flip(x, axis), axis=axis, keepdims=keep)).astype(jnp.int64)
    return fn(x, axis=axis, keepdims=keep).astype(jnp.int64)


@register_lowering(BACKEND, "CumSum")
def _cumsum(tr: Trace, node: Node, x: Any) -> Any:
    axis = int(node.attrs["axis"])
    x = jnp.asarray(x)
    if node.attrs["reverse"]:
        x = jnp.flip(x, axis)
    out = jnp.cumsum(x, axis=axis, dtype=x.dtype)
    if node.attrs["exclusive"] and x.size:
        # Shift by one (exact; subtracting x would round for floats).
        n = x.shape[axis]
        out = jnp.concatenate([jnp.zeros_like(lax.slice_in_dim(out, 0, 1, axis=axis)),
                               lax.slice_in_dim(out, 0, n - 1, axis=axis)], axis=axis)
    if node.attrs["reverse"]:
        out = jnp.flip(out, axis)
    return out


# --- linear algebra ----------------------------------------------------------------------
@register_lowering(BACKEND, "Gemm")
def _gemm(tr: Trace, node: Node, a: Any, b: Any, c: Any = None) -> Any:
    at = node.attrs
    dt = out_dtype(node)
    out = jnp.matmul(a.T if at["transA"] else a, b.T if at["transB"] else b)
    if at["alpha"] != 1.0:
        out = out * dt.type(at["alpha"])
    if c is not None and at["beta"] != 0.0:
        out = out + (c * dt.type(at["beta"]) if at["beta"] != 1.0 else c)
    return out.astype(dt)


@register_lowering(BACKEND, "Einsum")
def _einsum(tr: Trace, node: Node, *xs: Any) -> Any:
    return jnp.einsum(node.attrs["equation"], *xs)


# --- activations -------------------------------------------------------------------------
@register_lowering(BACKEND, "Softmax", "LogSoftmax")
def _softmax(tr: Trace, node: Node, x: Any) -> Any:
    axis = int(node.attrs["axis"])
    shifted = x - jnp.max(x, axis=axis, keepdims=True)
    if node.op.name == "Softmax":
        e = jnp.exp(shifted)
        return e / jnp.sum(e, axis=axis, keepdims=True)
    return shifted - jnp.log(jnp.sum(jnp.exp(shifted), axis=axis, keepdims=True))


@register_lowering(BACKEND, "Gelu")
def _gelu(tr: Trace, node: Node, x: Any) -> Any:
    return jax.nn.gelu(x, approximate=node.attrs["approximate"] == "tanh").astype(out_dtype(node))


@register_lowering(BACKEND, "HardSigmoid")
def _hard_sigmoid(tr: Trace, node: Node, x: Any) -> Any:
    dt = out_dtype(node).type
    return jnp.clip(x * dt(node.attrs["alpha"]) + dt(node.attrs["beta"]), 0, 1).astype(out_dtype(node))


@register_lowering(BACKEND, "HardSwish")
def _hard_swish(tr: Trace, node: Node, x: Any) -> Any:
    dt = out_dtype(node).type
    return (x * jnp.clip(x + dt(3), 0, 6) / dt(6)).astype(out_dtype(node))


@register_lowering(BACKEND, "LeakyRelu")
def _leaky_relu(tr: Trace, node: Node, x: Any) -> Any:
    return jnp.where(x >= 0, x, x * out_dtype(node).type(node.attrs["alpha"]))


@register_lowering(BACKEND, "PRelu")
def _prelu(tr: Trace, node: Node, x: Any, slope: Any) -> Any:
    return jnp.where(x >= 0, x, x * slope).astype(out_dtype(node))


@register_lowering(BACKEND, "Assert")
def _assert(tr: Trace, node: Node, cond: Any) -> Any:
    # XLA cannot raise: the failure is carried out of the computation and raised after it.
    tr.fail_where(node, jnp.logical_not(cond))
    return cond


@register_lowering(BACKEND, "CheckDims")
def _unchecked(tr: Trace, node: Node, *ins: Any) -> Any:
    # Dims are static once shapes are specialised: a check that could fail folds at trace time.
    return jnp.asarray(True)
