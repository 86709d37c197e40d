"""Optional dependencies in tests: skip with a reason outside CI, fail inside (CI=true)."""

from __future__ import annotations

import importlib
import os
import shutil
from types import ModuleType

import pytest

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


def require(module: str, extra: str) -> ModuleType:
    """Import ``module`` or skip the test (fail under CI, where every extra is installed)."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        msg = f"{module} is not installed (pip install 'nexus[{extra}]'): {e}"
        if IN_CI:
            pytest.fail(msg)
        pytest.skip(msg)


def require_program(name: str, package: str) -> str:
    """The path of an external program, or skip (fail under CI)."""
    path = shutil.which(name)
    if path is None:
        msg = f"the {name!r} program is not installed (Debian package {package!r})"
        if IN_CI:
            pytest.fail(msg)
        pytest.skip(msg)
    return path
