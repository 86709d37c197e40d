"""Structured regions: CFG -> region tree -> CFG.

Golden region trees for the seed graphs and two more (a while-form loop; a return from
inside a nested loop), written by hand from the graphs; the round trip on the script
fuzzer's and the DSL generator's programs, on gradient graphs, and the refusal of an
irreducible CFG naming its blocks.  The long fuzz run is
``python -m nexus.testing.region_fuzz --script 2000 --dsl 1000``.
"""

from __future__ import annotations

import numpy as np
import pytest

import nexus as nx
from nexus import seeds
from nexus.autodiff import vjp_graph
from nexus.autodiff.examples import damped_loop, rnn
from nexus.ir import Graph, Node, parse, print_graph, verify
from nexus.passes.loops import IrreducibleError
from nexus.passes.lower_regions import lower_regions
from nexus.passes.regions import Loop, Var, format_regions, walk
from nexus.passes.structurize import IrreducibleCFGError, StructurizeError, structurize
from nexus.testing.dsl_gen import same_results
from nexus.testing.region_fuzz import dsl_corpus, script_corpus


def roundtrip(g: Graph) -> Graph:
    back = lower_regions(structurize(g))
    verify(back)
    return back


# --- goldens: seed graphs -------------------------------------------------------------------------
# ^entry branches on a < b; the two arms meet in ^join, whose Phi is the If's output.
IFELSE = """\
regions @ifelse():
  %a = Constant {value = tensor<f32: 1.0>} : f32
  %b = Constant {value = tensor<f32: 2.0>} : f32
  %two = Constant {value = tensor<f32: 2.0>} : f32
  %p = Less %a, %b : bool
  if %p -> (%c : f32):
    then:
      %c_then = Add %a, %b : f32
      yield %c_then
    else:
      %c_else = Sub %a, %b : f32
      yield %c_else
  %d = Mul %c, %two : f32
  return %d
"""

# The loop leaves from ^header (i > 10) and from ^update (break): flag form.  `continue`
# (^skip) and the latch both jump back: again = true, with the header Phis' new values.
# %result.1 is the exit slot for ^after's Phi %result; paths that continue keep it.
SKIP5 = """\
regions @skip5():
  %sum_init = Constant {value = tensor<i32: 0>} : i32
  %i_init = Constant {value = tensor<i32: 1>} : i32
  loop (%i : i32 = %i_init, %sum : i32 = %sum_init, %again : bool = true, %result.1 : i32 = default):
    while %again
    body:
      %0 = Constant {value = tensor<i32: 10>} : i32
      %1 = Constant {value = tensor<i32: 5>} : i32
      %2 = Constant {value = tensor<i32: 1>} : i32
      %3 = Constant {value = tensor<i32: 25>} : i32
      %loop_cond = LessEqual %i, %0 : bool
      if %loop_cond -> (%again.1 : bool, %i.1 : i32, %sum.1 : i32, %result.2 : i32):
        then:
          %skip_cond = Equal %i, %1 : bool
          if %skip_cond -> (%again.2 : bool, %i.2 : i32, %sum.2 : i32, %result.3 : i32):
            then:
              %i_increment_skip = Add %i, %2 : i32
              yield true, %i_increment_skip, %sum, %result.1
            else:
              %sum_update = Add %sum, %i : i32
              %i_increment = Add %i, %2 : i32
              %break_cond = Greater %sum_update, %3 : bool
              if %break_cond -> (%again.3 : bool, %i.3 : i32, %sum.3 : i32, %result.4 : i32):
                then:
                  yield false, %i, %sum, %sum_update
                else:
                  yield true, %i_increment, %sum_update, %result.1
              yield %again.3, %i.3, %sum.3, %result.4
          yield %again.2, %i.2, %sum.2, %result.3
        else:
          yield false, %i, %sum, %sum
      next %i.1, %sum.1, %again.1, %result.2
    exit (%result = %result.1)
  return %result
"""

# The break (product < 30) leaves from ^else; `continue` jumps back with x unchanged.  The
# code after the loop reads the header Phi %x.1 (named x like the initial constant), so
# the loop exports it: its last value, which paths that leave keep.
FIRST_EXAMPLE = """\
regions @first_example():
  %x = Constant {value = tensor<f32: 5.0>} : f32
  %y = Constant {value = tensor<f32: 50.0>} : f32
  %limit = Constant {value = tensor<f32: 100.0>} : f32
  %step = Constant {value = tensor<f32: 1.0>} : f32
  %0 = Constant {value = tensor<f32: 50.0>} : f32
  %1 = Constant {value = tensor<f32: 30.0>} : f32
  loop (%x.1 : f32 = %x, %again : bool = true):
    while %again
    body:
      %loop_cond = Less %x.1, %limit : bool
      if %loop_cond -> (%again.1 : bool, %x.2 : f32):
        then:
          %sum = Add %x.1, %y : f32
          %product = Mul %x.1, %y : f32
          %2 = Greater %sum, %0 : bool
          if %2 -> (%again.2 : bool, %x.3 : f32):
            then:
              %x_update = Add %x.1, %step : f32
              yield true, %x_update
            else:
              %3 = Less %product, %1 : bool
              if %3 -> (%again.3 : bool):
                then:
                  yield false
                else:
                  yield true
              yield %again.3, %x.1
          yield %again.2, %x.3
        else:
          yield false, %x.1
      next %x.2, %again.1
    exit (%x.1)
  %final_result = Mul %x.1, %y : f32
  return %final_result
"""


@pytest.mark.parametrize(("name", "golden"), [("ifelse", IFELSE), ("skip5_loop", SKIP5),
                                              ("first_example", FIRST_EXAMPLE)])
def test_seed_graph_region_trees(name: str, golden: str) -> None:
    g = seeds.ALL[name]()
    assert format_regions(structurize(g)) == golden
    back = roundtrip(g)
    assert same_results(back(), (g(),))


def _skip5() -> int:
    total = 0
    i = 1
    while i <= 10:
        if i == 5:
            i += 1
            continue
        total += i
        i += 1
        if total > 25:
            break
    return total


def _first_example(y: float = 50.0) -> float:
    x = 5.0
    while x < 100:
        s, p = x + y, x * y
        if s > 50:
            x = x + 1
        elif p < 30:
            break
    return x * y


def test_rebuilt_seed_graphs_match_the_plain_python_programs() -> None:
    """The Python programs of the seed graphs' docstrings are the oracle."""
    results = [roundtrip(seeds.ALL[n]())() for n in ("ifelse", "skip5_loop", "first_example")]
    assert [float(r) for r in results] == [6.0, float(_skip5()), _first_example()]


# --- goldens: a while-form loop, a return out of two loops ------------------------------------------
COUNT = """
graph @count {
^entry:
  %0 = Start : (i32,)
  %n = Proj %0 {num = 0} : i32
  %zero = Constant {value = tensor<i32: 0>} : i32
  %one = Constant {value = tensor<i32: 1>} : i32
  %j0 = Jmp : X
^head(%j0, %back):
  %i = Phi %zero, %i2 : i32
  %s = Phi %zero, %s2 : i32
  %c = Less %i, %n : bool
  %br = Cond %c : (X, X)
  %out = Proj %br {num = 0} : X
  %in = Proj %br {num = 1} : X
^body(%in):
  %s2 = Add %s, %i : i32
  %i2 = Add %i, %one : i32
  %back = Jmp : X
^done(%out):
  %r = Return %s : X
^exit(%r):
  End : X
}
"""

# The header's Cond is the only way out and its nodes are pure: while form, the header's
# nodes are the cond region.  The sum is read after the loop: an exit result.
COUNT_REGIONS = """\
regions @count(%n : i32):
  %zero = Constant {value = tensor<i32: 0>} : i32
  %one = Constant {value = tensor<i32: 1>} : i32
  loop (%i : i32 = %zero, %s : i32 = %zero):
    cond:
      %c = Less %i, %n : bool
    while %c
    body:
      %s2 = Add %s, %i : i32
      %i2 = Add %i, %one : i32
      next %i2, %s2
    exit (%s)
  return %s
"""

FIND = """
graph @find {
^entry:
  %0 = Start : (i32,)
  %n = Proj %0 {num = 0} : i32
  %one = Constant {value = tensor<i32: 1>} : i32
  %none = Constant {value = tensor<i32: -1>} : i32
  %j0 = Jmp : X
^outer(%j0, %onext):
  %i = Phi %one, %i2 : i32
  %ci = Less %i, %n : bool
  %bi = Cond %ci : (X, X)
  %odone = Proj %bi {num = 0} : X
  %obody = Proj %bi {num = 1} : X
^inner(%obody, %inext):
  %j = Phi %one, %j2 : i32
  %cj = Less %j, %n : bool
  %bj = Cond %cj : (X, X)
  %idone = Proj %bj {num = 0} : X
  %ibody = Proj %bj {num = 1} : X
^ibody(%ibody):
  %p = Mul %i, %j : i32
  %hit = Equal %p, %n : bool
  %bh = Cond %hit : (X, X)
  %miss = Proj %bh {num = 0} : X
  %found = Proj %bh {num = 1} : X
^ret(%found):
  %s = Add %i, %j : i32
  %r1 = Return %s : X
^step(%miss):
  %j2 = Add %j, %one : i32
  %inext = Jmp : X
^olatch(%idone):
  %i2 = Add %i, %one : i32
  %onext = Jmp : X
^notfound(%odone):
  %r2 = Return %none : X
^exit(%r1, %r2):
  End : X
}
"""

# ^ret leaves both loops.  The inner loop has two exit targets (^ret, ^olatch): a flag
# %to_ret.2 (^olatch, the last, needs none).  After it, `if %to_ret.5` either leaves the
# outer loop too (its exit slots: flag %to_ret, and %j.1 for %j, which ^ret reads) or
# runs ^olatch and goes round.  After the outer loop the graph returns i + j or -1.
FIND_REGIONS = """\
regions @find(%n : i32):
  %one = Constant {value = tensor<i32: 1>} : i32
  %none = Constant {value = tensor<i32: -1>} : i32
  loop (%i : i32 = %one, %again : bool = true, %to_ret : bool = default, %j.1 : i32 = default):
    while %again
    body:
      %ci = Less %i, %n : bool
      if %ci -> (%again.1 : bool, %i.1 : i32, %to_ret.1 : bool, %j.2 : i32):
        then:
          loop (%j : i32 = %one, %again.2 : bool = true, %to_ret.2 : bool = default):
            while %again.2
            body:
              %cj = Less %j, %n : bool
              if %cj -> (%again.3 : bool, %j.3 : i32, %to_ret.3 : bool):
                then:
                  %p = Mul %i, %j : i32
                  %hit = Equal %p, %n : bool
                  if %hit -> (%again.4 : bool, %j.4 : i32, %to_ret.4 : bool):
                    then:
                      yield false, %j, true
                    else:
                      %j2 = Add %j, %one : i32
                      yield true, %j2, %to_ret.2
                  yield %again.4, %j.4, %to_ret.4
                else:
                  yield false, %j, false
              next %j.3, %again.3, %to_ret.3
            exit (%j, %to_ret.5 = %to_ret.2)
          if %to_ret.5 -> (%again.5 : bool, %i.2 : i32, %to_ret.6 : bool, %j.5 : i32):
            then:
              yield false, %i, true, %j
            else:
              %i2 = Add %i, %one : i32
              yield true, %i2, %to_ret, %j.1
          yield %again.5, %i.2, %to_ret.6, %j.5
        else:
          yield false, %i, false, %j.1
      next %i.1, %again.1, %to_ret.1, %j.2
    exit (%i, %to_ret.7 = %to_ret, %j = %j.1)
  if %to_ret.7 -> (%result : i32):
    then:
      %s = Add %i, %j : i32
      yield %s
    else:
      yield %none
  return %result
"""


def _find(n: int) -> int:
    i = 1
    while i < n:
        j = 1
        while j < n:
            if i * j == n:
                return i + j
            j += 1
        i += 1
    return -1


def test_while_form_loop_region_tree() -> None:
    g = verify(parse(COUNT))
    assert format_regions(structurize(g)) == COUNT_REGIONS
    back = roundtrip(g)
    for n in (0, 1, 5):
        assert int(back(n)) == int(g(n)) == sum(range(n))


def test_return_from_nested_loop_region_tree() -> None:
    g = verify(parse(FIND))
    assert format_regions(structurize(g)) == FIND_REGIONS
    back = roundtrip(g)
    for n in (0, 1, 2, 6, 7, 12):
        assert int(back(n)) == int(g(n)) == _find(n)


# ^else is entered from ^entry and from ^second (short-circuit `a and b`): a join placed
# after ^entry's If under its flag %to_else.  ^join's Phi %x is merged twice: in the If
# that leaves ^second (default where the path goes to ^else instead) and after ^else.
SHORT_CIRCUIT = """
graph @andand {
^entry:
  %0 = Start : (bool, bool, f32, f32)
  %a = Proj %0 {num = 0} : bool
  %b = Proj %0 {num = 1} : bool
  %p = Proj %0 {num = 2} : f32
  %q = Proj %0 {num = 3} : f32
  %c1 = Cond %a : (X, X)
  %e1 = Proj %c1 {num = 0} : X
  %t1 = Proj %c1 {num = 1} : X
^second(%t1):
  %c2 = Cond %b : (X, X)
  %e2 = Proj %c2 {num = 0} : X
  %t2 = Proj %c2 {num = 1} : X
^then(%t2):
  %x1 = Add %p, %q : f32
  %jt = Jmp : X
^else(%e1, %e2):
  %x2 = Sub %p, %q : f32
  %je = Jmp : X
^join(%jt, %je):
  %x = Phi %x1, %x2 : f32
  %r = Return %x : X
^exit(%r):
  End : X
}
"""

SHORT_CIRCUIT_REGIONS = """\
regions @andand(%a : bool, %b : bool, %p : f32, %q : f32):
  if %a -> (%to_else : bool, %x.1 : f32):
    then:
      if %b -> (%to_else.1 : bool, %x.2 : f32):
        then:
          %x1 = Add %p, %q : f32
          yield false, %x1
        else:
          yield true, default
      yield %to_else.1, %x.2
    else:
      yield true, default
  if %to_else -> (%x : f32):
    then:
      %x2 = Sub %p, %q : f32
      yield %x2
    else:
      yield %x.1
  return %x
"""

# Both exits of one Cond enter ^join: two edges, so ^join is a join even with one
# predecessor block, and its Phi is the If's output.
SELECT = """
graph @select {
^entry:
  %0 = Start : (bool, f32, f32)
  %a = Proj %0 {num = 0} : bool
  %p = Proj %0 {num = 1} : f32
  %q = Proj %0 {num = 2} : f32
  %c = Cond %a : (X, X)
  %f = Proj %c {num = 0} : X
  %t = Proj %c {num = 1} : X
^join(%f, %t):
  %x = Phi %p, %q : f32
  %r = Return %x : X
^exit(%r):
  End : X
}
"""

SELECT_REGIONS = """\
regions @select(%a : bool, %p : f32, %q : f32):
  if %a -> (%x : f32):
    then:
      yield %q
    else:
      yield %p
  return %x
"""


def test_join_reached_from_two_nesting_levels() -> None:
    g = verify(parse(SHORT_CIRCUIT))
    assert format_regions(structurize(g)) == SHORT_CIRCUIT_REGIONS
    back = roundtrip(g)
    for a in (False, True):
        for b in (False, True):
            want = np.float32(2.5 + 1.0) if a and b else np.float32(2.5 - 1.0)
            assert back(a, b, 2.5, 1.0) == g(a, b, 2.5, 1.0) == want


def test_cond_with_both_exits_into_one_block() -> None:
    g = verify(parse(SELECT))
    assert format_regions(structurize(g)) == SELECT_REGIONS
    back = roundtrip(g)
    assert [float(back(a, 1.0, 2.0)) for a in (False, True)] == [1.0, 2.0]


# --- properties of the tree --------------------------------------------------------------------------
def test_structurize_leaves_the_graph_alone_and_uses_its_nodes() -> None:
    g = verify(parse(FIND))
    before, version = print_graph(g), g.version
    tree = structurize(g)
    assert print_graph(g) == before and g.version == version
    data = [item for item in walk(tree.body) if isinstance(item, Node)]
    assert data and all(n.graph is g for n in data)


def test_loops_carry_header_phis_with_their_entry_and_back_edge_values() -> None:
    g = verify(parse(COUNT))
    (loop,) = [item for item in walk(structurize(g).body) if isinstance(item, Loop)]
    by_name = {n.name: n for n in g.nodes()}
    assert [(c.var, c.init, c.next) for c in loop.carried] == [
        (by_name["i"], by_name["zero"], by_name["i2"]), (by_name["s"], by_name["zero"], by_name["s2"])]
    assert loop.cond == [by_name["c"]] and loop.test is by_name["c"]


def test_lowered_graph_prints_and_parses_back() -> None:
    back = roundtrip(verify(parse(FIND)))
    again = parse(print_graph(back))
    verify(again)
    assert [int(again(n)) for n in (6, 7)] == [5, -1]


# --- refusals ----------------------------------------------------------------------------------------
def _irreducible() -> Graph:
    """^left and ^right jump into each other, and ^entry enters both: a cycle with two
    entries, which no natural loop describes."""
    g = Graph("tangle", [nx.TensorType("bool", ()), nx.TensorType("bool", ())], ["p", "q"])
    p, q = g.args
    cond = g.add("Cond", [p], g.start_block)
    to_right = g.add("Proj", [cond], g.start_block, {"num": 0})
    to_left = g.add("Proj", [cond], g.start_block, {"num": 1})
    left = g.new_block("left", [to_left])
    right = g.new_block("right", [to_right])
    out = g.new_block("out")
    right.append_input(g.add("Jmp", [], left))
    cond_r = g.add("Cond", [q], right)
    left.append_input(g.add("Proj", [cond_r], right, {"num": 1}))
    out.append_input(g.add("Proj", [cond_r], right, {"num": 0}))
    g.end_block.append_input(g.add("Return", [p], out))
    g.touch()
    return verify(g)


def test_irreducible_cfg_is_refused_naming_its_blocks() -> None:
    g = _irreducible()
    assert bool(g(True, False)) is True  # the graph itself is fine
    with pytest.raises(IrreducibleCFGError) as info:
        structurize(g)
    message = str(info.value)
    assert "^left" in message and "^right" in message and "@tangle" in message
    assert info.value.blocks == ["left", "right"] and info.value.entries == ["left", "right"]
    assert isinstance(info.value, IrreducibleError) and isinstance(info.value, StructurizeError)


def test_a_graph_that_never_returns_is_refused() -> None:
    g = Graph("spin")
    header = g.new_block("spin", [g.add("Jmp", [], g.start_block)])
    header.append_input(g.add("Jmp", [], header))
    g.touch()
    with pytest.raises(StructurizeError, match="never"):
        structurize(g)


# --- corpora -------------------------------------------------------------------------------------
def test_script_fuzz_corpus_round_trips() -> None:
    report = script_corpus(200, seed=2026, runs=2, max_depth=2)
    assert not report.failures, str(report.failures[0])
    assert report.graphs == 200 and report.flag_loops > 0 and report.while_loops > 0, report.summary()


def test_dsl_corpus_round_trips() -> None:
    report = dsl_corpus(200, seed=2026)
    assert not report.failures, str(report.failures[0])
    assert report.graphs >= 150, report.summary()


# --- gradient graphs -----------------------------------------------------------------------------
def test_gradient_graphs_round_trip() -> None:
    """Graph-mode autodiff's forward/reverse dispatch loops structure too (XLA must
    compile gradient graphs); stacks are carried through the loops."""
    rng = np.random.default_rng(0)
    T, D, H = 4, 3, 5
    rnn_args = (rng.normal(size=(T + 1, D)), rng.normal(size=(H, D)) * 0.5, rng.normal(size=(H, H)) * 0.5,
                rng.normal(size=H), T)
    x, w = rng.normal(size=6), rng.normal(size=6)
    cases = [(rnn(), (1, 2, 3), rnn_args), (damped_loop(), (0, 1), (x, w, 1e-3, 50.0, 30))]
    for g, argnums, args in cases:
        gg = vjp_graph(g, argnums, seed="ones")
        tree = structurize(gg)
        assert any(isinstance(item, Loop) and isinstance(item.test, Var) for item in walk(tree.body))
        back = verify(lower_regions(tree))
        want, got = gg(*args), back(*args)
        assert same_results(got, want)
