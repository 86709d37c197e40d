"""Benchmark W-seq: a Loop that appends to a sequence it carries, then stacks it.

One ONNX model (``onnx.helper``): ``for i < T: seq = SequenceInsert(seq, x * i)``, then
``ConcatFromSequence(seq, new_axis=1)``, with ``x`` an f32[16].  Nexus imports it (the
carried sequence is a Phi of sequence type) and runs it on the python backend; ONNX
Runtime runs the model itself; plain Python appends to a list and calls ``np.stack``.
All three must give the same array.

    python bench/w_seq.py [--trips 100 1000 10000] [--repeat 9]

Prints median / min / max per iteration and the paired ratio Nexus / peer.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import machine, measure, rows_from, table  # noqa: E402


def model() -> Any:
    from onnx import TensorProto, helper

    f, i64, b = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL
    body = helper.make_graph(
        [helper.make_node("Identity", ["c_in"], ["c_out"]),
         helper.make_node("Cast", ["i"], ["fi"], to=f),
         helper.make_node("Mul", ["x", "fi"], ["row"]),
         helper.make_node("SequenceInsert", ["s_in", "row"], ["s_out"])],
        "body", [helper.make_tensor_value_info("i", i64, []), helper.make_tensor_value_info("c_in", b, []),
                 helper.make_tensor_sequence_value_info("s_in", f, None)],
        [helper.make_tensor_value_info("c_out", b, []), helper.make_tensor_sequence_value_info("s_out", f, None)])
    graph = helper.make_graph(
        [helper.make_node("SequenceEmpty", [], ["s0"], dtype=f),
         helper.make_node("Loop", ["t", "", "s0"], ["s"], body=body),
         helper.make_node("ConcatFromSequence", ["s"], ["out"], axis=0, new_axis=1)],
        "append", [helper.make_tensor_value_info("t", i64, []), helper.make_tensor_value_info("x", f, [16])],
        [helper.make_tensor_value_info("out", f, ["T", 16])])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    m.ir_version = 10
    return m


def python(t: int, x: np.ndarray) -> np.ndarray:
    rows = []
    for i in range(t):
        rows.append(x * np.float32(i))
    return np.stack(rows)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--trips", type=int, nargs="+", default=[100, 1000, 10000])
    p.add_argument("--repeat", type=int, default=9)
    a = p.parse_args(argv)

    import onnxruntime as ort

    import nexus as nx

    m = model()
    g = nx.from_onnx(m)
    so = ort.SessionOptions()
    so.log_severity_level = 3
    so.intra_op_num_threads = 1
    sess = ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
    x = np.linspace(-1, 1, 16).astype(np.float32)
    print(machine())
    rows = []
    for t in a.trips:
        n = np.array(t, np.int64)
        impls = {"nexus (python backend)": lambda n=n: g(n, x),
                 "onnxruntime": lambda n=n: sess.run(None, {"t": n, "x": x})[0],
                 "python list + np.stack": lambda t=t: python(t, x)}
        want = python(t, x)
        ok = {k: bool(np.array_equal(np.asarray(fn()), want)) for k, fn in impls.items()}
        rows += rows_from(f"W-seq T={t}", measure(impls, a.repeat), "iter", per=t, ok=ok)
    print(table(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
