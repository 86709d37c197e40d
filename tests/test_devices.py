"""Placement and devices (seed 001, section 4.2): ``with nx.device(...)`` in the DSL and in
scripts, the placement pass (Memcpy on crossing edges, loop back edges included), the
torch devices of the python backend against NumPy and torch.nn.functional, and the comm
ops in a world of one rank."""

from __future__ import annotations

import numpy as np
import pytest

import nexus as nx
from nexus.backends.base import NexusRuntimeError
from nexus.ir.opdef import OpTypeError, get_op
from nexus.ir.types import DTYPES, TensorType
from nexus.passes.placement import Place, PlacementError, canonical_device, needs_placement
from nexus.testing.extras import require

torch = require("torch", "torch")

from nexus.backends.python import devices  # noqa: E402  (after the torch check)
from nexus.distributed import examples  # noqa: E402

R = np.random.default_rng(7)


def _strip(g: nx.Graph) -> nx.Graph:
    """A copy of ``g`` with every placement removed: the single-device program."""
    text = nx.print_graph(g)
    import re

    text = re.sub(r'device = "[^"]*"(, )?', "", text).replace(" {}", "")
    return nx.parse(text)


def _ops(g: nx.Graph) -> list[str]:
    return [n.op.name for n in g.nodes()]


# --- example 1 ------------------------------------------------------------------------------
def _torch_oracle(raw: np.ndarray, w: dict[str, np.ndarray], size: int = 8) -> tuple[np.ndarray, np.ndarray]:
    import torch.nn.functional as F

    x = torch.tensor(raw, dtype=torch.float32)
    x = F.interpolate(x, size=(size, size), mode="bilinear", align_corners=False) / 255.0
    h = F.max_pool2d(F.relu(F.conv2d(x, torch.tensor(w["w1"]), torch.tensor(w["b1"]), padding=1)), 2)
    logits = h.flatten(1) @ torch.tensor(w["w2"]) + torch.tensor(w["b2"])
    return logits.numpy(), logits.argmax(1).numpy()


def test_seed_example1_cpu_preprocessing_then_cnn_on_the_torch_device() -> None:
    raw = R.integers(0, 256, size=(3, 3, 16, 16)).astype(np.uint8)
    w = examples.cnn_weights()
    g = examples.preprocess_then_cnn(raw, w, "/TORCH:0")
    before = dict(devices.FALLBACKS)
    logits, pred = g()
    assert dict(devices.FALLBACKS) == before, "a CNN op ran through NumPy on the torch device"
    single_logits, single_pred = _strip(g)()  # the same program on one device
    np.testing.assert_allclose(logits, single_logits, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(pred, single_pred)
    want_logits, want_pred = _torch_oracle(raw, w)
    np.testing.assert_allclose(logits, want_logits, rtol=1e-4, atol=1e-5)
    np.testing.assert_array_equal(pred, want_pred)
    assert isinstance(logits, np.ndarray) and isinstance(pred, np.ndarray)  # back on /CPU:0

    # The Memcpy is in the graph (text form, and after a round trip) and in the picture.
    assert needs_placement(g)
    assert nx.place(g) == {"memcpy": 3}  # in: the normalised images; out: the two results
    assert not needs_placement(g) and Place().apply(g) == {}  # idempotent
    text = nx.print_graph(g)
    assert 'Memcpy %normalized {device = "/TORCH:0", src = "/CPU:0"}' in text
    assert structural_text(nx.parse(text)) == structural_text(g)
    np.testing.assert_allclose(nx.parse(text)()[0], want_logits, rtol=1e-4, atol=1e-5)
    from nexus.viz.dot import DEVICE_FILLS, TRANSFER_FILL

    dot = nx.to_dot(g)
    memcpy = [line for line in dot.splitlines() if "Memcpy" in line]
    assert len(memcpy) == 3 and all(TRANSFER_FILL in line and "@/" in line for line in memcpy)
    conv = next(line for line in dot.splitlines() if '"Conv' in line)
    assert DEVICE_FILLS["TORCH"] in conv and "@/TORCH:0" in conv


def structural_text(g: nx.Graph) -> str:
    return nx.print_graph(g)


def test_seed_example1_on_a_gpu() -> None:
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device on this machine (torch.cuda.is_available() is False)")
    raw = R.integers(0, 256, size=(2, 3, 16, 16)).astype(np.uint8)
    w = examples.cnn_weights()
    logits, pred = examples.preprocess_then_cnn(raw, w, "/GPU:0")()
    want_logits, want_pred = _torch_oracle(raw, w)
    np.testing.assert_allclose(logits, want_logits, rtol=1e-3, atol=1e-4)
    np.testing.assert_array_equal(pred, want_pred)


# --- the pass -------------------------------------------------------------------------------
def test_memcpy_across_a_loop_back_edge_goes_in_the_latch() -> None:
    """acc lives on the torch device, the loop counter on the CPU; the value entering the
    loop comes from the CPU.  The copies go where the edges leave, not in the header."""
    with nx.function("loop", x=("f32", (3,))) as f:
        (x,) = f.args
        acc = nx.mul(x, 1.0)  # on /CPU:0
        i = nx.constant(0, dtype="i64")
        with nx.while_loop(lambda: nx.less(i, 4)):
            with nx.device("/TORCH:0"):
                acc = nx.add(nx.tanh(acc), x, name="step")
            i = nx.add(i, 1)
        f.returns(acc)
    g = f.graph
    x = R.standard_normal(3).astype(np.float32)
    want = x * 1.0
    for _ in range(4):
        want = np.tanh(want) + x
    np.testing.assert_allclose(g(x), want, rtol=1e-6)
    stats = nx.place(g)
    nx.verify(g)
    header = next(b for b in g.blocks if b.phis and any(p.type.shape == (3,) for p in b.phis))
    copies = [n for n in g.nodes() if n.op.name == "Memcpy"]
    assert stats["memcpy"] == len(copies) >= 2
    assert all(n.block is not header for n in copies)
    back = [n for n in copies if n.attrs["device"] == "/CPU:0" and n.input(0).name == "step"]
    assert back and back[0].block in header.pred_blocks  # the latch copies back
    np.testing.assert_allclose(g(x), want, rtol=1e-6)


def test_constants_are_materialised_on_each_device_not_copied() -> None:
    with nx.function("c", x=("f32", (2,))) as f:
        (x,) = f.args
        k = nx.constant(np.array([2.0, 3.0], np.float32))
        a = nx.mul(x, k)
        with nx.device("/TORCH:0"):
            b = nx.mul(a, k)
        f.returns(b)
    g = f.graph
    stats = nx.place(g)
    assert stats == {"memcpy": 2, "constants": 1}
    consts = [n for n in g.nodes() if n.op.name == "Constant"]
    assert sorted(str(c.attrs.get("device")) for c in consts) == ["/TORCH:0", "None"]
    np.testing.assert_allclose(g(np.array([1.0, 2.0], np.float32)), [4.0, 18.0])


def test_device_names_and_errors() -> None:
    assert canonical_device("gpu:1") == "/GPU:1" and canonical_device("/torch:0") == "/TORCH:0"
    with pytest.raises(PlacementError, match=r"unknown device '/TPU:0'.*/CPU:k"):
        canonical_device("/TPU:0")
    with nx.function("bad", x=("f32", (2,))) as f:
        (x,) = f.args
        with nx.device("/TPU:0"):
            y = nx.neg(x)
        f.returns(y)
    with pytest.raises(NexusRuntimeError, match=r"graph @bad: Neg .*test_devices.py.*: unknown device '/TPU:0'"):
        f.graph(np.zeros(2, np.float32))


def test_unplaced_graphs_take_the_ordinary_path() -> None:
    """No placement: the generated code is the NumPy code (operators, no device kernels)."""
    from nexus.backends.python.interpreter import source

    with nx.function("plain", x=("f32", (2,))) as f:
        (x,) = f.args
        f.returns(nx.add(nx.mul(x, x), 1.0))
    assert not needs_placement(f.graph)
    assert source(f.graph) == (
        "def _nexus_plain(_lim, a0, *, k0=_K0):\n"
        "    v2 = a0 * a0  # Mul %?\n"
        "    del a0\n"
        "    v3 = v2 + k0  # Add %?\n"
        "    del v2\n"
        "    return v3\n")
    with nx.function("placed", x=("f32", (2,))) as f:
        (x,) = f.args
        with nx.device("/TORCH:0"):
            y = nx.add(nx.mul(x, x), 1.0)
        f.returns(y)
    src = source(f.graph)  # device kernels, the copies in and out
    assert "_f4(v3, v3)  # Mul" in src and src.count("# Memcpy") == 2


def test_machine_scope_sets_the_attribute_and_one_process_runs_all_machines() -> None:
    with nx.function("two", x=("f32", (2,))) as f:
        (x,) = f.args
        with nx.machine("host0"):
            y = nx.exp(x)
        with nx.machine("host1"), nx.device("/TORCH:0"):
            z = nx.mul(y, 2.0)
        f.returns(z)
    g = f.graph
    placed = {n.op.name: dict(n.attrs) for n in g.nodes() if n.op.name in ("Exp", "Mul")}
    assert placed["Exp"]["machine"] == "host0"
    assert placed["Mul"]["machine"] == "host1" and placed["Mul"]["device"] == "/TORCH:0"
    x = np.array([0.5, -1.0], np.float32)
    np.testing.assert_allclose(g(x), np.exp(x) * 2, rtol=1e-6)


# --- @nx.script -----------------------------------------------------------------------------
@nx.script
def _scripted(x: nx.Tensor, n: int) -> nx.Tensor:
    y = x * 2.0
    with nx.device("/TORCH:0"):
        for _ in range(n):
            y = nx.tanh(y) + x
    return y


def test_script_with_device() -> None:
    x = R.standard_normal(4).astype(np.float32)
    want = x * 2.0
    for _ in range(3):
        want = np.tanh(want) + x
    np.testing.assert_allclose(_scripted(x, 3), want, rtol=1e-6)
    g = _scripted.graph
    assert {n.attrs.get("device") for n in g.nodes() if n.op.name in ("Tanh", "Add")} == {"/TORCH:0"}
    assert all(n.attrs.get("device") is None for n in g.nodes() if n.op.name == "Mul")


def test_script_rejects_other_context_managers() -> None:
    def uses_open(x: nx.Tensor) -> nx.Tensor:
        with open("f") as fh:  # noqa: F841
            x = x + 1.0
        return x

    with pytest.raises(nx.ScriptError, match=r"(?s)`with` statements are not supported, except placement.*nx.device"):
        nx.script(uses_open)(np.zeros(2))


# --- torch kernels against the NumPy reference kernels ---------------------------------------
def f32(*shape: int) -> np.ndarray:
    return R.standard_normal(shape).astype(np.float32)


KERNEL_CASES: list[tuple[str, list[np.ndarray], dict]] = [
    *[(op, [f32(2, 3), f32(3)], {}) for op in ("Add", "Sub", "Mul", "Maximum", "Minimum", "Less", "Greater",
                                              "Equal", "LessEqual", "GreaterEqual", "NotEqual")],
    ("Div", [f32(2, 3), f32(3) + 3], {}),
    ("Div", [np.array([7, -7, 9], np.int32), np.array([2, 2, -4], np.int32)], {}),
    *[(op, [f32(5)], {}) for op in ("Neg", "Abs", "Exp", "Tanh", "Relu", "Sigmoid", "Floor", "Ceil", "Sign",
                                   "Sin", "Cos", "Erf")],
    ("Sqrt", [np.abs(f32(5))], {}), ("Log", [np.abs(f32(5)) + 0.1], {}), ("Rsqrt", [np.abs(f32(5)) + 0.1], {}),
    ("Reciprocal", [f32(5) + 5], {}), ("Pow", [np.abs(f32(4)), f32(4)], {}),
    ("And", [np.array([True, False, True]), np.array([True, True, False])], {}),
    ("Not", [np.array([True, False])], {}),
    ("Where", [np.array([True, False, True]), f32(3), f32(3)], {}),
    ("MatMul", [f32(2, 3), f32(3, 4)], {}), ("MatMul", [f32(2, 2, 3), f32(3)], {}),
    ("Gemm", [f32(3, 2), f32(4, 3), f32(4)], {"transA": True, "transB": True, "alpha": 0.5, "beta": 2.0}),
    ("ReduceSum", [f32(2, 3, 4)], {"axes": (0, 2), "keepdims": True}),
    ("ReduceMean", [f32(2, 3)], {"axes": (-1,)}), ("ReduceMax", [f32(2, 3)], {}),
    ("ReduceMin", [f32(2, 3)], {"axes": (0,)}),
    ("ArgMax", [np.array([[1, 3, 3], [2, 2, 0]], np.float32)], {"axis": 1}),
    ("ArgMax", [np.array([[1, 3, 3], [2, 2, 0]], np.float32)], {"axis": 1, "select_last_index": True}),
    ("ArgMin", [f32(3, 4)], {"axis": 0, "keepdims": True}),
    ("Reshape", [f32(2, 3, 4), np.array([6, -1], np.int64)], {}),
    ("Flatten", [f32(2, 3, 4)], {"axis": 2}), ("Transpose", [f32(2, 3, 4)], {"perm": (1, 2, 0)}),
    ("Transpose", [f32(2, 3)], {}),
    ("Softmax", [f32(2, 5)], {"axis": 1}), ("LogSoftmax", [f32(2, 5)], {"axis": 0}),
    ("Cast", [f32(4) * 10], {"to": "i32"}), ("Identity", [f32(3)], {}),
    ("Conv", [f32(1, 4, 6, 6), f32(6, 2, 3, 3), f32(6)], {"pads": (1, 1, 1, 1), "strides": (2, 1), "group": 2}),
    ("Conv", [f32(2, 2, 7), f32(3, 2, 2)], {"dilations": (2,)}),
    ("Conv", [f32(1, 1, 5, 5), f32(1, 1, 3, 3)], {"pads": (0, 1, 2, 1)}),  # asymmetric: through NumPy
    ("MaxPool", [f32(1, 2, 5, 5)], {"kernel_shape": (3, 3), "strides": (2, 2), "pads": (1, 1, 1, 1)}),
    ("AveragePool", [f32(1, 2, 4, 4)], {"kernel_shape": (2, 2), "strides": (2, 2)}),
    ("AveragePool", [f32(1, 2, 4, 4)], {"kernel_shape": (3, 3), "pads": (1, 1, 1, 1)}),  # through NumPy
]


def _dtype(a: np.ndarray) -> str:
    return next(k for k, v in DTYPES.items() if np.dtype(v) == a.dtype)


@pytest.mark.parametrize(("op", "inputs", "attrs"), KERNEL_CASES,
                         ids=[f"{c[0]}-{i}" for i, c in enumerate(KERNEL_CASES)])
def test_torch_kernel_matches_the_reference(op: str, inputs: list[np.ndarray], attrs: dict) -> None:
    opdef = get_op(op)
    assert opdef.kernel is not None
    want = opdef.kernel(*inputs, **opdef.complete_attrs(attrs))
    g = nx.Graph("k", [TensorType(_dtype(a), a.shape) for a in inputs])
    node = g.add(op, list(g.args), g.start_block, {**attrs, "device": "/TORCH:0"})
    g.add("Return", [node], g.start_block)
    g.end_block.append_input(g.start_block.terminator)
    got = g(*inputs)
    assert isinstance(got, (np.ndarray, np.generic))
    assert np.asarray(got).dtype == np.asarray(want).dtype and np.shape(got) == np.shape(want)
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=2e-6)


def test_memcpy_moves_between_libraries() -> None:
    x = f32(2, 3)
    t = devices.to_device(x, "/TORCH:0")
    assert isinstance(t, torch.Tensor) and t.dtype == torch.float32
    back = devices.to_device(t, "/CPU:0")
    assert isinstance(back, np.ndarray) and back is not x
    np.testing.assert_array_equal(back, x)
    scalar = devices.to_device(torch.tensor(2.5), "/CPU:0")
    assert isinstance(scalar, np.generic) and scalar == 2.5


# --- comm ops in a world of one rank --------------------------------------------------------
def test_collectives_of_one_rank_return_their_input() -> None:
    with nx.function("one", x=("f32", (2, 4))) as f:
        (x,) = f.args
        f.returns(nx.all_reduce(x), nx.all_gather(x, axis=1, group="0"), nx.broadcast(x),
                  nx.reduce_scatter(x, axis=1, group="0"))
    x = f32(2, 4)
    for out in f.graph(x):
        np.testing.assert_array_equal(out, x)


def test_recv_without_a_send_is_one_clear_error() -> None:
    """A world of one rank runs every machine: a Send reaches the Recv of its tag in this
    process, and a Recv nothing was sent to says how to run on several ranks."""
    with nx.function("lonely") as f:
        f.returns(nx.recv(peer=1, tag=4, dtype="f32", shape=[2]))
    with pytest.raises(NexusRuntimeError, match=r"Recv .*: Recv tag 4: .*needs several ranks.*tag 4.*torchrun"):
        f.graph()
    g = nx.parse("""graph @loopback {
^entry:
  %0 = Start : (f32[2],)
  %x = Proj %0 {num = 0} : f32[2]
  %sent = Send %x {peer = 1, tag = 5} : bool
  %got = Recv {peer = 0, tag = 5, dtype = "f32", shape = [2]} deps(%sent) : f32[2]
  %r = Return %sent, %got : X
^exit(%r):
  End : X
}""")
    x = np.array([1.0, -2.0], np.float32)
    token, got = g(x)
    assert bool(token) and got is not x
    np.testing.assert_array_equal(got, x)


def test_comm_type_rules() -> None:
    t = TensorType("f32", (4, 6))
    assert get_op("AllGather").rule_output([t], get_op("AllGather").complete_attrs({"group": "0,1,2"}), [None]) \
        == TensorType("f32", (12, 6))
    rs = get_op("ReduceScatter")
    assert rs.rule_output([t], rs.complete_attrs({"group": "0,1", "axis": 1}), [None]) == TensorType("f32", (4, 3))
    with pytest.raises(OpTypeError, match=r"dim 0 \(4\) is not divisible by the group's 3 ranks"):
        rs.rule_output([t], rs.complete_attrs({"group": "0,1,2"}), [None])
    ar = get_op("AllReduce")
    with pytest.raises(OpTypeError, match=r"op must be one of sum, mean"):
        ar.rule_output([t], ar.complete_attrs({"op": "avg"}), [None])
    with pytest.raises(OpTypeError, match=r"group must be a comma-separated list of ranks"):
        ar.rule_output([t], ar.complete_attrs({"group": "all"}), [None])
    recv = get_op("Recv")
    assert recv.rule_output([], recv.complete_attrs({"peer": 0, "dtype": "i32", "shape": [2, 3]}), []) \
        == TensorType("i32", (2, 3))


@pytest.mark.parametrize("mode", ["graph", "tape"])
def test_gradients_through_a_placed_graph(mode: str) -> None:
    """Memcpy's VJP copies the cotangent back; the gradient equals the analytic one."""
    with nx.function("l", x=("f32", (4,))) as f:
        (x,) = f.args
        with nx.device("/TORCH:0"):
            y = nx.reduce_sum(nx.mul(nx.tanh(x), x))
        f.returns(y)
    g = f.graph
    assert nx.place(g) == {"memcpy": 2}
    x = R.standard_normal(4).astype(np.float32)
    want = np.tanh(x) + x * (1 - np.tanh(x) ** 2)
    np.testing.assert_allclose(nx.grad(g, mode=mode)(x), want, rtol=1e-5)
    from nexus.autodiff.graph_mode import vjp_graph

    back = [dict(n.attrs) for n in vjp_graph(g, (0,), "ones").nodes() if n.op.name == "Memcpy"]
    assert {"src": "/TORCH:0", "device": "/CPU:0"} in back and {"src": "/CPU:0", "device": "/TORCH:0"} in back
