"""Every key of every rule table is a registered op.

Per-transformation rules live in tables keyed by op name (VJPs, backend lowerings,
constant-folding identities, symbolic shape evaluation, the frontends' name and function
tables...).  A key the registry does not know is a rule nobody can reach, usually a typo
or a renamed op: the table drifted from the registry.  The check itself is tested to
fail on a bogus key.
"""

from __future__ import annotations

from collections.abc import Iterable

import pytest

from nexus.ir.opdef import REGISTRY


def rule_tables() -> dict[str, Iterable[str]]:
    """Every table keyed by (or listing) op names, by a name for the report."""
    from nexus.autodiff import VJPS
    from nexus.backends.base import TABLES
    from nexus.backends.python import plan
    from nexus.frontend.names import public_ops
    from nexus.frontend.script import calls as script_calls
    from nexus.ir.node import TERMINATORS
    from nexus.ops import doc, math
    from nexus.passes import constfold, shapes
    from nexus.viz import dot

    tables: dict[str, Iterable[str]] = {
        "autodiff VJPS": VJPS,
        **{f"lowering table {name}": table for name, table in TABLES.items()},
        "constfold _IDENTITIES": constfold._IDENTITIES,
        "shapes SYMBOLIC_RULES": shapes.SYMBOLIC_RULES,
        "shapes _FIXED": shapes._FIXED,
        "frontend public names": [op.name for op in public_ops().values()],
        "script _NUMPY": script_calls._NUMPY.values(),
        "script _MATH": [op for op, _ in script_calls._MATH.values()],
        "script PYTHON_MATH": script_calls.PYTHON_MATH,
        "script FLOAT_OPS": script_calls.FLOAT_OPS,
        "script PROMOTING": script_calls.PROMOTING,
        "script BOOL_OPS": script_calls.BOOL_OPS,
        "ops.doc PROBE_ATTRS": doc.PROBE_ATTRS,
        # the math family's compact spec: a misspelt key would silently drop a property
        "math _OPERATOR": math._OPERATOR,
        "math _OPERATOR_ON_INTS": math._OPERATOR_ON_INTS,
        "math _ALIASES": math._ALIASES,
        "math _INT_MAY_FAIL": math._INT_MAY_FAIL,
        "math _COMMUTATIVE": math._COMMUTATIVE,
        # control-op dispatch
        "ir TERMINATORS": TERMINATORS,
        "python plan _KIND_BY_NAME": plan._KIND_BY_NAME,
        "viz CONTROL_OPS": dot.CONTROL_OPS,
    }
    return tables


def unregistered(tables: dict[str, Iterable[str]]) -> list[str]:
    """``"table: op"`` for each key that is not a registered op."""
    return [f"{name}: {op}" for name, keys in tables.items() for op in keys if op not in REGISTRY]


def test_every_rule_table_key_is_a_registered_op() -> None:
    tables = rule_tables()
    assert all(tables.values()), [name for name, keys in tables.items() if not keys]
    assert unregistered(tables) == []


def test_lowering_tables_check_themselves() -> None:
    from nexus.backends.base import check_tables

    assert check_tables() == []


@pytest.mark.parametrize("where", ["vjp", "lowering", "identities", "names"])
def test_a_bogus_key_is_reported(where: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from nexus.autodiff import VJPS
    from nexus.backends.base import TABLES, check_tables
    from nexus.passes import constfold

    if where == "vjp":
        monkeypatch.setitem(VJPS, "NoSuchOp", lambda *a: None)
        want = "autodiff VJPS: NoSuchOp"
    elif where == "lowering":
        monkeypatch.setitem(TABLES["python"].rules, "NoSuchOp", lambda *a: None)
        want = "lowering table python: NoSuchOp"
        assert check_tables() == ["python:NoSuchOp"]
    elif where == "identities":
        monkeypatch.setitem(constfold._IDENTITIES, "NoSuchOp", lambda f, n: None)
        want = "constfold _IDENTITIES: NoSuchOp"
    else:
        from nexus.ops import math

        monkeypatch.setitem(math._ALIASES, "NoSuchOp", ("no_such",))
        want = "math _ALIASES: NoSuchOp"
    assert unregistered(rule_tables()) == [want]


def test_op_facts_are_consistent() -> None:
    """The facts on OpDef agree with each other and with the type rules."""
    for op in REGISTRY.values():
        if op.size_output is not None:
            assert op.results[-1] == op.size_output.size, op.name  # the size comes last (docs say so)
        if op.operator_on_ints == "nonzero divisor":
            assert op.may_fail_on_int, op.name  # the kernel's zero check is why
        if op.operator:
            assert op.kind == "data" and op.pure, op.name
