"""``nx.state(name, init)``: a state declaration, read and assigned in the DSL and in scripts.

A :class:`State` is only a name and an initial value; it holds no run-time value (those
live in the store of a stream, see ``nexus.ops.state``).  ``s.read()`` emits a
``StateRead`` and ``s.assign(v)`` a ``StateWrite`` into the graph being built, each
ordered after the block's previous state op by a ``deps`` edge:

    h = nx.state("h", np.zeros(4, np.float32))     # module level, or inside the builder

    with nx.function("step", x=("f32", (4,))) as f:
        new = nx.tanh(h.read() + f.args[0])
        h.assign(new)
        f.returns(new)

In ``@nx.script`` a State is a module-level (or closure) variable, or a keyword-only
parameter whose default is one (``def step(x, *, h=nx.state("h", np.zeros(4)))``); the
script calls ``h.read()`` and ``h.assign(v)`` the same way.
"""

from __future__ import annotations

import ast
from typing import Any

import numpy as np

from nexus.frontend.dsl.builder import current_builder
from nexus.frontend.dsl.value import Value
from nexus.frontend.values import to_array
from nexus.ir.node import Node
from nexus.ir.types import TensorType, compatible, dtype_of, numpy_dtype
from nexus.ops.state import effect_deps

__all__ = ["State", "StateMethod", "script_state_call", "state"]


class State:
    """A state: ``name`` (what the graph's StateRead/StateWrite call it, and the key of
    its value in a stream's snapshot) and ``init``, the value it has before its first
    assignment and after a reset (a NumPy array, or a value of the DSL graph being
    built)."""

    __slots__ = ("name", "init")

    def __init__(self, name: str, init: Any):
        if not isinstance(name, str) or not name:
            raise ValueError(f"nx.state: the name must be a non-empty string, got {name!r}")
        self.name = name
        if isinstance(init, Value):
            self.init: Any = init
        else:
            try:
                arr = to_array(init, None)
                dtype_of(arr.dtype)
            except (ValueError, TypeError) as e:
                raise ValueError(f"nx.state({name!r}): cannot use {init!r} as the initial value: {e}") from None
            self.init = arr

    def __repr__(self) -> str:
        t = self.init.type if isinstance(self.init, Value) else f"{dtype_of(self.init.dtype)}{list(self.init.shape)}"
        return f"<nx.state {self.name!r}: {t}>"

    # --- the DSL ---------------------------------------------------------------------
    def read(self) -> Value:
        """The state's current value, as a value of the DSL graph being built."""
        what = f"state {self.name!r}.read()"
        b = current_builder(what)
        b.check_can_emit(what)
        init = b.input_node(self.init, None, what)
        return b.wrap(_add(b, "StateRead", init, self.name, what))

    def assign(self, value: Any) -> Value:
        """Make ``value`` the state's value (from here on, and in the next call)."""
        what = f"state {self.name!r}.assign()"
        b = current_builder(what)
        b.check_can_emit(what)
        init = b.input_node(self.init, None, what)
        t = init.type
        assert isinstance(t, TensorType)
        node = b.input_node(value, t, what)
        problem = _mismatch(self.name, t, node)
        if problem:
            b.fail(f"{what}: {problem}")
        return b.wrap(_add(b, "StateWrite", node, self.name, what))


def _add(b: Any, op: str, value: Node, name: str, what: str) -> Node:
    deps = effect_deps(b.block)
    node: Node = b.add(op, [value], {"name": name}, name=name, what=what)
    for d in deps:
        node.add_dep(d)
    b.g.touch()
    return node


def _mismatch(name: str, t: TensorType, value: Node) -> str:
    """Why ``value`` cannot be assigned to a state of type ``t`` ('' when it can)."""
    if compatible(value.type, t):
        return ""
    return (f"state {name!r} is {t}, the value assigned is {value.type} (a state keeps one dtype and shape; "
            "cast the value, or give the arguments static shapes)")


def state(name: str, init: Any) -> State:
    """Declare a state called ``name`` whose value before the first assignment (and after
    ``Stream.reset()``) is ``init``.  Read it with ``s.read()``, assign with
    ``s.assign(v)``, in the DSL or in ``@nx.script``; run the graph with ``nx.stream``."""
    return State(name, init)


# --- @nx.script -------------------------------------------------------------------------
class StateMethod:
    """``s.read`` / ``s.assign`` of a State inside a script, waiting for its call."""

    __slots__ = ("state", "method")

    def __init__(self, state: State, method: str):
        self.state, self.method = state, method

    def __repr__(self) -> str:
        return f"<{self.state!r}.{self.method}>"


def script_state_call(low: Any, call: StateMethod, node: ast.Call) -> Node:
    """Lower ``s.read()`` / ``s.assign(v)`` in a script (``low`` is its expression lowering)."""
    s = call.state
    shown = f"{s.name}.{call.method}()"
    if node.keywords:
        raise low.error(node, f"`{shown}` takes no keyword arguments")
    if isinstance(s.init, Value):
        raise low.error(node, f"state {s.name!r} has a DSL value as its initial value; a script needs an array",
                        "declare it with nx.state(name, np.zeros(...))")
    init = low.const(s.init, dtype_of(s.init.dtype))
    t = init.type
    if call.method == "read":
        if node.args:
            raise low.error(node, f"`{shown}` takes no arguments")
        return _emit(low, "StateRead", init, s.name)
    if len(node.args) != 1:
        raise low.error(node, f"`{s.name}.assign(value)` takes one argument, got {len(node.args)}")
    value = low.as_node(low.expr(node.args[0]))
    vt = value.type
    if isinstance(vt, TensorType) and vt.dtype != t.dtype and _kind(vt.dtype) == _kind(t.dtype) != "b":
        # Float math in a script is f64 where NumPy would say so (weak Python numbers
        # aside); a float state keeps its own float dtype, as `a[...] = v` would in NumPy.
        value = low.cast(value, t.dtype)
    problem = _mismatch(s.name, t, value)
    if problem:
        raise low.error(node, problem, "annotate the arguments with static shapes (x: Tensor[4])")
    return _emit(low, "StateWrite", value, s.name)


def _kind(dtype: str) -> str:
    return np.dtype(numpy_dtype(dtype)).kind


def _emit(low: Any, op: str, value: Node, name: str) -> Node:
    deps = effect_deps(low.cur)
    node: Node = low.emit(op, [value], {"name": name})
    for d in deps:
        node.add_dep(d)
    low.g.touch()
    return node
