"""Nexus: one graph IR for deep-learning programs.  Use as ``import nexus as nx``.

The public names are loaded lazily from the modules that define them (see ``_EXPORTS``),
so ``import nexus`` stays cheap and an optional dependency is imported only when used.
"""

from __future__ import annotations

import importlib
from typing import Any

from nexus.ir import (
    Graph,
    ParseError,
    TensorType,
    TupleType,
    VerifyError,
    X,
    parse,
    print_graph,
    structurally_equal,
    verify,
)
from nexus.runtime import NexusRuntimeError, run

__version__ = "0.1.0"

# name -> module that defines it.  Add a line here when a module grows a public name.
_EXPORTS: dict[str, str] = {
    "save": "nexus.io",
    "load": "nexus.io",
    "to_dot": "nexus.viz",
    "render": "nexus.viz",
    "optimize": "nexus.passes",
    "grad": "nexus.autodiff",
    "value_and_grad": "nexus.autodiff",
    "vjp": "nexus.autodiff",
    "script": "nexus.frontend.script",
    "script_source": "nexus.frontend.script",
    "ScriptError": "nexus.frontend.script",
    "Tensor": "nexus.frontend.script",
}


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'nexus' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


__all__ = [
    "Graph", "NexusRuntimeError", "ParseError", "TensorType", "TupleType", "VerifyError", "X",
    "parse", "print_graph", "run", "structurally_equal", "verify", *_EXPORTS,
]
