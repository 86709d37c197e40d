"""One DSL function per registry op, generated from the OpDefs (so a new op in any family
appears here without code): ``nx.add(a, b)``, ``nx.reshape(x, (2, 3))``,
``nx.reduce_sum(x, axes=(0,), keepdims=True)``.  Inputs are positional (or by their
input names); attributes are keyword arguments; ``name=`` names the node.

Names are the op names in snake_case (``MatMul`` -> ``mat_mul``) plus the TensorFlow /
NumPy spellings users know (``matmul``, ``subtract``, ``multiply``, ``logical_and``...).
"""

from __future__ import annotations

import keyword
import re
from collections.abc import Callable
from typing import Any

import numpy as np

from nexus.frontend.dsl_builder import current_builder
from nexus.frontend.dsl_value import Value
from nexus.ir.opdef import OpDef, all_ops
from nexus.ir.types import DTYPES, dtype_of

# Extra public spellings, keyed by op name.
ALIASES: dict[str, tuple[str, ...]] = {
    "MatMul": ("matmul",),
    "Sub": ("subtract",),
    "Mul": ("multiply",),
    "Div": ("divide", "truediv"),
    "FloorDiv": ("floordiv", "floor_divide"),
    "Pow": ("power",),
    "Neg": ("negative",),
    "And": ("logical_and",),
    "Or": ("logical_or",),
    "Xor": ("logical_xor",),
    "Not": ("logical_not",),
    "ArgMax": ("argmax",),
    "ArgMin": ("argmin",),
    "CumSum": ("cumsum",),
    "Clip": ("clip_by_value",),
}
# Ops the DSL builds itself (control flow, constants) rather than as plain functions.
_NOT_FUNCTIONS = frozenset({"Constant"})
_FUNCTION_KINDS = frozenset({"data"})


def snake_case(op_name: str) -> str:
    """``MatMul`` -> ``mat_mul``; Python keywords get a trailing underscore (``and_``)."""
    name = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", op_name).lower()
    return name + "_" if keyword.iskeyword(name) else name


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
    out: dict[str, Callable[..., Value]] = {}
    for opdef in all_ops().values():
        if opdef.kind not in _FUNCTION_KINDS or opdef.name in _NOT_FUNCTIONS:
            continue
        for public in (snake_case(opdef.name), *ALIASES.get(opdef.name, ())):
            out.setdefault(public, make_op_function(opdef, public))
    return out
