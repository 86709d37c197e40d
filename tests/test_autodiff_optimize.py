"""The gradient graph as it runs by default: optimised (GRADIENT_PIPELINE), with the
NumPy calls of its reverse step counted on a run (not timed), and gradients equal to
those of the unoptimised graph (bit for bit: the passes only fold exact identities and
hoist) and to PyTorch's."""

from __future__ import annotations

import numpy as np
import pytest

import nexus as nx
from nexus.autodiff.api import gradient_graph
from nexus.autodiff.counts import numpy_calls, reverse_blocks
from nexus.autodiff.examples import damped_loop, rnn
from nexus.backends.base import NexusRuntimeError
from nexus.ir import parse


def _rnn_args(T: int, batched: bool, dtype: type = np.float32) -> list:
    rng = np.random.default_rng(0)
    D, H, B = 6, 5, 3
    xs = rng.normal(size=(T, B, D) if batched else (T, D)).astype(dtype)
    return [xs, rng.normal(size=(H, D)).astype(dtype) / 3, rng.normal(size=(H, H)).astype(dtype) / 3,
            rng.normal(size=(B, H) if batched else (H,)).astype(dtype)]


# W4's RNN is the batched one.  The unbatched cell's dW is an outer product, which the
# MatMul rule builds from two Reshapes and a MatMul: 11 calls, not 10 (no Outer op yet).
@pytest.mark.parametrize("batched, limit", [(True, 2.0), (False, 2.2)])
def test_rnn_reverse_step_numpy_calls_at_most_twice_forward(batched: bool, limit: float) -> None:
    g = rnn(dtype="f32", batched=batched)
    gg = gradient_graph(g, (1, 2, 3), "ones")
    args = _rnn_args(12, batched)
    f1, r1 = numpy_calls(gg, *args, 4)
    f2, r2 = numpy_calls(gg, *args, 12)
    fwd, rev = (f2 - f1) / 8, (r2 - r1) / 8
    assert fwd == 5  # Gather, two MatMuls, Add, Tanh
    assert rev <= limit * fwd, (fwd, rev)


def test_rnn_reverse_step_has_no_zero_adds_or_invariant_transposes() -> None:
    gg = gradient_graph(rnn(dtype="f32", batched=True), (1, 2, 3), "ones")
    rev = reverse_blocks(gg)
    body = next(b for b in rev if any(n.op.name == "MatMul" for n in b.nodes))
    ops = sorted(n.op.name for n in body.nodes if n.op.name not in ("StackPop", "Proj", "Jmp"))
    # tanh': Mul, Sub, Mul; dh: MatMul with U itself; dU and dW: Transpose, MatMul, Add each;
    # then the loop header's reverse (no block code of its own): the test of its edge
    assert ops == sorted(["Mul", "Sub", "Mul", "MatMul", "Transpose", "MatMul", "Add", "Transpose",
                          "MatMul", "Add", "Equal", "Cond"])


@pytest.mark.parametrize("batched", [False, True])
@pytest.mark.parametrize("T", [0, 1, 7])
def test_optimised_gradient_graph_is_bit_identical(batched: bool, T: int) -> None:
    g = rnn(dtype="f64", batched=batched)
    args = [*_rnn_args(8, batched, np.float64), T]
    want = nx.run(gradient_graph(g, (1, 2, 3), "ones", optimize=False), *args)
    got = nx.run(gradient_graph(g, (1, 2, 3), "ones"), *args)
    for a, b in zip(got, want):
        assert np.asarray(a).tobytes() == np.asarray(b).tobytes()


def test_optimised_damped_loop_bit_identical_and_matches_torch() -> None:
    torch = pytest.importorskip("torch")
    from nexus.autodiff.examples import damped_python

    g = damped_loop("f64")
    rng = np.random.default_rng(3)
    x, w = rng.normal(size=5), rng.normal(size=5)
    for tol, big, cap in [(1e-3, 1e9, 20), (1e-3, 1e9, 3), (1e9, 1e9, 5)]:
        args = [x, w, np.float64(tol), np.float64(big), cap]
        want = nx.run(gradient_graph(g, (0, 1), "ones", optimize=False), *args, max_iterations=10_000)
        got = nx.run(gradient_graph(g, (0, 1), "ones"), *args, max_iterations=10_000)
        for a, b in zip(got, want):
            assert np.asarray(a).tobytes() == np.asarray(b).tobytes()
        xt, wt = torch.tensor(x, requires_grad=True), torch.tensor(w, requires_grad=True)
        damped_python(xt, wt, tol, big, cap).backward()
        np.testing.assert_allclose(got[1], xt.grad.numpy(), rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(got[2], wt.grad.numpy(), rtol=1e-10, atol=1e-12)


def test_stack_ops_inline_keep_their_meaning() -> None:
    g = parse("""
graph @s {
^entry:
  %0 = Start : (f32[2],)
  %x = Proj %0 {num = 0} : f32[2]
  %e = StackNew : stack
  %s1 = StackPush %e, %x : stack
  %p = StackPop %s1 {dtype = "f32"} : (stack, f32[2])
  %rest = Proj %p {num = 0} : stack
  %top = Proj %p {num = 1} : f32[2]
  %q = StackPop %rest {dtype = "f32"} : (stack, f32[2])
  %top2 = Proj %q {num = 1} : f32[2]
  %r = Return %top, %top2 : X
^exit(%r):
  End : X
}""")
    with pytest.raises(NexusRuntimeError, match="IndexError"):
        nx.run(g, np.ones(2, np.float32))


@pytest.mark.parametrize("batched", [False, True])
def test_rnn_reverse_takes_one_dispatch_per_iteration(batched: bool) -> None:
    # The loop header's reverse goes on from the body's (it pushes no block code): one
    # block code popped per iteration, not two (body, then header).
    from nexus.backends.python.trace import node_counts

    gg = gradient_graph(rnn(dtype="f32", batched=batched), (1, 2, 3), "ones")
    code = next(n for n in gg.nodes() if n.name == "block_code")
    runs = [node_counts(gg, *_rnn_args(12, batched), T)[code] for T in (4, 12)]
    assert (runs[1] - runs[0]) / 8 == 1, runs
