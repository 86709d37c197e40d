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
    "infer_shapes": "nexus.passes.shapes",
    "bind_shapes": "nexus.passes.shapes",
    "grad": "nexus.autodiff",
    "value_and_grad": "nexus.autodiff",
    "vjp": "nexus.autodiff",
    "script": "nexus.frontend.script",
    "script_source": "nexus.frontend.script",
    "ScriptError": "nexus.frontend.script",
    "Tensor": "nexus.frontend.script",
    # the with-statement DSL (nexus/frontend/dsl.py); op functions are generated from the registry
    "DSLError": "nexus.frontend.dsl", "Value": "nexus.frontend.dsl", "break_": "nexus.frontend.dsl",
    "constant": "nexus.frontend.dsl", "continue_": "nexus.frontend.dsl", "device": "nexus.frontend.dsl",
    "else_": "nexus.frontend.dsl",
    "function": "nexus.frontend.dsl", "graph": "nexus.frontend.dsl", "if_cond": "nexus.frontend.dsl",
    "return_": "nexus.frontend.dsl", "then": "nexus.frontend.dsl", "while_loop": "nexus.frontend.dsl",
    "abs": "nexus.frontend.dsl", "add": "nexus.frontend.dsl", "and_": "nexus.frontend.dsl",
    "arg_max": "nexus.frontend.dsl", "arg_min": "nexus.frontend.dsl", "argmax": "nexus.frontend.dsl",
    "argmin": "nexus.frontend.dsl", "cast": "nexus.frontend.dsl", "ceil": "nexus.frontend.dsl",
    "clip": "nexus.frontend.dsl", "clip_by_value": "nexus.frontend.dsl", "concat": "nexus.frontend.dsl",
    "constant_of_shape": "nexus.frontend.dsl", "cos": "nexus.frontend.dsl", "cum_sum": "nexus.frontend.dsl",
    "cumsum": "nexus.frontend.dsl", "dim_size": "nexus.frontend.dsl", "div": "nexus.frontend.dsl",
    "divide": "nexus.frontend.dsl", "einsum": "nexus.frontend.dsl", "equal": "nexus.frontend.dsl",
    "erf": "nexus.frontend.dsl", "exp": "nexus.frontend.dsl", "expand": "nexus.frontend.dsl",
    "flatten": "nexus.frontend.dsl", "floor": "nexus.frontend.dsl", "floor_div": "nexus.frontend.dsl",
    "floor_divide": "nexus.frontend.dsl", "floordiv": "nexus.frontend.dsl", "gather": "nexus.frontend.dsl",
    "gather_nd": "nexus.frontend.dsl", "gelu": "nexus.frontend.dsl", "gemm": "nexus.frontend.dsl",
    "greater": "nexus.frontend.dsl", "greater_equal": "nexus.frontend.dsl", "identity": "nexus.frontend.dsl",
    "leaky_relu": "nexus.frontend.dsl", "less": "nexus.frontend.dsl", "less_equal": "nexus.frontend.dsl",
    "log": "nexus.frontend.dsl", "log_softmax": "nexus.frontend.dsl", "logical_and": "nexus.frontend.dsl",
    "logical_not": "nexus.frontend.dsl", "logical_or": "nexus.frontend.dsl", "logical_xor": "nexus.frontend.dsl",
    "mat_mul": "nexus.frontend.dsl", "matmul": "nexus.frontend.dsl", "maximum": "nexus.frontend.dsl",
    "minimum": "nexus.frontend.dsl", "mod": "nexus.frontend.dsl", "mul": "nexus.frontend.dsl",
    "multiply": "nexus.frontend.dsl", "neg": "nexus.frontend.dsl", "negative": "nexus.frontend.dsl",
    "not_": "nexus.frontend.dsl", "not_equal": "nexus.frontend.dsl", "one_hot": "nexus.frontend.dsl",
    "or_": "nexus.frontend.dsl", "pad": "nexus.frontend.dsl", "pow": "nexus.frontend.dsl",
    "power": "nexus.frontend.dsl", "prelu": "nexus.frontend.dsl", "range": "nexus.frontend.dsl",
    "reciprocal": "nexus.frontend.dsl", "reduce_max": "nexus.frontend.dsl", "reduce_mean": "nexus.frontend.dsl",
    "reduce_min": "nexus.frontend.dsl", "reduce_prod": "nexus.frontend.dsl", "reduce_sum": "nexus.frontend.dsl",
    "relu": "nexus.frontend.dsl", "reshape": "nexus.frontend.dsl", "round": "nexus.frontend.dsl",
    "rsqrt": "nexus.frontend.dsl", "scatter_nd": "nexus.frontend.dsl", "shape_of": "nexus.frontend.dsl",
    "sigmoid": "nexus.frontend.dsl", "sign": "nexus.frontend.dsl", "sin": "nexus.frontend.dsl",
    "slice": "nexus.frontend.dsl", "softmax": "nexus.frontend.dsl", "softplus": "nexus.frontend.dsl",
    "split": "nexus.frontend.dsl", "sqrt": "nexus.frontend.dsl", "squeeze": "nexus.frontend.dsl",
    "sub": "nexus.frontend.dsl", "subtract": "nexus.frontend.dsl", "tanh": "nexus.frontend.dsl",
    "tile": "nexus.frontend.dsl", "transpose": "nexus.frontend.dsl", "truediv": "nexus.frontend.dsl",
    "unsqueeze": "nexus.frontend.dsl", "where": "nexus.frontend.dsl", "xor": "nexus.frontend.dsl",
    "average_pool": "nexus.frontend.dsl", "batch_normalization": "nexus.frontend.dsl",
    "boolean_mask": "nexus.frontend.dsl", "check_dims": "nexus.frontend.dsl", "conv": "nexus.frontend.dsl",
    "conv_transpose": "nexus.frontend.dsl", "dropout": "nexus.frontend.dsl",
    "global_average_pool": "nexus.frontend.dsl", "layer_normalization": "nexus.frontend.dsl",
    "max_pool": "nexus.frontend.dsl", "non_max_suppression": "nexus.frontend.dsl", "non_zero": "nexus.frontend.dsl",
    "random_normal": "nexus.frontend.dsl", "random_uniform": "nexus.frontend.dsl", "resize": "nexus.frontend.dsl",
    "top_k": "nexus.frontend.dsl", "unique": "nexus.frontend.dsl",
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
