"""Running one node's reference kernel (``OpDef.kernel``), the one way every evaluator
does it: the interpreter's tape mode, constant folding, shape inference, the importers'
static values and the XLA backend's host calls.  What a kernel is given (the node's
attributes without placement), the floating-point error state and the error that names
the node live here, so they are changed in one place.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from nexus.ir.node import Node, node_where
from nexus.ir.opdef import UNIVERSAL_ATTRS


class KernelError(ValueError):
    """A kernel raised on its node's values; ``node`` is the node, ``reason`` what the
    kernel said (``ZeroDivisionError: ...``), and ``__cause__`` the original exception."""

    def __init__(self, node: Node, reason: str):
        super().__init__(f"{node_where(node)}: {reason}")
        self.node = node
        self.reason = reason


def kernel_attrs(node: Node) -> dict[str, Any]:
    """The keyword arguments ``node``'s kernel takes: its attributes but placement
    (``device``, ``machine``), which say where it runs, not what it computes."""
    attrs = node.attrs
    if not attrs:
        return {}
    return {k: v for k, v in attrs.items() if k not in UNIVERSAL_ATTRS}


def kernel_call(node: Node, values: Sequence[Any], *, fp_errors: str | None = None) -> Any:
    """``node``'s kernel on ``values`` (one per input).  ``fp_errors``: NumPy's
    floating-point error handling while it runs (``"ignore"`` for evaluators that run
    ahead of the program, which must not warn about values it may never compute; None
    keeps the caller's, as the interpreter does).  Raises KernelError."""
    kernel = node.op.kernel
    if kernel is None:
        raise KernelError(node, f"{node.op.name} has no kernel")
    try:
        if fp_errors is None:
            return kernel(*values, **kernel_attrs(node))
        with np.errstate(all=fp_errors):  # type: ignore[arg-type]
            return kernel(*values, **kernel_attrs(node))
    except Exception as e:  # noqa: BLE001  (any kernel failure is reported with its node)
        raise KernelError(node, f"{type(e).__name__}: {e}") from e
