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
from nexus.ir.limits import MAX_DIM_NESTING
from nexus.ir.parser import ParseError, parse
from nexus.ir.printer import print_graph
from nexus.ir.tensorio import LoadError, load_file, open_regular, save_file

__all__ = ["LoadError", "load", "payload_path", "save"]

PathLike = str | os.PathLike[str]
_PAYLOAD_REF = re.compile(r'tensor<[^>]*:\s*@"')
_BOM = b"\xef\xbb\xbf"
_DIM_CALL = re.compile(r"\b(?:floor|ceiling|Max|Min|Mod)\(")


def payload_path(path: PathLike) -> str:
    """Where the tensors of the graph saved at ``path`` live."""
    return os.fspath(path) + ".safetensors"


def save(graph: Graph, path: PathLike) -> None:
    """Write ``graph`` (and the graphs it calls) to ``path`` as text, large tensors to
    ``path + ".safetensors"``.  A stale payload from an earlier save is removed."""
    payload: dict[str, np.ndarray] = {}
    text = print_graph(graph, payload)
    _check_loads_back(graph, text, payload)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    side = payload_path(path)
    if payload:
        save_file(payload, side, metadata={"format": "nexus", "graph": graph.name})
    elif os.path.exists(side):
        os.remove(side)


def _check_loads_back(graph: Graph, text: str, payload: dict[str, np.ndarray]) -> None:
    """Refuse to write text that :func:`load` would refuse: a dim expression nested past
    the parser's limit (``MAX_DIM_NESTING``; sympy builds deeper ones, e.g. ``floor``
    of ``floor`` ... of a strided slice in a loop), or dims whose function calls need more
    symbolic work than one text may ask (``MAX_DIM_WORK``).  Only a line with that many
    parentheses can be too deep and only dims with function calls cost work, so other
    graphs are not parsed again.  (Dims past ``MAX_DIM_OPS`` or ``MAX_DIM_BITS`` cannot
    be made: types refuse them.)"""
    if not _DIM_CALL.search(text) and all(line.count("(") <= MAX_DIM_NESTING for line in text.split("\n")):
        return
    try:
        parse(text, payload)
    except ParseError as e:
        raise ValueError(f"cannot save graph @{graph.name}: its text would not load back ({e.msg}, "
                         f"line {e.line})") from None


def load(path: PathLike) -> Graph:
    """Read a graph written by :func:`save`.

    Only regular files are read.  The payload ``path + ".safetensors"`` must resolve inside
    the directory of ``path``: a symlink leading out of it is refused (the rule ONNX
    adopted for external data after CVE-2024-27318).  A UTF-8 byte-order mark and Windows
    line endings are accepted.

    Raises FileNotFoundError when ``path`` is missing, :class:`LoadError` when it or its
    payload is not a regular file, not UTF-8, missing or malformed, and ``ParseError``
    (with line and column) when the text is malformed.
    """
    name = os.fspath(path)
    if not os.path.lexists(name):
        raise FileNotFoundError(f"{name}: no such file")
    with open_regular(name) as f:
        raw = f.read()
    if raw.startswith(_BOM):
        raw = raw[len(_BOM):]
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise LoadError(f"{name}: not a Nexus text file (byte {e.start} is not UTF-8)") from None
    side = payload_path(name)
    payload: dict[str, np.ndarray] = {}
    if os.path.lexists(side):
        payload = load_file(side, within=os.path.dirname(os.path.abspath(name)))
    elif _PAYLOAD_REF.search(text):
        raise LoadError(f"{name}: the graph refers to tensors stored in {side}, which does not exist")
    try:
        return parse(text, payload)
    except ParseError as e:
        raise e.in_file(name) from None
