"""``torch.cond`` and ``while_loop`` as blocks and Phis (the PyTorch importer's control flow).

``cond(pred, true_gm, false_gm, operands)``: the current block ends in a Cond on
``pred``; each branch graph is converted into its own arm on ``operands``, and the arms
jump to a join block.  Each output is a variable of the SSA builder bound at the end of
both arms, so a Phi appears only where they differ.

``while_loop(cond_gm, body_gm, carried, additional)``::

    pre:    v := carried                          (one variable per carried value)
    header: test := cond_gm(v, *additional)      (Phis of v; may span blocks)
            Cond test -> body | exit
    body:   v := body_gm(v, *additional); Jmp header
    exit:   the outputs are v (the header's Phis)

The header is sealed after the back edge; ``declare_assigned`` tells the builder that
only the loop's variables change around it.  ``additional`` (what the functions close
over) are ordinary values defined before the loop.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from nexus.frontend.torch.data import TorchImportError
from nexus.ir.node import Node

if TYPE_CHECKING:
    from nexus.frontend.torch.importer import Importer


def _scalar_bool(imp: Importer, v: Any) -> Node:
    if isinstance(v, bool):
        return imp.const(v)
    if not isinstance(v, Node):
        raise TorchImportError(f"the predicate must be a bool tensor or SymBool, got {type(v).__name__}")
    return imp.scalar_bool(v)


def convert_cond(imp: Importer, pred: Any, true_gm: Any, false_gm: Any, operands: Any) -> list[Any]:
    """``torch.cond``: an if/else region whose join Phis are the outputs."""
    fx = imp.fx
    known = imp.value_of(pred) if isinstance(pred, Node) else pred
    ops = list(operands)
    with imp.inside(fx):
        if isinstance(known, bool) or (known is not None and getattr(known, "size", 0) == 1):
            # a predicate known when the program is imported: only that branch exists
            return imp.emit_graph(true_gm if bool(known) else false_gm, None, ops)
        return imp.if_else(
            _scalar_bool(imp, pred),
            lambda side: [imp.as_node(v, "a branch output")
                          for v in imp.emit_graph(true_gm if side == "then" else false_gm, None, ops)],
            (imp.new_id(),),
            lambda t, e: TorchImportError(f"cond's branches return {t} and {e} values"))


def convert_while(imp: Importer, cond_gm: Any, body_gm: Any, carried: Any, additional: Any) -> list[Any]:
    """``while_loop``: a loop whose header Phis are the carried values."""
    fx = imp.fx
    init = [imp.as_node(v, "a loop-carried value") for v in carried]
    extra = list(additional)

    def test(vals: list[Node]) -> Node:
        out = imp.emit_graph(cond_gm, None, [*vals, *extra])
        if len(out) != 1:
            raise TorchImportError(f"while_loop's condition returns {len(out)} values, not one")
        return _scalar_bool(imp, out[0])

    def body(vals: list[Node]) -> list[Node]:
        return [imp.as_node(v, "a loop body output") for v in imp.emit_graph(body_gm, None, [*vals, *extra])]

    with imp.inside(fx):
        return imp.while_loop(init, test, body, (imp.new_id(),),
                              lambda got, want: TorchImportError(f"while_loop's body returns {got} values for "
                                                                 f"{want} carried ones"))
