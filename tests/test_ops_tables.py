"""Every key of every rule table is a registered op.

Per-transformation rules live in tables keyed by op name (VJPs, backend lowerings,
constant-folding identities, symbolic shape evaluation, the frontends' name and function
tables...).  A key the registry does not know is a rule nobody can reach, usually a typo
or a renamed op: the table drifted from the registry.  The tables are found, not listed:
every module-level dict (its keys, its values), set, tuple or list in ``nexus`` of which
at least two strings, and at least half, are op names is a table of op names, and all of
its strings must be.  The check itself is tested to fail on a new table and on a bogus key.
"""

from __future__ import annotations

import importlib
import pkgutil
import re
import types
from collections.abc import Iterable, Iterator
from typing import Any

import pytest

import nexus
from nexus.ir.opdef import REGISTRY
from nexus.ops.doc import accepted_dtypes
from nexus.testing.extras import expected_missing, in_ci

# Tables whose strings are another format's op names, which mostly coincide with ours.
FOREIGN = {
    ("nexus.frontend.onnx.data", "ONE_TO_ONE", "keys"): "ONNX op types",
    ("nexus.backends.onnx.lowering", "_SAME", "values"): "ONNX op types",
    ("nexus.frontend.onnx.ops", "CORE_OPS", "items"): "ONNX op types",
}


def _columns(obj: Any) -> Iterator[tuple[str, list[str]]]:
    if isinstance(obj, dict):
        yield "keys", [k for k in obj if isinstance(k, str)]
        yield "values", [v for v in obj.values() if isinstance(v, str)]
        yield "values[0]", [v[0] for v in obj.values() if isinstance(v, tuple) and v and isinstance(v[0], str)]
    elif isinstance(obj, (set, frozenset, tuple, list)):
        yield "items", [x for x in obj if isinstance(x, str)]


# The extra (pyproject.toml) that installs each optional module a Nexus module imports.
_EXTRA_OF = {"jax": "xla", "jaxlib": "xla", "llvmlite": "llvm", "onnxruntime": "onnx", "tensorflow": "tf",
             "graphviz": "viz"}


def _modules() -> Iterator[types.ModuleType]:
    for info in pkgutil.walk_packages(nexus.__path__, "nexus."):
        if info.name.startswith("nexus.testing"):
            continue  # test helpers: generators and oracles, not rules
        try:
            yield importlib.import_module(info.name)
        except ImportError as e:  # an optional part that is not installed: its tables go unchecked
            # (under CI only where the run declares that extra absent, as .ci/run does for torch
            # on the newer Pythons)
            missing = (e.name or "").split(".")[0]
            if in_ci() and _EXTRA_OF.get(missing, missing) not in expected_missing():
                raise


def _defines(mod: types.ModuleType, name: str) -> bool:
    """Whether ``mod`` assigns ``name`` at module level (rather than importing it)."""
    source = getattr(mod, "__file__", None)
    if source is None or not source.endswith(".py"):
        return False
    with open(source, encoding="utf-8") as f:
        text = f.read()
    return re.search(rf"^{re.escape(name)}\s*(:[^=\n]*)?=", text, re.M) is not None


def tables_in(mod: types.ModuleType, seen: set[int] | None = None) -> dict[tuple[str, str, str], list[str]]:
    """``(module, name, column)`` -> the strings of each table of op names that ``mod``
    defines at module level (``seen``: ids of tables already found elsewhere)."""
    seen = set() if seen is None else seen
    out = {}
    for name, obj in vars(mod).items():
        if name.startswith("__") or not isinstance(obj, (dict, set, frozenset, tuple, list)):
            continue
        if id(obj) in seen or not _defines(mod, name):
            continue
        seen.add(id(obj))
        for column, strings in _columns(obj):
            hits = sum(s in REGISTRY for s in strings)
            if hits >= 2 and 2 * hits >= len(strings):
                out[(mod.__name__, name, column)] = strings
    return out


def discovered_tables() -> dict[tuple[str, str, str], list[str]]:
    """Every table of op names in ``nexus``, named where it is defined."""
    seen: set[int] = set()
    return {k: v for mod in _modules() for k, v in tables_in(mod, seen).items()}


def rule_tables() -> dict[str, Iterable[str]]:
    """The tables discovery cannot see (held inside objects), by a name for the report."""
    from nexus.backends.base import TABLES
    from nexus.frontend.names import public_ops

    return {**{f"lowering table {name}": table for name, table in TABLES.items()},
            "frontend public names": [op.name for op in public_ops().values()]}


def unregistered(tables: dict[Any, Iterable[str]]) -> list[str]:
    """``"table: op"`` for each string of a table that is not a registered op."""
    out = []
    for name, keys in tables.items():
        if name in FOREIGN:
            continue
        label = ".".join(name[:2]) + f" [{name[2]}]" if isinstance(name, tuple) else name
        out += [f"{label}: {op}" for op in keys if op not in REGISTRY]
    return out


def test_every_table_of_op_names_names_registered_ops() -> None:
    found = discovered_tables()
    assert len(found) >= 20  # the discovery itself works (46 with every extra but torch)
    assert {k for k in FOREIGN if k not in found} == set()  # the exceptions are still needed
    assert unregistered(found) == []
    tables = rule_tables()
    assert all(tables.values()), [name for name, keys in tables.items() if not keys]
    assert unregistered(tables) == []


def test_lowering_tables_check_themselves() -> None:
    from nexus.backends.base import check_tables

    assert check_tables() == []


def test_a_new_hand_written_table_is_found_and_checked(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "new_rules.py").write_text('_KEEP = frozenset({"Add", "Mul", "Sendd"})\nNOT_OPS = ("a", "b")\n')
    monkeypatch.syspath_prepend(str(tmp_path))
    mod = importlib.import_module("new_rules")
    assert unregistered(tables_in(mod)) == ["new_rules._KEEP [items]: Sendd"]


@pytest.mark.parametrize("where", ["vjp", "lowering", "identities", "names"])
def test_a_bogus_key_is_reported(where: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from nexus.autodiff import VJPS
    from nexus.backends.base import TABLES, check_tables
    from nexus.passes import constfold

    if where == "vjp":
        monkeypatch.setitem(VJPS, "NoSuchOp", lambda *a: None)
        want = "nexus.autodiff.vjp.VJPS [keys]: NoSuchOp"
    elif where == "lowering":
        monkeypatch.setitem(TABLES["python"].rules, "NoSuchOp", lambda *a: None)
        assert check_tables() == ["python:NoSuchOp"]
        assert unregistered(rule_tables()) == ["lowering table python: NoSuchOp"]
        return
    elif where == "identities":
        monkeypatch.setitem(constfold._IDENTITIES, "NoSuchOp", lambda f, n: None)
        want = "nexus.passes.constfold._IDENTITIES [keys]: NoSuchOp"
    else:
        from nexus.ops import math

        monkeypatch.setitem(math._ALIASES, "NoSuchOp", ("no_such",))
        want = "nexus.ops.math._ALIASES [keys]: NoSuchOp"
    assert unregistered(discovered_tables()) == [want]


def test_op_facts_are_consistent() -> None:
    """The facts on OpDef agree with each other and with the type rules."""
    for op in REGISTRY.values():
        if op.size_output is not None:
            assert op.results[-1] == op.size_output.size, op.name  # the size comes last (docs say so)
        if op.operator_on_ints == "nonzero divisor":
            assert op.may_fail_on_int, op.name  # the kernel's zero check is why
        if op.operator:
            assert op.kind == "data" and op.pure, op.name
        if op.forking:
            assert op.terminator and len(op.results) >= 2, op.name  # its exits are Projs
        if op.kind == "comm":
            assert not op.pure, op.name  # communication is ordered, never folded or moved
        if op.promotion == "float":  # the frontends convert ints because the rule refuses them
            assert set(accepted_dtypes(op) or ()) <= {"f16", "bf16", "f32", "f64"}, op.name
        if op.broadcasting:
            assert op.promotion in ("arith", "logical"), op.name
