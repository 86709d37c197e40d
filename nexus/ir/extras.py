"""The optional extras of the ``nexus-ir`` distribution (``pip install "nexus-ir[onnx]"``):
which extra brings each optional third-party module, and the one-line error that names it
when the module is missing.

It sits at the bottom so that any layer can say which extra it needs; the ``nexus``
command turns every missing optional module into such a line (``needing``), and
``tests/test_cli_extras.py`` checks the table against ``pyproject.toml``."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

EXTRA_OF_MODULE: dict[str, str] = {
    "onnx": "onnx", "onnxruntime": "onnx", "ml_dtypes": "onnx",
    "jax": "xla", "jaxlib": "xla",
    "llvmlite": "llvm",
    "torch": "torch", "array_api_compat": "torch",
    "tensorboard": "tf",
    "graphviz": "viz",
    "torchvision": "models", "transformers": "models", "matplotlib": "models",
}
"""Top-level module -> the extra (``[project.optional-dependencies]``) that installs it."""


def install_command(extra: str) -> str:
    """The command that installs ``extra``, quoted for every shell (zsh globs brackets)."""
    return f'pip install "nexus-ir[{extra}]"'


class MissingExtra(ImportError):
    """An optional dependency is not installed: what needed it, and the extra to install."""

    def __init__(self, what: str, module: str, cause: BaseException | None = None):
        self.what, self.module, self.extra = what, module, EXTRA_OF_MODULE[module]
        first = None if cause is None else _innermost(cause)
        why = f" ({first})" if first is not None and str(first) else ""
        super().__init__(f"{what} needs the {self.extra} extra: {install_command(self.extra)}{why}", name=module)


def missing_module(e: BaseException) -> str | None:
    """The optional module (a key of :data:`EXTRA_OF_MODULE`) whose absence raised ``e``,
    looking through the errors it was raised from (``raise ImportError(...) from e``), or
    None: an ImportError of Nexus's own code, or of a module that is not optional, is a bug
    to report as it is."""
    seen: set[int] = set()
    cause: BaseException | None = e
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        if isinstance(cause, ImportError) and cause.name:
            top = cause.name.split(".")[0]
            if top in EXTRA_OF_MODULE:
                return top
        cause = cause.__cause__
    return None


@contextmanager
def needing(what: str) -> Iterator[None]:
    """Around code that may import an optional module: its ``ImportError`` becomes a
    :class:`MissingExtra` saying that ``what`` ("reading .onnx files") needs its extra.
    Any other ImportError passes unchanged."""
    try:
        yield
    except MissingExtra:
        raise
    except ImportError as e:
        module = missing_module(e)
        if module is None:
            raise
        raise MissingExtra(what, module, e) from e


def _innermost(e: BaseException) -> BaseException:
    """The first error of a ``raise ... from`` chain: "No module named 'jaxlib'" rather
    than the advice a library wrapped it in."""
    for _ in range(100):  # a chain may loop
        if e.__cause__ is None:
            break
        e = e.__cause__
    return e
