"""The ``llvm`` backend: a graph compiled to native code, called through ctypes.

``nx.compile(g, backend="llvm")`` emits the graph's LLVM function
(:mod:`nexus.backends.llvm.emit`), optimises it for the host CPU at the level its size
calls for (``opt_level=N`` chooses one, see :mod:`nexus.backends.llvm.target`) and loads it.  The
call boundary is one generated Python function per executable: the shared argument
conversion (``nexus.ir.binding``), then the native call with the arguments as they are
(ctypes takes NumPy scalars directly; a tensor passes its data pointer and dims), the
results written into preallocated NumPy scalars, and a status check.  Results are NumPy
scalars and arrays, as the python backend returns them; an array result is written into
the previous call's array when the caller has let go of it.  An executable is not
re-entrant across threads (its result slots are shared).

A loop can be stopped: Ctrl-C (SIGINT) on the main thread ends a native call with
KeyboardInterrupt, and ``nx.compile(g, backend="llvm", max_iterations=N)`` bounds the blocks
entered as the python backend does, with its error (``nexus.backends.llvm.poll`` says how
the generated code checks both, ``nexus.backends.llvm.interrupt`` how SIGINT reaches it).

A graph with ops the backend cannot lower runs as a :class:`~nexus.backends.llvm.partition.Partitioned`
graph (``fallback=True``, the default): compiled kernels inside the python backend, with
``.stayed_out`` naming the ops left to Python.
"""

from __future__ import annotations

import ctypes
import os
import sys
import time
import weakref
from pathlib import Path
from typing import Any

import numpy as np
import sympy

from nexus.backends.base import (
    Executable,
    MissingLoweringError,
    NativeRefused,
    NexusRuntimeError,
    register_backend,
)
from nexus.backends.llvm.cache import cache_dir as cache_dir_of
from nexus.backends.llvm.dimalias import dim_aliases
from nexus.backends.llvm.dtypes import Unsupported
from nexus.backends.llvm.emit import CONST_TABLE, INTERRUPTED, RELEASE, ModuleEmitter
from nexus.backends.llvm.interrupt import interrupted, learn_python_handler, runtime
from nexus.backends.llvm.pyabi import ENTRY as ENTRY_PY
from nexus.backends.llvm.pyabi import WEAK, WEAK_ENTRY, builtin, emit_entries
from nexus.backends.llvm.rules import BACKEND
from nexus.backends.llvm.target import Jitted, assembly, host_machine, level_for, little_endian
from nexus.ir.binding import signature
from nexus.ir.graph import Graph
from nexus.ir.node import Node
from nexus.ir.types import TensorType, numpy_dtype

ENTRY = "nexus_main"
_EXCEPTIONS: dict[str, type[Exception]] = {"ZeroDivisionError": ZeroDivisionError, "ValueError": ValueError,
                                           "IndexError": IndexError, "AssertionError": AssertionError,
                                           "NotImplementedError": NotImplementedError}


def _ctype(dtype: str) -> Any:
    dt = numpy_dtype(dtype)
    if dt.kind == "b":
        return ctypes.c_bool
    return np.ctypeslib.as_ctypes_type(dt)


def emit_module(g: Graph, max_iterations: int | None = None, little_endian: bool = True,
                jit: bool = False) -> ModuleEmitter:
    """The LLVM module of ``g`` (unoptimised), its entry function named ``nexus_main``;
    with ``max_iterations``, every block entry counts (see ``nexus.backends.llvm.poll``).
    ``little_endian``: the target's byte order (constant arrays are written as bytes);
    ``jit``: for this process (large constant arrays read from a table the loader fills,
    buffers kept between calls)."""
    me = ModuleEmitter(g.name, max_iterations, little_endian, table=jit, keep=jit)
    me.function(g, ENTRY)
    me.finish()
    return me


def llvm_ir(g: Graph, optimized: bool = True, triple: str | None = None, opt_level: int | None = None) -> str:
    """LLVM IR text of ``g``, when ``optimized`` after the pipeline of ``opt_level`` (None:
    chosen by size) for ``triple`` (None: the host)."""
    from nexus.backends.llvm.target import level_for, machine_for, optimize

    text = str(emit_module(g, little_endian=little_endian(triple)).module)
    if not optimized:
        return text
    level = level_for(text, opt_level)
    return str(optimize(text, machine_for(triple, level), level))


def asm(g: Graph, triple: str | None = None, opt_level: int | None = None) -> str:
    """Optimised assembly of ``g`` for ``triple`` (None: the host CPU) at ``opt_level``
    (None: chosen by size)."""
    return assembly(str(emit_module(g, little_endian=little_endian(triple)).module), triple, opt_level)


class LLVMExecutable(Executable):
    """``g`` as native code; ``compile_time`` is the seconds emitting, optimising and
    loading took.  ``max_iterations`` bounds the blocks a call enters (None: no bound);
    ``opt_level``: LLVM's optimisation level, 0 to 3 (None: chosen by the module's size;
    ``jit.level`` says which).
    ``outlined``: for a loop outlined from a host graph, the host's nodes it replaced."""

    backend = BACKEND
    outlined: tuple[Node, ...] = ()

    def __init__(self, g: Graph, max_iterations: int | None = None, cache_dir: Path | None = None,
                 opt_level: int | None = None):
        t0 = time.perf_counter()
        self.graph = g
        self.max_iterations = max_iterations
        me = emit_module(g, max_iterations, jit=True)
        self.errors = me.errors
        self.constants = me.tabled  # the arrays the table points to: kept alive with the code
        fn, fallible = me.functions[g]
        entries = emit_entries(me.module, g, fn, fallible)
        self.ir = str(me.module)
        runtime()  # the symbols the polls call
        learn_python_handler()
        self.jit = Jitted(self.ir, cache_dir, opt_level)
        # the buffers the code keeps between calls go when this executable does
        release = ctypes.CFUNCTYPE(None)(self.jit.address(RELEASE))
        weakref.finalize(self, _release, release, self.jit)
        if self.constants:
            table = (ctypes.c_void_p * len(self.constants)).from_address(self.jit.global_address(CONST_TABLE))
            table[:] = [a.ctypes.data for a in self.constants]
        self._native = self._prototype(g, fallible)(self.jit.address(ENTRY))
        self._call = self._wrapper(g, fallible)
        self.entries = {name: self.jit.address(name) for name in entries}
        if self.entries:
            # calls skip ctypes and Python: the class of this executable alone calls the entry
            call = self.entry(self._call, self._fail)
            self.__class__ = type(type(self).__name__, (type(self),), {"__call__": call, "__module__": __name__})
        self.compile_time = time.perf_counter() - t0

    def entry(self, fallback: Any, fail: Any, convert: Any = None, cell: list[Any] | None = None,
              graph: Graph | None = None) -> Any:
        """A builtin function calling this executable through its CPython entry
        (:mod:`nexus.backends.llvm.pyabi`), or None where it has none.  ``fallback`` takes
        the calls the entry does not; ``fail(status)`` raises a failure's error;
        ``convert``: applied to the results (int, float or bool on a single result of
        that Python type is done natively); ``cell[0]`` is set to ``graph`` on each call."""
        if not self.entries:
            return None
        name = ENTRY_PY
        if WEAK_ENTRY in self.entries:
            t = self.graph.result_types[0]
            if isinstance(t, TensorType) and convert is WEAK[t.dtype]:
                name, convert = WEAK_ENTRY, None
        return builtin(self.entries[name], self.graph.name or "nexus", self, graph, list(self.graph.result_types),
                       fallback, fail, convert, cell)

    @staticmethod
    def _prototype(g: Graph, fallible: bool) -> Any:
        argtypes: list[Any] = []
        for t in g.arg_types:
            assert isinstance(t, TensorType) and t.shape is not None
            argtypes += [_ctype(t.dtype)] if t.shape == () else [ctypes.c_void_p] + [ctypes.c_int64] * len(t.shape)
        argtypes += [ctypes.c_void_p] * len(g.result_types)
        return ctypes.CFUNCTYPE(ctypes.c_int32 if fallible else None, *argtypes)

    def _wrapper(self, g: Graph, fallible: bool) -> Any:
        """One Python function per executable: convert, call, check, return."""
        ns: dict[str, Any] = {"_conv": signature(g).convert, "_fn": self._native, "_fail": self._fail,
                              "_addr": _address, "_np": np, "_contig": np.ascontiguousarray, "_refs": sys.getrefcount,
                              "_keep": [None] * len(g.result_types)}
        n = len(g.args)
        names = [f"a{k}" for k in range(n)]
        lines = ["def call(*args):"]
        lines.append(f"    {', '.join(names)}{',' if n else ''} = _conv(args)" if n else "    _conv(args)")
        native: list[str] = []
        syms: dict[Any, str] = {}
        for k, t in enumerate(g.arg_types):
            assert isinstance(t, TensorType) and t.shape is not None
            if t.shape == ():
                native.append(names[k])
                continue
            lines.append(f"    a{k} = _contig(a{k})")
            native.append(f"_addr(a{k})")
            for i, d in enumerate(t.shape):
                native.append(f"a{k}.shape[{i}]")
                if isinstance(d, sympy.Symbol):
                    syms.setdefault(d, f"a{k}.shape[{i}]")
        for sym, rep in dim_aliases(g).items():
            if sympy.sympify(rep).free_symbols <= syms.keys():
                syms[sym] = _py_dim(rep, syms)
        results = []
        for r, t in enumerate(g.result_types):
            if not isinstance(t, TensorType) or t.shape is None:
                raise Unsupported(f"result type {t}")
            dt = numpy_dtype(t.dtype)
            if t.shape == ():
                slot = ns[f"_r{r}"] = np.empty((), dt)
                native.append(str(slot.ctypes.data))
                results.append(f"_r{r}[()]")
                continue
            dims = [str(d) if isinstance(d, int) else _py_dim(d, syms) for d in t.shape]
            ns[f"_d{r}"] = dt
            # The last result array is reused when nobody else holds it (no name, no view:
            # only _keep and this frame refer to it): a fresh 40 MB array costs more in
            # page faults than a fused loop takes to fill it.
            lines += [f"    s{r} = ({', '.join(dims)},)", f"    o{r} = _keep[{r}]",
                      f"    if o{r} is None or _refs(o{r}) != 3 or o{r}.shape != s{r}:",
                      f"        o{r} = _keep[{r}] = _np.empty(s{r}, _d{r})"]
            native.append(f"_addr(o{r})")
            results.append(f"o{r}")
        call = f"_fn({', '.join(native)})"
        if fallible:
            lines += [f"    rc = {call}", "    if rc: _fail(rc)"]
        else:
            lines.append(f"    {call}")
        ret = results[0] if len(results) == 1 else f"({', '.join(results)},)" if results else "None"
        lines.append(f"    return {ret}")
        self.wrapper_source = "\n".join(lines)
        exec(compile(self.wrapper_source, f"<llvm call {g.name}>", "exec"), ns)  # noqa: S102
        return ns["call"]

    def _fail(self, code: int) -> None:
        f = self.errors[code - 1]
        if f.exc == INTERRUPTED:
            interrupted()
        if f.node is None:
            raise NexusRuntimeError(f.msg)
        exc = _EXCEPTIONS.get(f.exc, RuntimeError)(f.msg)
        raise (NativeRefused if f.refusal else NexusRuntimeError)(f"{f.exc}: {f.msg}", f.node) from exc

    fail = _fail  # Executable.fail: what nx.compile(script)'s entries call on a failure

    def __call__(self, *args: Any) -> Any:  # the class of an executable with an entry calls that
        return self._call(*args)

    def source(self) -> str:
        return self.ir

    def optimized_ir(self) -> str:
        return self.jit.optimized_ir()

    def asm(self) -> str:
        """The host assembly of the optimised module that runs."""
        return str(host_machine(self.jit.level).emit_assembly(self.jit.optimized()))


def _release(release: Any, jit: Jitted) -> None:
    """Free the buffers a module kept (``jit``, its code, is still alive here)."""
    release()


def _address(a: np.ndarray) -> int:
    """The data address of the C-contiguous array ``a``.  ``a.ctypes.data`` builds a helper
    object on each use (~0.75 us, five of them a call for the NMS kernel); a ctypes view of
    the buffer costs a fifth of that.  Read-only and empty arrays have no such view."""
    try:
        return _addressof(_char_at(a))  # type: ignore[arg-type]  # an ndarray exports its buffer
    except (TypeError, ValueError):
        return int(a.ctypes.data)


_addressof, _char_at = ctypes.addressof, ctypes.c_char.from_buffer


def _py_dim(d: Any, syms: dict[Any, str]) -> str:
    expr = sympy.sympify(d)
    missing = expr.free_symbols - set(syms)
    if missing:
        raise Unsupported(f"result dim {d} depends on {sorted(map(str, missing))}, which no argument binds")
    return "(" + str(expr.subs({s: sympy.Symbol(f"__{v}") for s, v in syms.items()})).replace("__", "") + ")"


def compile_llvm(g: Graph, fallback: bool = True, max_iterations: int | None = None,
                 cache: str | os.PathLike[str] | bool | None = None, opt_level: int | None = None) -> Executable:
    """Compile ``g`` for the host; with ``fallback``, partition a graph that has ops (or
    types) the backend cannot lower (see :mod:`nexus.backends.llvm.partition`).
    ``max_iterations``: a call that enters more blocks fails as on the python backend.
    ``cache``: a directory of compiled objects (None: ``$NEXUS_CACHE_DIR`` if set; False:
    none), see :mod:`nexus.backends.llvm.cache`.  ``opt_level``: LLVM's optimisation level,
    0 to 3, of every module (None: 3 for small modules, 2 for large ones; see
    :mod:`nexus.backends.llvm.target`)."""
    from nexus.backends.llvm.partition import Partitioned, unsupported_ops

    _check_limit(max_iterations)
    level_for("", opt_level)  # a bad level fails here, before anything is emitted
    cache_dir = cache_dir_of(cache)
    # ops without a rule are known before anything is emitted: emitting the rest first (a
    # CNN's weights as constant arrays) took a minute only to find the first Conv
    missing = unsupported_ops(g) if fallback else {}
    if missing:
        return Partitioned(g, f"no llvm rule for {', '.join(sorted(missing))}", max_iterations, cache_dir, opt_level)
    try:
        return LLVMExecutable(g, max_iterations, cache_dir, opt_level)
    except (Unsupported, MissingLoweringError) as e:
        if not fallback:
            raise
        reason = str(e)

    return Partitioned(g, reason, max_iterations, cache_dir, opt_level)


def _check_limit(max_iterations: Any) -> None:
    if max_iterations is not None and (isinstance(max_iterations, bool) or not isinstance(max_iterations, int)
                                       or max_iterations < 0):
        raise TypeError(f"max_iterations is a non-negative int or None, got {max_iterations!r}")


register_backend(BACKEND, compile_llvm, options=("fallback", "max_iterations", "cache", "opt_level"),
                 doc="native code through LLVM (llvmlite): fused loops, scalars in registers")
