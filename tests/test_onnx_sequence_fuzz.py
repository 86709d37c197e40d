"""Random sequence programs against ONNX Runtime.

Each program splits a random tensor into a sequence (SplitToSequence: pieces of 1, with or
without keepdims, a chunk size, or a list of sizes, on a random axis), then applies a
random chain of SequenceInsert / SequenceErase (with and without a position, i32 or i64,
negative or not), SequenceAt and SequenceLength, and concatenates the result where the
shapes allow (ConcatFromSequence, with and without a new axis).  ONNX Runtime on the
model is the oracle for Nexus on the imported graph, for ONNX Runtime on the exported
graph and for Nexus after the default optimisation pipeline.  ``NEXUS_FUZZ_SEQ=N`` runs N
programs instead of the default 40.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import pytest

from nexus.testing.extras import require

onnx = require("onnx", "onnx")
ort = require("onnxruntime", "onnx")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import nexus as nx  # noqa: E402

F, I64 = TensorProto.FLOAT, TensorProto.INT64
COUNT = int(os.environ.get("NEXUS_FUZZ_SEQ", "40"))


class Program:
    """An ONNX graph under construction, with the element shapes of its current sequence
    (tracked by the generator, as the oracle for which ops are valid)."""

    def __init__(self, rng: np.random.Generator):
        self.rng, self.nodes, self.outputs, self.k = rng, list[Any](), list[Any](), 0

    def name(self, prefix: str) -> str:
        self.k += 1
        return f"{prefix}{self.k}"

    def const(self, value: Any) -> str:
        n = self.name("c")
        self.nodes.append(helper.make_node("Constant", [], [n], value=numpy_helper.from_array(np.asarray(value), n)))
        return n

    def node(self, op: str, ins: list[str], **attrs: Any) -> str:
        out = self.name(op.lower())
        self.nodes.append(helper.make_node(op, ins, [out], **attrs))
        return out

    def output(self, name: str, kind: str) -> None:
        if kind == "seq":
            self.outputs.append(helper.make_tensor_sequence_value_info(name, F, None))
        else:
            self.outputs.append(helper.make_tensor_value_info(name, I64 if kind == "i64" else F, None))

    def position(self, n: int, hi: int) -> tuple[str, int]:
        """A position in [-n, hi] as an i32 or i64 constant, and where it points."""
        k = int(self.rng.integers(-n, hi + 1))
        dtype = np.int64 if self.rng.integers(0, 2) else np.int32
        return self.const(dtype(k)), k + n if k < 0 else k


def split(p: Program, shape: list[int]) -> tuple[str, list[list[int]]]:
    rng, rank = p.rng, len(shape)
    axis = int(rng.integers(-rank, rank))
    ax, n = axis % rank, shape[axis % rank]
    mode = int(rng.integers(0, 3))
    if mode == 0:
        keep = int(rng.integers(0, 2))
        piece = [d for k, d in enumerate(shape) if k != ax or keep]
        if keep:
            piece[ax] = 1
        return p.node("SplitToSequence", ["x"], axis=axis, keepdims=keep), [piece] * n
    if mode == 1:
        c = int(rng.integers(1, n + 1))
        sizes = [min(c, n - i) for i in range(0, n, c)]
        arg = p.const(np.int64(c))
    else:
        sizes = []
        while sum(sizes) < n:
            sizes.append(int(rng.integers(0, n - sum(sizes) + 1)))
        sizes = sizes or [0]
        arg = p.const(np.array(sizes, np.int64))
    return p.node("SplitToSequence", ["x", arg], axis=axis), [[*shape[:ax], s, *shape[ax + 1:]] for s in sizes]


def program(rng: np.random.Generator) -> tuple[Any, list[int]]:
    p = Program(rng)
    shape = [int(rng.integers(1, 4)) for _ in range(int(rng.integers(1, 4)))]
    seq, elems = split(p, shape)
    for _ in range(int(rng.integers(1, 6))):
        n, op = len(elems), str(rng.choice(["insert", "erase", "at", "length"]))
        if op == "insert" and n:
            shp = elems[int(rng.integers(0, n))]
            t = p.const(rng.normal(size=shp).astype(np.float32))
            if rng.integers(0, 2):
                seq, elems = p.node("SequenceInsert", [seq, t]), [*elems, shp]
            else:
                pos, k = p.position(n, n)
                seq, elems = p.node("SequenceInsert", [seq, t, pos]), [*elems[:k], shp, *elems[k:]]
        elif op == "erase" and n:
            if rng.integers(0, 2):
                seq, elems = p.node("SequenceErase", [seq]), elems[:-1]
            else:
                pos, k = p.position(n, n - 1)
                seq, elems = p.node("SequenceErase", [seq, pos]), [*elems[:k], *elems[k + 1:]]
        elif op == "at" and n:
            p.output(p.node("SequenceAt", [seq, p.position(n, n - 1)[0]]), "f32")
        elif op == "length":
            p.output(p.node("SequenceLength", [seq]), "i64")
    p.output(seq, "seq")
    if elems and all(e == elems[0] for e in elems):
        r = len(elems[0])
        p.output(p.node("ConcatFromSequence", [seq], axis=int(rng.integers(-r - 1, r + 1)), new_axis=1), "f32")
    for a in range(len(elems[0]) if elems else 0):
        if all(len(e) == len(elems[0]) and all(e[d] == elems[0][d] for d in range(len(e)) if d != a) for e in elems):
            p.output(p.node("ConcatFromSequence", [seq], axis=a - len(elems[0]) * int(rng.integers(0, 2))), "f32")
            break
    g = helper.make_graph(p.nodes, "fuzz", [helper.make_tensor_value_info("x", F, shape)], p.outputs)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    m.ir_version = 10
    return m, shape


def same(got: Any, want: Any) -> None:
    if isinstance(want, list):
        assert isinstance(got, list) and len(got) == len(want)
        for a, b in zip(got, want):
            same(a, b)
        return
    got = np.asarray(got)
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_allclose(got, want, rtol=1e-6)


def ort_run(m: Any, x: np.ndarray) -> list[Any]:
    so = ort.SessionOptions()
    so.log_severity_level = 4
    return list(ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"]).run(None, {"x": x}))


@pytest.mark.parametrize("seed", range(COUNT))
def test_random_sequence_program_matches_onnxruntime(seed: int) -> None:
    rng = np.random.default_rng(seed)
    m, shape = program(rng)
    x = rng.normal(size=shape).astype(np.float32)
    want = ort_run(m, x)
    g = nx.from_onnx(m)
    nx.verify(g)

    def results(r: Any) -> list[Any]:  # one result as is, several as a tuple
        return list(r) if len(want) > 1 else [r]

    for got in (results(g(x)), ort_run(nx.to_onnx(g), x), results(nx.optimize(g)(x))):
        assert len(got) == len(want)
        for a, b in zip(got, want):
            same(a, b)
