"""ONNX ``RNN``, ``GRU`` and ``LSTM`` import as one Nexus loop over the time steps.  The
oracle is ONNX Runtime on the same model (for ``layout=1``, which ONNX Runtime's CPU kernels
refuse, ONNX Runtime on the time-major model with the inputs and outputs transposed), and
PyTorch for ``torch.nn.LSTM``/``GRU`` exported with ``torch.onnx.export``, their gradients
included."""

from __future__ import annotations

import io
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import nexus as nx
from nexus.testing.extras import require

onnx = require("onnx", "onnx")
ort = require("onnxruntime", "onnx")
from onnx import TensorProto as T  # noqa: E402
from onnx import helper as h  # noqa: E402

from nexus.frontend.onnx.data import OnnxImportError  # noqa: E402

GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}
OUTS = {"RNN": ("Y", "Y_h"), "GRU": ("Y", "Y_h"), "LSTM": ("Y", "Y_h", "Y_c")}
STEPS, BATCH, IN, HID = 5, 3, 4, 6
LENS = np.array([5, 2, 4], np.int32)  # one full length, two shorter than T


def rnn_model(op: str, *, direction: str = "forward", bias: bool = True, lens: np.ndarray | None = None,
              h0: bool = False, c0: bool = False, peep: bool = False, layout: int = 0,
              outputs: tuple[str, ...] | None = None, opset: int = 14, seed: int = 0,
              steps: int = STEPS, **attrs: Any) -> tuple[Any, dict[str, np.ndarray]]:
    """One ``op`` node on random float32 inputs (all of them graph inputs); ``outputs``
    lists the outputs to request (the others get the empty name)."""
    rng = np.random.default_rng(seed)
    g, d = GATES[op], 2 if direction == "bidirectional" else 1

    def rand(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape) * 0.6).astype(np.float32)

    x = rand(steps, BATCH, IN) if layout == 0 else rand(BATCH, steps, IN)
    state = (d, BATCH, HID) if layout == 0 else (BATCH, d, HID)
    feeds: dict[str, np.ndarray] = {"X": x, "W": rand(d, g * HID, IN), "R": rand(d, g * HID, HID)}
    optional: list[tuple[str, bool, Callable[[], Any]]] = [
        ("B", bias, lambda: rand(d, 2 * g * HID)), ("sequence_lens", lens is not None, lambda: lens),
        ("initial_h", h0, lambda: rand(*state))]
    if op == "LSTM":
        optional += [("initial_c", c0, lambda: rand(*state)), ("P", peep, lambda: rand(d, 3 * HID))]
    names = ["X", "W", "R"]
    for name, present, make in optional:
        names.append(name if present else "")
        if present:
            feeds[name] = make()
    while not names[-1]:
        names.pop()
    wanted = OUTS[op] if outputs is None else outputs
    out_names = [o if o in wanted else "" for o in OUTS[op]]
    while not out_names[-1]:
        out_names.pop()
    if layout:
        attrs["layout"] = layout
    node = h.make_node(op, names, out_names, direction=direction, hidden_size=HID, **attrs)
    elem = {np.dtype(np.float32): T.FLOAT, np.dtype(np.int32): T.INT32}
    inputs = [h.make_tensor_value_info(k, elem[v.dtype], list(v.shape)) for k, v in feeds.items()]
    y = [steps, d, BATCH, HID] if layout == 0 else [BATCH, steps, d, HID]
    outs = [h.make_tensor_value_info(o, T.FLOAT, y if o == "Y" else list(state)) for o in out_names if o]
    m = h.make_model(h.make_graph([node], "m", inputs, outs), opset_imports=[h.make_opsetid("", opset)])
    onnx.checker.check_model(m)
    return m, feeds


def ort_run(m: Any, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    return list(ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds))


def nexus_run(m: Any, feeds: dict[str, np.ndarray], roundtrip: bool = False) -> tuple[nx.Graph, list[np.ndarray]]:
    g = nx.from_onnx(m)
    nx.verify(g)
    if roundtrip:
        assert nx.structurally_equal(nx.parse(nx.print_graph(g)), g)
    got = g(*[feeds[i.name] for i in m.graph.input])
    return g, [np.asarray(v) for v in (got if isinstance(got, tuple) else (got,))]


def check(op: str, roundtrip: bool = False, **kw: Any) -> nx.Graph:
    """Import, verify, run and compare with ONNX Runtime."""
    m, feeds = rnn_model(op, **kw)
    g, got = nexus_run(m, feeds, roundtrip)
    want = ort_run(m, feeds)
    assert len(got) == len(want)
    for a, b in zip(got, want):
        assert a.shape == b.shape
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)
    return g


@pytest.mark.parametrize("op", list(GATES))
@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
def test_directions_plain_and_with_every_input(op: str, direction: str) -> None:
    """No optional input at all, then B, sequence_lens (two lengths shorter than T),
    initial_h and initial_c.  Both directions of a bidirectional op share one loop, in the
    graph of the one Call that stands for the op."""
    check(op, direction=direction, bias=False, seed=1)
    g = check(op, direction=direction, lens=LENS, h0=True, c0=True, roundtrip=direction == "bidirectional")
    calls = [n for n in g.nodes() if n.op.name == "Call"]
    assert len(calls) == 1 and calls[0].attrs["recurrent"]
    assert [n.op.name for n in calls[0].attrs["callee"].nodes()].count("Cond") == 1


@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
def test_lstm_peepholes(direction: str) -> None:
    check("LSTM", direction=direction, peep=True, lens=LENS, h0=True, c0=True)


@pytest.mark.parametrize("op", list(GATES))
def test_clip(op: str) -> None:
    # a small clip, so that it cuts many of the activations' inputs
    check(op, direction="bidirectional", clip=0.4, lens=LENS, h0=True, peep=op == "LSTM")


ACTS = [("Relu", None, None), ("Tanh", None, None), ("Sigmoid", None, None), ("Affine", 0.7, -0.2),
        ("LeakyRelu", 0.3, None), ("ThresholdedRelu", 0.1, None), ("ScaledTanh", 1.3, 0.8),
        ("HardSigmoid", 0.3, 0.4), ("Elu", 0.6, None), ("Softsign", None, None), ("Softplus", None, None)]


@pytest.mark.parametrize(("act", "alpha", "beta"), ACTS, ids=[a[0] for a in ACTS])
def test_rnn_activation(act: str, alpha: float | None, beta: float | None) -> None:
    attrs: dict[str, Any] = {"activations": [act]}
    if alpha is not None:
        attrs["activation_alpha"] = [alpha]
    if beta is not None:
        attrs["activation_beta"] = [beta]
    check("RNN", h0=True, **attrs)


def test_activations_without_alpha_beta_take_the_defaults() -> None:
    """HardSigmoid's defaults are 0.2/0.5; LeakyRelu's 0.01; Elu's 1; ONNX Runtime's 0 for
    Affine, ScaledTanh and ThresholdedRelu (the standalone ThresholdedRelu op's is 1)."""
    check("RNN", direction="bidirectional", activations=["HardSigmoid", "LeakyRelu"])
    check("RNN", direction="bidirectional", activations=["Elu", "ThresholdedRelu"], h0=True)
    check("GRU", direction="bidirectional", activations=["Sigmoid", "Affine", "Sigmoid", "ScaledTanh"], h0=True)


def test_gru_and_lstm_activations_with_alpha_beta() -> None:
    """Per-direction activations; the alpha/beta lists are consumed in order by the
    activations that take them."""
    check("GRU", direction="bidirectional", lens=LENS, activations=["HardSigmoid", "LeakyRelu", "Sigmoid", "Affine"],
          activation_alpha=[0.3, 0.2, 0.9], activation_beta=[0.45, 0.1])
    check("LSTM", direction="bidirectional", lens=LENS, h0=True, c0=True,
          activations=["HardSigmoid", "Affine", "LeakyRelu", "Sigmoid", "Tanh", "ScaledTanh"],
          activation_alpha=[0.25, 0.8, 0.05, 1.1], activation_beta=[0.5, 0.1, 0.9])


@pytest.mark.parametrize("lbr", [0, 1])
def test_gru_linear_before_reset(lbr: int) -> None:
    check("GRU", direction="bidirectional", linear_before_reset=lbr, lens=LENS, h0=True)
    check("GRU", direction="reverse", linear_before_reset=lbr, bias=False, seed=2)


def test_lstm_input_forget() -> None:
    check("LSTM", direction="bidirectional", input_forget=1, peep=True, lens=LENS, h0=True, c0=True)
    check("LSTM", input_forget=1, clip=0.5)


@pytest.mark.parametrize("op", list(GATES))
@pytest.mark.parametrize("opset", [14, 22])
def test_layout_batch_major(op: str, opset: int) -> None:
    """layout=1: X [B, T, I], Y [B, T, D, H], states [B, D, H].  The oracle runs the
    time-major model on the transposed inputs."""
    kw: dict[str, Any] = {"direction": "bidirectional", "lens": LENS, "h0": True, "c0": True, "opset": opset}
    m, feeds = rnn_model(op, layout=1, **kw)
    _, got = nexus_run(m, feeds)
    m0, _ = rnn_model(op, layout=0, **kw)
    feeds0 = {k: (v.transpose(1, 0, 2) if k in ("X", "initial_h", "initial_c") else v) for k, v in feeds.items()}
    want = ort_run(m0, feeds0)
    want = [want[0].transpose(2, 0, 1, 3), *(w.transpose(1, 0, 2) for w in want[1:])]
    assert len(got) == len(want)
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("op", list(GATES))
def test_optional_outputs(op: str) -> None:
    """Only Y_h (Y has the empty name), and only Y; for LSTM also only Y_c."""
    check(op, direction="bidirectional", lens=LENS, outputs=("Y_h",))
    check(op, direction="reverse", outputs=("Y",))
    if op == "LSTM":
        check(op, direction="bidirectional", lens=LENS, outputs=("Y_c",))


@pytest.mark.parametrize("op", list(GATES))
def test_zero_length_sequence(op: str) -> None:
    """A sequence of length 0: its rows of Y and its final states are 0 (as ONNX Runtime),
    whatever initial_h and initial_c are."""
    check(op, direction="bidirectional", lens=np.array([0, 3, 5], np.int32), h0=True, c0=True)


@pytest.mark.parametrize("op", list(GATES))
def test_export_of_the_import_matches_onnxruntime(op: str) -> None:
    """import -> nx.to_onnx -> ONNX Runtime equals ONNX Runtime on the original."""
    m, feeds = rnn_model(op, direction="bidirectional", lens=LENS, h0=True, c0=True, peep=True)
    e = nx.to_onnx(nx.from_onnx(m))
    got = ort_run(e, {i.name: feeds[o.name] for i, o in zip(e.graph.input, m.graph.input)})
    want = ort_run(m, feeds)
    assert len(got) == len(want)
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)


def test_one_graph_serves_every_sequence_length() -> None:
    """T and the batch are symbols: the loop's trip count is a run-time value."""
    m, _ = rnn_model("LSTM", direction="bidirectional", h0=True, c0=True)
    for vi in list(m.graph.input) + list(m.graph.output):
        dims = vi.type.tensor_type.shape.dim
        if vi.name == "X":
            dims[0].dim_param, dims[1].dim_param = "T", "N"
        elif vi.name in ("initial_h", "initial_c"):
            dims[1].dim_param = "N"
    g = nx.from_onnx(m)
    rng = np.random.default_rng(5)
    for steps, batch in ((1, 2), (7, 3)):
        feeds = {i.name: rng.standard_normal([d.dim_value or {"T": steps, "N": batch}[d.dim_param]
                                              for d in i.type.tensor_type.shape.dim]).astype(np.float32)
                 for i in m.graph.input}
        got = g(*feeds.values())
        for a, b in zip(got, ort_run(m, feeds)):
            np.testing.assert_allclose(np.asarray(a), b, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("op", list(GATES))
def test_compiled_backends(op: str) -> None:
    """llvm and xla with every input (Y's rows go into a buffer of T rows, so xla also takes
    the reversal within sequence_lens that it refused on a stack grown in the loop)."""
    cases: list[tuple[str, dict[str, Any]]] = [
        ("llvm", {"direction": "bidirectional", "lens": LENS, "h0": True, "c0": True, "peep": True}),
        ("xla", {"direction": "bidirectional", "lens": LENS, "h0": True, "c0": True, "peep": True}),
        ("xla", {"direction": "bidirectional", "h0": True, "c0": True, "peep": True}),
        ("xla", {"direction": "forward", "lens": LENS}),
        ("xla", {"direction": "bidirectional", "lens": LENS, "outputs": ("Y_h",)}),
    ]
    for backend, kw in cases:
        require({"llvm": "llvmlite", "xla": "jax"}[backend], backend)
        m, feeds = rnn_model(op, **kw)
        got = nx.compile(nx.from_onnx(m), backend=backend)(*[feeds[i.name] for i in m.graph.input])
        got = got if isinstance(got, tuple) else (got,)
        want = ort_run(m, feeds)
        assert len(got) == len(want)
        for a, b in zip(got, want):
            np.testing.assert_allclose(np.asarray(a), b, rtol=1e-5, atol=1e-5)


def test_errors_name_the_problem() -> None:
    m, _ = rnn_model("RNN", activations=["Swish"])
    with pytest.raises(OnnxImportError, match="unknown activation 'Swish'"):
        nx.from_onnx(m)
    m, _ = rnn_model("GRU", direction="bidirectional", activations=["Sigmoid", "Tanh"])
    with pytest.raises(OnnxImportError, match="needs 4 activations"):
        nx.from_onnx(m)
    m, _ = rnn_model("RNN")
    m.graph.node[0].op_type = "GRU"  # W and R have the rows of one gate, GRU has three
    with pytest.raises(OnnxImportError, match="W needs 3 x 6 rows, it has 6"):
        nx.from_onnx(m)
    m, _ = rnn_model("LSTM", direction="bidirectional")
    next(a for a in m.graph.node[0].attribute if a.name == "direction").s = b"forward"
    with pytest.raises(OnnxImportError, match="needs 1 directions in W, it has 2"):
        nx.from_onnx(m)


# --- PyTorch: torch.nn.LSTM / GRU exported by torch.onnx.export --------------------------------


def _torch() -> Any:
    return require("torch", "torch")


def _export(model: Any, x: Any, dynamic: bool = False) -> bytes:
    torch = _torch()
    buf = io.BytesIO()
    axes = {"x": {0: "batch", 1: "steps"}} if dynamic else None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        # dynamo=False: the TorchScript exporter (as tests/test_onnx_torch.py), which needs no onnxscript
        torch.onnx.export(model, (x,), buf, dynamo=False, input_names=["x"], dynamic_axes=axes, opset_version=17)
    return buf.getvalue()


def _recurrent(kind: str) -> Any:
    torch = _torch()
    torch.manual_seed(0)
    cls = torch.nn.LSTM if kind == "LSTM" else torch.nn.GRU
    return cls(input_size=IN, hidden_size=HID, num_layers=2, bidirectional=True, batch_first=True).eval()


@pytest.mark.parametrize("kind", ["LSTM", "GRU"])
def test_torch_two_layer_bidirectional_matches_pytorch(kind: str) -> None:
    torch = _torch()

    class Net(torch.nn.Module):  # type: ignore[misc,name-defined]
        def __init__(self) -> None:
            super().__init__()
            self.rnn = _recurrent(kind)

        def forward(self, x: Any) -> Any:
            y, state = self.rnn(x)
            return (y, *state) if kind == "LSTM" else (y, state)

    net = Net().eval()
    data = _export(net, torch.randn(BATCH, STEPS, IN), dynamic=True)
    assert [n.op_type for n in onnx.load_from_string(data).graph.node].count(kind) == 2  # one node per layer
    g = nx.from_onnx(data)
    for batch, steps in ((BATCH, STEPS), (2, 1), (4, 9)):  # the batch and T are symbols of the graph
        x = torch.randn(batch, steps, IN)
        with torch.no_grad():
            want = net(x)
        got = g(x.numpy())
        assert len(got) == len(want)
        for a, b in zip(got, want):
            np.testing.assert_allclose(np.asarray(a), b.numpy(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("kind", ["LSTM", "GRU"])
def test_torch_gradient_matches_autograd(kind: str) -> None:
    """nx.grad through the imported two-layer bidirectional LSTM (GRU): d/dx sum(Y**2)."""
    torch = _torch()

    class Loss(torch.nn.Module):  # type: ignore[misc,name-defined]
        def __init__(self) -> None:
            super().__init__()
            self.rnn = _recurrent(kind)

        def forward(self, x: Any) -> Any:
            return (self.rnn(x)[0] ** 2).sum()

    net = Loss().eval()
    x = torch.randn(BATCH, STEPS, IN, requires_grad=True)
    g = nx.from_onnx(_export(net, x.detach()))
    net(x).backward()
    got = nx.grad(g)(x.detach().numpy())
    np.testing.assert_allclose(np.asarray(got), x.grad.numpy(), rtol=1e-4, atol=1e-5)  # type: ignore[union-attr]
