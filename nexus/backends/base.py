"""The backend seam: every way of running a graph plugs in here.

A backend is a name, a ``compile(graph, **options) -> Executable`` function and a
lowering table keyed by op (as JAX keeps one rule table per transformation).  Rules are
registered with :func:`register_lowering`; a node whose op has no rule is a
:class:`MissingLoweringError` naming the op, the node, its source line and the backend.
Backends register themselves when their module is imported; :data:`BACKEND_MODULES`
names the module of each built-in backend, imported on first use, so an optional
dependency (JAX, llvmlite, onnxruntime) is loaded only by the backend that needs it.

:func:`compile` takes a Graph, a finished DSL function (``with nx.function(...) as f``)
or anything with a ``specialize(args)`` method (``@nx.script`` functions, which build one
graph per argument signature).
"""

from __future__ import annotations

import functools
import importlib
import types
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Protocol, TypeVar

import numpy as np

from nexus.ir.binding import BindingError
from nexus.ir.extras import needing
from nexus.ir.graph import Graph
from nexus.ir.node import Node, node_where
from nexus.ir.opdef import REGISTRY
from nexus.ir.printer import value_names
from nexus.ir.types import is_container


class NexusRuntimeError(RuntimeError):
    """A failure while running a graph; names the node, its op, block and source line."""

    def __init__(self, msg: str, node: Node | None = None):
        self.node = node
        if node is not None:
            msg = f"{node_where(node)}: {msg}"
        super().__init__(msg)


class NativeRefused(NexusRuntimeError):
    """Native code that refused a call on entry, before running anything, for these
    arguments' sizes (the llvm backend's one buffer per loop-carried array, where Python
    would change its size).  An interpreter calling such a kernel runs the kernel's graph
    itself instead (``nexus.backends.python.interpreter._call``), so Python's semantics
    hold, the errors Python raises later in the call included."""


class BackendError(ValueError):
    """An unknown backend, or options a backend does not take."""


class MissingLoweringError(NotImplementedError):
    """A node whose op the backend has no rule for."""

    def __init__(self, backend: str, node: Node):
        self.backend, self.node = backend, node
        super().__init__(f"backend {backend!r} has no lowering rule for op {node.op.name} ({node_where(node)}); "
                         f"register one with @register_lowering({backend!r}, {node.op.name!r})")


class StateOpsUnsupportedError(MissingLoweringError):
    """A graph with state ops (``nx.state``) compiled on a backend that does not run them."""

    def __init__(self, backend: str, node: Node):
        self.backend, self.node = backend, node
        runs = ", ".join(sorted(b.name for b in BACKENDS.values() if b.stateful)) or "none"
        NotImplementedError.__init__(
            self, f"backend {backend!r} does not run state ops: {node_where(node)} of state "
                  f"{node.attrs.get('name')!r}; run stateful graphs on a backend that does ({runs}), "
                  "e.g. nx.stream(f, backend='python')")


class ContainersUnsupportedError(MissingLoweringError):
    """A graph with sequence or optional values compiled on a backend that holds only
    tensors (``Backend.containers``); names the first node that makes one."""

    def __init__(self, backend: str, node: Node):
        self.backend, self.node = backend, node
        runs = ", ".join(sorted(b.name for b in BACKENDS.values() if b.containers)) or "none"
        NotImplementedError.__init__(
            self, f"backend {backend!r} holds no sequence or optional values: {node_where(node)} makes a "
                  f"{node.type}; run the graph on a backend that does ({runs})")


def check_containers(backend: Backend, g: Graph) -> None:
    """Refuse ``g`` on ``backend`` when it (or a graph it calls) has a sequence or optional
    value, an argument included, and the backend holds only tensors."""
    if backend.containers:
        return
    for h in (g, *g.callees()):
        for n in h.nodes():
            if is_container(n.type):
                raise ContainersUnsupportedError(backend.name, n)


def check_stateful(backend: Backend, g: Graph) -> None:
    """Refuse ``g`` on ``backend`` when it (or a graph it calls) has state ops the backend
    cannot run in program order (``Backend.stateful``)."""
    if backend.stateful:
        return
    for h in (g, *g.callees()):
        for n in h.nodes():
            if n.op.kind == "state":
                raise StateOpsUnsupportedError(backend.name, n)


class Executable(ABC):
    """A compiled graph: call it with NumPy arrays (or Python numbers)."""

    backend: str
    graph: Graph

    @abstractmethod
    def __call__(self, *args: Any) -> Any:
        """Run on ``args``; one result as is, several as a tuple."""

    @abstractmethod
    def source(self) -> str:
        """What the backend generated (Python source, HLO, LLVM IR...), for reading."""

    def entry(self, fallback: Callable[..., Any], fail: Callable[[int], Any], convert: Any = None,
              cell: list[Any] | None = None, graph: Graph | None = None) -> Callable[..., Any] | None:
        """A callable running this executable on arguments of the signature of its last call
        and nothing else: it checks them (classes, dtypes, shapes) and hands any other call
        to ``fallback``; ``fail(status)`` raises a failed run's error; ``convert`` is applied
        to the results; ``cell[0]`` is set to ``graph`` on each call.  :class:`Specialized`
        chains these entries, one per signature.  None (the default): no such entry."""
        return None

    def fail(self, code: int) -> Any:
        """Raise the error of a run that an entry reports as failed with status ``code``."""
        raise NexusRuntimeError(f"{self.backend}: a compiled call failed with status {code}")


@dataclass
class Partition:
    """A region of a graph that a mixed executable runs on one engine, and why there."""

    engine: str  # a backend's name: "onnxruntime", "llvm", "python"...
    nodes: list[str]  # the region's nodes, as `%name = Op` (the text form's names)
    why: str
    block: str = ""
    # the region's nodes themselves, in the graph that was compiled (`nexus viz --backend`
    # colours them); empty for a note that names no node
    members: tuple[Node, ...] = field(default=(), repr=False, compare=False)

    def __str__(self) -> str:
        where = f" in ^{self.block}" if self.block else ""
        return f"{self.engine}{where}: {len(self.nodes)} node(s) ({self.why})"


def in_graph(parts: list[Partition], g: Graph, copy_of: Mapping[Node, Node] | None = None) -> list[Partition]:
    """``parts`` made about ``g``: members of a copy of it mapped back (``copy_of``: the copy's
    node -> ``g``'s) and every node named as ``g``'s text form names it (no ``%?``)."""
    names, copy_of = value_names(g), copy_of or {}
    out = []
    for p in parts:
        if not p.members:
            out.append(p)
            continue
        members = tuple(m for n in p.members if (m := copy_of.get(n, n)) in names)
        out.append(replace(p, nodes=[f"%{names[n]} = {n.op.name}" for n in members], members=members))
    return out


Rule = TypeVar("Rule", bound=Callable[..., Any])


@dataclass
class LoweringTable:
    """A backend's rules, keyed by op name."""

    backend: str
    rules: dict[str, Callable[..., Any]] = field(default_factory=dict)

    def register(self, *ops: str) -> Callable[[Rule], Rule]:
        def add(rule: Rule) -> Rule:
            for op in ops:
                if op in self.rules:
                    raise ValueError(f"backend {self.backend!r}: op {op!r} has two lowering rules")
                self.rules[op] = rule
            return rule

        return add

    def get(self, op: str) -> Callable[..., Any] | None:
        return self.rules.get(op)

    def rule(self, node: Node) -> Callable[..., Any]:
        """The rule for ``node``'s op; MissingLoweringError if there is none."""
        rule = self.rules.get(node.op.name)
        if rule is None:
            raise MissingLoweringError(self.backend, node)
        return rule

    def __contains__(self, op: object) -> bool:
        return op in self.rules

    def __iter__(self) -> Iterator[str]:
        return iter(self.rules)


@dataclass(frozen=True)
class Backend:
    """A registered backend: ``compile(graph, **options)`` makes its executables."""

    name: str
    compile: Callable[..., Executable]
    options: frozenset[str] = frozenset()
    doc: str = ""
    stateful: bool = False  # runs state ops (nexus.ops.state) in program order
    containers: bool = False  # holds sequence and optional values (nexus.ops.sequence)

    def check_options(self, options: Mapping[str, Any]) -> None:
        unknown = sorted(set(options) - self.options)
        if unknown:
            takes = ", ".join(sorted(self.options)) or "none"
            raise BackendError(f"backend {self.name!r} has no option {unknown[0]!r} (its options: {takes})")


BACKEND_MODULES: dict[str, str] = {"python": "nexus.backends.python", "llvm": "nexus.backends.llvm",
                                 "xla": "nexus.backends.xla", "onnxruntime": "nexus.backends.onnx.runtime",
                                 "auto": "nexus.backends.auto"}
BACKENDS: dict[str, Backend] = {}
TABLES: dict[str, LoweringTable] = {}


def register_backend(name: str, compile: Callable[..., Executable], options: tuple[str, ...] = (),
                     doc: str = "", stateful: bool = False, containers: bool = False) -> Backend:
    """Register a backend; ``options`` names the keyword options its ``compile`` takes;
    ``stateful``: it runs state ops, in program order (others refuse graphs with them);
    ``containers``: it holds sequence and optional values (others refuse graphs with them)."""
    if name in BACKENDS:
        raise ValueError(f"backend {name!r} is registered twice")
    backend = BACKENDS[name] = Backend(name, compile, frozenset(options), doc, stateful, containers)
    return backend


def lowering_table(backend: str) -> LoweringTable:
    """The lowering table of ``backend`` (made on first use)."""
    table = TABLES.get(backend)
    if table is None:
        table = TABLES[backend] = LoweringTable(backend)
    return table


def register_lowering(backend: str, *ops: str) -> Callable[[Rule], Rule]:
    """Decorator: ``rule`` lowers ``ops`` on ``backend``.  The ops must be registered."""
    unknown = [op for op in ops if op not in REGISTRY]
    if unknown:
        raise ValueError(f"backend {backend!r}: lowering rule for unknown op(s) {', '.join(unknown)}")
    return lowering_table(backend).register(*ops)


def get_backend(name: str) -> Backend:
    backend = BACKENDS.get(name)
    if backend is None and name in BACKEND_MODULES:
        with needing(f"compiling with the {name} backend"):
            importlib.import_module(BACKEND_MODULES[name])
        backend = BACKENDS.get(name)
    if backend is None:
        known = ", ".join(sorted({*BACKENDS, *BACKEND_MODULES}))
        raise BackendError(f"unknown backend {name!r} (known: {known})")
    return backend


class Specializable(Protocol):
    """A function that builds one graph per argument signature (``@nx.script``)."""

    def specialize(self, args: tuple[Any, ...]) -> tuple[Graph, Callable[[Any], Any]]:
        """The graph for ``args``' signature and the conversion of its results."""
        ...

    def run_error(self, e: RuntimeError) -> Exception | None:
        """The error the function's own language raises where a run failed with ``e``
        (a script's UnboundLocalError), or ``e``; None where that language returns None
        instead (a script's path that falls off its end)."""
        ...


# ``nx.compile(script, backend=...)``: one compiled entry per argument signature.  The
# Python path (Specialized._python) keys a call three times: the script's signature cache
# finds its graph, the executables here the graph's executable, and that executable its
# own per-shape computation.  So each signature a call compiled gets the executable's
# entry (Executable.entry: the llvm backend's a builtin calling its kernel's CPython entry,
# nexus.backends.llvm.pyabi; the xla backend's a function calling its jitted computation),
# and the newest is the __call__ of the object's class (each object has a class of its
# own): a call it takes goes from the arguments straight to the compiled code; one it does
# not goes to the entry of the signature before, and so on down to the Python path, which
# compiles a new signature.  An entry takes only what its graph's signature says (Python
# bool/int/float for bool/i64/f64, the NumPy scalar of a dtype, an array of dtype and rank,
# or of its shapes), which a script keys to that same graph.
MAX_ENTRIES = 8  # signatures with an entry; later ones take the Python path


class Specialized(Executable):
    """A :class:`Specializable` compiled per argument signature on ``backend``, called
    through its executables' entries where they have them."""

    def __new__(cls, *args: Any, **kwargs: Any) -> Specialized:
        # a class of its own, whose __call__ the entries replace
        own = type(cls.__name__, (cls,), {"__module__": cls.__module__})
        return super().__new__(own)

    def __init__(self, fn: Specializable, backend: Backend, options: Mapping[str, Any]):
        self.fn, self.backend, self.options = fn, backend.name, dict(options)
        self._backend = backend
        self._compile = backend.compile
        self._exes: dict[Graph, Executable] = {}
        self._cell: list[Any] = [None]  # the graph last called; the entries set it
        self._front: Callable[..., Any] = self._python
        self._asked: set[Graph] = set()  # the graphs whose executables were asked for an entry
        self._entries = 0

    @property  # type: ignore[override]
    def graph(self) -> Graph | None:
        """The graph of the signature called last."""
        g: Graph | None = self._cell[0]
        return g

    @graph.setter
    def graph(self, g: Graph | None) -> None:
        self._cell[0] = g

    def _python(self, *args: Any) -> Any:
        """The call through Python; a signature that ran then gets its executable's entry."""
        g, convert = self.fn.specialize(args)
        exe = self._exes.get(g)
        if exe is None:
            check_stateful(self._backend, g)
            check_containers(self._backend, g)
            exe = self._exes[g] = self._compile(g, **self.options)
        self._cell[0] = g
        try:
            out = convert(exe(*args))
        except BindingError as e:  # named as the caller knows the function
            raise e.called(g.name) from None
        except RuntimeError as e:
            return self.failed(e)
        if g not in self._asked and self._entries < MAX_ENTRIES and _accepts(args):
            self._asked.add(g)  # once: an executable without entries (python) is not asked on every call
            entry = exe.entry(self._front, functools.partial(self._entry_failed, exe), convert, self._cell, g)
            if entry is not None:
                self._entries += 1
                self._front = entry
                # a builtin binds no self; a Python function would
                call = entry if isinstance(entry, types.BuiltinFunctionType) else staticmethod(entry)
                type(self).__call__ = call  # type: ignore[method-assign]
        return out

    __call__ = _python

    def _entry_failed(self, exe: Executable, code: int) -> Any:
        try:
            return exe.fail(code)
        except RuntimeError as e:
            return self.failed(e)

    def failed(self, e: RuntimeError) -> None:
        """Raise ``e`` as the function's language says it (Python: UnboundLocalError...), or
        return None where the function returns None there (Python's implicit return)."""
        err = self.fn.run_error(e)
        if err is None:
            return None
        if err is e:
            raise e
        raise err from e

    def source(self) -> str:
        g = self.graph
        if g is None:
            raise BackendError("nothing compiled yet: call it once, so that a signature is known")
        return self._exes[g].source()


def _accepts(args: tuple[Any, ...]) -> bool:
    """Whether an entry may take the classes of ``args`` as this call's signature: each a
    Python bool, int or float (which a script keys as bool, i64 and f64, as the entries
    read them) or a NumPy scalar or array (keyed by dtype, as the entries check it)."""
    return all(a.__class__ in (bool, int, float, np.ndarray) or isinstance(a, np.generic) for a in args)


def compile(target: Any, backend: str = "python", **options: Any) -> Executable:  # noqa: A001
    """Compile a Graph, a finished DSL function or an ``@nx.script`` function on ``backend``."""
    b = get_backend(backend)
    b.check_options(options)
    if isinstance(target, Graph):
        check_stateful(b, target)
        check_containers(b, target)
        return b.compile(target, **options)
    if hasattr(target, "specialize"):
        return Specialized(target, b, options)
    graph = getattr(target, "graph", None)
    if isinstance(graph, Graph):
        check_stateful(b, graph)
        check_containers(b, graph)
        return b.compile(graph, **options)
    raise TypeError(f"nx.compile takes a Graph, a DSL function or an @nx.script function, "
                    f"not {type(target).__name__}")


def check_tables(tables: Mapping[str, LoweringTable] | None = None) -> list[str]:
    """Ops named by a lowering table that the registry does not know (empty: all fine)."""
    return [f"{t.backend}:{op}" for t in (tables or TABLES).values() for op in t if op not in REGISTRY]
