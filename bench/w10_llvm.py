"""W10 with LLVM: the NumPy loops of ``nexus.testing.ports`` (issue 17's W10) compiled with
``backend="llvm"``, against the same functions run by NumPy and by the python backend, in
the same run.  Not a target of issue 12; it shows what partitioning and in-place SetItem
give a ported loop (Viterbi compiles whole but for its set-up; NMS's loop is a kernel).
"""

from __future__ import annotations

import numpy as np

import nexus as nx
from bench.common import Row, measure, rows_from
from nexus.testing.ports import boxes, hmm, nms, viterbi


def run(repeats: int) -> list[Row]:
    rng = np.random.default_rng(0)
    rows: list[Row] = []
    b, s = boxes(rng, 300)
    exe = nx.compile(nms.graph_for(b, s, 0.5), backend="llvm")
    ok = {"nexus llvm": bool(np.array_equal(exe(b, s, 0.5), nms.fn(b, s, 0.5)))}
    times = measure({"nexus llvm": lambda: exe(b, s, 0.5), "nexus @script": lambda: nms(b, s, 0.5),
                     "numpy loop": lambda: nms.fn(b, s, 0.5)}, max(3, repeats // 2))
    rows += rows_from("W10L NMS loop, 300 boxes", times, "call", ok=ok)
    args = hmm(rng, 3, 4, 10_000)
    vexe = nx.compile(viterbi.graph_for(*args), backend="llvm")
    got, want = vexe(*args), viterbi.fn(*args)
    ok = {"nexus llvm": bool(np.array_equal(got[0], want[0]) and np.isclose(got[1], want[1]))}
    times = measure({"nexus llvm": lambda: vexe(*args), "nexus @script": lambda: viterbi(*args),
                     "numpy loop": lambda: viterbi.fn(*args)}, max(3, repeats // 2))
    rows += rows_from("W10L Viterbi loop, S=3, T=10,000", times, "call", ok=ok)
    return rows
