"""State ops: values that persist across calls of a graph (streaming inference, RNN state).

``StateRead(init) {name}`` is the current value of the state called ``name``, or ``init``
when the state holds nothing yet (never written, or reset); ``StateWrite(value) {name}``
makes ``value`` the state's value and returns it.  Both are impure (``pure=False``, kind
``state``): passes never fold, merge, hoist or remove them.  The frontends order every
state op after the state op before it in the same block with a ``deps`` edge
(:func:`effect_deps`), so a block's reads and writes run in program order; across blocks
control flow orders them.

Where the values live between calls is the :class:`StateStore` that the caller installs
for the call (``with use_store(store): exe(*args)``; ``nx.stream`` does this): the graph
names its states, the store holds their values, so one graph can serve several
independent streams.  Running a stateful graph without a store is an error naming the
op; a store is a plain dict of NumPy arrays, saved as safetensors (``nexus.stream``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence
from contextvars import ContextVar
from typing import Any

import numpy as np

from nexus.ir.graph import Graph
from nexus.ir.node import Block, Node, node_where
from nexus.ir.opdef import Attr, OpTypeError
from nexus.ir.types import TensorType, Type
from nexus.ops._rules import define, tensor

FAMILY = "state"
STATE_OPS = frozenset({"StateRead", "StateWrite"})


class StateError(RuntimeError):
    """A state op run without a store, or states of one name that disagree."""


class StateStore:
    """The values of a graph's states between calls: state name -> array.  A state that
    is absent reads as its ``init`` input."""

    def __init__(self, values: Mapping[str, np.ndarray] | None = None):
        self.values: dict[str, np.ndarray] = dict(values or {})

    def __repr__(self) -> str:
        return f"<StateStore {sorted(self.values)}>"


_STORE: ContextVar[StateStore | None] = ContextVar("nexus_state_store", default=None)


@contextlib.contextmanager
def use_store(store: StateStore) -> Iterator[StateStore]:
    """Make ``store`` the one state ops read and write while the block runs.  State ops
    are impure, so the python backend runs them on the calling thread (never on its
    pool), where this context variable is set."""
    token = _STORE.set(store)
    try:
        yield store
    finally:
        _STORE.reset(token)


def _store(name: str, what: str) -> StateStore:
    store = _STORE.get()
    if store is None:
        raise StateError(f"{what} of state {name!r} outside a stream: run a graph with state ops through "
                         "nx.stream(f).step(...), which keeps the state between calls")
    return store


def _read(init: Any, name: str) -> Any:
    value = _store(name, "read").values.get(name)
    return init if value is None else value


def _write(value: Any, name: str) -> Any:
    # Values are never written in place by kernels (SetItem copies unless it owns the
    # array), so the store may keep the array itself.
    _store(name, "write").values[name] = value
    return value


def _same_as_input(op: str, ins: Sequence[Type], attrs: Mapping[str, Any], _: Sequence[Any]) -> Type:
    t = tensor(op, ins[0], 0)
    if not attrs["name"]:
        raise OpTypeError(f"{op}: the state name must not be empty")
    return t


_NAME = {"name": Attr("str", doc="the state's name: reads and writes of one name are one state")}

define("StateRead", FAMILY, ("init",), _same_as_input, _read, pure=False, kind="state", attrs=_NAME,
       doc="The current value of state `name`, or `init` while the state holds nothing (never written or reset).")
define("StateWrite", FAMILY, ("value",), _same_as_input, _write, pure=False, kind="state", attrs=_NAME,
       doc="Makes `value` the value of state `name` (read by later StateReads, in this call and the next); "
           "returns it.")


def has_state(g: Graph) -> bool:
    """Whether ``g`` or a graph it calls has state ops."""
    return any(n.op.kind == "state" for h in (g, *g.callees()) for n in h.nodes())


def is_effect(n: Node) -> bool:
    """A state op, or a Call of a graph with state ops: the nodes a block's effect chain
    orders."""
    if n.op.kind == "state":
        return True
    return n.op.name == "Call" and has_state(n.attrs["callee"])


def effect_deps(block: Block) -> list[Node]:
    """The ``deps`` a new state op (or a Call of a stateful graph) in ``block`` takes: the
    last one already there (a chain per block keeps them in program order, whatever the
    state names)."""
    for n in reversed(block.members):
        if is_effect(n):
            return [n]
    return []


def state_ops(g: Graph) -> list[Node]:
    """Every state op of ``g`` and of the graphs it calls."""
    return [n for h in (*g.callees(), g) for n in h.nodes() if n.op.name in STATE_OPS]


def state_types(g: Graph) -> dict[str, TensorType]:
    """Each state of ``g`` and its type; StateError when two ops of one state disagree
    (a write of another dtype or shape than the state's reads)."""
    out: dict[str, TensorType] = {}
    first: dict[str, Node] = {}
    for n in state_ops(g):
        name, t = n.attrs["name"], n.type
        assert isinstance(t, TensorType)
        if name not in out:
            out[name], first[name] = t, n
        elif out[name] != t:
            raise StateError(f"graph @{g.name}: state {name!r} is {out[name]} at {first[name].op.name} "
                             f"%{first[name].name or '?'} but {t} at {node_where(n)}")
    return out
