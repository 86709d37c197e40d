"""Budgets on the symbolic work that dims ask of sympy (issue 32): a small text file must
not make ``nexus verify`` or ``nx.load`` spin.

Each hostile file is refused with one error naming the file, line and column.  The
subprocess runs have a generous timeout only as a hang guard (before the budgets, these
files ran for minutes); nothing here asserts a duration.  Accepted dims keep their
meaning: they print and parse back to the same expression, and they evaluate like the
text does in plain Python."""

from __future__ import annotations

import math
import os
import random
import re
import subprocess
import sys
from fractions import Fraction

import pytest
import sympy

import nexus as nx
from nexus.ir import ParseError, parse, parse_dim
from nexus.ir.limits import MAX_DIM_BITS, MAX_DIM_OPS, MAX_DIM_WORK, MAX_SIMPLIFY_OPS
from nexus.ir.types import DimSyntaxError, TensorType, format_dim, sym
from nexus.ir.verify import verify

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")])}
HANG_GUARD = 120  # seconds; only a guard against a hang, the runs take a few seconds


def test_the_budgets_are_the_documented_numbers() -> None:
    assert (MAX_DIM_OPS, MAX_DIM_BITS, MAX_DIM_WORK, MAX_SIMPLIFY_OPS) == (1000, 2048, 20_000, 12)


def graph(*dims: str) -> str:
    """A graph whose arguments have the given dims (each an f32 vector), returning the first."""
    types = ", ".join(f"f32[{d}]" for d in dims)
    lines = ["graph @g {", "^entry:", f"  %0 = Start : ({types},)"]
    lines += [f"  %a{i} = Proj %0 {{num = {i}}} : f32[{d}]" for i, d in enumerate(dims)]
    lines += ["  %r = Return %a0 : X", "^exit(%r):", "  End : X", "}", ""]
    return "\n".join(lines)


PREFIX = "  %0 = Start : (f32["  # the first dim starts after it, on line 3

HOSTILE = {
    # name: (the dims, the reason, the 0-based offset in the first dim where it is refused)
    "product of 3000 powers": (["*".join(["3**2000"] * 3000)], f"more than {MAX_DIM_OPS} operations",
                               len("3**2000*") * 500 + 1),
    "product of 1000 powers": (["*".join(["3**2000"] * 1000)], f"more than {MAX_DIM_OPS} operations",
                               len("3**2000*") * 500 + 1),
    "product of 300 powers": (["*".join(["3**2000"] * 300)], f"would take 3170 bits (the limit is {MAX_DIM_BITS})",
                              1),
    "sum of 20000 symbols": (["+".join(f"a{i}" for i in range(20000))], f"more than {MAX_DIM_OPS} operations",
                             len("+".join(f"a{i}" for i in range(1001)))),
    "Max of 99 symbols": (["Max(" + ",".join(f"a{i}" for i in range(99)) + ")"], "budget of 20000 units", 0),
    "many dims of Mods": ([" + ".join(f"Mod(N{k}, {i + 2})" for i in range(60)) for k in range(40)],
                          "budget of 20000 units", None),
}


def write_hostile(tmp_path) -> dict[str, str]:
    files = {}
    for i, (name, (dims, _, _)) in enumerate(HOSTILE.items()):
        path = tmp_path / f"hostile{i}.nx"
        path.write_text(graph(*dims))
        files[name] = str(path)
    return files


def check_message(first_line: str, name: str, path: str) -> None:
    dims, reason, offset = HOSTILE[name]
    m = re.match(rf"{re.escape(path)}: line (\d+), col (\d+): bad dim '.*': (.*)$", first_line)
    assert m, (name, first_line[:400])
    assert reason in m.group(3), (name, m.group(3))
    if offset is not None:
        assert (int(m.group(1)), int(m.group(2))) == (3, len(PREFIX) + offset + 1), (name, first_line[:200])


def test_hostile_dims_are_refused_by_nexus_verify(tmp_path) -> None:
    for name, path in write_hostile(tmp_path).items():
        proc = subprocess.run([sys.executable, "-m", "nexus", "verify", path], capture_output=True, text=True,
                              timeout=HANG_GUARD, env=ENV)
        assert proc.returncode == 1 and "Traceback" not in proc.stderr, (name, proc.stderr[-2000:])
        first = proc.stderr.split("\n")[0]
        assert first.startswith("nexus: parse error: "), (name, first[:300])
        check_message(first[len("nexus: parse error: "):], name, path)


LOAD_ALL = """
import sys
import nexus as nx
for path in sys.argv[1:]:
    try:
        nx.load(path)
    except nx.ParseError as e:
        print(str(e).split("\\n")[0])
    else:
        print("loaded")
"""


def test_hostile_dims_are_refused_by_nx_load(tmp_path) -> None:
    files = write_hostile(tmp_path)
    proc = subprocess.run([sys.executable, "-c", LOAD_ALL, *files.values()], capture_output=True, text=True,
                          timeout=HANG_GUARD, env=ENV)
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = proc.stdout.splitlines()
    assert len(lines) == len(files)
    for (name, path), line in zip(files.items(), lines):
        check_message(line, name, path)


# --- the limits, at the limit and one past it ----------------------------------------------
def test_operations_up_to_the_limit() -> None:
    at = "+".join(f"a{i}" for i in range(MAX_DIM_OPS + 1))
    assert parse_dim(at) == sympy.Add(*(sym(f"a{i}") for i in range(MAX_DIM_OPS + 1)))
    with pytest.raises(DimSyntaxError, match=f"more than {MAX_DIM_OPS} operations") as info:
        parse_dim(at + "+b")
    assert info.value.pos == len(at)  # the operator past the limit
    with pytest.raises(DimSyntaxError, match="operations"):
        parse_dim("-" * (MAX_DIM_OPS + 1) + "N")  # unary minus signs count too (before the nesting limit)


def test_numbers_up_to_the_limit() -> None:
    assert parse_dim(f"2**{MAX_DIM_BITS - 1}") == 2 ** (MAX_DIM_BITS - 1)
    assert parse_dim(f"2**{MAX_DIM_BITS - 1}*N") == 2 ** (MAX_DIM_BITS - 1) * sym("N")
    assert parse_dim(f"2**{MAX_DIM_BITS - 1} + 2**{MAX_DIM_BITS - 2}") == 3 * 2 ** (MAX_DIM_BITS - 2)
    for text in (f"2**{MAX_DIM_BITS}", "2**1024*2**1024", "N*2**1024*M*2**1024", "(2**1024*N)**2",
                 f"2**{MAX_DIM_BITS - 1} + 2**{MAX_DIM_BITS - 1}", "3**2000", "(N + 3**1000)**3"):
        with pytest.raises(DimSyntaxError, match=f"{MAX_DIM_BITS}"):
            parse_dim(text)


def test_a_huge_power_is_refused_at_its_operator() -> None:
    e = _parse_error(graph("N", "3**2000*M"))
    assert (e.line, e.col) == (3, len("  %0 = Start : (f32[N], f32[3") + 1)
    assert "3**2000 is too large" in e.msg or "3170 bits" in e.msg


def test_function_work_is_budgeted_per_text_and_repeats_are_free() -> None:
    one = "Max(" + ", ".join(f"a{i}" for i in range(8)) + ")"
    assert parse(graph(*[one] * 200)) is not None  # the same dim 200 times costs once
    many = [f"Max({', '.join(f'a{i}' for i in range(k, k + 8))})" for k in range(40)]  # 40 different ones
    assert "budget of 20000 units" in _parse_error(graph(*many)).msg


def _parse_error(text: str) -> ParseError:
    with pytest.raises(ParseError) as info:
        parse(text)
    return info.value


# --- dims built in Python ------------------------------------------------------------------
def test_dims_built_in_python_are_held_to_the_same_limits() -> None:
    big_sum = sympy.Add(*(sym(f"a{i}") for i in range(20000)))
    with pytest.raises(ValueError, match=f"the limit is {MAX_DIM_OPS}"):
        TensorType("f32", (big_sum,))
    with pytest.raises(ValueError, match=f"the limit is {MAX_DIM_BITS}"):
        TensorType("f32", (sympy.Integer(3) ** 2000 * sym("N"),))
    with pytest.raises(ValueError, match=f"the limit is {MAX_DIM_BITS}"):
        TensorType("f32", (3 ** 2000,))  # before anything prints it (954 digits)
    assert TensorType("f32", (2 ** (MAX_DIM_BITS - 1),)).shape == (2 ** (MAX_DIM_BITS - 1),)


def test_shape_inference_asks_simplify_only_within_its_budget(monkeypatch) -> None:
    """Two arguments whose dims are sums of 400 symbols, added: broadcasting compares the
    dims.  sympy.simplify of their difference took 8 s per Add; now it is not asked."""
    asked: list[int] = []
    real = sympy.simplify

    def simplify(expr, *args, **kw):  # type: ignore[no-untyped-def]
        asked.append(sympy.count_ops(expr))
        return real(expr, *args, **kw)

    monkeypatch.setattr(sympy, "simplify", simplify)
    a = sympy.Add(*(sym(f"a{i}") for i in range(400)))
    b = sympy.Add(*(sym(f"b{i}") for i in range(400)))
    with nx.function("g", x=TensorType("f32", (a,)), y=TensorType("f32", (b,))) as f:
        x, y = f.args
        f.returns(x + y, y * x)
    verify(f.graph)
    assert all(n <= MAX_SIMPLIFY_OPS for n in asked), max(asked)
    assert parse(nx.print_graph(f.graph)) is not None  # and the text reads back


# --- the oracle for accepted dims ----------------------------------------------------------
def _gen(rng: random.Random, depth: int = 0) -> str:
    """A random dim text; its numbers stay small (sympy's floor and ceiling of sums of
    70-bit numbers can be off by one, a sympy matter the limits tests do not need)."""
    r = rng.random()
    if depth > 2 or r < 0.3:
        return rng.choice(["N", "M", "K", str(rng.randint(0, 9)), str(rng.randint(10, 10 ** 6))])
    if r < 0.5:
        return rng.choice(["+", "-", "*"]).join(_gen(rng, depth + 1) for _ in range(rng.randint(2, 24)))
    if r < 0.65:
        # Dims are integers: a quotient stays inside floor or ceiling, so that sympy's
        # integer assumptions about Mod's arguments hold for the Python oracle too.
        op, divisor = rng.choice(["/", "//", "%"]), f"({rng.randint(1, 9)} + N*{rng.randint(0, 3)})"
        if op == "/":
            return f"{rng.choice(['floor', 'ceiling'])}(({_gen(rng, depth + 1)})/{divisor})"
        return f"({_gen(rng, depth + 1)}){op}{divisor}"
    if r < 0.75:
        return f"({_gen(rng, depth + 1)})**{rng.randint(0, 3)}"
    if r < 0.85:
        return f"-{_gen(rng, depth + 1)}"
    fn = rng.choice(["floor", "ceiling", "Max", "Min"])
    n = 1 if fn in ("floor", "ceiling") else rng.randint(2, 3)
    return f"{fn}({', '.join(_gen(rng, depth + 1) for _ in range(n))})"


def _python_value(text: str, env: dict[str, int]) -> Fraction:
    """The text evaluated by Python on exact fractions: the independent oracle."""
    code = re.sub(r"\b(\d+)\b", r"F(\1)", text)
    scope = {"F": Fraction, "floor": math.floor, "ceiling": math.ceil, "Max": max, "Min": min,
             **{k: Fraction(v) for k, v in env.items()}}
    return Fraction(eval(code, {"__builtins__": {}}, scope))  # noqa: S307  (test-generated text)


def test_accepted_dims_round_trip_and_keep_their_value() -> None:
    rng = random.Random(32)
    checked = 0
    for _ in range(150):
        text = _gen(rng)
        dim = parse_dim(text)
        # One print and parse may still distribute a number over a sum that sympy had kept
        # apart (M/(8*(2*N + 5)) within a larger sum; the parser before the budgets did the
        # same), so the text reached after one round trip is the fixed point.
        again = parse_dim(format_dim(dim))
        assert parse_dim(format_dim(again)) == again, text
        for _ in range(2):
            env = {"N": rng.randint(0, 5), "M": rng.randint(0, 5), "K": rng.randint(0, 5)}
            want = _python_value(text, env)
            for d in (dim, again):
                got = d if isinstance(d, int) else d.subs({sym(k): v for k, v in env.items()})
                assert sympy.Rational(want.numerator, want.denominator) == got, (text, env)
        checked += 1
    assert checked == 150


def test_save_refuses_a_graph_whose_dims_would_exceed_the_work_budget(tmp_path) -> None:
    dims = [sympy.Max(*(sym(f"a{i}") for i in range(k, k + 8))) for k in range(40)]
    with nx.function("g", **{f"x{k}": TensorType("f32", (d,)) for k, d in enumerate(dims)}) as f:
        f.returns(*f.args)
    with pytest.raises(ValueError, match="would not load back.*budget of 20000 units"):
        nx.save(f.graph, tmp_path / "g.nx")
    assert not (tmp_path / "g.nx").exists()
