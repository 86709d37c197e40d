"""Whatever nx.save writes, nx.load reads (issue 18): graphs whose types hold large dim
expressions either save and load back to the same text, or are refused by nx.save
before anything is written.  Dim text stays cheap to read: sympy's simplify, which takes
time exponential in an expression's size, is not run on large expressions."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
import sympy
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import nexus as nx
from nexus.io import load, save
from nexus.ir import Graph
from nexus.ir.types import TensorType, sym

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SYMBOLS = [sym(f"N{i}") for i in range(6)]

leaves = st.one_of(st.sampled_from(SYMBOLS), st.integers(0, 9).map(sympy.Integer))


def _extend(children: st.SearchStrategy) -> st.SearchStrategy:
    k = st.integers(1, 5)
    return st.one_of(
        st.lists(children, min_size=2, max_size=60).map(lambda xs: sympy.Add(*xs)),  # many terms
        st.lists(children, min_size=2, max_size=4).map(lambda xs: sympy.Mul(*xs)),
        st.tuples(children, k).map(lambda a: sympy.floor((a[0] + 1) / a[1])),
        st.tuples(children, k).map(lambda a: sympy.ceiling(a[0] / a[1])),
        st.tuples(children, children).map(lambda a: sympy.Max(*a)),
        st.tuples(children, children).map(lambda a: sympy.Min(*a)),
        st.tuples(children, k).map(lambda a: sympy.Mod(*a)),
    )


dims = st.recursive(leaves, _extend, max_leaves=60)


def _graph(shape: tuple) -> Graph:
    g = Graph("dims", arg_types=[TensorType("f32", shape)], arg_names=["x"])
    g.end_block.append_input(g.add("Return", [g.args[0]], g.start_block))
    return g


def _saves_and_loads_back(g: Graph, path: str) -> bool:
    """True when ``g`` saved and loaded back to equal dims; False when nx.save refused it
    (and wrote nothing).  Equal, not the same text: sympy distributes a number over a sum
    when it reads ``2*(N+1)`` but not inside a product of three factors."""
    try:
        save(g, path)
    except ValueError as e:
        assert "would not load back" in str(e)
        assert not os.path.exists(path)
        return False
    got = load(path).arg_types[0]
    want = g.arg_types[0]
    assert isinstance(got, TensorType) and isinstance(want, TensorType) and got.rank == want.rank
    for a, b in zip(got.shape or (), want.shape or ()):
        assert sympy.expand(sympy.sympify(a) - sympy.sympify(b)) == 0, (a, b)
    return True


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.lists(dims, min_size=1, max_size=3))
def test_whatever_save_writes_load_reads(tmp_path_factory, shape: list) -> None:
    path = str(tmp_path_factory.mktemp("dims") / "g.nx")
    _saves_and_loads_back(_graph(tuple(shape)), path)


def test_a_sum_of_many_terms_round_trips(tmp_path) -> None:
    """51 inputs concatenated: a dim of 51 terms (was already read back before issue 18)."""
    shape = (sympy.Add(*(sym(f"N{i}") for i in range(51))),)
    assert _saves_and_loads_back(_graph(shape), str(tmp_path / "g.nx"))


def test_concat_of_51_script_inputs_saves_and_loads(tmp_path) -> None:
    src = ("import nexus as nx\ndef f(" + ", ".join(f"x{i}: nx.Tensor['N{i}']" for i in range(51)) + "):\n"
           "    return nx.concat((" + ", ".join(f"x{i}" for i in range(51)) + "), axis=0)\n")
    f = nx.script_source(src, "f", {"nx": nx})
    assert f(*[np.ones(2, np.float32)] * 51).shape == (102,)
    assert _saves_and_loads_back(f.graph, str(tmp_path / "f.nx"))


def test_nested_floors_deeper_than_the_parser_reads_are_refused_by_save(tmp_path) -> None:
    e = sym("N")
    for _ in range(60):  # e.g. a stride-2 slice 60 times over
        e = sympy.floor((e + 1) / 2)
    assert not _saves_and_loads_back(_graph((e,)), str(tmp_path / "g.nx"))
    e = sym("N")
    for _ in range(20):
        e = sympy.floor((e + 1) / 2)
    assert _saves_and_loads_back(_graph((e,)), str(tmp_path / "g.nx"))


@pytest.mark.parametrize("text", [
    "*".join(f"(N{i}+{i})" for i in range(20)),  # simplify expands it: 2**20 terms
    "floor((" * 20 + "N" + "+1)/2)" * 20,  # simplify recurses twice per level
], ids=["product of 20 sums", "20 nested floors"])
def test_large_dim_text_parses_quickly(text: str) -> None:
    code = f"from nexus.ir.types import parse_dim; parse_dim({text!r}); print('ok')"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")])}
    try:
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env)
    except subprocess.TimeoutExpired:
        pytest.fail("parsing the dim took more than 60 s")
    assert out.stdout.strip() == "ok", out.stderr[-2000:]
