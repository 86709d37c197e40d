"""W10: NumPy loops ported to ``@nx.script`` unchanged (issue 17): the greedy NMS that writes
``keep[n] = i`` and the Viterbi decoder that fills ``dp[t, s]``, each against the very same
function run by NumPy (its ``.fn``), in the same run.

Issue 17's target: each within 1.5x of the NumPy loop (Nexus / NumPy <= 1.5).
"""

from __future__ import annotations

import numpy as np

from bench.common import Row, measure, rows_from
from nexus.testing.ports import boxes, hmm, nms, viterbi


def run(repeats: int) -> list[Row]:
    rng = np.random.default_rng(0)
    rows: list[Row] = []
    b, s = boxes(rng, 300)
    ok = {"numpy loop": True, "nexus @script": bool(np.array_equal(nms(b, s, 0.5), nms.fn(b, s, 0.5)))}
    times = measure({"nexus @script": lambda: nms(b, s, 0.5), "numpy loop": lambda: nms.fn(b, s, 0.5)},
                    max(3, repeats // 2))
    rows += rows_from("W10 NMS loop, 300 boxes", times, "call", ok=ok)
    args = hmm(rng, 3, 4, 10_000)
    got, want = viterbi(*args), viterbi.fn(*args)
    ok = {"numpy loop": True, "nexus @script": bool(np.array_equal(got[0], want[0]) and np.isclose(got[1], want[1]))}
    times = measure({"nexus @script": lambda: viterbi(*args), "numpy loop": lambda: viterbi.fn(*args)},
                    max(3, repeats // 2))
    rows += rows_from("W10 Viterbi loop, S=3, T=10,000", times, "call", ok=ok)
    return rows
