"""Parser fuzzing: mutations of valid printed text either parse or raise ParseError;
never another exception, never a hang."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from nexus import seeds
from nexus.ir import Graph, ParseError, TensorType, parse, print_graph
from nexus.ir.node import SourceLoc
from nexus.ir.types import sym


def _rich_graph() -> str:
    """Arguments with symbolic dims, inline tensors of several dtypes, list attributes,
    deps, source locations and a Call of another graph."""
    callee = Graph("helper", [TensorType("f32", (sym("N"), 3))], ["v"])
    t = callee.add("Tanh", [callee.args[0]], callee.start_block)
    r = callee.add("Return", [t], callee.start_block)
    callee.end_block.append_input(r)
    g = Graph("rich", [TensorType("f32", (sym("N"), 3)), TensorType("i64", ())], ["x", "n"])
    e = g.start_block
    w = g.add("Constant", [], e, {"value": np.array([[1.5, -0.0], [np.inf, np.nan], [1e-8, 3]], np.float32)},
              name="w", loc=SourceLoc("model.py", 3, 4))
    m = g.add("MatMul", [g.args[0], w], e, name="m")
    s = g.add("ReduceSum", [m], e, {"axes": (0,)}, name="s", deps=[w])
    c = g.add("Call", [g.args[0]], e, {"callee": callee}, name="c")
    flags = g.add("Constant", [], e, {"value": np.array([True, False])}, name="flags")
    r = g.add("Return", [s, c, flags, g.args[1]], e)
    g.end_block.append_input(r)
    return print_graph(g)


HEAD = "graph @g {\n^entry:\n  %0 = Start : ()\n"
CORPUS = [print_graph(b()) for b in seeds.ALL.values()] + [_rich_graph()]
TOKENS = ["%", "^", "@", "{", "}", "[", "]", "(", ")", "<", ">", ":", ",", "=", '"', " ", "\n", "#", ".", "-",
          "0", "1", "9", "x", "X", "nan", "inf", "Phi", "Jmp", "Cond", "Return", "Add", "Proj", "Start", "End",
          "tensor<", "tensor<f32[2]: [1.0, 2.0]>", "%0", "%x", "%c", "^entry", "^exit(%9):", "f32", "i64",
          "f32[N, 3]", "f32[...]", "(X, X)", "deps(", "loc(", "{num = 0}", "{num = 7}", "graph @g {",
          "graph @helper {", "@helper", "\\", "\u00e9", "\t", "N*2//0", "(", "1e999", "99999999999999999999"]


@contextmanager
def time_limit(seconds: int) -> Iterator[None]:
    """Turn a hang into a test failure (hypothesis' deadline reports only afterwards)."""
    def on_alarm(*_: object) -> None:
        raise TimeoutError("parse did not finish")

    old = signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def parse_or_parse_error(text: str) -> None:
    with time_limit(10):
        try:
            g = parse(text)
        except ParseError as e:
            assert e.line >= 1 and e.col >= 1 and str(e)
            return
    assert isinstance(g, Graph)
    print_graph(g)  # whatever parses can be printed


@st.composite
def mutated(draw: st.DrawFn) -> str:
    text = draw(st.sampled_from(CORPUS))
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["delete", "insert", "replace", "token", "swap", "dup", "truncate", "span"]))
        n = len(text)
        pos = draw(st.integers(0, max(n - 1, 0)))
        if kind == "delete":
            text = text[:pos] + text[pos + 1:]
        elif kind == "insert":
            text = text[:pos] + draw(st.sampled_from(TOKENS)) + text[pos:]
        elif kind == "replace":
            text = text[:pos] + draw(st.characters(codec="utf-8")) + text[pos + 1:]
        elif kind == "token":
            text = text[:pos] + draw(st.sampled_from(TOKENS)) + text[pos + draw(st.integers(0, 6)):]
        elif kind == "span":
            text = text[:pos] + text[pos + draw(st.integers(1, 40)):]
        elif kind in ("swap", "dup"):
            lines = text.split("\n")
            i = draw(st.integers(0, len(lines) - 1))
            j = draw(st.integers(0, len(lines) - 1))
            if kind == "swap":
                lines[i], lines[j] = lines[j], lines[i]
            else:
                lines.insert(j, lines[i])
            text = "\n".join(lines)
        else:
            text = text[:pos]
    return text


@settings(max_examples=400, deadline=5000, suppress_health_check=[HealthCheck.too_slow])
@given(mutated())
@example("")
@example("graph @g {")
@example("graph @g {\n^entry:\n  %0 = Start : (" + "(" * 5000 + "\n}")
@example("graph @g {\n^entry:\n  %0 = Start : ()\n  %k = Constant {value = " + "[" * 5000 + "} : f32\n}")
@example("graph @g {\n^entry:\n  %0 = Start : (f32[" + "(" * 3000 + "N" + ")" * 3000 + "])\n}")
@example("graph @g {\n^entry:\n  %0 = Start : (f32[N**99999999])\n}")
@example("graph @g {\n^entry:\n  %0 = Start : (f32[2**2**2**2**2**2**2])\n}")
@example(HEAD + "  %k = Constant {value = tensor<f32[0, 99999999999999999999]: []>} : f32\n}")
@example(HEAD + "  %k = Constant {value = tensor<f32[4294967296, 4294967296]: [1]>} : f32\n}")
@example(HEAD + "  %k = Constant {value = tensor<f32[-1]: [1]>} : f32\n}")
def test_mutated_text_parses_or_raises_parse_error(text: str) -> None:
    parse_or_parse_error(text)


@settings(max_examples=150, deadline=5000)
@given(st.lists(st.sampled_from(TOKENS), max_size=30).map("".join))
def test_token_soup_inside_a_graph(body: str) -> None:
    parse_or_parse_error("graph @g {\n^entry:\n  " + body + "\n}\n")


def test_corpus_parses() -> None:
    for text in CORPUS:
        assert print_graph(parse(text)) == text
