"""Python's typing rules inside ``@nx.script``.

A script promises Python's semantics, so Python scalars keep Python's types:
``int`` -> i64, ``float`` -> f64 (a double, as in Python; DESIGN's weak typing makes a
lone float f32, which suits the DSL but would change the results of a Python function),
``bool`` -> bool.  Graph values that are scalars of those dtypes behave as Python
scalars ("weak"): next to a tensor they take its dtype, as NumPy does with Python
scalars (NEP 50).  Tensors of other dtypes are "strong" and promote as NumPy does.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from nexus.ir.node import Node
from nexus.ir.types import FLOAT_DTYPES, INT_DTYPES, TensorType, dtype_of, numpy_dtype

WEAK_DTYPES = ("bool", "i64", "f64")  # ordered: bool < int < float
PY_DTYPE = {bool: "bool", int: "i64", float: "f64"}
I64_MIN, I64_MAX = -(2**63), 2**63 - 1


def is_number(value: Any) -> bool:
    return isinstance(value, (bool, int, float)) and not isinstance(value, np.generic)


def py_dtype(value: Any) -> str:
    """The dtype of a Python number."""
    return "bool" if isinstance(value, bool) else "i64" if isinstance(value, int) else "f64"


def weak_dtype_of(value: Node | Any) -> str | None:
    """'bool'/'i64'/'f64' for Python numbers and graph scalars acting as them, else None."""
    if isinstance(value, Node):
        t = value.type
        if isinstance(t, TensorType) and t.shape == () and t.dtype in WEAK_DTYPES:
            return t.dtype
        return None
    if is_number(value):
        return py_dtype(value)
    return None


def result_dtype(dtypes: list[str]) -> str:
    return dtype_of(np.result_type(*[numpy_dtype(d) for d in dtypes]))


def common_dtype(strong: list[str], weak: list[str]) -> str:
    """NumPy's promotion with Python scalars as weak operands (NEP 50)."""
    if strong:
        dt = result_dtype(strong)
        for w in weak:
            if w == "f64" and dt not in FLOAT_DTYPES:
                dt = "f64"  # an int tensor next to a Python float becomes float64
            elif w == "i64" and dt == "bool":
                dt = "i64"
        return dt
    return max(weak, key=WEAK_DTYPES.index)


def is_int(dtype: str) -> bool:
    return dtype in INT_DTYPES


def is_float(dtype: str) -> bool:
    return dtype in FLOAT_DTYPES


def python_converter(t: Any) -> Any:
    """How a result of type ``t`` is returned as Python returns it: weak scalars become
    bool/int/float (chosen once per type, applied on every call)."""
    if isinstance(t, TensorType) and t.shape == () and t.dtype in WEAK_DTYPES:
        return {"bool": bool, "i64": int, "f64": float}[t.dtype]
    return _same


def _same(value: Any) -> Any:
    return value
