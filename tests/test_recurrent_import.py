"""Recurrent ops through both importers (``nx.from_torch`` keeps ``aten.lstm``/``gru``/``rnn_*``
out of torch's decompositions, ``nx.from_onnx`` reads torch.onnx's export of the same module):
both give the same annotated Call of the same loop, which ``nx.to_onnx`` writes back as the
ONNX op while the loop is unchanged (as the loop once it is not), and which ``backend="auto"``
and ``"onnxruntime"`` hand to ONNX Runtime.  The oracles are torch eager, torch autograd and
ONNX Runtime."""

from __future__ import annotations

import io
import warnings
from typing import Any

import numpy as np
import pytest

import nexus as nx
from nexus.frontend.recurrent import canonical_text, spec_of
from nexus.testing.extras import require

torch = require("torch", "torch")
onnx = require("onnx", "onnx")
ort = require("onnxruntime", "onnx")

IN, HID, BATCH, STEPS = 4, 5, 3, 6
KINDS = {"LSTM": torch.nn.LSTM, "GRU": torch.nn.GRU, "RNN": torch.nn.RNN}


def module(kind: str, batch_first: bool = True, **kw: Any) -> Any:
    torch.manual_seed(0)
    return KINDS[kind](IN, HID, num_layers=2, bidirectional=True, batch_first=batch_first, **kw).eval()


def flat(out: Any) -> list[np.ndarray]:
    """torch's (output, h_n) or (output, (h_n, c_n)) as a flat list of arrays."""
    y, state = out
    return [t.detach().numpy() for t in (y, *(state if isinstance(state, tuple) else (state,)))]


def close(got: Any, want: list[np.ndarray]) -> None:
    got = list(got) if isinstance(got, (tuple, list)) else [got]
    assert len(got) == len(want)
    for a, b in zip(got, want):
        np.testing.assert_allclose(np.asarray(a), b, rtol=1e-4, atol=1e-5)


def from_onnx(m: Any, x: Any) -> nx.Graph:
    buf = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(m, (x,), buf, dynamo=False, input_names=["x"], opset_version=17)
    return nx.from_onnx(buf.getvalue())


def calls(g: nx.Graph) -> list[Any]:
    return [n for n in g.nodes() if n.op.name == "Call"]


def ort_run(model: Any, *args: np.ndarray) -> list[np.ndarray]:
    s = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return list(s.run(None, {i.name: a for i, a in zip(s.get_inputs(), args)}))


@pytest.mark.parametrize("kind", list(KINDS))
@pytest.mark.parametrize("batch_first", [True, False])
def test_from_torch_matches_eager_and_exports_the_onnx_op(kind: str, batch_first: bool) -> None:
    m = module(kind, batch_first)
    x = torch.randn(BATCH, STEPS, IN) if batch_first else torch.randn(STEPS, BATCH, IN)
    want = flat(m(x))
    g = nx.from_torch(m, (x,))
    assert [spec_of(c).op for c in calls(g)] == [kind, kind]  # type: ignore[union-attr]  # one per layer
    close(g(x.numpy()), want)
    e = nx.to_onnx(g)
    assert [n.op_type for n in e.graph.node].count(kind) == 2 and "Loop" not in {n.op_type for n in e.graph.node}
    close(ort_run(e, x.numpy()), want)


def test_initial_states_and_single_direction() -> None:
    torch.manual_seed(1)
    m = torch.nn.LSTM(IN, HID, num_layers=2).eval()
    x, h0, c0 = torch.randn(STEPS, BATCH, IN), torch.randn(2, BATCH, HID), torch.randn(2, BATCH, HID)

    class Net(torch.nn.Module):  # type: ignore[misc,name-defined]
        def __init__(self) -> None:
            super().__init__()
            self.rnn = m

        def forward(self, x: Any, h: Any, c: Any) -> Any:
            return self.rnn(x, (h, c))

    net = Net().eval()
    g = nx.from_torch(net, (x, h0, c0))
    args = [t.numpy() for t in (x, h0, c0)]
    want = flat(net(x, h0, c0))
    close(g(*args), want)
    close(ort_run(nx.to_onnx(g), *args), want)


@pytest.mark.parametrize("kind", ["LSTM", "GRU"])
def test_both_importers_build_the_same_annotated_loop(kind: str) -> None:
    """torch's weights mapped to ONNX's layout (gate order, biases) give the very cell graph
    of the ONNX import of torch.onnx's export, and the same annotation."""
    m = module(kind)
    x = torch.randn(BATCH, STEPS, IN)
    a, b = calls(nx.from_torch(m, (x,))), calls(from_onnx(m, x))
    assert len(a) == len(b) == 2
    for ca, cb in zip(a, b):
        assert spec_of(ca) == spec_of(cb) is not None
        ga, gb = ca.attrs["callee"], cb.attrs["callee"]
        assert canonical_text(ga) == canonical_text(gb.clone(ga.name)[0])
        for va, vb in zip(ca.inputs, cb.inputs):  # the weights, in ONNX's layout, are the same constants
            if va.op.name == "Constant" and vb.op.name == "Constant":
                np.testing.assert_array_equal(va.attrs["value"], vb.attrs["value"])


@pytest.mark.parametrize("importer", ["torch", "onnx"])
def test_auto_and_onnxruntime_run_the_op_on_onnx_runtime(importer: str) -> None:
    m = module("LSTM")
    x = torch.randn(BATCH, STEPS, IN)
    g = nx.from_torch(m, (x,)) if importer == "torch" else from_onnx(m, x)
    want = flat(m(x))
    exe = nx.compile(g, backend="auto")
    assert [p.engine for p in exe.partitions] == ["onnxruntime"]
    close(exe(x.numpy()), want)
    split = nx.compile(g, backend="onnxruntime", split=True)  # each Call a region of its own session
    assert any(p.engine == "onnxruntime" and "fused LSTM" in p.why for p in split.partitions)
    assert not calls(split.host) or all(spec_of(c) is None for c in calls(split.host))
    close(split(x.numpy()), want)


def test_a_changed_loop_exports_as_a_loop() -> None:
    """Once a pass or a user changes the cell graph, it no longer is the ONNX op: the
    export inlines it and writes the loop (which ONNX Runtime runs to the same result)."""
    m = module("GRU")
    x = torch.randn(BATCH, STEPS, IN)
    g = nx.from_torch(m, (x,))
    call = calls(g)[0]
    callee = call.attrs["callee"]
    ret = callee.returns[0]
    v = ret.input(0)
    one = callee.add("Constant", [], ret.block, {"value": np.ones((), np.float32)})
    callee.set_input(ret, 0, callee.add("Mul", [v, one], ret.block))
    assert spec_of(call) is None and spec_of(calls(g)[1]) is not None
    e = nx.to_onnx(g)
    ops = [n.op_type for n in e.graph.node]
    assert ops.count("GRU") == 1 and ops.count("Loop") == 1
    close(ort_run(e, x.numpy()), flat(m(x)))


@pytest.mark.parametrize("kind", ["LSTM", "GRU"])
def test_gradient_through_the_torch_import_matches_autograd(kind: str) -> None:
    m = module(kind)

    class Loss(torch.nn.Module):  # type: ignore[misc,name-defined]
        def __init__(self) -> None:
            super().__init__()
            self.rnn = m

        def forward(self, x: Any) -> Any:
            return (self.rnn(x)[0] ** 2).sum()

    net = Loss().eval()
    x = torch.randn(BATCH, STEPS, IN, requires_grad=True)
    g = nx.from_torch(net, (x.detach(),))
    net(x).backward()
    np.testing.assert_allclose(np.asarray(nx.grad(g)(x.detach().numpy())), x.grad.numpy(), rtol=1e-4, atol=1e-5)


def test_llvm_compiles_the_torch_import() -> None:
    require("llvmlite", "llvm")
    m = module("GRU")
    x = torch.randn(BATCH, STEPS, IN)
    close(nx.compile(nx.from_torch(m, (x,)), backend="llvm")(x.numpy()), flat(m(x)))


def test_xla_runs_the_torch_import() -> None:
    """Two layers: the second reads the first one's Y, a buffer of T rows (xla refuses a
    stack grown in a loop there; torch's unrolled decomposition ran)."""
    require("jax", "xla")
    m = module("LSTM")
    x = torch.randn(BATCH, STEPS, IN)
    close(nx.compile(nx.from_torch(m, (x,)), backend="xla")(x.numpy()), flat(m(x)))


def test_dropout_in_training_mode_is_refused() -> None:
    torch.manual_seed(0)
    m = torch.nn.LSTM(IN, HID, num_layers=2, dropout=0.5).train()
    with pytest.raises(Exception, match="dropout=0.5 in training mode is random"):
        nx.from_torch(m, (torch.randn(STEPS, BATCH, IN),))


def test_official_rnn_node_tests_export_as_the_op_and_agree() -> None:
    """The 18 official ONNX RNN/GRU/LSTM node tests: import -> export writes the op again
    (layout=1 ones as the time-major op between Transposes, which ONNX Runtime's CPU kernel
    runs) and ONNX Runtime gives the expected outputs stored with each test."""
    from onnx.backend.test.runner import _normalize_tensor

    from nexus.testing import onnx_conformance as conf

    cases = [c for c in conf.node_cases() if c.ops & {"RNN", "GRU", "LSTM"}]
    assert len(cases) >= 18
    for case in cases:
        e = nx.to_onnx(nx.from_onnx(case.model))
        ops = {n.op_type for n in e.graph.node}
        assert ops & case.ops and "Loop" not in ops, case.name
        names = [i.name for i in case.model.graph.input if i.name not in {t.name for t in case.model.graph.initializer}]
        for inputs, outputs in case.data_sets:
            feeds = dict(zip(names, [np.asarray(_normalize_tensor(x)) for x in inputs]))
            got = ort_run(e, *[feeds[n] for n in names])
            for a, b in zip(got, outputs):
                np.testing.assert_allclose(a, np.asarray(_normalize_tensor(b)), rtol=case.rtol, atol=case.atol,
                                           err_msg=case.name)
