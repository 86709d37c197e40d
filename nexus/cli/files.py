"""What the ``nexus`` subcommands read and write: the graph a FILE argument names (a saved
graph, ``seed:NAME`` or ``example:NAME``, resolved here for every subcommand), and the
files they write, whose ``OSError`` becomes one line naming the file."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from nexus.ir.graph import Graph


class CliError(Exception):
    """An error reported as one line on stderr, exit status 1."""


def _seed004() -> Graph:
    from nexus.passes import examples

    return examples.seed004()


def _rnn() -> Graph:
    from nexus.passes import examples

    return examples.rnn(8, 4, 6)


# The graphs of nexus.passes.examples that a FILE argument may name (the RNN at a size the
# pass docs and bench/w3_licm.py show: 8 steps, 4 inputs, 6 hidden).
EXAMPLES: dict[str, Callable[[], Graph]] = {"seed004": _seed004, "rnn": _rnn}

FILE_HELP = ("a graph saved with nx.save (text, with its tensors in FILE.safetensors), seed:NAME for a "
             "built-in seed graph (seed:ifelse, seed:skip5_loop, seed:first_example), or example:NAME for a "
             f"pass example ({', '.join('example:' + name for name in EXAMPLES)})")


def load_graph(path: str) -> Graph:
    """The graph ``path`` names: ``seed:NAME`` builds a seed graph, ``example:NAME`` one of
    :data:`EXAMPLES`, anything else is a file loaded with ``nx.load``."""
    if path.startswith("seed:"):
        from nexus.seeds import ALL

        build = ALL.get(path[len("seed:"):])
        if build is None:
            raise CliError(f"unknown seed graph {path[len('seed:'):]!r}; known: {', '.join(ALL)}")
        return build()
    if path.startswith("example:"):
        example = EXAMPLES.get(path[len("example:"):])
        if example is None:
            raise CliError(f"unknown example {path[len('example:'):]!r}; known: {', '.join(EXAMPLES)}")
        return example()
    from nexus.io import load

    if os.path.isdir(path):
        raise CliError(f"{path}: is a directory, not a graph file")
    try:
        return load(path)
    except OSError as e:  # one that nx.load did not name (a read that fails once the file is open)
        raise CliError(f"{path}: cannot read: {e.strerror or e}") from None


@contextmanager
def writing(path: str) -> Iterator[None]:
    """Around code that writes ``path``: an ``OSError`` (a full disk, a missing directory,
    no permission) becomes a :class:`CliError` naming the file.  A write that fails has no
    file name of its own (``e.filename`` is None), hence the wrapper."""
    try:
        yield
    except BrokenPipeError:
        raise
    except OSError as e:
        folder = os.path.dirname(path) or "."
        if not os.path.isdir(folder):
            raise CliError(f"cannot write {path}: the directory {folder} does not exist") from None
        name = e.filename if e.filename not in (None, path) else None  # another file: the .safetensors beside
        why = f"{name}: {e.strerror}" if name else (e.strerror or str(e))
        raise CliError(f"cannot write {path}: {why}") from None
