"""Python values entering a graph, with the weak typing of DESIGN section 1: a Python
scalar takes the dtype of the tensor it meets; alone, int -> i64, float -> f32, bool ->
bool.  Shared by every frontend so that they agree."""

from __future__ import annotations

from typing import Any

import numpy as np

from nexus.ir.graph import Graph
from nexus.ir.node import Block, Node, SourceLoc
from nexus.ir.types import TensorType, dtype_of, numpy_dtype

DEFAULT_DTYPES = {bool: "bool", int: "i64", float: "f32"}


def is_python_scalar(value: Any) -> bool:
    return isinstance(value, (bool, int, float)) and not isinstance(value, np.generic)


def weak_dtype(value: Any, like: str | None = None) -> str:
    """The dtype a Python scalar takes next to a tensor of dtype ``like`` (or alone)."""
    if isinstance(value, bool):
        return "bool" if like is None or like == "bool" else like
    if like is not None and like != "bool":
        if isinstance(value, float) and numpy_dtype(like).kind in "iu":
            return "f32"  # a float never silently becomes an int
        return like
    return DEFAULT_DTYPES[type(value)] if type(value) in DEFAULT_DTYPES else "f32"


def to_array(value: Any, dtype: str | None = None) -> np.ndarray:
    """A Python scalar, list or NumPy value as an array of ``dtype`` (weakly typed if None)."""
    if is_python_scalar(value):
        return np.array(value, dtype=numpy_dtype(dtype or weak_dtype(value)))
    arr = np.asarray(value)
    if arr.dtype == np.float64 and not isinstance(value, np.ndarray) and dtype is None:
        arr = arr.astype(np.float32)  # Python float lists follow the scalar rule
    if dtype is not None:
        arr = arr.astype(numpy_dtype(dtype))
    dtype_of(arr.dtype)  # raises for dtypes Nexus has no name for
    return arr


def constant(g: Graph, block: Block, value: Any, like: TensorType | None = None,
             name: str | None = None, loc: SourceLoc | None = None) -> Node:
    """A Constant node for a Python or NumPy value; Python scalars are weakly typed."""
    dtype = weak_dtype(value, like.dtype if like is not None else None) if is_python_scalar(value) else None
    return g.add("Constant", [], block, {"value": to_array(value, dtype)}, name=name, loc=loc)
