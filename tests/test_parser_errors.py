"""ParseError messages point at the line and column of the problem and show the line."""

from __future__ import annotations

import pytest

from nexus import seeds
from nexus.ir import ParseError, parse, print_graph

HEAD = "graph @g {\n^entry:\n  %0 = Start : ()\n"

# text, line, column (1-based), message
CASES = [
    ("graph @g {\n^entry:\n  %0 = Start : (f33)\n}\n", 3, 17, "unknown type 'f33'"),
    (HEAD + "  %r = Return %nope : X\n^exit(%r):\n  End : X\n}\n", 4, 15, "%nope is not defined"),
    (HEAD + "  %k = Frobnicate : f32\n}\n", 4, 3, "unknown op 'Frobnicate'"),
    (HEAD, 4, 1, "graph is not closed with '}'"),
    (HEAD + "  %0 = Jmp : X\n}\n", 4, 3, "%0 is defined twice"),
    (HEAD + "  %k = Constant {value = tensor<f32[3]: [1.0, 2.0]>} : f32[3]\n}\n", 4, 33,
     "f32[3] holds 3 values, found 2"),
    ("graph @g {\n^entry:\n  %0 = Start : (f32[N+])\n}\n", 3, 23, "bad dim 'N+'"),
    (HEAD + "  %k = Constant {value = tensor<f32: 1.0>, colour = 1} : f32\n}\n", 4, 3,
     "Constant: unknown attribute 'colour' (known: value)"),
    ("graph @g {\n^entry:\n  %0 = Start ()\n}\n", 3, 14, "expected ':', found '()'"),
    (HEAD + "  %k = Constant {value = tensor<u8: 300>} : u8\n}\n", 4, 33, "out of range for u8"),
    (HEAD + "  %k = Constant {value = tensor<f32: 1.0>} : f32 trailing\n}\n", 4, 50, "unexpected 'trailing'"),
    ("graph @g {\n  %0 = Start : ()\n}\n", 2, 3, "a node line before the first block header"),
    ("\n\nnot a graph\n", 3, 1, "expected 'graph @name {'"),
    (HEAD + "  %p = Proj %0 : f32\n}\n", 4, 3, "Proj: missing required attribute 'num'"),
    ("graph @g {\n^entry:\n  %0 = Start : (f32[2**9999])\n}\n", 3, 22, "too large for a dim"),
]


@pytest.mark.parametrize("text,line,col,message", CASES)
def test_parse_error_points_at_line_and_column(text: str, line: int, col: int, message: str) -> None:
    with pytest.raises(ParseError) as info:
        parse(text)
    e = info.value
    assert message in e.msg, e.msg
    assert (e.line, e.col) == (line, col), str(e)
    assert str(e).startswith(f"line {line}, col {col}: ")
    source = text.split("\n")[line - 1]
    if source.strip():
        # The offending line and a caret under the column follow the message.
        assert f"\n  {source}\n  {' ' * (col - 1)}^" in str(e)


def test_error_in_a_printed_graph_names_the_right_line() -> None:
    lines = print_graph(seeds.skip5_loop()).split("\n")
    k = next(i for i, ln in enumerate(lines) if "%sum_update = Add" in ln)
    lines[k] = lines[k].replace("%sum, %i", "%sum, %missing")
    with pytest.raises(ParseError, match=f"line {k + 1}, col 27: %missing is not defined"):
        parse("\n".join(lines))


def test_not_text() -> None:
    with pytest.raises(ParseError, match="expected text"):
        parse(b"graph @g {}")  # type: ignore[arg-type]
