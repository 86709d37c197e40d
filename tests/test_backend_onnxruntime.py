"""The onnxruntime backend: whole graphs as one session, and dense regions of graphs with
control flow (or ops ONNX cannot say) as sessions inside the python backend.  The oracles
are plain Python running the same function, NumPy, and torch eager."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import nexus as nx
from nexus.backends.base import BackendError
from nexus.testing.extras import require

require("onnxruntime", "onnx")
from nexus.backends.onnx.runtime import Session, Split, regions  # noqa: E402


def relay(x, w, n: int):  # noqa: ANN001, ANN201
    i = 0
    while i < n:
        x = np.tanh(x @ w) + x
        i += 1
    return x


def busy(x, w, n: int):  # noqa: ANN001, ANN201
    i = 0
    while i < n:  # a body of many nodes: worth one session call in place of them all
        y = x @ w
        x = np.tanh(y) * 0.5 + np.sin(y) * 0.25 + np.cos(x) * 0.125 - np.exp(-np.abs(y)) * 0.0625
        i += 1
    return x


def rolled(x, w):  # noqa: ANN001, ANN201
    a = np.tanh(x @ w) * 0.5 + np.sin(x) * 0.25 + np.cos(x) * 0.125 - np.exp(-np.abs(x)) * 0.0625
    b = np.roll(a, 1)  # no ONNX rule: stays on the python backend, between two regions
    return np.tanh(b @ w) * 0.5 + np.sin(b) * 0.25 + np.cos(a) * 0.125 - np.exp(-np.abs(b)) * 0.0625


def small(x, y):  # noqa: ANN001, ANN201
    return (x * y).sum(), x + y


RNG = np.random.default_rng(0)
X = RNG.standard_normal((4, 8)).astype(np.float32)
W = (RNG.standard_normal((8, 8)) / 4).astype(np.float32)


def test_whole_graph_is_one_session_and_agrees_with_python() -> None:
    exe = nx.compile(nx.script(rolled).specialize((X, W))[0], backend="onnxruntime", threads=1)
    # np.roll has no ONNX rule: the graph splits, and says why
    assert isinstance(exe, Split) and "does not export" in exe.reason
    np.testing.assert_allclose(exe(X, W), rolled(X, W), rtol=1e-5, atol=1e-6)
    engines = [p.engine for p in exe.partitions]
    assert engines == ["onnxruntime", "onnxruntime"], exe.partitions  # the matmuls, each side of the roll
    g, _ = nx.script(small).specialize((X, X))
    whole = nx.compile(g, backend="onnxruntime")
    assert isinstance(whole, Session)
    s, t = whole(X, X)
    assert isinstance(s, np.float32) and s == pytest.approx(float((X * X).sum()), rel=1e-5)
    np.testing.assert_array_equal(t, X + X)


def test_regions_are_convex() -> None:
    g, _ = nx.script(rolled).specialize((X, W))
    (block,) = [b for b in g.blocks if any(n.op.name == "Roll" for n in b.members)]
    found = regions(block)
    roll = next(n for n in block.members if n.op.name == "Roll")
    assert len(found) == 2 and all(roll not in r for r in found)
    # no region both feeds the roll and reads it
    feeds = [any(u is roll for n in r for u in n.users) for r in found]
    reads = [any(v is roll for n in r for v in n.inputs) for r in found]
    assert not any(f and r for f, r in zip(feeds, reads))


def test_split_loop_runs_its_body_in_a_session() -> None:
    f = nx.compile(nx.script(busy), backend="onnxruntime", split=True, threads=1)
    np.testing.assert_allclose(f(X, W, 5), busy(X, W, 5), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(f(X, W, 0), busy(X, W, 0))
    exe = f._exes[f.graph]  # type: ignore[attr-defined]
    assert isinstance(exe, Split)
    (body,) = [p for p in exe.partitions if p.engine == "onnxruntime"]
    assert any("MatMul" in n for n in body.nodes) and len(body.nodes) >= 10
    # the loop's condition, one node, is not worth a session call
    assert [len(p.nodes) for p in exe.partitions if p.engine == "python"] == [1]
    # the whole graph exports too (an ONNX Loop): the default runs it as one session
    whole = nx.compile(nx.script(relay), backend="onnxruntime", threads=1)
    np.testing.assert_allclose(whole(X, W, 5), relay(X, W, 5), rtol=1e-5, atol=1e-5)


def test_one_session_serves_every_batch_size() -> None:
    torch = require("torch", "torch")
    m = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(),
                            torch.nn.Conv2d(8, 8, 3, padding=1, groups=8), torch.nn.Flatten(),
                            torch.nn.Linear(8 * 6 * 6, 5), torch.nn.Softmax(-1)).eval()
    x = torch.randn(2, 3, 6, 6)
    batch = torch.export.Dim("batch", min=1)
    g = nx.from_torch(m, (x,), dynamic_shapes=({0: batch},))
    exe = nx.compile(g, backend="onnxruntime", threads=1)
    assert isinstance(exe, Session)
    for n in (1, 2, 7):
        xb = torch.randn(n, 3, 6, 6)
        with torch.no_grad():
            want = m(xb).numpy()
        np.testing.assert_allclose(exe(xb.numpy()), want, rtol=1e-4, atol=1e-6)


def test_arguments_are_checked_at_the_call_boundary() -> None:
    g, _ = nx.script(small).specialize((X, X))
    exe = nx.compile(g, backend="onnxruntime")
    with pytest.raises(nx.BindingError, match="argument 0"):
        exe(X[0], X)
    with pytest.raises(nx.NexusRuntimeError, match="broadcast"):  # as the python backend says it
        exe(X, X[:2])
    with pytest.raises(nx.BindingError, match="takes 2 arguments"):
        exe(X)


def test_options_are_checked() -> None:
    g, _ = nx.script(small).specialize((X, X))
    with pytest.raises(BackendError, match="no option 'thread'"):
        nx.compile(g, backend="onnxruntime", thread=1)
    with pytest.raises(ValueError, match="optimization is one of"):
        nx.compile(g, backend="onnxruntime", optimization="fast")


def test_a_decoding_loop_runs_under_default_optimisations() -> None:
    """A greedy decoder (torch's while_loop) exported whole: ONNX Runtime's fusion of a
    Transpose of an outer-scope weight into a Gemm of the Loop body lost an input."""
    torch = require("torch", "torch")
    from torch._higher_order_ops.while_loop import while_loop

    class Decoder(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.emb, self.cell, self.out = torch.nn.Embedding(20, 16), torch.nn.Linear(32, 16), torch.nn.Linear(16, 20)

        def forward(self, h: Any, tok: Any, n: Any) -> Any:
            def cond(i: Any, h: Any, tok: Any) -> Any:
                return i < n

            def body(i: Any, h: Any, tok: Any) -> Any:
                h = torch.tanh(self.cell(torch.cat([self.emb(tok), h], -1)))
                return i + 1, h, self.out(h).argmax(-1)

            return while_loop(cond, body, (torch.zeros((), dtype=torch.int64), h, tok))[1:]

    m = Decoder().eval()
    args = (torch.randn(2, 16), torch.tensor([1, 2]), torch.tensor(5))
    exe = nx.compile(nx.from_torch(m, args), backend="onnxruntime")
    assert isinstance(exe, Session)
    h, tok = exe(*[a.numpy() for a in args])
    with torch.no_grad():
        want_h, want_tok = m(*args)
    np.testing.assert_allclose(h, want_h.numpy(), rtol=1e-4, atol=1e-6)
    np.testing.assert_array_equal(tok, want_tok.numpy())
