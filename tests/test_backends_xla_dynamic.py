"""Data-dependent sizes on the xla backend (nexus.backends.xla.dynamic): the op's kernel on
the host, padded to a static bound, the true size beside it.  Oracles: plain NumPy / plain
Python (a greedy NMS written here) and the python backend."""

from __future__ import annotations

import numpy as np
import pytest

import nexus as nx
from nexus.frontend.script import Tensor
from nexus.testing.extras import require

require("jax", "xla")

from nexus.backends.xla import XlaLoweringError  # noqa: E402  (after the skip)


def greedy_nms(boxes: np.ndarray, scores: np.ndarray, iou: float) -> list[int]:
    """Plain-Python NMS over [y1, x1, y2, x2] boxes (the oracle)."""
    def area(b: np.ndarray) -> float:
        return float((b[2] - b[0]) * (b[3] - b[1]))

    keep: list[int] = []
    for i in sorted(range(len(scores)), key=lambda j: (-scores[j], j)):
        ok = True
        for j in keep:
            a, b = boxes[i], boxes[j]
            ih = max(min(a[2], b[2]) - max(a[0], b[0]), 0.0)
            iw = max(min(a[3], b[3]) - max(a[1], b[1]), 0.0)
            inter = ih * iw
            if inter > 0 and inter / (area(a) + area(b) - inter) > iou:
                ok = False
                break
        if ok:
            keep.append(i)
    return keep


@nx.script
def nms_in_a_branch(boxes: Tensor["N", 4], scores: Tensor["N"], iou: float) -> Tensor:  # noqa: F821, UP037
    total = 0.0
    if iou > 0.0:
        keep, k = nx.non_max_suppression(boxes, scores, 100, iou, 0.0)
        i = 0
        while i < k:  # a trip count from the data: NMS's true size
            total = total + scores[keep[i]] * (i + 1)
            i = i + 1
    return total


def random_boxes(rng: np.random.Generator, n: int) -> np.ndarray:
    corner = rng.uniform(0, 10, (n, 2))
    return np.concatenate([corner, corner + rng.uniform(1, 4, (n, 2))], axis=1)


def test_nms_inside_a_branch_with_a_loop_over_its_true_size() -> None:
    rng = np.random.default_rng(3)
    exe = nx.compile(nms_in_a_branch, backend="xla")
    python = nx.compile(nms_in_a_branch, backend="python")
    for n in (12, 12, 30):
        boxes, scores = random_boxes(rng, n), rng.uniform(0, 1, n)
        for iou in (0.2, 0.6, -1.0):
            keep = greedy_nms(boxes, scores, iou) if iou > 0 else []
            want = sum(scores[j] * (i + 1) for i, j in enumerate(keep))
            got = exe(boxes, scores, iou)
            assert got == pytest.approx(want, rel=1e-12)
            assert got == pytest.approx(python(boxes, scores, iou), rel=1e-12)
    assert exe._exes[exe.graph].compiles == 2  # one per N


def test_padded_results_are_sliced_to_their_true_size() -> None:
    with nx.function("g", x=("f64", ("N",)), k="i64") as f:
        x, k = f.args
        idx, nz = nx.non_zero(x)
        vals, _, _, counts, u = nx.unique(x)
        sel, m = nx.boolean_mask(x, nx.greater(x, 0.0))
        top, _, _ = nx.top_k(x, k)
        f.returns(idx, nz, nx.sum(nx.gather(x, idx, axis=0)), vals, counts, u, sel, nx.reduce_mean(sel),
                  nx.reduce_max(sel), top, nx.dim_size(sel, axis=0))
    exe = nx.compile(f, backend="xla")
    for x, k in ((np.array([0.0, 2.0, 0.0, -3.0, 2.0, 5.0]), 2), (np.array([1.0, 1.0, 4.0, 0.0, 0.0, 0.0]), 4)):
        got = exe(x, k)
        sel = x[x > 0]
        vals, counts = np.unique(x, return_counts=True)
        want = (np.array(np.nonzero(x)), np.count_nonzero(x), x[x != 0].sum(), vals, counts, len(vals), sel,
                sel.mean(), sel.max(), np.sort(x)[::-1][:k], len(sel))
        assert len(got) == len(want)
        for a, b in zip(got, want):
            np.testing.assert_allclose(a, b, rtol=1e-12)
        for a, b in zip(got, f.graph(x, k)):  # the python backend
            np.testing.assert_allclose(a, b, rtol=1e-12)


def test_a_caller_given_bound_smaller_than_the_result_is_an_error() -> None:
    with nx.function("g", x=("f64", ("N",))) as f:
        idx, nz = nx.non_zero(f.args[0])
        f.returns(nz)
    exe = nx.compile(f, backend="xla", dynamic_bound=2)
    assert exe(np.array([0.0, 1.0, 0.0, 2.0])) == 2
    with pytest.raises(Exception, match="more than the bound 2"):
        exe(np.array([1.0, 1.0, 0.0, 2.0]))


def test_an_op_that_padding_would_change_names_the_op() -> None:
    with nx.function("g", x=("f64", ("N",))) as f:
        sel, _ = nx.boolean_mask(f.args[0], nx.greater(f.args[0], 0.0))
        f.returns(nx.argmax(sel))
    with pytest.raises(XlaLoweringError, match="op ArgMax reads a value whose size is data-dependent"):
        nx.compile(f, backend="xla")(np.ones(3))
