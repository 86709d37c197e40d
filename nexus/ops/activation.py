"""Activations: Gelu, Softplus, LeakyRelu, PRelu, Softmax, LogSoftmax, HardSigmoid, HardSwish.

Float-only; each kernel returns the dtype it was given (f16 is computed in f32 and
rounded back, as PyTorch does on CPU)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from nexus.ir.opdef import Attr, OpTypeError
from nexus.ir.types import FLOAT_DTYPES, TensorType, Type
from nexus.ops._rules import broadcast, check_dtype, define, like, normalize_axis, tensor, unary_rule
from nexus.ops._special import erf, erfc_f32

FAMILY = "activation"
FLOATS = frozenset(FLOAT_DTYPES)


def _wide(x: Any) -> np.ndarray:
    """``x`` as an array of at least f32 precision, for the intermediate steps."""
    arr = np.asarray(x)
    return arr.astype(np.float32) if arr.dtype == np.float16 else arr


def _gelu(x: Any, approximate: str = "none") -> Any:
    w = _wide(x)
    if approximate == "tanh":
        c = w.dtype.type(math.sqrt(2 / math.pi))
        out = 0.5 * w * (1 + np.tanh(c * (w + w.dtype.type(0.044715) * w * w * w)))
    elif approximate == "none" and w.dtype == np.float32 and w.ndim:
        # x Phi(x) = relu(x) - |x| erfc(|x| / sqrt 2) / 2: no cancellation for negative x (1 +
        # erf(x / sqrt 2) loses every digit below x = -5) and 5-10x faster (BART's and ViT's MLPs)
        z = np.abs(w)
        half = z * np.float32(0.5)
        z *= np.float32(1 / math.sqrt(2))
        half *= erfc_f32(z)
        out = np.maximum(w, np.float32(0))
        out -= half
        if np.isinf(w).any():  # erfc's fit gives NaN at inf; the erf form gives gelu(inf) = inf
            out[np.isposinf(w)] = np.inf
            out[np.isneginf(w)] = np.nan  # -inf * (1 + erf(-inf)) as below (and torch)
    elif approximate == "none":
        out = np.asarray(erf(w / w.dtype.type(math.sqrt(2))))  # a new array: the rest in place
        out += 1
        out *= w
        out *= w.dtype.type(0.5)
    else:
        raise ValueError(f"Gelu: approximate must be 'none' or 'tanh', got {approximate!r}")
    return like(out, x)


def _gelu_rule(op: str, ins: Sequence[Type], attrs: Mapping[str, Any], _: Sequence[Any]) -> Type:
    if attrs["approximate"] not in ("none", "tanh"):
        raise OpTypeError(f"{op}: approximate must be 'none' or 'tanh', got {attrs['approximate']!r}")
    return unary_rule(FLOATS)(op, ins, attrs, _)


define("Gelu", FAMILY, ("x",), _gelu_rule, _gelu, differentiable=True, promotion="float",
       attrs={"approximate": Attr("str", "none", "'none' (erf) or 'tanh'")},
       doc="x * Phi(x), Phi the standard normal CDF (or its tanh approximation).")


def _softplus(x: Any) -> Any:
    w = _wide(x)
    # log(1 + e^x) = max(x, 0) + log1p(e^-|x|): no overflow for large |x|.
    return like(np.maximum(w, 0) + np.log1p(np.exp(-np.abs(w))), x)


define("Softplus", FAMILY, ("x",), unary_rule(FLOATS), _softplus, differentiable=True, promotion="float",
       doc="log(1 + exp(x)), computed without overflow.")


def _leaky_relu(x: Any, alpha: float = 0.01) -> Any:
    arr = np.asarray(x)
    return like(np.where(arr >= 0, arr, arr * arr.dtype.type(alpha)), x)


define("LeakyRelu", FAMILY, ("x",), unary_rule(FLOATS), _leaky_relu, differentiable=True,
       attrs={"alpha": Attr("float", 0.01, "slope for x < 0")}, doc="x if x >= 0 else alpha * x.")


def _prelu_rule(op: str, ins: Sequence[Type], attrs: Mapping[str, Any], _: Sequence[Any]) -> Type:
    dtype, shape = broadcast(op, ins)
    check_dtype(op, tensor(op, ins[0], 0), FLOATS)
    return TensorType(dtype, shape)


def _prelu(x: Any, slope: Any) -> Any:
    out = np.where(np.asarray(x) >= 0, x, np.multiply(x, slope))
    return like(out, x)


define("PRelu", FAMILY, ("x", "slope"), _prelu_rule, _prelu, differentiable=True, broadcasting=True,
       doc="x if x >= 0 else slope * x; slope broadcasts against x (per channel: shape [C, 1, 1]).")


def _softmax_rule(op: str, ins: Sequence[Type], attrs: Mapping[str, Any], _: Sequence[Any]) -> Type:
    t = tensor(op, ins[0], 0)
    check_dtype(op, t, FLOATS)
    if t.shape is not None:
        if not t.shape:
            raise OpTypeError(f"{op}: needs rank >= 1, got a scalar")
        normalize_axis(op, attrs["axis"], len(t.shape))
    return t


def _log_softmax(x: Any, axis: int = -1) -> Any:
    w = _wide(x)
    if w.size == 0:
        return np.asarray(x).copy()
    shifted = w - np.max(w, axis=axis, keepdims=True)
    return like(shifted - np.log(np.sum(np.exp(shifted), axis=axis, keepdims=True)), x)


def _softmax(x: Any, axis: int = -1) -> Any:
    w = _wide(x)
    if w.size == 0:
        return np.asarray(x).copy()
    e = w - np.maximum.reduce(w, axis=axis, keepdims=True)  # np.max and np.sum, less their wrappers' us
    np.exp(e, out=e)  # e is this kernel's own array: in place from here
    e /= np.add.reduce(e, axis=axis, keepdims=True)
    return like(e, x)


_AXIS = {"axis": Attr("int", -1, "the axis normalised over")}
define("Softmax", FAMILY, ("x",), _softmax_rule, _softmax, attrs=_AXIS, differentiable=True, promotion="float",
       doc="exp(x) / sum(exp(x)) along `axis` (max-shifted for stability).")
define("LogSoftmax", FAMILY, ("x",), _softmax_rule, _log_softmax, attrs=_AXIS, differentiable=True,
       promotion="float",
       doc="x - log(sum(exp(x))) along `axis` (max-shifted for stability).")


try:  # np.clip's ufunc, without the ~2 us of Python of np.clip around it (28 calls in MobileNetV3)
    from numpy._core.umath import clip as _clip  # type: ignore[attr-defined]
except ImportError:  # NumPy 1.x
    from numpy.core.umath import clip as _clip  # type: ignore[no-redef,unused-ignore]


# The hard activations of mobile CNNs, kept whole so that a runtime can fuse them into the
# convolution before them (ONNX Runtime does): decomposed, they were five passes over memory.
def _hard_sigmoid(x: Any, alpha: float = 0.2, beta: float = 0.5) -> Any:
    w = _wide(x)
    f = w.dtype.type
    out = np.asarray(w * f(alpha))  # a new array (0-d for a scalar): the rest in place
    out += f(beta)
    _clip(out, f(0), f(1), out=out)
    return like(out, x)


define("HardSigmoid", FAMILY, ("x",), unary_rule(FLOATS), _hard_sigmoid, differentiable=True, promotion="float",
       attrs={"alpha": Attr("float", 0.2, "slope"), "beta": Attr("float", 0.5, "offset")},
       doc="max(0, min(1, alpha * x + beta)) (ONNX's defaults; torch's hardsigmoid is alpha = 1/6).")


def _hard_swish(x: Any) -> Any:
    w = _wide(x)
    f = w.dtype.type
    out = np.asarray(w + f(3))
    _clip(out, f(0), f(6), out=out)
    out *= w
    out /= f(6)
    return like(out, x)


define("HardSwish", FAMILY, ("x",), unary_rule(FLOATS), _hard_swish, differentiable=True, promotion="float",
       doc="x * relu6(x + 3) / 6, as torch computes it (ONNX's HardSwish).")
