"""The ``onnx.backend`` interface over Nexus: ``NexusBackend.prepare(model).run(inputs)``
imports the model (:func:`nexus.frontend.onnx.importer.from_onnx`) and runs the graph on a
Nexus backend (``python`` by default), so ``onnx.backend.test`` runners and anything else
written against that interface run Nexus unchanged.

Some ONNX inputs are attributes in Nexus (Unsqueeze's axes, Pad's constant value...).
When a model computes one from a graph input, the representation specialises: it
imports the model again with those inputs bound to the values of each call (as XLA
specialises on static arguments), one graph per distinct set of values.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import onnx
from onnx.backend.base import Backend, BackendRep

from nexus.backends.base import compile as nx_compile
from nexus.frontend.onnx.data import load_model
from nexus.frontend.onnx.importer import NeedsConstant, from_onnx
from nexus.ir.graph import Graph


class NexusRep(BackendRep):
    """A prepared model: ``run(inputs)`` -> the outputs, in graph order."""

    def __init__(self, model: onnx.ModelProto, backend: str = "python", source: Any = None):
        self.model = model
        self.source = source if source is not None else model  # a path keeps its external data
        self.backend = backend
        inits = {t.name for t in model.graph.initializer} | {t.name for t in model.graph.sparse_initializer}
        self.input_names = [vi.name for vi in model.graph.input if vi.name not in inits]
        self.output_names = [vi.name for vi in model.graph.output]
        self.specialized: list[str] = []  # inputs that are bound per call
        self._cache: dict[bytes, tuple[Any, list[int]]] = {}
        try:
            self.graph: Graph | None = from_onnx(self.source)
            self.exe: Any = nx_compile(self.graph, backend=backend)
        except NeedsConstant as e:
            if e.name not in self.input_names:
                raise
            self.graph, self.exe = None, None
            self.specialized = [e.name]

    def run(self, inputs: Any, **kwargs: Any) -> tuple[Any, ...]:
        feeds = self._feeds(inputs)
        if self.exe is not None:
            return self._outputs(self.exe(*feeds))
        exe, free = self._specialize(feeds)
        return self._outputs(exe(*[feeds[i] for i in free]))

    def _feeds(self, inputs: Any) -> list[Any]:
        if isinstance(inputs, Mapping):
            return [_feed(inputs[n]) for n in self.input_names]
        if isinstance(inputs, np.ndarray) or not isinstance(inputs, Sequence):
            inputs = [inputs]
        if len(inputs) != len(self.input_names):
            raise ValueError(f"the model takes {len(self.input_names)} inputs ({', '.join(self.input_names)}), "
                             f"got {len(inputs)}")
        return [_feed(x) for x in inputs]

    def _specialize(self, feeds: list[Any]) -> tuple[Any, list[int]]:
        while True:
            pos = [self.input_names.index(n) for n in self.specialized]
            key = b"".join(feeds[p].tobytes() + str(feeds[p].dtype).encode() + str(feeds[p].shape).encode()
                           for p in pos)
            hit = self._cache.get(key)
            if hit is not None:
                return hit
            try:
                g = from_onnx(self.source, constants={n: feeds[p] for n, p in zip(self.specialized, pos)})
            except NeedsConstant as e:
                if e.name not in self.input_names or e.name in self.specialized:
                    raise
                self.specialized.append(e.name)
                continue
            free = [i for i, n in enumerate(self.input_names) if n not in self.specialized]
            made = self._cache[key] = (nx_compile(g, backend=self.backend), free)
            return made

    def _outputs(self, result: Any) -> tuple[Any, ...]:
        outs = result if isinstance(result, tuple) else (result,)
        return tuple(_feed(o) for o in outs)


def _feed(x: Any) -> Any:
    """A value as ONNX backends pass it: an array; a sequence as a list of arrays; an
    empty optional as None."""
    if x is None:
        return None
    if isinstance(x, list):
        return [np.asarray(e) for e in x]
    return np.asarray(x)


class NexusBackend(Backend):
    """``onnx.backend.base.Backend`` running ONNX models on Nexus (CPU)."""

    @classmethod
    def prepare(cls, model: Any, device: str = "CPU", **kwargs: Any) -> NexusRep:
        if not cls.supports_device(device):
            raise ValueError(f"Nexus's ONNX backend runs on CPU, not {device!r}")
        source = model
        if not isinstance(model, onnx.ModelProto):
            model, _ = load_model(model)
        return NexusRep(model, backend=kwargs.get("backend", "python"), source=source)

    @classmethod
    def run_model(cls, model: Any, inputs: Any, device: str = "CPU", **kwargs: Any) -> tuple[Any, ...]:
        return cls.prepare(model, device, **kwargs).run(inputs)

    @classmethod
    def supports_device(cls, device: str) -> bool:
        return device.upper().startswith("CPU")


prepare = NexusBackend.prepare
run_model = NexusBackend.run_model
supports_device = NexusBackend.supports_device
