"""State ops (StateRead/StateWrite): text form, ordering by deps, passes that must leave
them alone, the python backend's order under parallel execution, and the errors (no
stream, backends that do not run them, autodiff, disagreeing states, bad snapshots).
Oracles: plain Python/NumPy counters and sums computed beside the stream."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import nexus as nx
from nexus import Tensor
from nexus.autodiff.graph_mode import GradError
from nexus.backends.base import StateOpsUnsupportedError
from nexus.backends.python.plan import kahn_groups
from nexus.frontend.dsl import DSLError
from nexus.frontend.script.errors import ScriptError
from nexus.ir.tensorio import LoadError
from nexus.ops.state import StateError
from nexus.testing.extras import require

TEXT = """graph @acc {
^entry:
  %0 = Start : (f32[4],)
  %x = Proj %0 {num = 0} : f32[4]
  %init = Constant {value = tensor<f32[4]: [1.0, 1.0, 1.0, 1.0]>} : f32[4]
  %old = StateRead %init {name = "h"} : f32[4]
  %new = Add %old, %x : f32[4]
  %w = StateWrite %new {name = "h"} deps(%old) : f32[4]
  %again = StateRead %init {name = "h"} deps(%w) : f32[4]
  %r = Return %old, %again : X
^exit(%r):
  End : X
}
"""


def test_text_form_parses_runs_and_round_trips() -> None:
    g = nx.parse(TEXT)
    nx.verify(g)
    again = nx.parse(nx.print_graph(g))
    assert nx.structurally_equal(g, again)
    reads = [n for n in again.nodes() if n.op.name == "StateRead"]
    assert [d.op.name for d in reads[1].deps] == ["StateWrite"]
    s = nx.stream(again)
    x = np.array([1, 2, 3, 4], np.float32)
    old, new = s.step(x)
    np.testing.assert_array_equal(old, [1, 1, 1, 1])  # init before the first write
    np.testing.assert_array_equal(new, 1 + x)
    old, new = s.step(x)
    np.testing.assert_array_equal(old, 1 + x)
    np.testing.assert_array_equal(new, 1 + 2 * x)


def test_type_rule_errors() -> None:
    with pytest.raises(nx.ParseError, match="missing required attribute 'name'"):
        nx.parse(TEXT.replace(' {name = "h"} deps(%w)', " deps(%w)"))
    bad = nx.parse(TEXT.replace('{name = "h"} deps(%old)', '{name = ""} deps(%old)'))
    with pytest.raises(nx.VerifyError, match="state name must not be empty"):
        nx.verify(bad)


def _counter() -> tuple[nx.Graph, nx.State]:
    """A loop that adds 1.0 to a state n times; returns the state after the loop."""
    c = nx.state("c", np.zeros((), np.float64))
    with nx.function("count", n=("i64", ())) as f:
        i = nx.constant(0, dtype="i64")
        with nx.while_loop(lambda: i < f.args[0]):
            c.assign(c.read() + 1.0)
            c.read()  # an unused read: DCE must keep it (it is an effect's position)
            i = i + 1
        f.returns(c.read())
    return f.graph, c


@pytest.mark.parametrize("pipeline", ["constfold", "cse", "dce", "licm", "constfold,cse,licm,dce,simplifycfg",
                                      None])
def test_passes_leave_state_ops_alone(pipeline: str | None) -> None:
    g, _ = _counter()
    before = sorted((n.op.name, n.block.name if n.block else "") for n in g.nodes() if n.op.kind == "state")
    nx.optimize(g, pipeline, verify_each=True)
    after = sorted((n.op.name, n.block.name if n.block else "") for n in g.nodes() if n.op.kind == "state")
    # Not merged (CSE), removed (DCE), folded (constfold) or hoisted out of the loop (LICM).
    assert after == before
    s = nx.stream(g)
    total = 0.0
    for n in (3, 0, 5):
        total += n  # the oracle: a Python counter
        assert s.step(n) == total


# Reads without deps (the first state op of their block) that a pass treating them as
# pure would merge (CSE: %r2 with %r1, across the write), remove (DCE: %unused) or fold
# (constfold: to %init).
BRANCHY = """graph @branchy {
^entry:
  %0 = Start : (f64, bool)
  %x = Proj %0 {num = 0} : f64
  %c = Proj %0 {num = 1} : bool
  %init = Constant {value = tensor<f64: 0.0>} : f64
  %r1 = StateRead %init {name = "s"} : f64
  %w = StateWrite %x {name = "s"} deps(%r1) : f64
  %br = Cond %c : (X, X)
  %no = Proj %br {num = 0} : X
  %yes = Proj %br {num = 1} : X
^then(%yes):
  %unused = StateRead %init {name = "s"} : f64
  %j1 = Jmp : X
^other(%no):
  %j2 = Jmp : X
^join(%j1, %j2):
  %r2 = StateRead %init {name = "s"} : f64
  %r = Return %r1, %r2 : X
^exit(%r):
  End : X
}
"""


@pytest.mark.parametrize("pipeline", ["cse", "dce", "constfold", "licm", "simplifycfg", "constfold,cse,dce"])
def test_passes_keep_reads_without_deps(pipeline: str) -> None:
    g = nx.parse(BRANCHY)
    nx.optimize(g, pipeline, verify_each=True)
    assert sum(n.op.name == "StateRead" for n in g.nodes()) == 3
    s = nx.stream(g)
    prev = 0.0
    for x, c in ((1.5, True), (2.5, False), (-4.0, True)):
        assert s.step(x, c) == (prev, x)  # the oracle: the value before, then the one written
        prev = x


def test_state_ops_are_chained_in_program_order() -> None:
    g, _ = _counter()
    body = next(b for b in g.blocks if sum(n.op.kind == "state" for n in b.members) == 3)
    ops = [n for n in body.members if n.op.kind == "state"]
    assert [d for n in ops for d in n.deps] == ops[:-1]
    groups = kahn_groups([n for n in body.members if n.op.kind not in ("phi",) and n.op.name != "Jmp"], body)
    order = [n for grp in groups for n in grp if n.op.kind == "state"]
    assert order == ops  # each in its own later group


def test_parallel_backend_runs_state_ops_in_order() -> None:
    # Heavy independent products in one block go to the thread pool; the state ops among
    # them must still see each other's effects in program order.
    a = nx.state("a", np.zeros((64, 64)))
    with nx.function("par", x=("f64", (64, 64))) as f:
        x = f.args[0]
        first = a.read()
        prods = [nx.matmul(x, x + float(k)) for k in range(4)]
        a.assign(prods[0])
        seen = a.read()
        a.assign(prods[1] + prods[2] + prods[3])
        f.returns(first, seen, a.read())
    s = nx.stream(f, parallel=True)
    rng = np.random.default_rng(0)
    prev = np.zeros((64, 64))
    for _ in range(3):
        x = rng.normal(size=(64, 64))
        p = [x @ (x + k) for k in range(4)]
        first, seen, last = s.step(x)
        np.testing.assert_allclose(first, prev)
        np.testing.assert_allclose(seen, p[0])
        np.testing.assert_allclose(last, p[1] + p[2] + p[3])
        prev = last


def test_running_without_a_stream_names_the_op() -> None:
    g = nx.parse(TEXT)
    with pytest.raises(nx.NexusRuntimeError, match=r"StateRead %old.*outside a stream.*nx.stream"):
        g(np.zeros(4, np.float32))


@pytest.mark.parametrize("backend,module,extra", [("xla", "jax", "xla"), ("llvm", "llvmlite", "llvm")])
def test_backends_without_state_refuse(backend: str, module: str, extra: str) -> None:
    require(module, extra)
    g = nx.parse(TEXT)
    with pytest.raises(StateOpsUnsupportedError, match=f"backend '{backend}' does not run state ops: StateRead %old"):
        nx.compile(g, backend=backend)
    with pytest.raises(StateOpsUnsupportedError):
        nx.stream(g, backend=backend)


def test_grad_refuses_state() -> None:
    g = nx.parse(TEXT)
    with pytest.raises(GradError, match="StateRead %old of state 'h'.*not supported"):
        nx.vjp(g, np.ones(4, np.float32))
    with pytest.raises(GradError, match="StateRead %old"):
        nx.vjp(g, np.ones(4, np.float32), mode="tape")
    with pytest.raises(GradError, match="StateRead %old"):
        nx.grad(nx.parse(TEXT.replace("%r = Return %old, %again", "%r = Return %sum").replace(
            "  %r =", "  %sum = ReduceSum %again : f32\n  %r =")))(np.ones(4, np.float32))


def test_states_of_one_name_must_agree() -> None:
    a = nx.state("s", np.zeros(3, np.float32))
    b = nx.state("s", np.zeros(3, np.float64))
    with nx.function("bad") as f:
        f.returns(a.read(), b.read())
    with pytest.raises(StateError, match="state 's' is f32\\[3\\] .* but f64\\[3\\]"):
        nx.stream(f)


def test_dsl_assign_of_another_type_is_refused() -> None:
    a = nx.state("s", np.zeros(3, np.float32))
    with pytest.raises(DSLError, match="state 's' is f32\\[3\\], the value assigned is f32\\[4\\]"):
        with nx.function("bad"):
            a.assign(np.zeros(4, np.float32))


def test_script_state_spellings_and_errors() -> None:
    total = nx.state("total", np.zeros(3))

    @nx.script
    def module_level(x: Tensor[3]):  # type: ignore[no-untyped-def]
        total.assign(total.read() + x)
        return total.read()

    @nx.script
    def argument(x: Tensor[3], *, t=nx.state("total", np.zeros(3))):  # type: ignore[no-untyped-def]  # noqa: B008
        t.assign(t.read() + x)
        return t.read()

    for fn in (module_level, argument):
        s = nx.stream(fn)
        acc = np.zeros(3)
        for k in range(4):
            x = np.arange(3.0) + k
            acc = acc + x  # the oracle
            np.testing.assert_array_equal(s.step(x), acc)

    with pytest.raises(ScriptError, match="keyword-only parameter `t` must declare a state"):
        @nx.script
        def not_a_state(x, *, t=1.0):  # type: ignore[no-untyped-def]
            return x

    @nx.script
    def wrong_shape(x: Tensor[4]):  # type: ignore[no-untyped-def]
        total.assign(x)
        return x

    with pytest.raises(ScriptError, match="state 'total' is f64\\[3\\], the value assigned is f64\\[4\\]"):
        nx.stream(wrong_shape).step(np.zeros(4))


def test_a_failed_step_leaves_the_state_unchanged() -> None:
    c = nx.state("c", np.zeros((), np.float64))

    @nx.script
    def add_small(x: float):  # type: ignore[no-untyped-def]
        c.assign(c.read() + x)
        assert x < 10.0, "too big"
        return c.read()

    s = nx.stream(add_small)
    assert s.step(1.0) == 1.0
    with pytest.raises(AssertionError, match="too big"):
        s.step(20.0)
    assert s.snapshot() == {"c": 1.0}
    assert s.step(2.0) == 3.0


def test_restore_and_load_check_the_state(tmp_path: Path) -> None:
    s = nx.stream(nx.parse(TEXT))
    with pytest.raises(StateError, match="has no state 'nope'"):
        s.restore({"nope": np.zeros(4, np.float32)})
    with pytest.raises(StateError, match="state 'h' is f32\\[4\\], its value has shape \\[5\\]"):
        s.restore({"h": np.zeros(5, np.float32)})
    with pytest.raises(StateError, match="its value has dtype float64"):
        s.restore({"h": np.zeros(4)})
    s.step(np.ones(4, np.float32))
    s.save(tmp_path / "acc.nx")
    loaded = nx.load_stream(tmp_path / "acc.nx")
    np.testing.assert_array_equal(loaded.snapshot()["h"], [2, 2, 2, 2])
    (tmp_path / "acc.nx.state.safetensors").unlink()
    with pytest.raises(LoadError, match="no saved state"):
        nx.load_stream(tmp_path / "acc.nx")


def test_a_script_calling_a_stateful_script_keeps_the_order() -> None:
    acc = nx.state("acc", np.zeros(2))

    @nx.script
    def bump(x: Tensor[2]):  # type: ignore[no-untyped-def]
        acc.assign(acc.read() + x)
        return acc.read()

    @nx.script
    def outer(x: Tensor[2]):  # type: ignore[no-untyped-def]
        acc.assign(acc.read() * 2.0)  # must run before bump's read, though bump needs only x
        after = bump(x)
        return after + acc.read()

    s = nx.stream(outer)
    a = np.zeros(2)
    for k in range(3):
        x = np.array([1.0, -1.0]) * (k + 1)
        a = a * 2.0 + x  # the oracle
        np.testing.assert_array_equal(s.step(x), 2 * a)
    call = next(n for n in s.graph.nodes() if n.op.name == "Call")
    assert [d.op.name for d in call.deps] == ["StateWrite"]
    inlined, _ = s.graph.clone()
    nx.optimize(inlined, "inline,cse,dce", verify_each=True)  # deps on the Call become control order
    assert not any(n.op.name == "Call" for n in inlined.nodes())
    s2, a = nx.stream(inlined), np.zeros(2)
    for k in range(3):
        x = np.array([1.0, -1.0]) * (k + 1)
        a = a * 2.0 + x
        np.testing.assert_array_equal(s2.step(x), 2 * a)
