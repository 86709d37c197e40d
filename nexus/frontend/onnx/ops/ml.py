"""ONNX import rules: the ai.onnx.ml ops that are plain tensor functions."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from nexus.frontend.onnx.ops import Ins, _cast, _like, _rank, _req, _t, converts
from nexus.ir.node import Node

if TYPE_CHECKING:
    from nexus.frontend.onnx.importer import Importer


@converts("ai.onnx.ml.Binarizer")
def _binarizer(imp: Importer, ins: Ins, attrs: dict[str, Any]) -> list[Node | None]:
    """1 where x > threshold, else 0, in x's dtype."""
    x = _req(ins[0], "X")
    return [_cast(imp, imp.emit("Greater", [x, _like(imp, float(attrs.get("threshold", 0.0)), x)]), _t(x).dtype)]


@converts("ai.onnx.ml.ArrayFeatureExtractor")
def _array_feature_extractor(imp: Importer, ins: Ins, attrs: dict[str, Any]) -> list[Node | None]:
    """x[..., indices] (the indices flattened); a vector x gives one row [1, k], as ONNX
    Runtime and the reference do."""
    x, idx = _req(ins[0], "X"), _req(ins[1], "Y")
    flat = imp.emit("Reshape", [_cast(imp, idx, "i64"), imp.const(np.array([-1], np.int64))])
    y = imp.emit("Gather", [x, flat], {"axis": _rank(x) - 1})
    return [imp.emit("Unsqueeze", [y], {"axes": (0,)}) if _rank(x) == 1 else y]
