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

from nexus.frontend.torch_data import TorchImportError
from nexus.ir.node import Node

if TYPE_CHECKING:
    from nexus.frontend.torch_import import Importer


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
        p = _scalar_bool(imp, pred)
        on_false, on_true = imp.branch(p)
        arms = []
        for label, gm, edge in (("then", true_gm, on_true), ("else", false_gm, on_false)):
            imp.block = imp.new_block(label, [edge])
            outs = [imp.as_node(v, "a branch output") for v in imp.emit_graph(gm, None, ops)]
            arms.append((imp.block, outs, imp.jump()))
    (then_end, then_outs, j1), (else_end, else_outs, j2) = arms
    if len(then_outs) != len(else_outs):
        raise TorchImportError(f"cond's branches return {len(then_outs)} and {len(else_outs)} values")
    join = imp.new_block("join", [j1, j2])
    uid = imp.new_id()
    keys = [(uid, k) for k in range(len(then_outs))]
    for key, a, b in zip(keys, then_outs, else_outs):
        imp.ssa.set_value(key, then_end, a)
        imp.ssa.set_value(key, else_end, b)
    imp.block = join
    return [imp.ssa.get_value(key, join) for key in keys]


def convert_while(imp: Importer, cond_gm: Any, body_gm: Any, carried: Any, additional: Any) -> list[Any]:
    """``while_loop``: a loop whose header Phis are the carried values."""
    fx = imp.fx
    init = [imp.as_node(v, "a loop-carried value") for v in carried]
    extra = list(additional)
    uid = imp.new_id()
    keys = [(uid, k) for k in range(len(init))]
    with imp.inside(fx):
        pre = imp.block
        for key, v in zip(keys, init):
            imp.ssa.set_value(key, pre, v)
        jmp = imp.jump()
        header = imp.new_block("loop", [jmp], seal=False)
        imp.ssa.declare_assigned(header, keys)
        imp.block = header
        phis = [imp.ssa.get_value(key, header) for key in keys]
        test = imp.emit_graph(cond_gm, None, [*phis, *extra])
        if len(test) != 1:
            raise TorchImportError(f"while_loop's condition returns {len(test)} values, not one")
        on_false, on_true = imp.branch(_scalar_bool(imp, test[0]))
        exit_block = imp.new_block("loop_exit", [on_false])
        imp.block = imp.new_block("loop_body", [on_true])
        vin = [imp.ssa.get_value(key, imp.block) for key in keys]
        outs = [imp.as_node(v, "a loop body output") for v in imp.emit_graph(body_gm, None, [*vin, *extra])]
        if len(outs) != len(init):
            raise TorchImportError(f"while_loop's body returns {len(outs)} values for {len(init)} carried ones")
        for key, v in zip(keys, outs):
            imp.ssa.set_value(key, imp.block, v)
        header.append_input(imp.jump())
        imp.ssa.seal(header)
    imp.block = exit_block
    return [imp.ssa.get_value(key, exit_block) for key in keys]
