"""ONNX import rules: ops with data-dependent output sizes, and control flow."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from nexus.frontend.onnx.control import convert_if, convert_loop, convert_scan
from nexus.frontend.onnx.ops import RULES, Ins, _i64_scalar, _req, _t, converts
from nexus.ir.node import Node
from nexus.ir.types import numpy_dtype

if TYPE_CHECKING:
    from nexus.frontend.onnx.importer import Importer


# --- data-dependent sizes ------------------------------------------------------------------
@converts("TopK")
def _topk(imp: Importer, ins: Ins, attrs: dict[str, Any]) -> list[Node | None]:
    t = imp.emit("TopK", [_req(ins[0], "X"), _i64_scalar(imp, _req(ins[1], "K"))],
                 {"axis": int(attrs.get("axis", -1)), "largest": bool(attrs.get("largest", 1)),
                  "sorted": bool(attrs.get("sorted", 1))})
    return [imp.emit("Proj", [t], {"num": 0}), imp.emit("Proj", [t], {"num": 1}, name=None)]


@converts("NonZero")
def _nonzero(imp: Importer, ins: Ins, attrs: dict[str, Any]) -> list[Node | None]:
    t = imp.emit("NonZero", [_req(ins[0], "X")])
    return [imp.emit("Proj", [t], {"num": 0})]


@converts("Unique")
def _unique(imp: Importer, ins: Ins, attrs: dict[str, Any]) -> list[Node | None]:
    x, is_sorted = _req(ins[0], "X"), bool(attrs.get("sorted", 1))
    if attrs.get("axis") is None:
        t = imp.emit("Unique", [x], {"sorted": is_sorted})
    else:
        t = imp.emit("UniqueSlices", [x], {"axis": int(attrs["axis"]), "sorted": is_sorted})
    return [imp.emit("Proj", [t], {"num": i}, name=None) for i in range(4)]


@converts("NonMaxSuppression")
def _nms(imp: Importer, ins: Ins, attrs: dict[str, Any]) -> list[Node | None]:
    boxes, scores = _req(ins[0], "boxes"), _req(ins[1], "scores")
    ft = numpy_dtype(_t(boxes).dtype)
    full = list(ins) + [None] * (5 - len(ins))
    mx = _i64_scalar(imp, full[2]) if full[2] is not None else imp.const(np.array(0, np.int64))
    iou = full[3] if full[3] is not None else imp.const(np.array(0, ft))
    score = full[4] if full[4] is not None else imp.const(np.array(-np.inf, ft))
    t = imp.emit("NonMaxSuppression", [boxes, scores, mx, iou, score],
                 {"center_point_box": int(attrs.get("center_point_box", 0))})
    return [imp.emit("Proj", [t], {"num": 0})]


# --- control flow ----------------------------------------------------------------------------
RULES.add("If", convert_if)
RULES.add("Loop", convert_loop)
RULES.add("Scan", convert_scan)

