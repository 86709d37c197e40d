"""Differential fuzzing of gradients: random differentiable @nx.script programs over
floats (branches on float conditions, for/while loops with data-dependent break and
continue, early returns, scalar-array broadcasting) must give the gradients of PyTorch
eager autograd running the same source, in both modes."""

from __future__ import annotations

import os
import random
import types
from typing import Any

import numpy as np
import pytest

import nexus as nx
from nexus.frontend.script import Tensor, script_source
from nexus.testing.extras import require

FLOATS, ARR = ["x", "y"], "v"


class Gen:
    """Writes one program ``f(x: float, y: float, v: Tensor) -> float``."""

    def __init__(self, rng: random.Random):
        self.rng = rng
        self.lines: list[str] = []
        self.n = 0

    def fexpr(self, d: int = 2) -> str:
        r = self.rng
        if d <= 0 or r.random() < 0.3:
            return r.choice(FLOATS + ["0.5", "-1.25", "1.5"])
        a = lambda: self.fexpr(d - 1)  # noqa: E731
        k = r.randrange(9)
        return [f"({a()} + {a()})", f"({a()} - {a()})", f"({a()} * {a()})", f"np.tanh({a()})",
                f"np.sin({a()})", f"({a()} * {r.choice(['0.5', '-0.75', '1.1'])})", f"np.exp(np.tanh({a()}))",
                f"({a()} / {r.choice(['2.0', '-3.0'])})", f"np.sum({self.aexpr(d - 1)}) * 0.25"][k]

    def aexpr(self, d: int = 1) -> str:
        r = self.rng
        if d <= 0 or r.random() < 0.4:
            return ARR
        a = lambda: self.aexpr(d - 1)  # noqa: E731
        return r.choice([f"({a()} * {self.fexpr(0)})", f"np.tanh({a()})", f"({a()} + {self.fexpr(0)})",
                         f"({a()} - {a()})"])

    def cond(self) -> str:
        return f"{self.fexpr(1)} {self.rng.choice(['<', '>'])} {self.fexpr(1)}"

    def assign(self, ind: str) -> None:
        if self.rng.random() < 0.25:
            self.lines.append(f"{ind}{ARR} = np.tanh({self.aexpr(1)})")
        else:
            self.lines.append(f"{ind}{self.rng.choice(FLOATS)} = np.tanh({self.fexpr()})")

    def block(self, ind: str, depth: int, in_loop: bool) -> None:
        for _ in range(self.rng.randint(1, 3)):
            k = self.rng.randrange(7 if depth < 2 else 2)
            if k <= 1:
                self.assign(ind)
            elif k == 2:
                self.lines.append(f"{ind}if {self.cond()}:")
                self.block(ind + "    ", depth + 1, in_loop)
                self.lines.append(f"{ind}else:")
                self.block(ind + "    ", depth + 1, in_loop)
            elif k == 3:
                self.n += 1
                self.lines.append(f"{ind}for i{self.n} in range({self.rng.randint(1, 4)}):")
                self.loop_body(ind + "    ", depth + 1)
            elif k == 4:
                self.n += 1
                c = f"c{self.n}"
                self.lines += [f"{ind}{c} = 0", f"{ind}while {c} < {self.rng.randint(1, 5)} and {self.cond()}:",
                               f"{ind}    {c} += 1"]
                self.loop_body(ind + "    ", depth + 1)
            elif k == 5 and in_loop:
                self.lines += [f"{ind}if {self.cond()}:", f"{ind}    {self.rng.choice(['break', 'continue'])}"]
            else:
                self.lines += [f"{ind}if {self.cond()}:", f"{ind}    return {self.fexpr()}"]

    def loop_body(self, ind: str, depth: int) -> None:
        self.assign(ind)
        if self.rng.random() < 0.5:  # a data-dependent exit or skip before the rest of the body
            self.lines += [f"{ind}if {self.cond()}:", f"{ind}    {self.rng.choice(['break', 'continue'])}"]
        self.block(ind, depth, True)

    def program(self) -> str:
        self.lines = ["def f(x: float, y: float, v: Tensor):"]
        self.block("    ", 0, False)
        self.lines.append(f"    return {self.fexpr()} + np.sum({ARR}) * y")
        return "\n".join(self.lines) + "\n"


def _torch_grads(src: str, x: float, y: float, v: np.ndarray) -> tuple[float, list[np.ndarray]]:
    torch = require("torch", "torch")
    def lift(fn: Any) -> Any:
        return lambda a: fn(torch.as_tensor(a, dtype=torch.float64))

    shim = types.SimpleNamespace(tanh=lift(torch.tanh), sin=lift(torch.sin), exp=lift(torch.exp),
                                 sum=lift(torch.sum))
    ns: dict[str, Any] = {"np": shim, "Tensor": object}
    exec(compile(src, "<fuzz>", "exec"), ns)  # noqa: S102  (our generated source)
    tx, ty = (torch.tensor(a, dtype=torch.float64, requires_grad=True) for a in (x, y))
    tv = torch.tensor(v, requires_grad=True)
    out = torch.as_tensor(ns["f"](tx, ty, tv), dtype=torch.float64)
    if out.requires_grad:
        out.backward()
    grads = [np.zeros(()) if t.grad is None else t.grad.numpy() for t in (tx, ty, tv)]
    return float(out.detach()), grads


def test_generator_makes_the_promised_constructs() -> None:
    text = "".join(Gen(random.Random(s)).program() for s in range(40))
    for construct in ("while ", "for ", "break", "continue", "    return np", "else:", "np.sum(v", "v = "):
        assert text.count(construct) >= 5, construct


@pytest.mark.parametrize("mode", ["graph", "tape"])
def test_random_programs_match_torch_autograd(mode: str) -> None:
    rng = random.Random(2026)
    checked = 0
    for k in range(40):
        src = Gen(rng).program()
        sf = script_source(src, "f", {"np": np, "Tensor": Tensor})
        for _ in range(2):
            x, y = rng.uniform(-2, 2), rng.uniform(-2, 2)
            v = np.array([rng.uniform(-1, 1) for _ in range(3)])
            want_value, want = _torch_grads(src, x, y, v)
            value, grads = nx.value_and_grad(sf, argnums=(0, 1, 2), mode=mode)(x, y, v)
            if abs(float(value) - want_value) > 1e-9 * (1 + abs(want_value)):
                continue  # a float condition decided differently by NumPy and PyTorch rounding
            for got, exp in zip(grads, want):
                np.testing.assert_allclose(got, exp, rtol=1e-7, atol=1e-10, err_msg=f"program {k}:\n{src}")
            checked += 1
    assert checked >= 60


def test_random_programs_have_the_same_gradients_on_xla() -> None:
    """The same gradient graphs compiled by the xla backend and run by the python backend
    (whose gradients the test above checks against torch).  NEXUS_GRAD_FUZZ=1000 is the long
    run."""
    require("jax", "xla")
    rng = random.Random(7)
    count = int(os.environ.get("NEXUS_GRAD_FUZZ", "6"))
    for k in range(count):
        src = Gen(rng).program()
        g = nx.value_and_grad(script_source(src, "f", {"np": np, "Tensor": Tensor}), argnums=(0, 1, 2))
        ref, xla = nx.compile(g, backend="python"), nx.compile(g, backend="xla")
        for _ in range(2):
            args = (rng.uniform(-2, 2), rng.uniform(-2, 2), np.array([rng.uniform(-1, 1) for _ in range(3)]))
            want, got = ref(*args), xla(*args)
            for a, b in zip(_flat(want), _flat(got)):
                np.testing.assert_allclose(b, a, rtol=1e-9, atol=1e-12, err_msg=f"program {k}:\n{src}")


def _flat(x: Any) -> list[Any]:
    return [y for v in x for y in _flat(v)] if isinstance(x, (tuple, list)) else [x]
