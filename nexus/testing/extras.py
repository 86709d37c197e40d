"""Optional dependencies in tests: skip with a reason outside CI, fail inside (CI=true).

A test module may call :func:`require` at module level: a missing extra then skips the
whole module, with its reason shown by ``pytest -rs``.  Under CI a missing extra fails,
except the extras that the run declares absent in ``NEXUS_EXPECT_MISSING`` (a comma-
separated list of extra names, e.g. ``torch``): ``.ci/run`` sets it for the interpreters
that have no torch wheel here.  The variable only turns those failures into skips with a
reason; it changes nothing else.

Only a missing *third-party* package is optional.  Nexus's own modules are imported
directly by tests, and an ImportError that comes from Nexus code (a broken import inside
a nexus module, a nexus module that does not exist) is a bug: it propagates, so the test
errors instead of being skipped."""

from __future__ import annotations

import importlib
import os
import shutil
import sys
from types import ModuleType, TracebackType
from typing import Any

import pytest


def in_ci() -> bool:
    """Whether we run under CI, where every extra is installed (read at each call, so
    tests of this module can set it)."""
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def expected_missing() -> frozenset[str]:
    """The extras this run declares absent (``NEXUS_EXPECT_MISSING=torch,onnx``): their
    tests skip under CI too.  Read at each call, like :func:`in_ci`."""
    raw = os.environ.get("NEXUS_EXPECT_MISSING", "")
    return frozenset(name.strip() for name in raw.split(",") if name.strip())


def require(module: str, extra: str) -> ModuleType:
    """Import the optional third-party ``module`` (installed by ``pip install
    'nexus-ir[extra]'``) or skip the test, or the whole module when called at module level;
    under CI fail instead, unless ``extra`` is in ``NEXUS_EXPECT_MISSING``.  An
    ImportError raised by Nexus's own code propagates."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        if _is_nexus(module) or _is_nexus(e.name) or _raised_in_nexus(e.__traceback__):
            raise
        msg = f"{module} is not installed (pip install 'nexus-ir[{extra}]'): {e}"
        caller = sys._getframe(1).f_code
        if caller.co_name == "<module>":
            # pytest reports a module's skip at the line that raised it (here), and `-rs`
            # folds equal reasons into one line: name the module so each one shows.
            msg = f"{os.path.basename(caller.co_filename)}: {msg}"
        if in_ci():
            if extra not in expected_missing():
                pytest.fail(msg)
            msg += f" (expected here: NEXUS_EXPECT_MISSING={os.environ['NEXUS_EXPECT_MISSING']})"
        # A skip outside a test function (a module-level require) skips that module; without
        # the flag pytest reports it as a collection error that fails the whole run.
        pytest.skip(msg, allow_module_level=True)


def _is_nexus(name: str | None) -> bool:
    return name is not None and (name == "nexus" or name.startswith("nexus."))


def _raised_in_nexus(tb: TracebackType | None) -> bool:
    """Whether a frame of the traceback runs code of a nexus module (this one aside): a
    third-party package that imports Nexus and meets a broken nexus module."""
    while tb is not None:
        name = tb.tb_frame.f_globals.get("__name__")
        if name != __name__ and _is_nexus(name):
            return True
        tb = tb.tb_next
    return False


def require_program(name: str, package: str) -> str:
    """The path of an external program, or skip (fail under CI)."""
    path = shutil.which(name)
    if path is None:
        msg = f"the {name!r} program is not installed (Debian package {package!r})"
        if in_ci():
            pytest.fail(msg)
        pytest.skip(msg)
    return path


# The third-party module each optional backend needs (its extra: EXTRA_OF_MODULE's).
BACKEND_MODULES = {"llvm": "llvmlite", "xla": "jax", "onnxruntime": "onnxruntime", "auto": "onnxruntime"}


def compiled_script(fn: Any, backend: str) -> Any:
    """``fn`` as ``@nx.script``, compiled on ``backend`` (python: the script itself); a
    missing extra of the backend skips the test (fails under CI), as :func:`require`."""
    from nexus.backends.base import compile as compile_on
    from nexus.frontend.script import script
    from nexus.ir.extras import EXTRA_OF_MODULE

    s = script(fn)
    if backend == "python":
        return s
    module = BACKEND_MODULES[backend]
    require(module, EXTRA_OF_MODULE[module])
    return compile_on(s, backend=backend)
