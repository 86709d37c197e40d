"""The registry of the PyTorch import table and the helpers its rules share.

``RULES.table[key](imp, *args, **kwargs)`` gets the importer and the FX node's arguments with
nodes replaced by their values: Nexus nodes for tensors and SymInts (an i64 scalar),
Python numbers, lists, dtypes as torch gives them.  Its parameters mirror the ATen
schema, so Python binds defaults and keywords.  It returns a node, or a list for ops
with several outputs (None where an output is not supported).  Keys are torch's names:
``aten.add.Tensor`` (an overload) or ``aten.add`` (every overload), ``operator.mul``.
The rules live in the modules of this package, one per section: ``pointwise``
(pointwise ops and tensor creation), ``reductions`` (reductions, sorting, SymInt
arithmetic, ``cond`` and ``while_loop``), ``shapes`` (shapes and indexing) and ``nn``
(linear algebra, the nn ops, data-dependent sizes); the registry loads them on first use.
A rule registered with ``@whole`` converts its op whole: the importer has torch's
decompositions leave that op as it is (scaled dot-product attention).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from nexus.frontend.importing import Registry, known_rank, tensor_type
from nexus.frontend.torch.data import (
    NP_DTYPES,
    TorchImportError,
    describe,
    np_dtype,
    source_of,
    target_name,
    torch_dtype,
)
from nexus.ir.node import Node

if TYPE_CHECKING:
    from nexus.frontend.torch.importer import Importer

Rule = Callable[..., Any]
_SECTIONS = ("pointwise", "reductions", "shapes", "nn", "recurrent")
RULES: Registry[Rule] = Registry(*(f"nexus.frontend.torch.ops.{m}" for m in _SECTIONS))
INT64_MAX = int(np.iinfo(np.int64).max)

# Ops that only check or annotate (runtime asserts torch inserts for its symbolic sizes).
IGNORED = ("aten._assert_tensor_metadata", "aten.sym_constrain_range_for_size", "aten.sym_constrain_range",
            "aten._assert_scalar", "aten._assert_async")


rules = RULES.converts
_WHOLE: set[str] = set()


def whole(*ops: str) -> Callable[[Rule], Rule]:
    """``@rules(*ops)`` for ops (full overload names) that torch's decomposition is to leave
    as they are, for this rule to convert whole (:func:`whole_ops`)."""
    _WHOLE.update(ops)
    return rules(*ops)


def whole_ops() -> frozenset[str]:
    """The ops the importer converts whole: the decompositions it runs leave them be."""
    RULES.table  # noqa: B018  (loads the sections, which register them)
    return frozenset(_WHOLE)


def rule_for(target: Any) -> Rule | None:
    """The rule of an FX call target: its overload's, else its packet's."""
    key = target_name(target)
    table = RULES.table
    fn = table.get(key)
    if fn is None and key.startswith("aten."):
        fn = table.get(key.rsplit(".", 1)[0])
    return fn


def unsupported(gm: Any, outer: Any = None) -> list[str]:
    """Every call of the program (subgraphs included) that has no rule, with its source."""
    import operator


    out: list[str] = []
    for n in gm.graph.nodes:
        if n.op == "get_attr":
            sub = getattr(gm, n.target, None)
            if sub is not None and hasattr(sub, "graph"):
                user = next(iter(n.users), None)
                out.extend(unsupported(sub, source_of(user) if user is not None else outer))
        elif n.op == "call_function" and n.target is not operator.getitem and rule_for(n.target) is None:
            out.append(describe(n, outer))
        elif n.op == "call_module":
            out.append(f"call_module {n.target!r} (node {n.name!r})")
    return out


# --- helpers ---------------------------------------------------------------------------------
def rank(v: Node) -> int:
    return known_rank(v, TorchImportError)


def axis(a: int, rank: int) -> int:
    if not -max(rank, 1) <= a < max(rank, 1):
        raise TorchImportError(f"dim {a} is out of range for rank {rank}")
    return a % max(rank, 1)


def cast(imp: Importer, v: Node, dtype: str) -> Node:
    return v if tensor_type(v).dtype == dtype else imp.emit("Cast", [v], {"to": dtype}, name="")


def out_dtype(imp: Importer, k: int | None = None) -> str:
    """The dtype torch gives the current node's output (``k``-th of a tuple)."""
    val = imp.fx.meta.get("val")
    if k is not None:
        val = val[k]
    if val is None or not hasattr(val, "dtype"):
        raise TorchImportError("the node has no example output (meta['val'])")
    return torch_dtype(val.dtype)


def as_tensor(imp: Importer, v: Any, dtype: str) -> Node:
    """``v`` (a node or Python number) as a node of ``dtype``."""
    if isinstance(v, Node):
        return cast(imp, v, dtype)
    return imp.const(v, np_dtype(dtype))


def promote(*vals: Any) -> str:
    """torch's result dtype of ``vals`` (nodes by dtype and whether 0-d, Python numbers)."""
    import torch


    dummies: list[Any] = []
    for v in vals:
        if isinstance(v, Node):
            t = tensor_type(v)
            dummies.append(torch.empty(() if t.shape == () else (1,), dtype=getattr(torch, NP_DTYPES[t.dtype])))
        else:
            dummies.append(v)
    if len(dummies) == 1:
        d = dummies[0]
        return torch_dtype(d.dtype) if isinstance(d, torch.Tensor) else torch_dtype(torch.tensor(d).dtype)
    dt = torch.result_type(dummies[0], dummies[1])
    for d in dummies[2:]:
        dt = torch.promote_types(dt, torch.result_type(d, d) if not isinstance(d, torch.Tensor) else d.dtype)
    return torch_dtype(dt)


def shape_vec(imp: Importer, sizes: Sequence[Any]) -> Node:
    """A 1-D i64 node of ``sizes`` (ints and SymInt nodes): a constant when all are known."""
    known = [imp.value_of(s) for s in sizes]
    if all(k is not None for k in known):
        return imp.const([int(np.asarray(k)) for k in known], np.int64)
    parts = [imp.emit("Reshape", [cast(imp, s, "i64"), imp.const([1], np.int64)], name="") if isinstance(s, Node)
             else imp.const([int(s)], np.int64) for s in sizes]
    return imp.emit("Concat", parts, {"axis": 0}, name="")


def i64_scalar(imp: Importer, v: Any) -> Node:
    if isinstance(v, Node):
        v = cast(imp, v, "i64")
        return v if tensor_type(v).shape == () else imp.emit("Reshape", [v, imp.const([], np.int64)], name="")
    return imp.const(int(v), np.int64)


def int_list(v: Any) -> list[int]:
    return [int(x) for x in (v if isinstance(v, (list, tuple)) else [v])]
