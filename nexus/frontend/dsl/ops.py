"""One DSL function per registry op, generated from the OpDefs (so a new op in any family
appears here without code): ``nx.add(a, b)``, ``nx.reshape(x, (2, 3))``,
``nx.reduce_sum(x, axes=(0,), keepdims=True)``.  Inputs are positional (or by their
input names); attributes are keyword arguments; ``name=`` names the node.

Names are the op names in snake_case (``MatMul`` -> ``mat_mul``) plus the TensorFlow /
NumPy spellings users know (``matmul``, ``subtract``, ``sum``, ``logical_and``...): the
op's ``public_names``, one table with scripts (``nexus.frontend.names``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from nexus.frontend.dsl.builder import current_builder
from nexus.frontend.dsl.value import Value
from nexus.frontend.names import public_ops
from nexus.ir.opdef import OpDef
from nexus.ir.types import DTYPES, dtype_of


def dtype_name(value: Any) -> str:
    """A dtype given as a Nexus name ("f32"), a NumPy name ("float32") or a NumPy type."""
    if isinstance(value, str) and value in DTYPES:
        return value
    try:
        return dtype_of(np.dtype(value))
    except (TypeError, ValueError):
        raise ValueError(f"unknown dtype {value!r}; use one of {', '.join(DTYPES)}") from None


def make_op_function(opdef: OpDef, public: str) -> Callable[..., Value]:
    """The DSL function building ``opdef`` into the current graph."""
    attr_kinds = {k: a.kind for k, a in opdef.attrs.items()}

    def op_function(*inputs: Any, name: str | None = None, **kwargs: Any) -> Value:
        b = current_builder(f"nx.{public}")
        args = list(inputs)
        attrs: dict[str, Any] = {}
        for key, value in kwargs.items():
            if key in opdef.inputs and not opdef.variadic:
                pos = opdef.inputs.index(key)
                if pos < len(args):
                    b.fail(f"nx.{public}: input {key!r} given twice")
                while len(args) < pos:
                    args.append(_MISSING)
                args.append(value)
            elif attr_kinds.get(key) == "dtype":
                try:
                    attrs[key] = dtype_name(value)
                except ValueError as e:
                    b.fail(f"nx.{public}: {e}")
            else:
                attrs[key] = value
        if any(a is _MISSING for a in args) or not opdef.arity_ok(len(args)):
            names = ", ".join(opdef.inputs) + (", ..." if opdef.variadic else "")
            b.fail(f"nx.{public} takes {opdef.arity_text()} inputs ({names}), got {len(args)}")
        return b.emit(opdef, args, attrs, name=name, public=public)

    op_function.__name__ = op_function.__qualname__ = public
    attrs_doc = "".join(f"\n    {k}: {a.kind}{'' if a.doc == '' else ' - ' + a.doc}" for k, a in opdef.attrs.items())
    op_function.__doc__ = (f"{opdef.name}: {opdef.doc}\n\nInputs: {', '.join(opdef.inputs) or 'none'}"
                           + (f"\nAttributes:{attrs_doc}" if attrs_doc else ""))
    return op_function


_MISSING = object()


def op_functions() -> dict[str, Callable[..., Value]]:
    """Every op function by public name, built from the registry as it is now."""
    return {public: make_op_function(opdef, public) for public, opdef in public_ops().items()}
