"""The pass manager (pipelines, options, stats, verify-each, print-after-all, required
properties) and the ``nexus opt`` command."""

from __future__ import annotations

import dataclasses
import io
from contextlib import redirect_stderr, redirect_stdout

import numpy as np
import pytest

import nexus as nx
from nexus.ir import Graph, parse, structurally_equal
from nexus.passes import PassError, optimize, parse_pipeline
from nexus.passes.examples import seed004
from nexus.passes.manager import Pass, register_pass, run_pipeline

# Some samples wrap around int32 on purpose; NumPy warns about that.
pytestmark = pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")


def test_parse_pipeline_with_options() -> None:
    passes = parse_pipeline("constfold{max_elements=8 identities=false}, licm{speculate=false},dce")
    assert [p.name for p in passes] == ["constfold", "licm", "dce"]
    assert passes[0].max_elements == 8 and passes[0].identities is False  # type: ignore[attr-defined]
    assert passes[1].speculate is False  # type: ignore[attr-defined]


@pytest.mark.parametrize("text, message", [
    ("constfold,nosuch", "unknown pass 'nosuch'"),
    ("licm{fast=true}", "unknown option 'fast'"),
    ("licm{speculate=maybe}", "is not a bool"),
    ("licm{speculate=true", "unclosed"),
])
def test_pipeline_errors(text: str, message: str) -> None:
    with pytest.raises(PassError, match=message):
        parse_pipeline(text)


def test_optimize_is_in_place_and_exported() -> None:
    g = seed004()
    assert nx.optimize is optimize
    assert optimize(g, "constfold") is g


def test_stats_accumulate_per_pass() -> None:
    g = seed004()
    stats: dict[str, dict[str, int]] = {}
    optimize(g, "constfold,dce,dce", stats=stats)
    assert stats["constfold"] == {"reassociated": 2}
    assert stats["dce"] == {"nodes": 6}  # 3 old ops + 3 old constants; the 2nd dce finds nothing


def test_print_after_all_calls_back_in_order() -> None:
    seen: list[str] = []
    optimize(seed004(), "constfold,cse,dce", print_after_all=lambda name, g: seen.append(name))
    assert seen == ["constfold", "cse", "dce"]
    out = io.StringIO()
    with redirect_stdout(out):
        optimize(seed004(), "dce", print_after_all=True)
    assert "after dce" in out.getvalue() and "graph @seed004" in out.getvalue()


@dataclasses.dataclass(frozen=True)
class _Breaker(Pass):
    """Test pass: drops the Return's input, breaking the graph."""

    name = "test_breaker"

    def apply(self, g: Graph) -> dict[str, int]:
        (r,) = g.returns
        r.drop_inputs()
        r.append_input(r)  # a control value used as data: invalid
        g.touch()
        return {"broken": 1}


@dataclasses.dataclass(frozen=True)
class _NeedsReachable(Pass):
    """Test pass: records the block count it sees."""

    name = "test_needs_reachable"
    requires = frozenset({"no_unreachable"})

    def apply(self, g: Graph) -> dict[str, int]:
        return {"blocks": len(g.blocks)}


@pytest.fixture
def scratch_registry():  # type: ignore[no-untyped-def]
    """Test passes registered inside a test leave the registry as it was."""
    from nexus.passes import manager

    saved, loaded = dict(manager.PASSES), dict(manager._LOADED)
    yield
    manager.PASSES.clear()
    manager.PASSES.update(saved)
    manager._LOADED.clear()
    manager._LOADED.update(loaded)


def test_verify_each_names_the_pass(scratch_registry) -> None:  # type: ignore[no-untyped-def]
    register_pass("test_breaker", _Breaker)
    with pytest.raises(PassError, match="after pass test_breaker"):
        optimize(seed004(), "constfold,test_breaker,dce", verify_each=True)


def test_required_property_is_assured(scratch_registry) -> None:  # type: ignore[no-untyped-def]
    register_pass("test_needs_reachable", _NeedsReachable)
    g = parse("""
graph @u {
^entry:
  %0 = Start : (f32,)
  %x = Proj %0 {num = 0} : f32
  %r = Return %x : X
^dead:
  %j = Jmp : X
^exit(%r):
  End : X
}""")
    stats: dict[str, dict[str, int]] = {}
    run_pipeline(g, parse_pipeline("test_needs_reachable"), stats=stats)
    assert stats["test_needs_reachable"] == {"blocks": 2}  # ^dead was removed first


def test_cli_opt_seed004(tmp_path: object) -> None:
    from nexus.cli.main import main

    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        assert main(["opt", "example:seed004", "-p", "constfold,dce", "--stats", "--verify-each"]) == 0
    g = parse(out.getvalue())
    assert [n.op.name for n in g.nodes() if n.op.kind == "data"].count("Add") == 1
    assert int(g(10)) == 113
    assert "reassociated=2" in err.getvalue()


def test_cli_opt_round_trip_file(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from nexus.cli.main import main

    src, dst = tmp_path / "in.nx", tmp_path / "out.nx"
    nx.save(seed004(), src)
    err = io.StringIO()
    with redirect_stderr(err):
        assert main(["opt", str(src), "-o", str(dst), "--print-after-all", "--loops"]) == 0
    assert "after canonicalize" in err.getvalue() and "no loops" in err.getvalue()
    expected = seed004()
    optimize(expected)
    assert structurally_equal(nx.load(dst), expected)


def test_cli_opt_errors_and_help() -> None:
    from nexus.cli.main import main

    err = io.StringIO()
    with redirect_stderr(err), redirect_stdout(io.StringIO()):
        assert main(["opt", "example:seed004", "-p", "constfold,bogus"]) == 1
    assert "unknown pass 'bogus'" in err.getvalue()
    out = io.StringIO()
    with redirect_stdout(out), pytest.raises(SystemExit):
        main(["opt", "--help"])
    assert "nexus opt model.nx -p constfold,cse,dce" in out.getvalue()
    assert "licm" in out.getvalue()


def test_max_elements_limits_folding() -> None:
    g = Graph("big", [], [])
    b = g.start_block
    a = g.add("Constant", [], b, {"value": np.ones(64, np.float32)})
    s = g.add("Add", [a, a], b)
    g.end_block.append_input(g.add("Return", [s], b))
    optimize(g, "constfold{max_elements=16}")
    assert any(n.op.name == "Add" for n in g.nodes())
    optimize(g, "constfold")
    assert not any(n.op.name == "Add" for n in g.nodes())
    np.testing.assert_array_equal(g(), np.full(64, 2.0, np.float32))
