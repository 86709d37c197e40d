"""TensorFlow GraphDef import on graphs made by real TensorFlow (tensorflow-cpu 2.21.0,
tests/fixtures/tf/make_fixtures.py): v1 Switch/Merge frames and conds, TF2 functional
While/If with the function library, TensorArray / TensorList, TF's own gradient graph
of a while loop (StackV2 push/pop), a frozen MLP.  The oracle is TensorFlow's outputs,
committed beside each GraphDef; TensorFlow itself is not needed."""

from __future__ import annotations

import os
import subprocess
from typing import Any

import numpy as np
import pytest

import nexus as nx
from nexus.testing.extras import require, require_program

require("tensorboard", "tf")

HERE = os.path.join(os.path.dirname(__file__), "fixtures", "tf")
FIXTURES = ["seed004", "cond_v1", "cond_v1_false", "skip5_v1", "skip5_v2", "nested_v1", "mixed_v1", "mixed_v1_k1",
            "mixed_v1_neg", "mixed_v2", "mixed_v2_neg", "ops_v1", "mlp_frozen", "rnn_v1", "rnn_v2", "grad_v1",
            "grad_v2"]
# Through XLA: the loops and conds.  Not the RNNs, TF2's gradient and ops_v1: the XLA backend
# needs static shapes, and these compute them at run time (tf.shape -> Cast, Range, growing lists).
LOOPS = ["skip5_v1", "skip5_v2", "nested_v1", "mixed_v1", "mixed_v1_k1", "mixed_v2", "grad_v1"]


def fixture(name: str) -> tuple[str, list[str], list[str], list[np.ndarray], list[np.ndarray]]:
    """The GraphDef path, input and output names, inputs and TF's outputs of a fixture."""
    z = np.load(os.path.join(HERE, name + ".npz"))
    ins = [str(s) for s in z["input_names"]]
    outs = [str(s) for s in z["output_names"]]
    return (os.path.join(HERE, str(z["graph"]) + ".pbtxt"), ins, outs, [z[f"in{k}"] for k in range(len(ins))],
            [z[f"out{k}"] for k in range(len(outs))])


def as_tuple(v: Any) -> tuple[Any, ...]:
    return v if isinstance(v, tuple) else (v,)


def check(got: Any, want: list[np.ndarray]) -> None:
    got = as_tuple(got)
    assert len(got) == len(want)
    for a, b in zip(got, want):
        assert np.asarray(a).dtype == b.dtype
        np.testing.assert_allclose(np.asarray(a), b, rtol=2e-5, atol=2e-6)


@pytest.mark.parametrize("name", FIXTURES)
def test_fixture_imports_verifies_round_trips_and_matches_tensorflow(name: str) -> None:
    path, ins, outs, args, want = fixture(name)
    g = nx.from_tf(path, ins, outs)
    nx.verify(g)
    h = nx.parse(nx.print_graph(g))
    assert nx.structurally_equal(h, g)
    check(g(*args), want)
    check(h(*args), want)


@pytest.mark.parametrize("name", FIXTURES)
def test_fixture_draws(name: str) -> None:
    exe = require_program("dot", "graphviz")
    path, ins, outs, _, _ = fixture(name)
    proc = subprocess.run([exe, "-Tsvg"], input=nx.to_dot(nx.from_tf(path, ins, outs)).encode(),
                          capture_output=True, timeout=60)
    assert proc.returncode == 0 and b"<svg" in proc.stdout


def test_control_flow_becomes_blocks_and_phis() -> None:
    def ops(name: str) -> list[str]:
        path, ins, outs, _, _ = fixture(name)
        return [n.op.name for n in nx.from_tf(path, ins, outs).nodes()]

    cond = ops("cond_v1")
    assert cond.count("Cond") == 1 and cond.count("Phi") == 1 and "Switch" not in cond
    skip5 = ops("skip5_v1")  # a loop (Cond on LoopCond) with a cond inside its body
    assert skip5.count("Cond") == 2 and skip5.count("Phi") >= 3
    assert ops("nested_v1").count("Cond") == 2  # two loops, one inside the other
    grad = ops("grad_v1")
    assert grad.count("StackPush") == 1 and grad.count("StackPop") == 1 and grad.count("Cond") == 2
    assert "Cond" not in ops("mlp_frozen")
    mixed = ops("mixed_v1")  # 4 conds (two on one predicate, one inside, one in a loop test) and a loop
    assert mixed.count("Cond") == 5
    grad2 = ops("grad_v2")  # TF2: a forward and a backward While, the accumulators stacked tensors
    assert grad2.count("Cond") == 2 and "Concat" in grad2 and "Slice" in grad2


def test_seed004_binary_and_text_agree_and_default_names() -> None:
    _, _, _, args, want = fixture("seed004")
    g_bin = nx.from_tf(os.path.join(HERE, "seed004.pb"))  # inputs: the Placeholders; outputs: unconsumed nodes
    g_txt = nx.from_tf(os.path.join(HERE, "seed004.pbtxt"), ["input:0"], ["output"])
    assert nx.structurally_equal(g_bin, g_txt)
    check(g_bin(*args), want)
    with open(os.path.join(HERE, "seed004.pb"), "rb") as f:
        check(nx.from_tf(f.read())(*args), want)


def test_seed004_through_llvm_is_one_add_of_103() -> None:
    require("llvmlite", "llvm")
    _, ins, outs, args, want = fixture("seed004")
    ex = nx.compile(nx.from_tf(os.path.join(HERE, "seed004.pb"), ins, outs), backend="llvm")
    check(ex(*args), want)
    assert int(np.asarray(ex(np.array([10], np.int32)))[0]) == 113
    body = [ln.split()[0] for ln in ex.asm().splitlines() if ln.startswith("\t") and not ln.startswith("\t.")]
    assert "addl" in body and "$103" in ex.asm()  # constant-folded, as seed 004 shows
    assert not any(op.startswith(("sub", "imul")) for op in body)


@pytest.mark.parametrize("name", ["seed004", "cond_v1", "skip5_v1", "skip5_v2", "nested_v1", "mixed_v1", "ops_v1",
                                  "mlp_frozen", "rnn_v1", "rnn_v2", "grad_v1", "grad_v2"])
def test_fixture_through_llvm(name: str) -> None:
    require("llvmlite", "llvm")
    path, ins, outs, args, want = fixture(name)
    check(nx.compile(nx.from_tf(path, ins, outs), backend="llvm")(*args), want)


@pytest.mark.parametrize("name", ["seed004", *LOOPS])
def test_loops_through_xla(name: str) -> None:
    require("jax", "xla")
    path, ins, outs, args, want = fixture(name)
    check(nx.compile(nx.from_tf(path, ins, outs), backend="xla")(*args), want)


def test_loop_counts_follow_the_inputs() -> None:
    """The imported loops are loops, not unrolled: other trip counts give what plain
    Python gives."""
    path, ins, outs, _, _ = fixture("skip5_v1")
    g = nx.from_tf(path, ins, outs)

    def skip5(n: int, limit: int) -> tuple[int, int]:
        i = s = 0
        while i < n and s <= limit:
            i += 1
            if i != 5:
                s += i
        return s, i

    for n, limit in [(10, 25), (3, 100), (20, 60), (0, 5)]:
        got = as_tuple(g(np.array(n, np.int32), np.array(limit, np.int32)))
        assert tuple(int(v) for v in got) == skip5(n, limit)
    path, ins, outs, _, _ = fixture("nested_v1")
    x = np.array([0.5, -1.0], np.float32)
    for n in (0, 1, 3, 6):
        want = sum(np.float32(i * j) + x for i in range(n) for j in range(i)) if n > 1 else np.zeros(2, np.float32)
        np.testing.assert_allclose(np.asarray(nx.from_tf(path, ins, outs)(np.array(n, np.int32), x)), want,
                                   rtol=1e-6)


def test_rnn_runs_other_lengths() -> None:
    """The sequence length is symbolic: a longer sequence runs the same graph; compared
    with the recurrence in NumPy (the weights read back from the GraphDef's constants)."""
    path, ins, outs, args, want = fixture("rnn_v2")
    g = nx.from_tf(path, ins, outs)
    consts = [np.asarray(n.attrs["value"]) for n in g.nodes() if n.op.name == "Constant"]
    w = next(c for c in consts if c.shape == (3, 4))
    u = next(c for c in consts if c.shape == (4, 4))
    xs = np.random.default_rng(5).standard_normal((9, 2, 3)).astype(np.float32)
    h = np.ones((2, 4), np.float32) * 0.1
    hs, last = g(xs, h)
    for t in range(9):
        h = np.tanh(xs[t] @ w + h @ u)
        np.testing.assert_allclose(hs[t], h, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(last, h, rtol=1e-5, atol=1e-6)


def test_docs_example_runs(monkeypatch: Any, capsys: Any) -> None:
    """The example of docs/tf.md runs as written (from the repository root)."""
    require("llvmlite", "llvm")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    with open(os.path.join(root, "docs", "tf.md")) as f:
        doc = f.read()
    code = doc.split("```python\n", 1)[1].split("```", 1)[0]
    monkeypatch.chdir(root)
    exec(compile(code, "docs/tf.md", "exec"), {})  # our own documentation, not loaded data
    assert "$103" in capsys.readouterr().out


def test_default_inputs_and_outputs() -> None:
    """Without names: the Placeholders in order, and the unconsumed nodes outside loops and
    conds (a v1 cond's unused pivot is no output)."""
    for name in ("cond_v1", "skip5_v1", "mixed_v1", "skip5_v2"):
        path, ins, outs, args, want = fixture(name)
        g = nx.from_tf(path)
        assert [a.name for a in g.args] == [i.split(":")[0] for i in ins]
        got = as_tuple(g(*args))
        check(got[:len(want)], want)
