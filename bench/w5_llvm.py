"""W5 with LLVM (issue 12): the greedy ``@nx.script`` NMS (``nexus.testing.ports.nms``)
compiled with ``backend="llvm"`` (argsort in the python backend, the loop a native kernel)
against ONNX Runtime's NonMaxSuppression (C++, one thread), in the same run, on W5's 2,000
clustered boxes (float32, IoU 0.5, no score threshold).  The row ``nexus llvm`` is the
greedy loop in ORT's order (:func:`nms_kept`: each box against the boxes kept so far, which
stops at the first overlap); ports.nms (each kept box against every later one) has a row
of its own.  Both must select ORT's boxes.  (The NumPy run
of the loop takes seconds here and has no row; W10 compares it on 300 boxes.)

Issue 12's target: llvm at least as fast as ONNX Runtime (llvm / ORT <= 1).
"""

from __future__ import annotations

from typing import Any

import numpy as np

import nexus as nx
from bench.common import Row, Skip, measure, rows_from
from bench.w5_nms import make_inputs
from nexus.testing.ports import nms, ort_nms_session


@nx.script
def nms_kept(boxes, scores, thresh: float):
    """The greedy loop in ONNX Runtime's order: each box, best score first, is compared
    with the boxes kept so far and kept unless one overlaps it by more than ``thresh``
    (the same boxes as ports.nms, which suppresses forward from each kept box)."""
    order = np.argsort(-scores)
    area = (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])
    keep = np.zeros(len(scores), dtype=np.int64)
    n = 0
    for k in range(len(order)):
        i = order[k]
        kept = True
        for m in range(n):
            j = keep[m]
            xx1 = max(boxes[i, 0], boxes[j, 0])
            yy1 = max(boxes[i, 1], boxes[j, 1])
            xx2 = min(boxes[i, 2], boxes[j, 2])
            yy2 = min(boxes[i, 3], boxes[j, 3])
            inter = max(0.0, xx2 - xx1) * max(0.0, yy2 - yy1)
            if inter / (area[j] + area[i] - inter) > thresh:
                kept = False
                break
        if kept:
            keep[n] = i
            n += 1
    return keep[:n]


def _ort(boxes: np.ndarray, scores: np.ndarray, iou: float) -> Any:
    sess = ort_nms_session()
    # make_inputs gives [y1, x1, y2, x2], ORT's layout; the script reads [x1, y1, x2, y2]: IoU is
    # symmetric in the axes, so both see the same boxes.
    feeds = {"b": boxes[None], "s": scores[None, None], "m": np.array([len(scores)], np.int64),
             "i": np.array([iou], np.float32)}
    return lambda: sess.run(None, feeds)[0][:, 2]


def run(repeats: int, n: int = 2000) -> list[Row]:
    boxes, scores = make_inputs(n)
    iou = 0.5
    try:
        exe = nx.compile(nms_kept.graph_for(boxes, scores, np.float32(iou)), backend="llvm")
        port = nx.compile(nms.graph_for(boxes, scores, np.float32(iou)), backend="llvm")
    except ImportError as e:
        raise Skip(f"llvmlite: {e}") from None
    want = port(boxes, scores, iou)
    impls = {"nexus llvm": lambda: exe(boxes, scores, iou),
             "nexus llvm, ports.nms (compares suppressed boxes too)": lambda: port(boxes, scores, iou)}
    ok = {k: True for k in impls}
    ok["nexus llvm"] = bool(np.array_equal(exe(boxes, scores, iou), want))
    try:
        ort = _ort(boxes, scores, iou)
        impls["onnxruntime (1 thread)"] = ort
        ok["onnxruntime (1 thread)"] = bool(np.array_equal(ort(), want))
    except ImportError:
        pass
    times = measure(impls, max(5, repeats))
    return rows_from(f"W5 NMS @script llvm, {n} boxes", times, "call", ok=ok)
