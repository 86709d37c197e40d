"""The text parser's own limits (nexus.ir.limits), at the limit and one past it.

Nesting and the length of a number literal are bounded by Nexus, not by the interpreter:
the same text parses (or fails with the same one-line message) on every Python, whatever
its recursion limit or ``sys.get_int_max_str_digits()``."""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest

from nexus.ir import ParseError, TupleType, parse, parse_dim
from nexus.ir.limits import MAX_DIM_NESTING, MAX_NESTING, MAX_NUMBER_CHARS
from nexus.ir.types import DimSyntaxError


def test_the_limits_are_the_documented_numbers() -> None:
    # The tests below build their texts from these; pin them so a change is deliberate.
    assert (MAX_NESTING, MAX_DIM_NESTING, MAX_NUMBER_CHARS) == (32, 50, 600)


def graph(start_type: str = "()", constant: str = "tensor<i32: 7>", ctype: str = "i32", attrs: str = "") -> str:
    return (f"graph @g {{\n^entry:\n  %0 = Start : {start_type}\n"
            f"  %1 = Constant {{value = {constant}{attrs}}} : {ctype}\n"
            "  %2 = Return %1 : X\n^exit(%2):\n  End : X\n}\n")


def parse_error(text: str) -> ParseError:
    with pytest.raises(ParseError) as info:
        parse(text)
    return info.value


def nested_tuple(levels: int) -> str:
    return "(" * levels + ")" * levels


def tuple_depth(t: object) -> int:
    depth = 0
    while isinstance(t, TupleType):
        depth += 1
        t = t.elems[0] if t.elems else None
    return depth


def test_tuple_types_nest_up_to_the_limit() -> None:
    g = parse(graph(start_type=nested_tuple(MAX_NESTING)))
    assert tuple_depth(g.start.type) == MAX_NESTING
    e = parse_error(graph(start_type=nested_tuple(MAX_NESTING + 1)))
    assert e.msg == f"tuple types nest more than {MAX_NESTING} levels deep"
    assert (e.line, e.col) == (3, len("  %0 = Start : ") + MAX_NESTING + 1)  # the bracket that opens level 33


@pytest.mark.parametrize("inner", ["", "1"])
def test_attribute_values_nest_up_to_the_limit(inner: str) -> None:
    """The same limit whether the innermost list is empty or holds a number."""
    def text(levels: int) -> str:
        return graph(attrs=", device = " + "[" * levels + inner + "]" * levels)

    value: list = [int(inner)] if inner else []
    for _ in range(MAX_NESTING - 1):
        value = [value]
    # At the limit the value is read whole; the attribute check that follows refuses a list.
    assert parse_error(text(MAX_NESTING)).msg.endswith(f"attribute 'device' must be a string, got {value!r}")
    e = parse_error(text(MAX_NESTING + 1))
    assert e.msg == f"attribute values nest more than {MAX_NESTING} levels deep"
    assert e.col == len("  %1 = Constant {value = tensor<i32: 7>, device = ") + MAX_NESTING + 1


def test_number_literals_up_to_the_limit() -> None:
    at = "0" * (MAX_NUMBER_CHARS - 1) + "7"
    assert _constant(parse(graph(constant=f"tensor<i32: {at}>"))) == 7
    assert _constant(parse(graph(constant=f"tensor<f64: 0.{'3' * (MAX_NUMBER_CHARS - 2)}>", ctype="f64"))) == 1 / 3
    e = parse_error(graph(constant=f"tensor<i32: 0{at}>"))
    assert e.msg == f"a number of {MAX_NUMBER_CHARS + 1} characters (the limit is {MAX_NUMBER_CHARS})"
    assert (e.line, e.col) == (4, len("  %1 = Constant {value = tensor<i32: ") + 1)


def test_number_literal_limit_applies_to_attribute_numbers_and_dims() -> None:
    too_long = "1" * (MAX_NUMBER_CHARS + 1)
    assert "the limit is" in parse_error(graph(attrs=f", device = {too_long}")).msg
    e = parse_error(graph(start_type=f"(f32[{too_long}])"))
    assert f"a number of {MAX_NUMBER_CHARS + 1} characters" in e.msg
    g = parse(graph(start_type=f"(f32[{'1' * MAX_NUMBER_CHARS}])"))
    assert g.start.type.elems[0].shape == (int("1" * MAX_NUMBER_CHARS),)


def _constant(g: object) -> object:
    node = next(n for b in g.blocks for n in b.nodes if n.op.name == "Constant")  # type: ignore[attr-defined]
    return node.attrs["value"].item()


@pytest.fixture
def int_digits() -> Iterator[None]:
    saved = sys.get_int_max_str_digits()
    yield
    sys.set_int_max_str_digits(saved)


def test_number_limit_does_not_depend_on_the_interpreters_int_digit_limit(int_digits: None) -> None:
    """PYTHONINTMAXSTRDIGITS (or sys.set_int_max_str_digits) changes what int() accepts;
    the text parser accepts and refuses the same literals at its lowest and with none."""
    at, past = "1" * MAX_NUMBER_CHARS, "1" * (MAX_NUMBER_CHARS + 1)
    for setting in (640, 0):  # the lowest the interpreter allows, and unlimited
        sys.set_int_max_str_digits(setting)
        assert parse_dim(at) == int(at)
        with pytest.raises(DimSyntaxError, match="the limit is 600"):
            parse_dim(past)
    sys.set_int_max_str_digits(0)
    with pytest.raises(DimSyntaxError, match="the limit is 600"):
        parse_dim("1" * 5000)  # past int()'s default of 4300 digits too: still Nexus's message


def test_dims_nest_up_to_the_limit() -> None:
    for wrap in (lambda s: f"({s})", lambda s: f"-{s}", lambda s: f"floor({s})", lambda s: f"Max(1, {s})"):
        text = "N"
        for _ in range(MAX_DIM_NESTING):
            text = wrap(text)
        assert str(parse_dim(text)) in ("N", "-N", "Max(1, N)"), text
        with pytest.raises(DimSyntaxError, match=f"nests more than {MAX_DIM_NESTING} levels deep"):
            parse_dim(wrap(text))


def test_a_long_flat_dim_is_not_deep() -> None:
    """The depth counts what encloses a term, not the terms before it."""
    n = 3 * MAX_DIM_NESTING
    assert parse_dim(" + ".join(["N"] * n)) == n * parse_dim("N")
    assert parse_dim(" + ".join(f"Mod(N, {k})" for k in range(2, n))) is not None
