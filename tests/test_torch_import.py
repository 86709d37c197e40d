"""PyTorch -> Nexus (issue 21): five models exported by ``torch.export`` with a dynamic
batch size import, verify, and match PyTorch at several batch sizes; the imported RNN's
gradients match ``torch.autograd``; every graph optimises and infers shapes symbolically;
the CNN and transformer layer go on to ONNX and ONNX Runtime.

The exported programs are shared by module-scoped fixtures (``torch.export`` is slow)."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pytest

import nexus as nx
from nexus.frontend.torch.importer import TorchProgram, from_torch
from nexus.testing.extras import require

torch = require("torch", "torch")
nn = torch.nn
Dim = torch.export.Dim
while_loop = torch._higher_order_ops.while_loop

RTOL = 1e-5
BATCHES = (1, 3, 6)


class CNN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.c1 = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.c2 = nn.Conv2d(8, 16, 3, stride=2, groups=2)
        self.fc = nn.Linear(16, 10)

    def forward(self, x: Any) -> Any:
        x = torch.relu(self.bn(self.c1(x)))
        x = nn.functional.max_pool2d(x, 2)
        x = nn.functional.leaky_relu(self.c2(x), 0.1)
        x = nn.functional.adaptive_avg_pool2d(x, 1).flatten(1)
        return torch.log_softmax(self.fc(x), -1)


class RNN(nn.Module):
    """h = tanh(x_t W + h U + b) for t < n, n a run-time tensor: a torch while_loop."""

    def __init__(self, unrolled: bool = False) -> None:
        super().__init__()
        self.W = nn.Parameter(torch.randn(4, 8) * 0.4)
        self.U = nn.Parameter(torch.randn(8, 8) * 0.4)
        self.b = nn.Parameter(torch.randn(8) * 0.1)
        self.unrolled = unrolled  # the same steps as a Python loop: the gradient oracle

    def forward(self, xs: Any, n: Any) -> Any:
        h0 = xs.new_zeros(xs.shape[1], 8)
        if self.unrolled:
            h = h0
            for t in range(int(n)):
                h = torch.tanh(xs[t] @ self.W + h @ self.U + self.b)
            return h

        def cond(i: Any, h: Any) -> Any:
            return i < n

        def body(i: Any, h: Any) -> Any:
            x = torch.index_select(xs, 0, i.reshape(1)).squeeze(0)
            return i + 1, torch.tanh(x @ self.W + h @ self.U + self.b)

        _, h = while_loop(cond, body, (torch.zeros((), dtype=torch.int64), h0))
        return h


class CondModel(nn.Module):
    """torch.cond on a data-dependent predicate; the second output is a tuple element
    that reads the symbolic batch size."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(6, 6)
        self.b = nn.Linear(6, 6)

    def forward(self, x: Any) -> Any:
        def pos(x: Any) -> Any:
            return torch.tanh(self.a(x))

        def neg(x: Any) -> Any:
            return torch.sigmoid(self.b(x)) * 2

        y = torch.cond(x.sum() > 0, pos, neg, (x,))
        return y, x.shape[0] * y.mean(0)


class DetectionHead(nn.Module):
    """Boxes and scores per anchor, sorted by score, then greedy NMS written in torch ops:
    a while_loop over the anchors clears the later boxes that overlap a kept one."""

    A = 16

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.box = nn.Linear(8 * 4 * 4, self.A * 4)
        self.score = nn.Linear(8 * 4 * 4, self.A)

    def forward(self, x: Any) -> Any:
        f = nn.functional.avg_pool2d(torch.relu(self.conv(x)), 2).flatten(1)
        d = self.box(f).view(x.shape[0], self.A, 4)
        xy = torch.sigmoid(d[..., :2]) * 10
        wh = torch.exp(d[..., 2:].clamp(max=2.0))
        boxes = torch.cat([xy - wh / 2, xy + wh / 2], -1)
        scores = torch.sigmoid(self.score(f))
        order = torch.argsort(scores, -1, descending=True)
        boxes = torch.gather(boxes, 1, order.unsqueeze(-1).expand(-1, -1, 4))
        scores = torch.gather(scores, 1, order)
        x1, y1, x2, y2 = boxes.unbind(-1)
        area = (x2 - x1) * (y2 - y1)
        lo, hi = torch.maximum, torch.minimum
        iw = (hi(x2[:, :, None], x2[:, None, :]) - lo(x1[:, :, None], x1[:, None, :])).clamp(min=0)
        ih = (hi(y2[:, :, None], y2[:, None, :]) - lo(y1[:, :, None], y1[:, None, :])).clamp(min=0)
        inter = iw * ih
        iou = inter / (area[:, :, None] + area[:, None, :] - inter)
        idx = torch.arange(self.A)

        def cond(i: Any, keep: Any) -> Any:
            return i < self.A

        def body(i: Any, keep: Any) -> Any:
            row = torch.index_select(iou, 1, i.reshape(1)).squeeze(1)
            kept = torch.index_select(keep, 1, i.reshape(1))
            return i + 1, keep & ~((row > 0.5) & kept & (idx > i))

        _, keep = while_loop(cond, body, (torch.zeros((), dtype=torch.int64), scores > 0.3))
        return boxes * keep[..., None], torch.where(keep, scores, 0.0)


def encoder_layer() -> Any:
    return nn.TransformerEncoderLayer(16, 4, 32, dropout=0.0, batch_first=True).eval()


def _batch() -> Any:
    return Dim("batch", min=1, max=64)


def _import(model: Any, args: tuple[Any, ...], dyn: Any, **kw: Any) -> TorchProgram:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        prog = from_torch(model, args, dyn, program=True, **kw)
    assert isinstance(prog, TorchProgram)
    nx.verify(prog.graph)
    return prog


def _bn_stats(m: Any) -> Any:
    with torch.no_grad():
        m.bn.running_mean.uniform_(-0.5, 0.5)
        m.bn.running_var.uniform_(0.5, 2.0)
    return m


# name -> (model, example args, dynamic shapes, inputs at batch size B)
CASES: dict[str, Any] = {
    "cnn": (lambda: _bn_stats(CNN().eval()), (torch.randn(2, 3, 16, 16),), lambda: ({0: _batch()},),
            lambda b: (torch.randn(b, 3, 16, 16),)),
    "transformer": (encoder_layer, (torch.randn(2, 5, 16),), lambda: ({0: _batch()},),
                    lambda b: (torch.randn(b, 5, 16),)),
    "rnn": (RNN, (torch.randn(5, 2, 4), torch.tensor(4)), lambda: ({0: Dim("T", min=1, max=100), 1: _batch()}, None),
            lambda b: (torch.randn(7, b, 4), torch.tensor(b + 1))),
    "cond": (CondModel, (torch.randn(3, 6),), lambda: ({0: _batch()},), lambda b: (torch.randn(b, 6),)),
    "detection": (DetectionHead, (torch.randn(2, 3, 8, 8),), lambda: ({0: _batch()},),
                  lambda b: (torch.randn(b, 3, 8, 8),)),
}


_CACHE: dict[str, tuple[str, Any, TorchProgram]] = {}


def _program(name: str) -> tuple[str, Any, TorchProgram]:
    """The model and its import, made once per test session (torch.export is slow)."""
    if name not in _CACHE:
        torch.manual_seed(0)
        make, args, dyn, _ = CASES[name]
        model = make()
        _CACHE[name] = (name, model, _import(model, args, dyn()))
    return _CACHE[name]


@pytest.fixture(scope="module", params=list(CASES))
def imported(request: Any) -> tuple[str, Any, TorchProgram]:
    return _program(request.param)


def _flat(v: Any) -> list[Any]:
    return list(v) if isinstance(v, (tuple, list)) else [v]


def test_matches_pytorch_on_several_batch_sizes(imported: tuple[str, Any, TorchProgram]) -> None:
    name, model, prog = imported
    inputs = CASES[name][3]
    torch.manual_seed(1)
    for b in BATCHES:
        args = inputs(b)
        if name == "cond" and b == 3:
            args = (-args[0].abs(),)  # the other branch (sum < 0)
        with torch.no_grad():
            want = model(*args)
        got = prog(*args)
        assert isinstance(got, tuple) == isinstance(want, tuple)  # the output structure is kept
        for g, w in zip(_flat(got), _flat(want)):
            np.testing.assert_allclose(g, w.numpy(), rtol=RTOL, atol=1e-6, err_msg=f"{name} at batch {b}")


def test_symbolic_shapes_optimize_and_infer(imported: tuple[str, Any, TorchProgram]) -> None:
    name, model, prog = imported
    g = prog.graph
    assert "batch" in str(g.arg_types[0])
    want = {"cnn": ["f32[batch, 10]"], "transformer": ["f32[batch, 5, 16]"], "rnn": ["f32[batch, 8]"],
            "cond": ["f32[batch, 6]", "f32[6]"], "detection": ["f32[batch, 16, 4]", "f32[batch, 16]"]}[name]
    assert [str(t) for t in g.result_types] == want
    h, _ = g.clone()
    nx.infer_shapes(h)
    assert [str(t) for t in h.result_types] == want
    nx.optimize(h)
    nx.verify(h)
    args = [a.numpy() for a in CASES[name][3](2)]
    for a, b in zip(_flat(g(*args)), _flat(h(*args))):
        np.testing.assert_array_equal(a, b)


def test_control_flow_becomes_blocks(imported: tuple[str, Any, TorchProgram]) -> None:
    name, _, prog = imported
    text = nx.print_graph(prog.graph)
    if name == "cond":
        assert "^then" in text and "^else" in text and "Phi" in text
    elif name in ("rnn", "detection"):
        assert "^loop" in text and "^loop_body" in text and "Phi" in text
        dot = nx.to_dot(prog.graph)
        assert dot.count("subgraph cluster_") == len(prog.graph.blocks)
    else:
        assert len(prog.graph.blocks) == 2  # no control flow: entry and exit only
    assert nx.parse(text) is not None


class SquaredNorm(nn.Module):
    """A scalar loss of the RNN's final state, for nx.grad."""

    def __init__(self, rnn: Any) -> None:
        super().__init__()
        self.rnn = rnn

    def forward(self, xs: Any, n: Any) -> Any:
        h = self.rnn(xs, n)
        return (h * h).sum()


def test_rnn_gradient_matches_torch_autograd_in_float64() -> None:
    torch.manual_seed(2)
    model = SquaredNorm(RNN()).double()
    dyn = ({0: Dim("T", min=1, max=100), 1: _batch()}, None)
    prog = _import(model, (torch.randn(5, 2, 4, dtype=torch.float64), torch.tensor(3)), dyn, params="arguments")
    assert prog.param_names == ["rnn.W", "rnn.U", "rnn.b"]
    xs, n = torch.randn(6, 3, 4, dtype=torch.float64), torch.tensor(5)
    # Oracle: torch.autograd through the same steps as a Python loop (torch's eager
    # while_loop autograd disagrees with finite differences for closed-over parameters).
    oracle = SquaredNorm(RNN(unrolled=True)).double()
    oracle.load_state_dict(model.state_dict())
    x_ref = xs.clone().requires_grad_(True)
    oracle(x_ref, n).backward()
    want = [x_ref.grad] + [dict(oracle.named_parameters())[k].grad for k in prog.param_names]
    got = nx.grad(prog.graph, argnums=(0, *prog.param_argnums))(xs.numpy(), n.numpy(), *prog.param_values)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w.numpy(), rtol=1e-5, atol=1e-12)


@pytest.mark.parametrize("name", ["cnn", "transformer"])
def test_pytorch_to_nexus_to_onnx_runtime(name: str) -> None:
    ort = require("onnxruntime", "onnx")
    _, model, prog = _program(name)
    inputs = CASES[name][3]
    torch.manual_seed(3)
    onnx_model = nx.to_onnx(prog.graph)
    sess = ort.InferenceSession(onnx_model.SerializeToString())
    for b in (1, 4):
        (x,) = inputs(b)
        got = sess.run(None, {sess.get_inputs()[0].name: x.numpy()})[0]
        with torch.no_grad():
            np.testing.assert_allclose(got, model(x).numpy(), rtol=RTOL, atol=1e-6)
