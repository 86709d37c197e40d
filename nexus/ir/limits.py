"""Nexus's own limits on the untrusted text it reads: the text form (:mod:`nexus.ir.parser`,
dim expressions), safetensors headers (:mod:`nexus.ir.tensorio`) and command-line values
(:mod:`nexus.cli.values`).

They are checked before a recursive parser or ``int()`` could meet a limit of the
interpreter, so the same text is accepted or refused on every interpreter: how deeply
:func:`json.loads` may nest depends on CPython's recursion limit and C stack budget, which
differ between versions (5000 nested lists are refused on 3.11 and accepted on 3.13), and
``int()`` refuses long digit strings by a limit that ``PYTHONINTMAXSTRDIGITS`` can change.
"""

from __future__ import annotations

import json
import re
from typing import Any

MAX_NESTING = 32
"""Brackets inside brackets in one value or type: nested lists (a tensor of rank 32, NumPy
1.x's largest), tuple types, JSON arrays and objects."""

MAX_DIM_NESTING = 50
"""Parentheses, unary minus signs and powers inside each other in one dim expression."""

MAX_SIMPLIFY_OPS = 12
"""Operations in a dim expression that ``sympy.simplify`` is asked to normalise; a larger
expression is kept as sympy's constructors evaluated it.  Simplifying costs time
exponential in the expression's size (a product of 20 sums, ``floor`` nested 15 deep: hours),
so text of a few hundred characters could otherwise stall a loader; printing and parsing
a kept expression give the same expression back, so round trips hold either way."""

MAX_DIM_OPS = 1000
"""Operations in one dim expression: operators (unary minus included) and function calls as
written in the text, ``sympy.count_ops`` for a dim built in Python.  The largest dims that
shape inference makes in the tests have 240 (a strided slice in a loop, nested to
``MAX_DIM_NESTING``; conv stacks: under 100).  Checked while the text is split into tokens,
before sympy sees any of it, so a sum of 20,000 symbols is refused in milliseconds."""

MAX_DIM_BITS = 2048
"""The size of the numbers in one dim: every integer, numerator and denominator has at most
this many bits (617 decimal digits, below 640, the lowest limit of
``sys.set_int_max_str_digits``, so a dim always prints).  Sizes are measured as
:func:`nexus.ir.types.dim_bits` does, so that sympy never computes a larger number on the
way: a product counts the sizes of its factors together, ``x**k`` counts ``x``'s ``k``
times, a fraction its numerator and denominator together, a symbol nothing.  The text is
refused at the operator whose result would be larger (``3**2000``, 3170 bits, at its
``**``), before sympy evaluates it."""

MAX_DIM_WORK = 20_000
"""Units of symbolic work that the dims of one text (a whole file) may ask of sympy's
functions.  Each ``floor``, ``ceiling``, ``Max``, ``Min`` or ``Mod`` costs 20 plus the
tokens inside its parentheses, and ``Max`` and ``Min`` that times half the square of
their number of arguments (sympy compares their arguments pairwise: ``Max`` of 99
symbols took 22 s, of 8 symbols 50 ms).  A dim written again is parsed once and costs
nothing.  A unit is about 0.25 ms of sympy on a busy machine, so a text past the budget
is refused within about 5 s; ``floor`` nested 50 deep (the nesting limit) costs 6,100,
the dims that shape inference prints for the test models far less."""

MAX_NUMBER_CHARS = 600
"""Characters in one number literal, sign and exponent included.  A value of any Nexus
dtype takes at most 24; the limit stays below 640, the smallest digit limit that
``sys.set_int_max_str_digits`` accepts, so ``int()`` never refuses a literal allowed here."""


class LimitError(ValueError):
    """Text past one of the limits; ``pos`` is the offset where it goes past (or None)."""

    def __init__(self, msg: str, pos: int | None = None):
        super().__init__(msg)
        self.pos = pos


def number_too_long(literal: str) -> str | None:
    """Why ``literal`` is too long to be a number, or None when it is not."""
    if len(literal) <= MAX_NUMBER_CHARS:
        return None
    return f"a number of {len(literal)} characters (the limit is {MAX_NUMBER_CHARS})"


# A JSON string (an unterminated one runs to the end), or a bracket outside strings.
_JSON_TOKEN = re.compile(r'"(?:[^"\\]|\\[\s\S])*"?|[\[\]{}]')


def json_nesting_excess(text: str, limit: int = MAX_NESTING) -> int | None:
    """The offset of the first bracket that opens level ``limit + 1`` of ``text`` (JSON),
    or None when the arrays and objects nest at most ``limit`` deep."""
    depth = 0
    for m in _JSON_TOKEN.finditer(text):
        ch = m.group()
        if ch in "[{":
            depth += 1
            if depth > limit:
                return m.start()
        elif ch in "]}":
            depth -= 1
    return None


def _int(literal: str) -> int:
    why = number_too_long(literal)
    if why is not None:
        raise LimitError(why)
    return int(literal)


def _float(literal: str) -> float:
    why = number_too_long(literal)
    if why is not None:
        raise LimitError(why)
    return float(literal)


def load_json(text: str, **kwargs: Any) -> Any:
    """:func:`json.loads` within the limits: raises :class:`LimitError` for text that nests
    deeper than :data:`MAX_NESTING` or holds a number longer than :data:`MAX_NUMBER_CHARS`,
    and ``json.JSONDecodeError`` for text that is not JSON."""
    pos = json_nesting_excess(text)
    if pos is not None:
        raise LimitError(f"brackets nest more than {MAX_NESTING} levels deep", pos)
    return json.loads(text, parse_int=_int, parse_float=_float, **kwargs)
