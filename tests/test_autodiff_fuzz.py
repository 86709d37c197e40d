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
from nexus.testing.grad_gen import Gen, fuzz


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
    (whose gradients the test above checks against torch): every one compiles and
    agrees.  The long run is ``python -m nexus.testing.grad_gen --count 1000 --backend xla``
    (or NEXUS_GRAD_FUZZ=1000 here)."""
    require("jax", "xla")
    outcomes, failures = fuzz(int(os.environ.get("NEXUS_GRAD_FUZZ", "8")), seed=7, backend="xla")
    assert not failures, "{}\nprogram {}: {}\n{}\n{}".format(dict(outcomes), *failures[0])
