"""Nexus: one graph IR for deep-learning programs.  Use as ``import nexus as nx``.

The public names are loaded lazily from the modules that define them (see ``_EXPORTS``),
so ``import nexus`` stays cheap and an optional dependency is imported only when used.
"""

from __future__ import annotations

import importlib
from typing import Any

from nexus import ops  # noqa: F401, I001  (the op families register themselves; ir imports no op)
from nexus.backends import NexusRuntimeError, compile, run
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

__version__ = "0.1.0"

# name -> module that defines it.  Add a line here when a module grows a public name.
_EXPORTS: dict[str, str] = {
    "save": "nexus.io",
    "load": "nexus.io",
    "to_dot": "nexus.viz",
    "render": "nexus.viz",
    "optimize": "nexus.passes",
    "infer_shapes": "nexus.passes.shapes",
    "bind_shapes": "nexus.ir.binding",
    "BindingError": "nexus.ir.binding",
    "from_onnx": "nexus.frontend.onnx.importer",
    "from_tf": "nexus.frontend.tf.importer",
    "TfImportError": "nexus.frontend.tf.proto",
    "from_torch": "nexus.frontend.torch.importer",
    "from_exported": "nexus.frontend.torch.importer",
    "to_onnx": "nexus.backends.onnx.export",
    "grad": "nexus.autodiff",
    "value_and_grad": "nexus.autodiff",
    "vjp": "nexus.autodiff",
    "script": "nexus.frontend.script",
    "script_source": "nexus.frontend.script",
    "ScriptError": "nexus.frontend.script",
    "Tensor": "nexus.frontend.script",
    # the with-statement DSL (nexus/frontend/dsl/__init__.py); its op functions (nx.add, nx.matmul,
    # ...) are generated from the registry and found by __getattr__ below
    "DSLError": "nexus.frontend.dsl", "Value": "nexus.frontend.dsl", "break_": "nexus.frontend.dsl",
    "constant": "nexus.frontend.dsl", "continue_": "nexus.frontend.dsl", "device": "nexus.frontend.dsl",
    "else_": "nexus.frontend.dsl", "function": "nexus.frontend.dsl", "graph": "nexus.frontend.dsl",
    "if_cond": "nexus.frontend.dsl", "return_": "nexus.frontend.dsl", "then": "nexus.frontend.dsl",
    "while_loop": "nexus.frontend.dsl", "machine": "nexus.frontend.dsl",
    "place": "nexus.passes.placement",
    # state across calls (docs/state.md)
    "state": "nexus.frontend.dsl.state", "State": "nexus.frontend.dsl.state",
    "stream": "nexus.stream", "Stream": "nexus.stream", "load_stream": "nexus.stream",
}


# A public name that is also the name of the submodule defining it (nx.stream, in
# nexus/stream.py): the first import of that submodule anywhere (`from nexus.stream import
# Stream`) binds the module over the name, and nx.stream(...) then calls a module.  Such
# names are bound now; the others stay lazy.
for _name, _module in _EXPORTS.items():
    if _module == f"{__name__}.{_name}":
        globals()[_name] = getattr(importlib.import_module(_module), _name)


def _op_names() -> list[str]:
    from nexus.frontend.dsl import op_names

    return op_names()


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is not None:
        value = getattr(importlib.import_module(module), name)
    else:
        # One DSL function per registered op: an op added to the registry is nx.<snake_name>.
        if name.startswith("_") or name not in _op_names():
            raise AttributeError(f"module 'nexus' has no attribute {name!r}")
        value = getattr(importlib.import_module("nexus.frontend.dsl"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS, *_op_names()})


__all__ = [
    "Graph", "NexusRuntimeError", "ParseError", "TensorType", "TupleType", "VerifyError", "X",
    "compile", "parse", "print_graph", "run", "structurally_equal", "verify", *_EXPORTS,
]
