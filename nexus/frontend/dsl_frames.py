"""Reading and rebinding the Python variables of the frames that build a DSL graph.

The with-statement DSL lets users update graph values by plain rebinding
(``x = nx.add(x, step)``).  The builder cannot see an assignment happen, so at every
block boundary it reads the local variables of each frame that opened a region, and at
every block entry it rebinds them to values valid in the new block (a loop-header Phi,
an if-join Phi, ...).  This module holds the two CPython-specific operations that needs,
and the source location of the user's code.
"""

from __future__ import annotations

import ctypes
import os
import sys
from collections.abc import Mapping
from types import FrameType
from typing import Any

from nexus.ir.node import SourceLoc

_FRONTEND_DIR = os.path.dirname(os.path.abspath(__file__))

if sys.version_info < (3, 13):
    # Before PEP 667, ``frame.f_locals`` of a function is a snapshot dict; writes reach the
    # fast locals (and closure cells) only through PyFrame_LocalsToFast.
    _locals_to_fast = ctypes.pythonapi.PyFrame_LocalsToFast
    _locals_to_fast.argtypes = [ctypes.py_object, ctypes.c_int]
    _locals_to_fast.restype = None
else:  # pragma: no cover - f_locals is a write-through proxy from 3.13 on
    _locals_to_fast = None


def frame_locals(frame: FrameType) -> dict[str, Any]:
    """A snapshot of ``frame``'s variables (its globals at module level)."""
    return dict(frame.f_locals)


def set_frame_locals(frame: FrameType, updates: Mapping[str, Any]) -> None:
    """Rebind variables of ``frame`` (a running function, class body or module)."""
    if not updates:
        return
    f_locals = frame.f_locals
    for name, value in updates.items():
        f_locals[name] = value
    if _locals_to_fast is not None and f_locals is not frame.f_globals:
        _locals_to_fast(frame, 0)


def is_dsl_frame(frame: FrameType) -> bool:
    """Whether ``frame`` runs code of the DSL implementation itself."""
    return os.path.dirname(os.path.abspath(frame.f_code.co_filename)) == _FRONTEND_DIR and os.path.basename(
        frame.f_code.co_filename
    ).startswith("dsl")


def user_frame() -> FrameType:
    """The innermost frame outside the DSL implementation: the user's code."""
    frame: FrameType | None = sys._getframe(1)
    while frame is not None and is_dsl_frame(frame):
        frame = frame.f_back
    if frame is None:  # pragma: no cover - always called below user code
        return sys._getframe(1)
    return frame


def user_loc() -> SourceLoc:
    """The source location of the user's line that is running now."""
    frame = user_frame()
    return SourceLoc(frame.f_code.co_filename, frame.f_lineno, 0)
