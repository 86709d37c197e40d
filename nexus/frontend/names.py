"""The public names of ops, one table for the DSL and for scripts.

``nx.<name>`` is an op's snake_case name or one of its aliases (``OpDef.public_names``:
``nx.mat_mul`` and ``nx.matmul``, ``nx.reduce_sum`` and ``nx.sum``), whether it is called
on the module while building a DSL graph or inside an ``@nx.script`` function.  The
names come from the registry as it is when they are looked up, so an op registered
later has its names too.
"""

from __future__ import annotations

from nexus.ir.opdef import OpDef, all_ops

# Ops that are functions of the frontends: data ops, except Constant (nx.constant builds
# one from a value; it is no function of tensors).
FUNCTION_KINDS = frozenset({"data"})
NOT_FUNCTIONS = frozenset({"Constant"})

_cache: tuple[int, dict[str, OpDef]] = (-1, {})


def public_ops() -> dict[str, OpDef]:
    """Every public name -> its op (the first op to claim a name keeps it)."""
    global _cache
    ops = all_ops()
    if _cache[0] != len(ops):  # the registry only grows
        table: dict[str, OpDef] = {}
        for op in ops.values():
            if op.kind in FUNCTION_KINDS and op.name not in NOT_FUNCTIONS:
                for name in op.public_names:
                    table.setdefault(name, op)
        _cache = (len(ops), table)
    return _cache[1]


def op_for_name(name: str) -> OpDef | None:
    """The op called ``nx.<name>``, or None."""
    return public_ops().get(name)
