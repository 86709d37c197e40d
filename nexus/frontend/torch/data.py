"""Shared pieces of the PyTorch importer: its error, names, source locations and dtypes."""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from nexus.ir.types import dtype_of


class TorchImportError(ValueError):
    """A program the importer cannot convert; the message names the op and its source line."""


# --- locations -------------------------------------------------------------------------------
_FRAME = re.compile(r'File "([^"]+)", line (\d+), in (\S+)\n?(.*)?')


def source_of(fx_node: Any) -> tuple[str, int, str] | None:
    """(file, line, code) of the innermost frame of the node's stack trace that is real
    source (not torch's generated ``<eval_with_key>`` code)."""
    trace = fx_node.meta.get("stack_trace") if hasattr(fx_node, "meta") else None
    if not trace:
        return None
    best = None
    for m in _FRAME.finditer(trace):
        f = m.group(1)
        if f.startswith("<") or "torch/fx/passes" in f:
            continue
        best = (f, int(m.group(2)), (m.group(4) or "").strip())
    return best


def describe(fx_node: Any, fallback: tuple[str, int, str] | None = None) -> str:
    """``op 'name' at file:line (code)`` for error messages."""
    src = source_of(fx_node) or fallback
    where = f" at {src[0]}:{src[1]}" + (f" ({src[2]})" if src[2] else "") if src else " (no source location)"
    return f"{target_name(fx_node.target)} (node {fx_node.name!r}){where}"


def target_name(target: Any) -> str:
    """The table key of an FX call target: ``aten.add.Tensor``, ``operator.mul``, ``cond``."""
    if isinstance(target, str):
        return target
    mod = getattr(target, "__module__", None)
    if mod in ("_operator", "operator"):
        return f"operator.{target.__name__}"
    if mod == "torch" and callable(target) and hasattr(target, "__name__"):
        return f"torch.{target.__name__}"
    if mod == "math" and hasattr(target, "__name__"):
        return f"math.{target.__name__}"
    return str(target)


_TORCH_DTYPES = {
    "torch.float32": "f32", "torch.float64": "f64", "torch.float16": "f16", "torch.int64": "i64",
    "torch.int32": "i32", "torch.int16": "i16", "torch.int8": "i8", "torch.uint8": "u8", "torch.bool": "bool",
}
NP_DTYPES = {"f32": "float32", "f64": "float64", "f16": "float16", "i64": "int64", "i32": "int32", "i16": "int16",
       "i8": "int8", "u8": "uint8", "bool": "bool"}


def torch_dtype(dt: Any) -> str:
    """The Nexus dtype of a torch dtype."""
    d = _TORCH_DTYPES.get(str(dt))
    if d is None:
        raise TorchImportError(f"torch dtype {dt} has no Nexus dtype (supported: {', '.join(_TORCH_DTYPES)})")
    return d


def np_dtype(dtype: str) -> np.dtype:
    return np.dtype(NP_DTYPES[dtype])


def tensor_to_numpy(t: Any, what: str) -> np.ndarray:
    import torch

    if not isinstance(t, torch.Tensor):
        raise TorchImportError(f"{what} is a {type(t).__name__}, not a tensor")
    torch_dtype(t.dtype)
    arr = np.array(t.detach().cpu().contiguous().numpy(), order="C", copy=True)
    dtype_of(arr.dtype)
    return arr
