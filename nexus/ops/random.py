"""Random ops.  The seed is an explicit input (an i64 scalar computed in the graph, so a
loop can derive one per iteration); there is no global generator state.  The ops are
impure (``pure=False``): passes never fold, merge or hoist them, and their order relative
to other effects is given by ``deps`` edges."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from nexus.ir.opdef import Attr, OpTypeError
from nexus.ir.types import FLOAT_DTYPES, TensorType, Type, numpy_dtype
from nexus.ops._rules import check_int_scalar, check_int_vector, define, dims_value, fresh_shape, tensor, vector_len

FAMILY = "random"


def _rule(op: str, ins: Sequence[Type], attrs: Mapping[str, Any], values: Sequence[Any]) -> Type:
    shape, seed = tensor(op, ins[0], 0), tensor(op, ins[1], 1)
    check_int_vector(op, shape, "the shape input")
    check_int_scalar(op, seed, "the seed")
    if attrs["dtype"] not in FLOAT_DTYPES:
        raise OpTypeError(f"{op}: dtype must be a float type, got {attrs['dtype']}")
    if attrs.get("generator") not in (None, *_GENERATORS):
        raise OpTypeError(f"{op}: generator must be one of {', '.join(_GENERATORS)}, got {attrs['generator']!r}")
    dims = dims_value(values[0])
    return TensorType(attrs["dtype"], tuple(dims) if dims is not None else fresh_shape(vector_len(shape)))


_GENERATORS = ("pcg64", "mt19937")


def _generator(seed: Any) -> np.random.Generator:
    return np.random.Generator(np.random.PCG64(int(seed) & (2**64 - 1)))


def _uniform(shape: Any, seed: Any, dtype: str = "f32", low: float = 0.0, high: float = 1.0,
             generator: str = "pcg64") -> np.ndarray:
    dims = tuple(int(d) for d in shape)
    if generator == "mt19937":  # NumPy's legacy stream: np.random.seed(s); np.random.uniform(...)
        out = np.random.RandomState(int(seed) & (2**32 - 1)).uniform(low, high, size=dims)
    else:
        out = _generator(seed).uniform(low, high, size=dims)
    # Rounding to a narrower dtype may reach `high`; keep the interval half-open.
    out = out.astype(numpy_dtype(dtype))
    return np.where(out >= np.asarray(high, out.dtype), np.nextafter(np.asarray(high, out.dtype), -np.inf), out)


def _normal(shape: Any, seed: Any, dtype: str = "f32", mean: float = 0.0, scale: float = 1.0) -> np.ndarray:
    dims = tuple(int(d) for d in shape)
    return _generator(seed).normal(mean, scale, size=dims).astype(numpy_dtype(dtype))


define("RandomUniform", FAMILY, ("shape", "seed"), _rule, _uniform, pure=False,
       attrs={
           "dtype": Attr("dtype", "f32", "a float dtype"),
           "low": Attr("float", 0.0, "lower bound (included)"),
           "high": Attr("float", 1.0, "upper bound (excluded)"),
           "generator": Attr("str", None, "pcg64 (the default): NumPy's default Generator; mt19937: NumPy's legacy "
                             "RandomState (np.random.seed), the stream ONNX's reference Dropout draws from"),
       },
       doc="Uniform samples in [low, high) of the shape held in `shape`; the same seed gives the same tensor.",
       may_fail=True)
define("RandomNormal", FAMILY, ("shape", "seed"), _rule, _normal, pure=False,
       attrs={
           "dtype": Attr("dtype", "f32", "a float dtype"),
           "mean": Attr("float", 0.0, "mean"),
           "scale": Attr("float", 1.0, "standard deviation"),
       },
       doc="Normal samples of the shape held in `shape`; the same seed gives the same tensor.", may_fail=True)
