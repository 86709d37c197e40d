"""The TensorFlow import table: one small function per TF op type, building Nexus nodes.

``RULES.table[op](imp, node)`` gets the importer (``arg``/``args`` read inputs, ``emit``,
``const``) and the :class:`TfNode`, and returns the node's outputs (None for one it does
not produce).  Inputs that Nexus takes as attributes (reduction axes, say) must be known
when the graph is imported.  The rules live in the modules of this package, one per
section (``elementwise``, ``shapes``, ``lists`` for TensorArrays, TensorLists and stacks),
and control flow (``If``, ``While``) in :mod:`nexus.frontend.tf.control`; the registry
loads them on first use.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import numpy as np

from nexus.frontend.importing import Registry, tensor_type
from nexus.frontend.tf.proto import TfImportError, TfNode, nexus_dtype
from nexus.ir.node import Node
from nexus.ir.static import static_value
from nexus.ir.types import numpy_dtype

if TYPE_CHECKING:
    from nexus.frontend.tf.importer import Importer


Outs = Sequence["Node | None"]
Converter = Callable[["Importer", TfNode], Outs]
_SECTIONS = ("nexus.frontend.tf.ops.elementwise", "nexus.frontend.tf.ops.shapes", "nexus.frontend.tf.ops.lists",
             "nexus.frontend.tf.control")
RULES: Registry[Converter] = Registry(*_SECTIONS)
converts = RULES.converts
INT64_MAX, INT64_MIN = np.iinfo(np.int64).max, np.iinfo(np.int64).min


# --- helpers -----------------------------------------------------------------------------------
_t = tensor_type


def attr_i(n: TfNode, key: str, default: int = 0) -> int:
    a = n.attr.get(key)
    return int(a.i) if a is not None else default


def attr_b(n: TfNode, key: str, default: bool = False) -> bool:
    a = n.attr.get(key)
    return bool(a.b) if a is not None else default


def attr_type(n: TfNode, key: str) -> str:
    a = n.attr.get(key)
    if a is None:
        raise TfImportError(f"needs the type attribute {key!r}")
    return nexus_dtype(a.type, f"attribute {key!r}")


def known(imp: Importer, n: TfNode, i: int, what: str) -> np.ndarray:
    """The import-time value of input ``i``, which Nexus takes as an attribute."""
    v = static_value(imp.arg(n, i))
    if v is None:
        raise TfImportError(f"{what} (input {i}, {n.inputs[i][0]!r}) must be known when the graph is imported "
                            f"(a constant, or computed from constants and static shapes); it is computed at run time")
    return np.asarray(v)


def ints(imp: Importer, n: TfNode, i: int, what: str) -> list[int]:
    return [int(x) for x in known(imp, n, i, what).reshape(-1)]


def cast(imp: Importer, v: Node, dtype: str) -> Node:
    if _t(v).dtype == dtype:
        return v
    if v.op.name == "Constant":  # a shape or an index given as a constant: keep it one
        return imp.const(np.asarray(v.attrs["value"]).astype(numpy_dtype(dtype)))
    return imp.emit("Cast", [v], {"to": dtype}, name="")


def i64(imp: Importer, v: Node) -> Node:
    return cast(imp, v, "i64")


def scalar(imp: Importer, v: Node) -> Node:
    if _t(v).shape != ():
        v = imp.emit("Reshape", [v, imp.const(np.array([], np.int64))], name="")
    return v


