"""The pass manager: a lazy name registry, text pipelines, stats, verify-each.

A pass is a frozen dataclass (its options are fields) with a ``name``, the graph
properties it ``requires`` and those it ``preserves`` when it changes the graph (xDSL's
``ModulePass`` with libFIRM's ``assure``/``confirm`` properties).  ``apply(g)`` edits the
graph in place and returns counts of what it changed, e.g. ``{"folded": 3}``.

Pipelines are text: ``"constfold,cse,dce"``; options go in braces:
``"licm{speculate=false},dce"``.  Pass modules are imported only when a pipeline names
them, so ``import nexus.passes`` stays cheap.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from typing import Any, ClassVar

from nexus.ir.graph import Graph
from nexus.ir.printer import print_graph
from nexus.ir.verify import VerifyError, verify


class PassError(ValueError):
    """A pipeline that names an unknown pass or a bad option, or a pass that broke the graph."""


# Properties a pass may require; each has an assurer run by the manager when missing.
PROPERTIES = ("no_unreachable",)


@dataclass(frozen=True)
class Pass:
    """Base class of every pass; subclasses are frozen dataclasses whose fields are options."""

    name: ClassVar[str] = ""
    requires: ClassVar[frozenset[str]] = frozenset()
    # Properties still true after the pass changed the graph ("all" keeps every one).
    preserves: ClassVar[frozenset[str]] = frozenset()

    def apply(self, g: Graph) -> dict[str, int]:
        raise NotImplementedError


# name -> "module:Class"; imported on first use.
PASSES: dict[str, str] = {
    "constfold": "nexus.passes.constfold:ConstFold",
    "dce": "nexus.passes.dce:DCE",
    "cse": "nexus.passes.cse:CSE",
    "gvn": "nexus.passes.cse:CSE",
    "simplifycfg": "nexus.passes.simplifycfg:SimplifyCFG",
    "licm": "nexus.passes.licm:LICM",
    "inline": "nexus.passes.inline:Inline",
    "shapes": "nexus.passes.shapeinfer:InferShapes",
    "shapechecks": "nexus.passes.shapechecks:InsertShapeChecks",
    "shape-values": "nexus.passes.shapevalues:MaterializeShapeValues",
    "canonicalize": "nexus.passes.canonicalize:Canonicalize",
    "place": "nexus.passes.placement:Place",
}

DEFAULT_PIPELINE = "inline,canonicalize,licm,canonicalize"


def register_pass(name: str, target: str | type[Pass]) -> None:
    """Add a pass under ``name``: a class, or ``"module:Class"`` to import lazily."""
    if isinstance(target, str):
        PASSES[name] = target
    else:
        _LOADED[name] = target
        PASSES[name] = f"{target.__module__}:{target.__qualname__}"


_LOADED: dict[str, type[Pass]] = {}


def get_pass(name: str) -> type[Pass]:
    """The pass class registered under ``name`` (imports its module)."""
    if name in _LOADED:
        return _LOADED[name]
    target = PASSES.get(name)
    if target is None:
        known = ", ".join(sorted(PASSES))
        raise PassError(f"unknown pass {name!r} (known: {known})")
    module, _, cls = target.partition(":")
    klass = getattr(importlib.import_module(module), cls)
    _LOADED[name] = klass
    return klass  # type: ignore[no-any-return]


def available_passes() -> dict[str, str]:
    """Pass name -> first line of its docstring."""
    out = {}
    for name in sorted(PASSES):
        doc = (get_pass(name).__doc__ or "").strip().splitlines()
        out[name] = doc[0] if doc else ""
    return out


def parse_pipeline(text: str) -> list[Pass]:
    """``"constfold,licm{speculate=false},dce"`` -> pass instances, options checked."""
    out: list[Pass] = []
    i, n = 0, len(text)
    while i < n:
        if text[i] in ", \t\n":
            i += 1
            continue
        j = i
        while j < n and text[j] not in ",{ \t\n":
            j += 1
        name = text[i:j]
        opts: dict[str, str] = {}
        if j < n and text[j] == "{":
            close = text.find("}", j)
            if close < 0:
                raise PassError(f"pipeline {text!r}: unclosed '{{' after {name!r}")
            for item in text[j + 1:close].replace(";", " ").replace(",", " ").split():
                key, eq, value = item.partition("=")
                if not eq:
                    raise PassError(f"pass {name}: option {item!r} must be key=value")
                opts[key] = value
            j = close + 1
        out.append(_instantiate(name, opts))
        i = j
    return out


def _instantiate(name: str, opts: Mapping[str, str]) -> Pass:
    klass = get_pass(name)
    known = {f.name: f for f in fields(klass)}
    kwargs: dict[str, Any] = {}
    for key, text in opts.items():
        f = known.get(key)
        if f is None:
            raise PassError(f"pass {name}: unknown option {key!r} (known: {', '.join(known) or 'none'})")
        kwargs[key] = _convert(name, key, text, f.type)
    return klass(**kwargs)


def _convert(pname: str, key: str, text: str, typ: Any) -> Any:
    typ = typ if isinstance(typ, str) else getattr(typ, "__name__", str(typ))
    try:
        if typ == "bool":
            if text.lower() not in ("true", "false", "1", "0"):
                raise ValueError(text)
            return text.lower() in ("true", "1")
        if typ == "int":
            return int(text)
        if typ == "float":
            return float(text)
    except ValueError:
        raise PassError(f"pass {pname}: option {key}={text!r} is not a {typ}") from None
    return text


Printer = Callable[[str, Graph], None]


def run_pipeline(
    g: Graph,
    passes: list[Pass],
    *,
    verify_each: bool = False,
    stats: dict[str, dict[str, int]] | None = None,
    print_after: Printer | None = None,
) -> Graph:
    """Run ``passes`` in order on ``g`` (in place), assuring required properties."""
    held: set[str] = set()
    for p in passes:
        for prop in sorted(p.requires - held):
            _ASSURERS[prop](g)
            held.add(prop)
        before = g.version
        counts = p.apply(g)
        if g.version != before:
            held = set(PROPERTIES) if "all" in p.preserves else held & set(p.preserves)
        if stats is not None:
            mine = stats.setdefault(p.name, {})
            for k, v in counts.items():
                mine[k] = mine.get(k, 0) + v
        if print_after is not None:
            print_after(p.name, g)
        if verify_each:
            try:
                verify(g)
            except VerifyError as e:
                raise PassError(f"after pass {p.name}: {e}") from e
    return g


def _assure_no_unreachable(g: Graph) -> None:
    from nexus.passes.cfgutil import remove_unreachable

    remove_unreachable(g)


_ASSURERS: dict[str, Callable[[Graph], None]] = {"no_unreachable": _assure_no_unreachable}


def optimize(
    g: Graph,
    pipeline: str | None = None,
    *,
    verify_each: bool = False,
    stats: dict[str, dict[str, int]] | None = None,
    print_after_all: bool | Printer = False,
) -> Graph:
    """Optimise ``g`` IN PLACE with a text pipeline (default: :data:`DEFAULT_PIPELINE`)
    and return ``g``.  ``stats``, if given, is filled with ``{pass: {counter: n}}``;
    ``verify_each`` verifies after every pass (raising :class:`PassError` naming it);
    ``print_after_all`` prints the graph after every pass (or calls a function with
    the pass name and graph).  Clone first (``g.clone()``) to keep the original.

    Contract: a run that succeeds gives bit-identical results before and after (NaN and
    the sign of zero included); effectful ops and ``deps`` edges stay.  A run that failed
    in a *dead* pure op (say an unused integer division by zero) may succeed afterwards,
    as dead code is removed; live failures are never folded away or hoisted onto paths
    that did not run them."""
    passes = parse_pipeline(DEFAULT_PIPELINE if pipeline is None else pipeline)
    printer: Printer | None
    if callable(print_after_all):
        printer = print_after_all
    elif print_after_all:
        printer = _print_stdout
    else:
        printer = None
    return run_pipeline(g, passes, verify_each=verify_each, stats=stats, print_after=printer)


def _print_stdout(name: str, g: Graph) -> None:
    print(f"// ----- after {name} -----")
    print(print_graph(g), end="")
