"""One table of op names for both frontends: every ``nx.<name>`` that works on the module
in the DSL works inside ``@nx.script`` and names the same op; aliases agree with NumPy's
function of that name."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import nexus as nx
from nexus.frontend.script.calls import op_for_name
from nexus.ir.opdef import all_ops
from nexus.ir.types import dtype_of

rng = np.random.default_rng(0)
X = rng.uniform(0.5, 2.0, (3, 4)).astype(np.float32)
Y = rng.uniform(0.5, 2.0, (3, 4)).astype(np.float32)
P = rng.uniform(-1.0, 1.0, (3, 4)) > 0
Q = rng.uniform(-1.0, 1.0, (3, 4)) > 0
FUNCTION_OPS = [o for o in all_ops().values() if o.kind == "data" and o.name != "Constant"]


def run_dsl(expr: str, args: tuple[np.ndarray, ...]) -> Any:
    params = ", ".join(f"a{i}" for i in range(len(args)))
    ns: dict[str, Any] = {"nx": nx}
    exec(f"def f({params}):\n    return {expr}\n", ns)  # noqa: S102  (test source)
    types = {f"a{i}": (dtype_of(a.dtype), a.shape) for i, a in enumerate(args)}
    return nx.graph(**types)(ns["f"])(*args)


def run_script(expr: str, args: tuple[np.ndarray, ...]) -> Any:
    params = ", ".join(f"a{i}" for i in range(len(args)))
    return nx.script_source(f"def f({params}):\n    return {expr}\n", "f", {"nx": nx})(*args)


# alias -> (the nx call, its arguments, NumPy's function of that name on them)
ALIAS_CASES: dict[str, tuple[str, tuple[np.ndarray, ...], Callable[..., Any]]] = {
    "subtract": ("nx.subtract(a0, a1)", (X, Y), np.subtract),
    "multiply": ("nx.multiply(a0, a1)", (X, Y), np.multiply),
    "divide": ("nx.divide(a0, a1)", (X, Y), np.divide),
    "truediv": ("nx.truediv(a0, a1)", (X, Y), np.true_divide),
    "floordiv": ("nx.floordiv(a0, a1)", (X, Y), np.floor_divide),
    "floor_divide": ("nx.floor_divide(a0, a1)", (X, Y), np.floor_divide),
    "power": ("nx.power(a0, a1)", (X, Y), np.power),
    "negative": ("nx.negative(a0)", (X,), np.negative),
    "logical_and": ("nx.logical_and(a0, a1)", (P, Q), np.logical_and),
    "logical_or": ("nx.logical_or(a0, a1)", (P, Q), np.logical_or),
    "logical_xor": ("nx.logical_xor(a0, a1)", (P, Q), np.logical_xor),
    "logical_not": ("nx.logical_not(a0)", (P,), np.logical_not),
    "matmul": ("nx.matmul(a0, nx.transpose(a1))", (X, Y), lambda a, b: np.matmul(a, b.T)),
    "clip_by_value": ("nx.clip_by_value(a0, 0.75, 1.5)", (X,), lambda a: np.clip(a, 0.75, 1.5)),
    "sum": ("nx.sum(a0)", (X,), np.sum),
    "mean": ("nx.mean(a0, axes=(1,))", (X,), lambda a: np.mean(a, axis=1)),
    "argmax": ("nx.argmax(a0, axis=1)", (X,), lambda a: np.argmax(a, axis=1)),
    "argmin": ("nx.argmin(a0, axis=0)", (X,), lambda a: np.argmin(a, axis=0)),
    "cumsum": ("nx.cumsum(a0, axis=1)", (X,), lambda a: np.cumsum(a, axis=1)),
    "cumprod": ("nx.cumprod(a0, axis=1)", (X,), lambda a: np.cumprod(a, axis=1)),
    "concatenate": ("nx.concatenate(a0, a1, axis=0)", (X, Y), lambda a, b: np.concatenate([a, b], axis=0)),
    "shape": ("nx.shape(a0)", (X,), np.shape),
}


def test_every_alias_has_a_numpy_case() -> None:
    aliases = {a for o in all_ops().values() for a in o.aliases}
    assert aliases == set(ALIAS_CASES)


@pytest.mark.parametrize("alias", sorted(ALIAS_CASES))
@pytest.mark.parametrize("frontend", [run_dsl, run_script], ids=["dsl", "script"])
def test_alias_agrees_with_numpy(alias: str, frontend: Callable[..., Any]) -> None:
    expr, args, oracle = ALIAS_CASES[alias]
    got, want = frontend(expr, args), oracle(*args)
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-6)
    assert np.asarray(got).dtype == np.asarray(want).dtype


def test_clip_by_value_in_a_script_and_sum_on_the_module() -> None:
    # The two halves of the issue's example: each worked in one frontend only.
    @nx.script
    def clip(x):  # type: ignore[no-untyped-def]
        return nx.clip_by_value(x, 0.75, 1.5)

    np.testing.assert_array_equal(clip(X), np.clip(X, 0.75, 1.5))
    assert "sum" in dir(nx) and callable(nx.sum)

    @nx.graph(x=("f32", (3, 4)))
    def total(x):  # type: ignore[no-untyped-def]
        return nx.sum(x)

    np.testing.assert_allclose(total(X), np.sum(X), rtol=1e-6)


def test_public_names_are_unique() -> None:
    owner: dict[str, str] = {}
    for op in FUNCTION_OPS:
        for name in op.public_names:
            assert owner.setdefault(name, op.name) == op.name, f"nx.{name} is {owner[name]} and {op.name}"


@pytest.mark.parametrize("op", FUNCTION_OPS, ids=lambda o: o.name)
def test_every_name_is_the_same_op_in_both_frontends(op) -> None:  # type: ignore[no-untyped-def]
    for name in op.public_names:
        fn = getattr(nx, name)  # the DSL function on the module
        assert fn.__name__ == name and (fn.__doc__ or "").startswith(f"{op.name}:"), name
        assert op_for_name(name) == op.name, name  # nx.<name> inside a script
