"""Streams: a graph with state ops run call after call, its state kept in between.

``s = nx.stream(f)`` wraps a Graph, a DSL function or an ``@nx.script`` function;
``s.step(*args)`` runs it once against the stream's :class:`~nexus.ops.state.StateStore`
(the values of its ``nx.state`` s), ``s.reset()`` forgets them (the next read gives each
state's init), ``s.snapshot()`` / ``s.restore(snap)`` copy them out and back, and
``s.save(path)`` / ``nx.load_stream(path)`` write and read the graph's text (``nx.save``)
with the state beside it in ``path + ".state.safetensors"``.  Loading parses text and raw
tensor bytes only: nothing is unpickled or evaluated.

A step is all or nothing: it runs against a copy of the store's table and commits only
when the graph returns, so a step that raises leaves the state as it was.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import numpy as np

from nexus.backends import compile as compile_graph
from nexus.io import load, save
from nexus.ir.graph import Graph
from nexus.ir.tensorio import LoadError, load_file, load_metadata, save_file
from nexus.ir.types import TensorType, numpy_dtype
from nexus.ops.state import StateError, StateStore, state_types, use_store

__all__ = ["StateError", "Stream", "load_stream", "state_path", "stream"]

PathLike = str | os.PathLike[str]
Snapshot = dict[str, np.ndarray]
_FORMAT = "nexus-stream-state"


def state_path(path: PathLike) -> str:
    """Where the state of the stream saved at ``path`` lives."""
    return os.fspath(path) + ".state.safetensors"


class Stream:
    """``f`` run step by step with its state kept between steps (see the module doc)."""

    def __init__(self, f: Any, backend: str = "python", **options: Any):
        # A Graph or a DSL function has one graph; a script has one per argument signature.
        fixed = f if isinstance(f, Graph) else None if hasattr(f, "specialize") else getattr(f, "graph", None)
        self._fixed: Graph | None = fixed if isinstance(fixed, Graph) else None
        if self._fixed is None and not hasattr(f, "specialize"):
            raise TypeError(f"nx.stream takes a Graph, a DSL function or an @nx.script function, "
                            f"not {type(f).__name__}")
        self.exe = compile_graph(f, backend, **options)
        self.store = StateStore()
        self._types: dict[Graph, tuple[int, dict[str, TensorType]]] = {}
        if self._fixed is not None:
            self.states()  # a graph whose states disagree is refused before it runs

    def __repr__(self) -> str:
        g = self.graph
        return f"<nx.stream @{g.name if g is not None else '?'}: states {sorted(self.store.values)}>"

    @property
    def graph(self) -> Graph | None:
        """The graph the steps run (for a script: the one of the last step's signature)."""
        return self._fixed if self._fixed is not None else self.exe.graph

    def states(self) -> dict[str, TensorType]:
        """The graph's states and their types (empty before a script's first step)."""
        g = self.graph
        if g is None:
            return {}
        hit = self._types.get(g)
        if hit is None or hit[0] != g.version:
            hit = self._types[g] = (g.version, state_types(g))
        return hit[1]

    # --- running ---------------------------------------------------------------------
    def step(self, *args: Any) -> Any:
        """Run the graph once on ``args``; the state it writes is there for the next step."""
        trial = StateStore(self.store.values)
        with use_store(trial):
            out = self.exe(*args)
        _check(self.states(), trial.values, f"graph @{self.graph.name if self.graph else '?'}")
        self.store = trial
        return out

    __call__ = step

    def reset(self) -> None:
        """Forget every state's value: the next step reads each state's init."""
        self.store = StateStore()

    def snapshot(self) -> Snapshot:
        """A copy of the states' values (the states never written are absent: they read
        as their init)."""
        return {k: np.array(v, copy=True) for k, v in self.store.values.items()}

    def restore(self, snap: Mapping[str, Any]) -> None:
        """Make the stream's state that of ``snap`` (from :meth:`snapshot`): its values and
        nothing else (a state absent from it reads its init next)."""
        values = {str(k): np.array(v, copy=True) for k, v in snap.items()}
        known = self.states()
        if self.graph is not None:
            unknown = sorted(set(values) - set(known))
            if unknown:
                raise StateError(f"graph @{self.graph.name} has no state {unknown[0]!r} "
                                 f"(its states: {', '.join(sorted(known)) or 'none'})")
        _check(known, values, "the snapshot")
        self.store = StateStore(values)

    # --- files -----------------------------------------------------------------------
    def save(self, path: PathLike, snapshot: Mapping[str, Any] | None = None) -> None:
        """Write the graph to ``path`` (``nx.save``: text, large constants in
        ``path.safetensors``) and the state (or ``snapshot``) to ``path.state.safetensors``."""
        g = self.graph
        if g is None:
            raise StateError("nothing to save yet: a script's stream has a graph after its first step")
        values = self.snapshot() if snapshot is None else {str(k): np.asarray(v) for k, v in snapshot.items()}
        _check(self.states(), values, "the state to save")
        save(g, path)
        save_file(values, state_path(path), metadata={"format": _FORMAT, "graph": g.name})


def _check(types: Mapping[str, TensorType], values: Mapping[str, Any], what: str) -> None:
    """Every value has its state's dtype and (where the type knows it) shape."""
    for name, v in values.items():
        t = types.get(name)
        if t is None:
            continue
        arr = np.asarray(v)
        if arr.dtype != numpy_dtype(t.dtype):
            raise StateError(f"{what}: state {name!r} is {t}, its value has dtype {arr.dtype}")
        shape = t.shape
        if shape is not None and (len(shape) != arr.ndim or any(
                isinstance(d, int) and d != n for d, n in zip(shape, arr.shape))):
            raise StateError(f"{what}: state {name!r} is {t}, its value has shape {list(arr.shape)}")


def stream(f: Any, backend: str = "python", **options: Any) -> Stream:
    """A :class:`Stream` of ``f`` (a Graph, a DSL function or an ``@nx.script``
    function) compiled on ``backend``; its state starts empty (every state reads its init)."""
    return Stream(f, backend, **options)


def load_stream(path: PathLike, backend: str = "python", **options: Any) -> Stream:
    """A stream read back from :meth:`Stream.save`: the graph from ``path`` and the
    state from ``path.state.safetensors`` (which must lie in the same directory)."""
    g = load(path)
    side = state_path(path)
    if not os.path.lexists(side):
        raise LoadError(f"{os.fspath(path)}: no saved state beside it ({side} does not exist)")
    within = os.path.dirname(os.path.abspath(os.fspath(path)))
    meta = load_metadata(side, within=within)
    if meta.get("format") != _FORMAT:
        raise LoadError(f"{side}: not a Nexus stream state (metadata format {meta.get('format')!r})")
    values = load_file(side, within=within)
    s = Stream(g, backend, **options)
    try:
        s.restore(values)
    except StateError as e:
        raise LoadError(f"{side}: {e}") from None
    return s
