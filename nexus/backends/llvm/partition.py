"""Graphs the llvm backend cannot compile whole: they run on the python backend.

:class:`Partitioned` reports which ops stayed out (``stayed_out``: op name -> count of
nodes without a rule or with types the backend does not take) and why."""

from __future__ import annotations

from typing import Any

from nexus.backends.base import Executable, lowering_table
from nexus.backends.llvm.rules import BACKEND
from nexus.ir.graph import Graph

_CONTROL = frozenset({"Start", "End", "Proj", "Phi", "Cond", "Jmp", "Return", "Constant"})


def unsupported_ops(g: Graph) -> dict[str, int]:
    """Op name -> number of nodes of ``g`` the llvm lowering table has no rule for."""
    table = lowering_table(BACKEND)
    out: dict[str, int] = {}
    for n in g.nodes():
        if n.op.name not in table and n.op.name not in _CONTROL:
            out[n.op.name] = out.get(n.op.name, 0) + 1
    return out


class Partitioned(Executable):
    """``g`` on the python backend, with the ops that kept it from LLVM named."""

    backend = BACKEND

    def __init__(self, g: Graph, reason: str = ""):
        from nexus.backends.python.interpreter import compile_python

        self.graph = g
        self.stayed_out = unsupported_ops(g)
        self.reason = reason
        self.compile_time = 0.0
        self._run = compile_python(g)

    def __call__(self, *args: Any) -> Any:
        return self._run(*args)

    def source(self) -> str:
        return f"# ran by the python backend; ops without an llvm rule: {self.stayed_out} {self.reason}\n" + \
            self._run.source()
