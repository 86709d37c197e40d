"""Benchmark W5: NonMaxSuppression on 2000 boxes.

Nexus (the NMS example graph run by the interpreter, and the bare kernel) against ONNX
Runtime's NonMaxSuppression op and a plain vectorised NumPy implementation (the classic
greedy loop: one IoU row per kept box).  All three must select the same boxes.

    python bench/w5_nms.py [--boxes 2000] [--repeat 30]

Prints median / min / max in milliseconds and the ratios to Nexus's graph.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from nexus.ir.graph import Graph  # noqa: E402
from nexus.ir.types import TensorType, sym  # noqa: E402
from nexus.ops.dynamic import nms_single  # noqa: E402
from nexus.testing.ports import ort_nms_session  # noqa: E402


def make_inputs(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Boxes as detectors emit them: clustered around 100 objects in a 1000 x 1000 image."""
    rng = np.random.default_rng(seed)
    centers = rng.uniform(0, 1000, (100, 2))
    c = centers[rng.integers(0, 100, n)] + rng.normal(0, 8, (n, 2))
    size = rng.uniform(20, 80, (n, 2))
    boxes = np.concatenate([c - size / 2, c + size / 2], axis=1).astype(np.float32)  # y1, x1, y2, x2
    scores = rng.uniform(0, 1, n).astype(np.float32)
    return boxes, scores


def numpy_nms(boxes: np.ndarray, scores: np.ndarray, max_out: int, iou_thr: float, score_thr: float) -> np.ndarray:
    """The textbook vectorised NMS (as in Fast R-CNN's py_cpu_nms), with ONNX's thresholds."""
    y1, x1, y2, x2 = boxes[:, 0], boxes[:, 1], boxes[:, 2], boxes[:, 3]
    areas = (x2 - x1) * (y2 - y1)
    idx = np.nonzero(scores > score_thr)[0]
    order = idx[np.argsort(-scores[idx], kind="stable")]
    keep = []
    while order.size > 0 and len(keep) < max_out:
        i = order[0]
        keep.append(i)
        xx1 = np.maximum(x1[i], x1[order[1:]])
        yy1 = np.maximum(y1[i], y1[order[1:]])
        xx2 = np.minimum(x2[i], x2[order[1:]])
        yy2 = np.minimum(y2[i], y2[order[1:]])
        inter = np.maximum(0.0, xx2 - xx1) * np.maximum(0.0, yy2 - yy1)
        iou = inter / (areas[i] + areas[order[1:]] - inter)
        order = order[1:][iou <= iou_thr]
    return np.asarray(keep, np.int64)


def nexus_graph() -> Graph:
    """boxes [N, 4], scores [N] -> selected box indices [nb]."""
    n = sym("N")
    g = Graph("nms", [TensorType("f32", (n, 4)), TensorType("f32", (n,)), TensorType("i64", ()),
                      TensorType("f32", ()), TensorType("f32", ())])
    e = g.start_block
    nms = g.add("NonMaxSuppression", list(g.args), e)
    sel = g.add("Proj", [nms], e, {"num": 0})
    g.end_block.append_input(g.add("Return", [sel], e))
    return g


def ort_session() -> Any:
    return ort_nms_session(score_threshold=True)


def timeit(fn: Callable[[], Any], repeat: int) -> list[float]:
    fn()  # warm up
    out = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t0) * 1e3)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="W5: NMS on N boxes, Nexus vs ONNX Runtime vs NumPy")
    p.add_argument("--boxes", type=int, default=2000)
    p.add_argument("--repeat", type=int, default=30)
    args = p.parse_args(argv)
    boxes, scores = make_inputs(args.boxes)
    max_out, iou, thr = args.boxes, 0.5, 0.05
    g = nexus_graph()
    g_args = (boxes, scores, np.int64(max_out), np.float32(iou), np.float32(thr))
    want = numpy_nms(boxes, scores, max_out, iou, thr)
    runs: dict[str, Callable[[], Any]] = {
        "nexus graph (interpreter)": lambda: g(*g_args),
        "nexus kernel": lambda: nms_single(boxes, scores, max_out, iou, thr),
        "numpy vectorised": lambda: numpy_nms(boxes, scores, max_out, iou, thr),
    }
    np.testing.assert_array_equal(g(*g_args), want)
    try:
        sess = ort_session()
        feeds = {"b": boxes[None], "s": scores[None, None], "m": np.array([max_out]),
                 "i": np.array([iou], np.float32), "t": np.array([thr], np.float32)}
        np.testing.assert_array_equal(sess.run(None, feeds)[0][:, 2], want)
        runs["onnxruntime (1 thread)"] = lambda: sess.run(None, feeds)
    except ImportError as e:
        print(f"onnxruntime not installed ({e}); pip install 'nexus-ir[onnx]'")
    print(f"W5 NMS: {args.boxes} boxes, {len(want)} kept, iou {iou}, score > {thr}, {args.repeat} runs")
    results = {name: timeit(fn, args.repeat) for name, fn in runs.items()}
    base = statistics.median(results["nexus graph (interpreter)"])
    print(f"{'implementation':28s} {'median ms':>10s} {'min':>8s} {'max':>8s} {'vs nexus graph':>15s}")
    for name, ts in results.items():
        med = statistics.median(ts)
        print(f"{name:28s} {med:10.3f} {min(ts):8.3f} {max(ts):8.3f} {med / base:14.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
