"""The SSA policy of the DSL: :class:`DSLSSA` is the IR's builder (:mod:`nexus.ir.cons`,
Braun et al.) over the user's Python variables, keyed by ``(frame token, name)``.

- A variable may hold a Python number (:class:`PyScalar`): a Constant is made only when
  a lookup needs a graph value.
- A variable may hold a value that is invalid where it is bound (:class:`Stale`, created
  in a closed region); using it is an error the builder words.
- Values cannot be checked later (the user's code holds them), so the builder asks
  :meth:`DSLSSA.undefined` before a lookup, and a lookup never meets an undefined
  variable.  Paths join types with ``join_types`` (a loop header Phi is widened at
  sealing and the types downstream re-inferred); different dtypes are a ``PhiTypeError``.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass

from nexus.ir.cons import UNDEFINED, Lazy, SSABuilder
from nexus.ir.graph import Graph
from nexus.ir.node import Block, Node, SourceLoc
from nexus.ir.types import Type

Var = Hashable


@dataclass(frozen=True)
class Stale(Lazy):
    """A variable bound to a value that is invalid here (created in a closed region)."""

    reason: str


@dataclass(frozen=True)
class PyScalar(Lazy):
    """A variable holding a Python number: a Constant is made only if a read needs it."""

    value: object


@dataclass(frozen=True)
class Undefined:
    """Why a variable has no value in a block: the merge block where some path lacks it."""

    merge: Block | None
    stale: Stale | None = None


class DSLSSA(SSABuilder[Var]):
    """The DSL's builder: lazy numbers, stale bindings, Phis at the user's source line."""

    def __init__(self, g: Graph, number: Callable[[object], Node], phi_loc: Callable[[Block], SourceLoc | None]):
        super().__init__(g)
        self.number = number  # a Constant for a Python number
        self.phi_loc = phi_loc  # where a Phi of a block comes from in the user's source

    # --- the policy hooks ------------------------------------------------------------------
    def new_phi(self, var: Var, block: Block, t: Type) -> Node:
        name = var[1] if isinstance(var, tuple) and len(var) == 2 and isinstance(var[1], str) else None
        return self.g.add("Phi", [], block, type=t, name=name, loc=self.phi_loc(block))

    def materialize(self, var: Var, block: Block, value: Lazy) -> Node:
        if isinstance(value, PyScalar):
            return self.number(value.value)
        raise AssertionError(f"read of a stale variable: {value!r}")

    # --- definedness -----------------------------------------------------------------------
    def undefined(self, var: Var, block: Block) -> Undefined | None:
        """None if ``var`` has a value on every path to the end of ``block``; else the
        merge block where a path without it joins (or the stale binding found)."""
        state: dict[Block, Undefined | None] = {}
        return self._undefined(var, block, state)

    def _undefined(self, var: Var, block: Block, state: dict[Block, Undefined | None]) -> Undefined | None:
        if block in state:
            return state[block]  # a cycle: the loop itself adds no undefined path
        d = self.defs.get(block, {}).get(var)
        if isinstance(d, Stale):
            return Undefined(None, d)
        if d is not None and d is not UNDEFINED:
            return None
        preds = block.pred_blocks
        if not preds or d is UNDEFINED:
            return Undefined(None)
        state[block] = None
        results = [self._undefined(var, p, state) for p in preds]
        bad = [r for r in results if r is not None]
        out: Undefined | None = None
        if bad:
            stale = next((r for r in bad if r.stale is not None), None)
            if stale is not None:
                out = stale
            elif len(bad) < len(results):
                out = Undefined(block)  # defined on some paths only: this block merges them
            else:
                out = bad[0]
        state[block] = out
        return out
