"""Saving and loading graphs: the text form plus a safetensors payload.

``save(g, "model.nx")`` writes the text to ``model.nx`` and, when the graph holds
tensors too large to print inline (more than 16 elements), those tensors to
``model.nx.safetensors``.  ``load`` reads both back.  Loading parses text and raw bytes
only: it never unpickles, imports or evaluates anything from the files.
"""

from __future__ import annotations

import os
import re

import numpy as np

from nexus.ir.graph import Graph
from nexus.ir.parser import parse
from nexus.ir.printer import print_graph
from nexus.ir.tensorio import LoadError, load_file, save_file

__all__ = ["LoadError", "load", "payload_path", "save"]

PathLike = str | os.PathLike[str]
_PAYLOAD_REF = re.compile(r'tensor<[^>]*:\s*@"')


def payload_path(path: PathLike) -> str:
    """Where the tensors of the graph saved at ``path`` live."""
    return os.fspath(path) + ".safetensors"


def save(graph: Graph, path: PathLike) -> None:
    """Write ``graph`` (and the graphs it calls) to ``path`` as text, large tensors to
    ``path + ".safetensors"``.  A stale payload from an earlier save is removed."""
    payload: dict[str, np.ndarray] = {}
    text = print_graph(graph, payload)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    side = payload_path(path)
    if payload:
        save_file(payload, side, metadata={"format": "nexus", "graph": graph.name})
    elif os.path.exists(side):
        os.remove(side)


def load(path: PathLike) -> Graph:
    """Read a graph written by :func:`save`.

    Raises FileNotFoundError when ``path`` is missing, :class:`LoadError` when the text is
    not UTF-8 or its payload is missing or malformed, and ``ParseError`` (with line and
    column) when the text is malformed.
    """
    name = os.fspath(path)
    try:
        with open(name, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        raise FileNotFoundError(f"{name}: no such file") from None
    except IsADirectoryError:
        raise LoadError(f"{name}: is a directory, not a graph file") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise LoadError(f"{name}: not a Nexus text file (byte {e.start} is not UTF-8)") from None
    side = payload_path(name)
    payload: dict[str, np.ndarray] = {}
    if os.path.exists(side):
        payload = load_file(side)
    elif _PAYLOAD_REF.search(text):
        raise LoadError(f"{name}: the graph refers to tensors stored in {side}, which does not exist")
    return parse(text, payload)
