"""Value types of the IR: tensors with int or symbolic dims, tuples, stacks, sequences,
optionals and control (X).

Dims are Python ints or sympy expressions over integer symbols.  Symbols are always made
through :func:`sym` so that two mentions of ``N`` are the same sympy object.  Dim strings
are parsed by a small recursive-descent parser (:func:`parse_dim`), never by ``eval``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TypeAlias

import numpy as np
import sympy

from nexus.ir.limits import MAX_DIM_BITS, MAX_DIM_NESTING, MAX_DIM_OPS, MAX_DIM_WORK, MAX_SIMPLIFY_OPS, number_too_long

Dim: TypeAlias = "int | sympy.Expr"

# Canonical short dtype names and their NumPy dtypes.  The short names are what the text
# format prints; ``numpy_dtype`` and ``dtype_of`` convert at the boundary.
DTYPES: dict[str, np.dtype] = {
    "bool": np.dtype(np.bool_),
    "i8": np.dtype(np.int8),
    "i16": np.dtype(np.int16),
    "i32": np.dtype(np.int32),
    "i64": np.dtype(np.int64),
    "u8": np.dtype(np.uint8),
    "u16": np.dtype(np.uint16),
    "u32": np.dtype(np.uint32),
    "u64": np.dtype(np.uint64),
    "f16": np.dtype(np.float16),
    "f32": np.dtype(np.float32),
    "f64": np.dtype(np.float64),
}
# Narrow dtypes NumPy lacks (bfloat16, the float8/float4 formats, 4- and 2-bit ints), as
# ONNX, safetensors and XLA use them: Nexus name -> the ``ml_dtypes`` type that holds them
# in NumPy.  They are part of the type system always; ``ml_dtypes`` is imported only when
# a value of one is made or read (``numpy_dtype``), so core Nexus needs only NumPy.  They
# are storage types: Cast converts to and from them, data movement (Reshape, Concat...)
# carries them, and arithmetic runs in a wider dtype (the ONNX importer casts around it).
NARROW_DTYPES: dict[str, str] = {
    "bf16": "bfloat16",
    "f8e4m3fn": "float8_e4m3fn",
    "f8e4m3fnuz": "float8_e4m3fnuz",
    "f8e5m2": "float8_e5m2",
    "f8e5m2fnuz": "float8_e5m2fnuz",
    "f8e8m0fnu": "float8_e8m0fnu",
    "f4e2m1fn": "float4_e2m1fn",
    "i4": "int4",
    "u4": "uint4",
    "i2": "int2",
    "u2": "uint2",
}
_BY_NUMPY = {v: k for k, v in DTYPES.items()}
_BY_NARROW_NAME = {v: k for k, v in NARROW_DTYPES.items()}
_NARROW_KINDS = {"bf16": "f", "i4": "i", "i2": "i", "u4": "u", "u2": "u"}  # the rest are floats
ALL_DTYPE_NAMES: tuple[str, ...] = (*DTYPES, *NARROW_DTYPES)
FLOAT_DTYPES = frozenset({"f16", "f32", "f64"})
INT_DTYPES = frozenset({"i8", "i16", "i32", "i64", "u8", "u16", "u32", "u64"})
UNSIGNED_DTYPES = frozenset({"u8", "u16", "u32", "u64"})
NARROW_FLOAT_DTYPES = frozenset(n for n in NARROW_DTYPES if _NARROW_KINDS.get(n, "f") == "f")


def is_dtype(name: str) -> bool:
    """Whether ``name`` is a Nexus dtype (native or narrow); imports nothing."""
    return name in DTYPES or name in NARROW_DTYPES


def dtype_kind(dtype: str) -> str:
    """NumPy's kind letter of a Nexus dtype, narrow ones included ('b', 'i', 'u', 'f'):
    ``ml_dtypes`` types report 'V' to NumPy, so code that branches on the kind asks here."""
    d = DTYPES.get(dtype)
    if d is not None:
        return str(d.kind)
    if dtype in NARROW_DTYPES:
        return _NARROW_KINDS.get(dtype, "f")
    raise ValueError(f"unknown dtype {dtype!r}; known: {', '.join(ALL_DTYPE_NAMES)}")


def _ml_dtypes() -> object:
    try:
        import ml_dtypes  # noqa: PLC0415  (optional: only narrow dtypes need it)
    except ImportError:
        return None
    return ml_dtypes


def numpy_dtype(dtype: str) -> np.dtype:
    try:
        return DTYPES[dtype]
    except KeyError:
        pass
    name = NARROW_DTYPES.get(dtype)
    if name is None:
        raise ValueError(f"unknown dtype {dtype!r}; known: {', '.join(ALL_DTYPE_NAMES)}")
    mod = _ml_dtypes()
    kind = getattr(mod, name, None)
    if kind is None:
        raise ValueError(f"dtype {dtype} needs the ml_dtypes package (0.5 or later) for its NumPy values "
                         f"(pip install ml_dtypes, or nexus-ir[onnx])")
    return np.dtype(kind)  # type: ignore[no-any-return]


def int_range(dtype: str) -> tuple[int, int]:
    """The least and greatest value of an integer dtype, narrow ones included."""
    bits = {"i4": 4, "u4": 4, "i2": 2, "u2": 2}.get(dtype)
    if bits is not None:
        return (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if dtype[0] == "i" else (0, (1 << bits) - 1)
    info = np.iinfo(numpy_dtype(dtype))
    return int(info.min), int(info.max)


def dtype_of(np_dtype: object) -> str:
    """The Nexus dtype name of a NumPy dtype (or anything ``np.dtype`` accepts)."""
    d = np.dtype(np_dtype)  # type: ignore[call-overload]
    try:
        return _BY_NUMPY[d]
    except KeyError:
        pass
    narrow = _BY_NARROW_NAME.get(d.name)  # ml_dtypes types report kind 'V' (float8_e5m2: 'f')
    if narrow is not None and numpy_dtype(narrow) == d:
        return narrow
    raise ValueError(f"NumPy dtype {d} has no Nexus dtype")


def sym(name: str) -> sympy.Symbol:
    """The symbol for a named dim; all dims are non-negative integers."""
    return sympy.Symbol(name, integer=True, nonnegative=True)


def is_static(dim: Dim) -> bool:
    return isinstance(dim, int)


def simplify_dim(dim: Dim) -> Dim:
    """Normalise a dim: sympy integers become Python ints, strings are parsed dims.

    Raises ValueError for a dim past the limits of :mod:`nexus.ir.limits` (more than
    ``MAX_DIM_OPS`` operations, numbers larger than ``MAX_DIM_BITS``), which the text form
    could not read back."""
    if isinstance(dim, (bool, np.bool_)):
        raise TypeError("a dim cannot be a bool")
    if isinstance(dim, (int, np.integer)):
        value = int(dim)
        if value.bit_length() > MAX_DIM_BITS:  # checked before anything converts it to a str
            raise ValueError(f"a dim of {value.bit_length()} bits (the limit is {MAX_DIM_BITS})")
        return value
    if isinstance(dim, str):  # "N", "2*N": parsed, never evaluated
        return parse_dim(dim)
    expr = dim
    if not isinstance(dim, sympy.Symbol):
        ops = sympy.count_ops(dim)
        if ops > MAX_DIM_OPS:
            raise ValueError(f"a dim of {ops} operations (the limit is {MAX_DIM_OPS})")
        bits = dim_bits(dim)
        if bits > MAX_DIM_BITS:
            raise ValueError(f"a dim whose numbers take {bits} bits (the limit is {MAX_DIM_BITS})")
        if ops <= MAX_SIMPLIFY_OPS:  # see MAX_SIMPLIFY_OPS
            expr = sympy.simplify(dim)
    if isinstance(expr, sympy.Integer):
        return int(expr)
    return expr


def _number_bits(x: sympy.Basic) -> int:
    if isinstance(x, sympy.Integer):
        return abs(int(x)).bit_length()
    if isinstance(x, sympy.Rational):
        return abs(int(x.p)).bit_length() + int(x.q).bit_length()
    return 0  # a symbol, or a number sympy keeps symbolic (zoo, nan)


def dim_bits(dim: Dim, memo: dict[sympy.Basic, int] | None = None) -> int:
    """The size of the numbers in ``dim`` as :data:`~nexus.ir.limits.MAX_DIM_BITS` bounds
    it: an integer counts its bits, a fraction those of its numerator and denominator, a
    symbol nothing; a product adds its factors' sizes, ``x**k`` is ``k`` times ``x``'s,
    a sum or function call the largest of its arguments'.  No number sympy computes from
    the parts is larger than what this counts, so checking it before an operation keeps
    sympy's arithmetic small.  ``memo`` keeps the sizes of subexpressions across calls.

    Runs on an explicit stack: dims built in Python may nest deeper than Python recurses."""
    if isinstance(dim, int):
        return dim.bit_length() if dim >= 0 else (-dim).bit_length()
    memo = {} if memo is None else memo
    stack: list[tuple[sympy.Basic, bool]] = [(dim, False)]
    while stack:
        node, ready = stack.pop()
        if node in memo:
            continue
        if not node.args:
            memo[node] = _number_bits(node)
            continue
        if not ready:
            stack.append((node, True))
            stack.extend((a, False) for a in node.args if a not in memo)
            continue
        sizes = [memo[a] for a in node.args]
        if node.is_Mul:
            memo[node] = sum(sizes)
        elif node.is_Pow and node.args[1].is_Integer:
            k = abs(int(node.args[1]))
            memo[node] = max(sizes[0] * max(k, 1), sizes[1])
        elif node.is_Pow:
            memo[node] = sizes[0] + sizes[1]
        else:
            memo[node] = max(sizes)
    return memo[dim]


class Type:
    """Base of all value types."""

    __slots__ = ()


@dataclass(frozen=True, slots=True)
class ControlType(Type):
    """The type of control values (``X``): Jmp, the exits of a Cond, Return."""

    def __str__(self) -> str:
        return "X"


X = ControlType()


@dataclass(frozen=True, slots=True)
class TensorType(Type):
    """A tensor of ``dtype``; ``shape`` is a tuple of dims, or None when the rank is unknown."""

    dtype: str
    shape: tuple[Dim, ...] | None = ()

    def __post_init__(self) -> None:
        if not is_dtype(self.dtype):
            raise ValueError(f"unknown dtype {self.dtype!r}; known: {', '.join(ALL_DTYPE_NAMES)}")
        if self.shape is not None:
            object.__setattr__(self, "shape", tuple(simplify_dim(d) for d in self.shape))

    @property
    def rank(self) -> int | None:
        return None if self.shape is None else len(self.shape)

    @property
    def is_scalar(self) -> bool:
        return self.shape == ()

    @property
    def is_static(self) -> bool:
        return self.shape is not None and all(isinstance(d, int) for d in self.shape)

    def with_shape(self, shape: tuple[Dim, ...] | None) -> TensorType:
        return TensorType(self.dtype, shape)

    def with_dtype(self, dtype: str) -> TensorType:
        return TensorType(dtype, self.shape)

    def __str__(self) -> str:
        if self.shape is None:
            return f"{self.dtype}[...]"
        if not self.shape:
            return self.dtype
        return f"{self.dtype}[{', '.join(format_dim(d) for d in self.shape)}]"


@dataclass(frozen=True, slots=True)
class TupleType(Type):
    """The type of multi-output nodes (Start, Cond, NMS, TopK...); read with Proj."""

    elems: tuple[Type, ...]

    def __str__(self) -> str:
        inner = ", ".join(str(e) for e in self.elems)
        return f"({inner},)" if len(self.elems) == 1 else f"({inner})"


@dataclass(frozen=True, slots=True)
class StackType(Type):
    """A functional (persistent) stack of tensors (``stack``), as graph-mode autodiff's
    forward part pushes saved values for its reverse part.  The elements' types are not
    part of the type: one stack holds values of several types, and each pop names the
    type it reads (``StackPop{dtype=...}``).  A stack is an ordinary value: Phis join it
    and it feeds stack ops; it is not a tuple, so it is never read with Proj."""

    def __str__(self) -> str:
        return "stack"


STACK = StackType()


@dataclass(frozen=True, slots=True)
class SequenceType(Type):
    """A sequence of tensors of one dtype (ONNX's ``seq(tensor)``), written
    ``seq<f32[3, s0]>`` or, with its length, ``seq<f32[3, s0], 4>``.

    ``elem`` is what every element is: its dtype and, where known, its rank; an int dim is
    that size in every element, a symbolic dim is per element (elements may differ there,
    so the call boundary binds no element symbol and ``SequenceAt`` gives each read fresh
    ones).  ``length`` is the number of elements: an int, a symbolic dim, or None when
    unknown.  A sequence is an immutable value (ops return new sequences); a graph's caller
    passes and gets it as a Python list of arrays."""

    elem: TensorType
    length: Dim | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.elem, TensorType):
            raise TypeError(f"a sequence holds tensors, not {self.elem}")
        if self.length is not None:
            object.__setattr__(self, "length", simplify_dim(self.length))
            if isinstance(self.length, int) and self.length < 0:
                raise ValueError(f"a sequence cannot have {self.length} elements")

    @property
    def dtype(self) -> str:
        return self.elem.dtype

    def with_length(self, length: Dim | None) -> SequenceType:
        return SequenceType(self.elem, length)

    def __str__(self) -> str:
        if self.length is None:
            return f"seq<{self.elem}>"
        return f"seq<{self.elem}, {format_dim(self.length)}>"


@dataclass(frozen=True, slots=True)
class OptionalType(Type):
    """A value that may be absent (ONNX's ``optional(...)``): a tensor or a sequence, or
    nothing; written ``opt<f32[3]>``, ``opt<seq<f32[...]>>``.  At run time it is the value
    itself, or None."""

    elem: TensorType | SequenceType

    def __post_init__(self) -> None:
        if not isinstance(self.elem, (TensorType, SequenceType)):
            raise TypeError(f"an optional holds a tensor or a sequence, not {self.elem}")

    def __str__(self) -> str:
        return f"opt<{self.elem}>"


def is_container(t: Type) -> bool:
    """Whether ``t`` is a sequence or an optional: a value no tensor backend holds."""
    return isinstance(t, (SequenceType, OptionalType))


def scalar(dtype: str) -> TensorType:
    return TensorType(dtype, ())


def format_dim(dim: Dim) -> str:
    if isinstance(dim, int):
        return str(dim)
    text = sympy.sstr(dim)
    return str(text).replace(" ", "")


# --- parsing dims and types (used by the text parser and by Tensor["N", 4] annotations) --

_DIM_TOKEN = re.compile(r"\s*(?:(\d+)|([A-Za-z_][A-Za-z_0-9]*)|(//|\*\*|[-+*/%(),]))")
_DIM_FUNCS = {
    "floor": sympy.floor,
    "ceiling": sympy.ceiling,
    "Max": sympy.Max,
    "Min": sympy.Min,
    "Mod": sympy.Mod,
}


class DimSyntaxError(ValueError):
    """A dim expression that does not parse; ``pos`` is the offset in the text."""

    def __init__(self, msg: str, pos: int):
        super().__init__(msg)
        self.pos = pos


class DimBudget:
    """The symbolic work that one text's dims may still ask of sympy (``MAX_DIM_WORK``
    units, see :mod:`nexus.ir.limits`), and the dims it has parsed already: the parser
    keeps one per text, so that the cost is bounded per file, not per dim."""

    def __init__(self, units: int = MAX_DIM_WORK):
        self.left = units
        self.parsed: dict[str, Dim] = {}

    def spend(self, units: int, pos: int) -> None:
        self.left -= units
        if self.left < 0:
            raise DimSyntaxError(f"the dims of this text ask for more symbolic work than the budget of "
                                 f"{MAX_DIM_WORK} units (floor, ceiling, Max, Min, Mod)", pos)


def parse_dim(text: str, budget: DimBudget | None = None) -> Dim:
    """Parse ``N``, ``2*N + 1``, ``floor(N/2)``, ``Max(N, M)`` into a dim.  No eval.

    Within the limits of :mod:`nexus.ir.limits`: at most ``MAX_DIM_OPS`` operations
    (counted on the tokens, before sympy builds anything), nesting at most
    ``MAX_DIM_NESTING`` deep, numbers of at most ``MAX_DIM_BITS`` (checked before each
    operation that could make a larger one).  Sums and products are built in one sympy
    call each rather than one per operator, so the work grows with the text's length, not
    with its square.  ``budget`` bounds the work of the function calls across the dims
    that share it (a fresh one of ``MAX_DIM_WORK`` units when None)."""
    if budget is not None and text in budget.parsed:
        return budget.parsed[text]
    tokens: list[tuple[str, str, int]] = []
    pos, ops = 0, 0
    while pos < len(text):
        if text[pos:].strip() == "":
            break
        m = _DIM_TOKEN.match(text, pos)
        if not m:
            raise DimSyntaxError(f"unexpected character {text[pos:].lstrip()[:1]!r} in dim", pos)
        kind = "int" if m.group(1) else "name" if m.group(2) else "op"
        why = number_too_long(m.group(1)) if kind == "int" else None
        if why is not None:
            raise DimSyntaxError(why, m.start(1))
        tok = (kind, m.group(m.lastindex or 0), m.start(m.lastindex or 0))
        if kind == "op" and (tok[1] not in "()," or (tok[1] == "(" and tokens and tokens[-1][0] == "name")):
            ops += 1  # an operator, or the parenthesis of a function call
            if ops > MAX_DIM_OPS:
                raise DimSyntaxError(f"dim expression has more than {MAX_DIM_OPS} operations", tok[2])
        tokens.append(tok)
        pos = m.end()
    parser = _DimParser(tokens, len(text), DimBudget() if budget is None else budget)
    result = parser.expr()
    if parser.i != len(tokens):
        raise DimSyntaxError(f"unexpected {tokens[parser.i][1]!r} in dim", tokens[parser.i][2])
    dim = simplify_dim(result)
    parser.budget.parsed[text] = dim
    return dim


_FOLD = 16  # operands of a sum or product combined one by one, as Python's operators would


class _DimParser:
    def __init__(self, tokens: list[tuple[str, str, int]], end: int, budget: DimBudget):
        self.tokens, self.budget = tokens, budget
        self.i = 0
        self.end = end
        self.depth = 0
        self.bits: dict[sympy.Basic, int] = {}  # dim_bits of the subexpressions built so far

    def size(self, value: sympy.Expr) -> int:
        return dim_bits(value, self.bits)

    def check(self, value: sympy.Expr, pos: int) -> sympy.Expr:
        """``value``, made by the operator at ``pos``, if its numbers are within the limit."""
        self.combined(self.size(value), pos)
        return value

    def combined(self, sizes: int, pos: int) -> None:
        """Refuse an operator at ``pos`` whose operands' numbers together are too large."""
        if sizes > MAX_DIM_BITS:
            raise DimSyntaxError(f"a number in this dim would take {sizes} bits (the limit is {MAX_DIM_BITS})", pos)

    def nest(self) -> None:
        # Untrusted text must not exhaust the Python stack: a limit of Nexus, checked before
        # the interpreter's own (which differs between versions) could be met.
        if self.depth > MAX_DIM_NESTING:  # the unary() calls running around this one
            pos = self.tokens[self.i][2] if self.i < len(self.tokens) else self.end
            raise DimSyntaxError(f"dim expression nests more than {MAX_DIM_NESTING} levels deep", pos)
        self.depth += 1

    def peek(self) -> str | None:
        return self.tokens[self.i][1] if self.i < len(self.tokens) else None

    def take(self) -> tuple[str, str, int]:
        if self.i >= len(self.tokens):
            raise DimSyntaxError("dim expression ends too early", self.end)
        tok = self.tokens[self.i]
        self.i += 1
        return tok

    def expr(self) -> sympy.Expr:
        value = self.term()
        rest: list[sympy.Expr] = []
        first, count = 0, 1
        while self.peek() in ("+", "-"):
            op, pos = self.take()[1:]
            rhs = self.term()
            if op == "-":
                rhs = self.check(-rhs, pos)
            count += 1
            if count <= _FOLD:
                value = self.check(value + rhs, pos)
            else:
                first = first or pos
                rest.append(rhs)
        if rest:  # one sympy call for the rest: folding a long sum costs its length squared
            value = self.check(sympy.Add(value, *rest), first)
        return value

    def term(self) -> sympy.Expr:
        value = self.unary()
        rest: list[sympy.Expr] = []
        sizes, first, count = self.size(value), 0, 1
        while self.peek() in ("*", "/", "//", "%"):
            op, pos = self.take()[1:]
            rhs = self.unary()
            if op in ("//", "%"):
                if rest:
                    value, rest = self.check(sympy.Mul(value, *rest), first), []
                self.combined(self.size(value) + self.size(rhs), pos)
                value = self.check(sympy.floor(value / rhs) if op == "//" else sympy.Mod(value, rhs), pos)
                sizes, count = self.size(value), 1
                continue
            factor = rhs if op == "*" else rhs ** -1
            sizes += self.size(factor)
            self.combined(sizes, pos)  # before sympy multiplies any of the numbers
            count += 1
            if count <= _FOLD:
                value = self.check(value * factor, pos)
                sizes = self.size(value)
            else:
                first = first or pos
                rest.append(factor)
        if rest:  # one sympy call for the rest, as for sums
            value = self.check(sympy.Mul(value, *rest), first)
        return value

    def unary(self) -> sympy.Expr:
        """A signed power; the depth counts the unary() calls it runs inside (parentheses,
        function calls, unary minus signs and exponents), not the terms before it."""
        self.nest()
        try:
            return self._unary()
        finally:
            self.depth -= 1

    def _unary(self) -> sympy.Expr:
        if self.peek() == "-":
            pos = self.take()[2]
            return self.check(-self.unary(), pos)
        base = self.atom()
        if self.peek() == "**":
            pos = self.take()[2]
            exponent = self.unary()
            _check_power(base, exponent, pos, self.size(base))
            return self.check(base ** exponent, pos)
        return base

    def atom(self) -> sympy.Expr:
        kind, text, pos = self.take()
        if kind == "int":
            return sympy.Integer(int(text))
        if kind == "name":
            if self.peek() == "(":
                fn = _DIM_FUNCS.get(text)
                if fn is None:
                    raise DimSyntaxError(f"unknown function {text!r} in dim", pos)
                self.take()
                first = self.i
                args = [self.expr()]
                while self.peek() == ",":
                    self.take()
                    args.append(self.expr())
                self.expect(")")
                cost = 20 + self.i - first  # sympy's Max and Min compare their arguments pairwise
                self.budget.spend(cost * len(args) ** 2 // 2 if fn in (sympy.Max, sympy.Min) else cost, pos)
                self.combined(sum(self.size(a) for a in args) if fn is sympy.Mod else 0, pos)
                return self.check(fn(*args), pos)
            return sym(text)
        if text == "(":
            value = self.expr()
            self.expect(")")
            return value
        raise DimSyntaxError(f"unexpected {text!r} in dim", pos)

    def expect(self, text: str) -> None:
        kind, got, pos = self.take()
        if got != text:
            raise DimSyntaxError(f"expected {text!r} but found {got!r}", pos)


def _check_power(base: sympy.Expr, exponent: sympy.Expr, pos: int, base_bits: int) -> None:
    """Refuse powers whose value would be huge (sympy computes constant powers eagerly),
    before computing them: ``base_bits`` is ``dim_bits(base)``."""
    if not isinstance(exponent, sympy.Integer):
        if exponent.is_number:
            raise DimSyntaxError("a constant exponent in a dim must be an integer", pos)
        return
    e = int(exponent)
    if e < 0:
        raise DimSyntaxError("a dim cannot have a negative exponent", pos)
    if isinstance(base, sympy.Integer):
        bits = abs(int(base)).bit_length()
        if bits > 1 and (bits - 1) * e >= MAX_DIM_BITS:  # n**e has at least (bits - 1) * e + 1 bits
            raise DimSyntaxError(f"the power {base}**{e} is too large for a dim "
                                 f"(over {MAX_DIM_BITS} bits)", pos)
    elif e > 64:
        raise DimSyntaxError(f"the exponent {e} is too large for a dim", pos)
    elif base_bits * e > MAX_DIM_BITS:
        raise DimSyntaxError(f"a number in this dim would take {base_bits * e} bits "
                             f"(the limit is {MAX_DIM_BITS})", pos)


def broadcast_shapes(a: tuple[Dim, ...], b: tuple[Dim, ...],
                     assumed: list[tuple[int, int, bool]] | None = None) -> tuple[Dim, ...]:
    """NumPy broadcasting of two shapes with symbolic dims.  Raises ValueError on conflict.

    Two dims that may differ at run time (``N`` and ``M``, ``N`` and ``3``) are taken to
    broadcast; the result keeps the int if there is one, else the first.  That is right
    only if the other dim equals the kept one or is 1 (``N = 1`` against ``M = 3`` would
    make the result 3, not N), so ``assumed``, if given, receives ``(axis in a, axis in
    b, a_kept)`` of each such pair for a run-time check of exactly that."""
    out: list[Dim] = []
    for i in range(max(len(a), len(b))):
        da = a[len(a) - 1 - i] if i < len(a) else 1
        db = b[len(b) - 1 - i] if i < len(b) else 1
        # Dims are ints or sympy expressions, never equal to an int: comparing a symbol
        # with 1 would cost a sympify, so the int tests come first.
        a_int, b_int = type(da) is int, type(db) is int
        if a_int and da == 1:
            out.append(db)
        elif (b_int and db == 1) or (a_int == b_int and da == db):
            out.append(da)
        elif a_int and b_int:
            raise ValueError(f"shapes {shape_str(a)} and {shape_str(b)} do not broadcast")
        elif not dims_may_differ(da, db):
            out.append(da)
        else:
            a_kept = a_int or not b_int
            if assumed is not None:
                assumed.append((len(a) - 1 - i, len(b) - 1 - i, a_kept))
            out.append(da if a_kept else db)
    return tuple(reversed(out))


def dims_may_differ(a: Dim, b: Dim, broadcast: bool = False) -> bool:
    """Whether two dims that a rule takes to be equal (``broadcast``: equal or 1) may
    differ at run time: they are not the same expression, not both ints (those the rule
    compared), and, broadcasting, neither is 1."""
    a_int, b_int = type(a) is int, type(b) is int  # dims are ints or simplified sympy expressions
    if a_int and b_int:
        return False
    if broadcast and ((a_int and a == 1) or (b_int and b == 1)):
        return False
    if a is b:
        return False
    if a_int or b_int:
        return True  # an expression equal to an int would have been simplified to it
    if getattr(a, "is_Symbol", False) and getattr(b, "is_Symbol", False):
        # Two plain symbols differ unless they are the same symbol (names first: cheap);
        # skipping simplify for them saves ~10-40 ms per op when a frontend builds graphs
        # over symbolic shapes.
        return a.name != b.name or bool(a != b)  # type: ignore[union-attr]
    return a != b and not dim_is_zero(a - b)


def dim_is_zero(expr: sympy.Expr) -> bool:
    """Whether ``expr`` (a difference of dims) is zero for sure: it is 0 as sympy built it,
    or ``sympy.simplify`` proves it, asked only for at most ``MAX_SIMPLIFY_OPS``
    operations (its time grows exponentially with the size: two sums of 400 symbols cost
    the verifier 8 s per Add).  False means "not proved", which callers treat as "may
    differ": a run-time check, or a fresh symbol, instead of a proof."""
    if expr == 0:
        return True
    if sympy.count_ops(expr) > MAX_SIMPLIFY_OPS:
        return False
    return bool(sympy.simplify(expr) == 0)


def shape_str(shape: tuple[Dim, ...] | None) -> str:
    if shape is None:
        return "[...]"
    return "[" + ", ".join(format_dim(d) for d in shape) + "]"


_fresh = 0


def fresh_dim(prefix: str = "s") -> sympy.Symbol:
    """A new symbol for a dim nobody can name statically (a Phi join, a data-dependent
    size).  Names are ``s0, s1, ...`` in creation order."""
    global _fresh
    _fresh += 1
    return sym(f"{prefix}{_fresh - 1}")


def join_types(a: Type, b: Type) -> Type:
    """The least type covering both: equal dims stay, different dims become a fresh
    symbol, different ranks an unknown rank.  Different dtypes or kinds are an error
    (a stack joins only a stack, and is then unchanged).  Sequences join their element
    types (an empty one's counts for nothing) and their lengths (as dims); optionals join
    what they hold."""
    if a == b:
        return a
    if isinstance(a, TensorType) and isinstance(b, TensorType):
        if a.dtype != b.dtype:
            raise TypeError(f"cannot join {a} and {b}: dtypes differ")
        if a.shape is None or b.shape is None or len(a.shape) != len(b.shape):
            return TensorType(a.dtype, None)
        return TensorType(a.dtype, tuple(x if x == y else fresh_dim() for x, y in zip(a.shape, b.shape)))
    if isinstance(a, SequenceType) and isinstance(b, SequenceType):
        if a.dtype != b.dtype:
            raise TypeError(f"cannot join {a} and {b}: element dtypes differ")
        # An empty sequence's element type constrains nothing (it has no elements).
        elem = b.elem if a.length == 0 else a.elem if b.length == 0 else join_types(a.elem, b.elem)
        assert isinstance(elem, TensorType)
        length = a.length if a.length == b.length else None if a.length is None or b.length is None else fresh_dim()
        return SequenceType(elem, length)
    if isinstance(a, OptionalType) and isinstance(b, OptionalType):
        inner = join_types(a.elem, b.elem)
        assert isinstance(inner, (TensorType, SequenceType))
        return OptionalType(inner)
    raise TypeError(f"cannot join {a} and {b}")


def compatible(a: Type, b: Type) -> bool:
    """Whether two types can describe the same values: same kind and dtype, same rank
    where both are known, equal dims where both are concrete ints (stacks: any two;
    sequences: compatible elements and lengths; optionals: compatible contents)."""
    if a == b:
        return True
    if isinstance(a, TensorType) and isinstance(b, TensorType):
        if a.dtype != b.dtype:
            return False
        if a.shape is None or b.shape is None:
            return True
        if len(a.shape) != len(b.shape):
            return False
        return all(not (isinstance(x, int) and isinstance(y, int)) or x == y for x, y in zip(a.shape, b.shape))
    if isinstance(a, TupleType) and isinstance(b, TupleType):
        return len(a.elems) == len(b.elems) and all(compatible(x, y) for x, y in zip(a.elems, b.elems))
    if isinstance(a, SequenceType) and isinstance(b, SequenceType):
        fixed = isinstance(a.length, int) and isinstance(b.length, int)
        return compatible(a.elem, b.elem) and not (fixed and a.length != b.length)
    if isinstance(a, OptionalType) and isinstance(b, OptionalType):
        return compatible(a.elem, b.elem)
    return False
