"""Graph values as the DSL user holds them, with Python operators building graph ops.

A :class:`Value` is either *concrete* (a node) or *a variable read*: when the builder
rebinds the user's variable ``x`` on entering a block, ``x`` becomes "the value of
variable x at the start of that block", resolved to a node (maybe a Phi) on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NoReturn

from nexus.frontend.names import BY_DUNDER
from nexus.ir.node import Block, Node
from nexus.ir.types import TensorType, Type

if TYPE_CHECKING:
    from nexus.frontend.dsl.builder import Builder, Region


class Value:
    """A tensor in the graph being built.  Use it in ``nx`` ops and Python operators."""

    __slots__ = ("_builder", "_node", "_var", "_block", "_epoch", "_region")
    __array_priority__ = 1000  # NumPy scalars on the left defer to our reflected operators

    def __init__(self, builder: Builder, region: Region, node: Node | None = None, *,
                 var: Any = None, block: Block | None = None, epoch: int = -1):
        self._builder = builder
        self._region = region
        self._node = node
        self._var = var
        self._block = block
        self._epoch = epoch

    # --- what it is ----------------------------------------------------------------
    @property
    def node(self) -> Node:
        """The graph node (a variable read is resolved, maybe creating a Phi)."""
        return self._builder.use(self)

    @property
    def type(self) -> Type:
        return self.node.type

    @property
    def dtype(self) -> str:
        t = self.type
        return t.dtype if isinstance(t, TensorType) else str(t)

    @property
    def shape(self) -> tuple | None:
        t = self.type
        return t.shape if isinstance(t, TensorType) else None

    @property
    def graph(self) -> Any:
        return self._builder.g

    def __repr__(self) -> str:
        if self._node is not None:
            n = self._builder.ssa.resolve(self._node)
            blk = n.block.name if n.block is not None else "?"
            return f"<nx.Value %{n.name or n.op.name} : {n.type} in ^{blk}>"
        return f"<nx.Value variable {self._var[1]!r} at ^{self._block.name if self._block else '?'}>"

    # --- misuse --------------------------------------------------------------------
    def __bool__(self) -> NoReturn:
        self._builder.fail("a graph value has no Python truth value while the graph is built; "
                           "branch with `with nx.if_cond(c):` or loop with `with nx.while_loop(c):`")

    def __iter__(self) -> NoReturn:
        self._builder.fail("graph values are not iterable; index them with x[i]")

    def __index__(self) -> NoReturn:
        self._builder.fail("a graph value is not a Python int while the graph is built")

    def __float__(self) -> NoReturn:
        self._builder.fail("a graph value is not a Python float while the graph is built")

    __int__ = __index__
    __hash__ = object.__hash__

    # --- operators -----------------------------------------------------------------
    def _op(self, op: str, *inputs: Any) -> Value:
        return self._builder.emit(op, inputs, {})

    def _binary(self, dunder: str, a: Any, b: Any) -> Value:
        """The op of a Python operator (nexus.frontend.names): ``&``, ``|`` and ``^`` are
        logical on bools and bitwise on integers, as in Python and NumPy."""
        o = BY_DUNDER[dunder]
        return self._op(o.on_bools if o.on_bools and self.dtype == "bool" else o.op, a, b)

    def __add__(self, o: Any) -> Value:
        return self._binary("add", self, o)

    def __radd__(self, o: Any) -> Value:
        return self._binary("add", o, self)

    def __sub__(self, o: Any) -> Value:
        return self._binary("sub", self, o)

    def __rsub__(self, o: Any) -> Value:
        return self._binary("sub", o, self)

    def __mul__(self, o: Any) -> Value:
        return self._binary("mul", self, o)

    def __rmul__(self, o: Any) -> Value:
        return self._binary("mul", o, self)

    def __truediv__(self, o: Any) -> Value:
        return self._binary("truediv", self, o)

    def __rtruediv__(self, o: Any) -> Value:
        return self._binary("truediv", o, self)

    def __floordiv__(self, o: Any) -> Value:
        return self._binary("floordiv", self, o)

    def __rfloordiv__(self, o: Any) -> Value:
        return self._binary("floordiv", o, self)

    def __mod__(self, o: Any) -> Value:
        return self._binary("mod", self, o)

    def __rmod__(self, o: Any) -> Value:
        return self._binary("mod", o, self)

    def __pow__(self, o: Any) -> Value:
        return self._binary("pow", self, o)

    def __rpow__(self, o: Any) -> Value:
        return self._binary("pow", o, self)

    def __matmul__(self, o: Any) -> Value:
        return self._binary("matmul", self, o)

    def __rmatmul__(self, o: Any) -> Value:
        return self._binary("matmul", o, self)

    def __neg__(self) -> Value:
        return self._op("Neg", self)

    def __pos__(self) -> Value:
        return self

    def __abs__(self) -> Value:
        return self._op("Abs", self)

    def __invert__(self) -> Value:  # logical on bools, bitwise on integers
        return self._op("Not" if self.dtype == "bool" else "BitwiseNot", self)

    def __and__(self, o: Any) -> Value:
        return self._binary("and", self, o)

    def __rand__(self, o: Any) -> Value:
        return self._binary("and", o, self)

    def __or__(self, o: Any) -> Value:
        return self._binary("or", self, o)

    def __ror__(self, o: Any) -> Value:
        return self._binary("or", o, self)

    def __xor__(self, o: Any) -> Value:
        return self._binary("xor", self, o)

    def __rxor__(self, o: Any) -> Value:
        return self._binary("xor", o, self)

    def __lshift__(self, o: Any) -> Value:
        return self._binary("lshift", self, o)

    def __rlshift__(self, o: Any) -> Value:
        return self._binary("lshift", o, self)

    def __rshift__(self, o: Any) -> Value:
        return self._binary("rshift", self, o)

    def __rrshift__(self, o: Any) -> Value:
        return self._binary("rshift", o, self)

    def __lt__(self, o: Any) -> Value:
        return self._binary("lt", self, o)

    def __le__(self, o: Any) -> Value:
        return self._binary("le", self, o)

    def __gt__(self, o: Any) -> Value:
        return self._binary("gt", self, o)

    def __ge__(self, o: Any) -> Value:
        return self._binary("ge", self, o)

    def __eq__(self, o: Any) -> Value:  # type: ignore[override]
        return self._binary("eq", self, o)

    def __ne__(self, o: Any) -> Value:  # type: ignore[override]
        return self._binary("ne", self, o)

    def __getitem__(self, index: Any) -> Value:
        """``x[i]`` and ``x[i, j]``: Gather along the leading axes (no slices yet)."""
        parts = index if isinstance(index, tuple) else (index,)
        out = self
        for part in parts:
            if isinstance(part, slice) or part is Ellipsis or part is None:
                self._builder.fail("slicing is not supported yet; index with ints or graph values")
            out = self._builder.emit("Gather", (out, part), {})
        return out
