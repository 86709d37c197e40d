"""Issue 12's NMS acceptance: the greedy ``@nx.script`` NMS (``nexus.testing.ports.nms``:
argsort, then ``keep[n] = i`` in a loop) compiled with ``backend="llvm"`` returns the
indices ONNX Runtime's NonMaxSuppression returns, on 100 random and 100 tricky inputs.

The argsort (TopK) and the array set-up stay in the python backend; the loop is a native
kernel.  ORT takes boxes as [y1, x1, y2, x2] (center_point_box 0), no score threshold,
max_output_boxes_per_class = the number of boxes; both compute in float32."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from nexus.testing.extras import require

require("llvmlite", "llvm")
ort = require("onnxruntime", "onnx")
onnx = require("onnx", "onnx")

import nexus as nx  # noqa: E402
from nexus.backends.llvm.partition import Partitioned  # noqa: E402
from nexus.testing.ports import boxes as random_boxes  # noqa: E402
from nexus.testing.ports import nms, ort_nms_session  # noqa: E402


def _session() -> Any:
    return ort_nms_session()


def ort_nms(sess: Any, b: np.ndarray, s: np.ndarray, thresh: float) -> np.ndarray:
    feeds = {"b": b[None, :, [1, 0, 3, 2]], "s": s[None, None], "m": np.array([len(s)], np.int64),
             "i": np.array([thresh], np.float32)}
    return np.asarray(sess.run(None, feeds)[0][:, 2], np.int64)


def _grid(rng: np.random.Generator, n: int, side: int = 6) -> np.ndarray:
    """Boxes with integer corners on a small grid: exact areas, many exact IoU ties."""
    xy = rng.integers(0, side, (n, 2))
    wh = rng.integers(1, 4, (n, 2))
    return np.concatenate([xy, xy + wh], axis=1).astype(np.float32)


def tricky_cases() -> Iterator[tuple[str, np.ndarray, np.ndarray, float]]:
    rng = np.random.default_rng(12)
    for k in range(100):
        kind = k % 10
        n = int(rng.integers(2, 40))
        if kind == 0:  # every score equal: ties broken by index
            b = _grid(rng, n)
            yield "equal scores", b, np.full(n, 0.5, np.float32), 0.5
        elif kind == 1:  # identical boxes
            b = np.repeat(_grid(rng, 1), n, axis=0)
            yield "identical boxes", b, rng.uniform(0, 1, n).astype(np.float32), 0.3
        elif kind == 2:  # zero-area boxes among others (x1 == x2 or y1 == y2)
            b = _grid(rng, n)
            flat = rng.random(n) < 0.4
            b[flat, 2] = b[flat, 0]
            yield "zero-area boxes", b, rng.uniform(0, 1, n).astype(np.float32), 0.4
        elif kind == 3:  # IoU exactly at the threshold: [0,0,2,2] against [0,0,2,1] is 2 / 4
            b = np.array([[0, 0, 2, 2], [0, 0, 2, 1], [0, 0, 1, 2], [1, 0, 3, 2]], np.float32)
            b = np.concatenate([b, b + 10 * rng.integers(1, 3)])
            yield "IoU at the threshold", b, rng.permutation(len(b)).astype(np.float32), 0.5
        elif kind == 4:
            yield "one box", _grid(rng, 1), np.array([0.7], np.float32), 0.5
        elif kind == 5:
            yield "no box", np.zeros((0, 4), np.float32), np.zeros(0, np.float32), 0.5
        elif kind == 6:  # few distinct scores, grid boxes, thresholds 0 and 1 too
            b = _grid(rng, n, side=4)
            s = rng.integers(0, 3, n).astype(np.float32)
            yield "score ties, grid", b, s, float(rng.choice([0.0, 0.25, 0.5, 1.0]))
        elif kind == 7:  # nested boxes
            c = rng.uniform(10, 20, 2)
            r = np.sort(rng.uniform(0.5, 5, n))
            b = np.stack([c[0] - r, c[1] - r, c[0] + r, c[1] + r], axis=1).astype(np.float32)
            yield "nested boxes", b, rng.uniform(0, 1, n).astype(np.float32), 0.2
        elif kind == 8:  # zero and negative scores, duplicates of scores and boxes
            b = np.concatenate([_grid(rng, n // 2 + 1)] * 2)
            s = np.concatenate([np.zeros(n // 2 + 1), -rng.integers(0, 2, n // 2 + 1)]).astype(np.float32)
            yield "zero and negative scores", b, s, 0.5
        else:  # all disjoint: nothing suppressed
            x = np.arange(n, dtype=np.float32) * 3
            b = np.stack([x, x, x + 1, x + 1], axis=1)
            yield "disjoint", b, rng.uniform(0, 1, n).astype(np.float32), 0.0


@pytest.fixture(scope="module")
def compiled() -> Any:
    b, s = random_boxes(np.random.default_rng(0), 10)
    exe = nx.compile(nms.graph_for(b.astype(np.float32), s.astype(np.float32), np.float32(0.5)), backend="llvm")
    assert isinstance(exe, Partitioned) and len(exe.kernels) == 1  # the loop is native
    assert "SetItem" not in exe.stayed_out and "Gather" not in exe.stayed_out
    return exe


def test_nms_llvm_matches_onnxruntime_on_100_random_inputs(compiled: Any) -> None:
    sess, rng = _session(), np.random.default_rng(1)
    for _ in range(100):
        b, s = random_boxes(rng, int(rng.integers(1, 300)))
        b, s = b.astype(np.float32), s.astype(np.float32)
        thresh = float(rng.choice([0.3, 0.5, 0.7]))
        np.testing.assert_array_equal(compiled(b, s, thresh), ort_nms(sess, b, s, thresh))


def test_nms_llvm_matches_onnxruntime_on_100_tricky_inputs(compiled: Any) -> None:
    sess = _session()
    seen = set()
    for what, b, s, thresh in tricky_cases():
        b, s = b.astype(np.float32), s.astype(np.float32)
        want = ort_nms(sess, b, s, thresh)
        got = compiled(b, s, thresh)
        np.testing.assert_array_equal(got, want, err_msg=f"{what}: {len(s)} boxes, threshold {thresh}")
        seen.add(what)
    assert len(seen) == 10
