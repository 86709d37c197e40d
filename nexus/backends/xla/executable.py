"""The xla backend's executable: BuildArguments, ExecuteGraph, BuildComputation (seed 003),
compiled once per argument signature.

* **BuildArguments** (:meth:`XlaExecutable.build_arguments`): the call boundary shared by
  every backend (``nexus.ir.binding``) converts and checks the arguments; their concrete
  shapes and dtypes are the signature, and each becomes a JAX tracer.
* **ExecuteGraph** (:class:`nexus.backends.xla.trace.Trace`): every node's rule runs on
  the tracers, regions become ``lax.cond`` / ``lax.while_loop``.
* **BuildComputation** (:meth:`XlaExecutable.build_computation`): the results become the
  output tuple, with the peak stack depth of a gradient graph last.

The compiled computations are cached by signature; ``compiles`` counts how many were
built (a gradient graph whose stacks outgrew their capacity in a later call counts its
recompiles too; at a signature's first call, a cheap computation of the stacks' depth
sizes them first, so that the full one compiles once).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from nexus.backends.base import Executable
from nexus.backends.xla.trace import (
    BACKEND,
    Check,
    HostErrors,
    NewCheck,
    NewStackKind,
    Padded,
    StackLayout,
    Trace,
    TripCount,
    carry_refused,
    is_static,
    regions,
    stack_news,
)
from nexus.ir.binding import signature
from nexus.ir.graph import Graph
from nexus.ir.node import Node
from nexus.ir.types import StackType

Key = tuple[Any, ...]  # per argument: a NumPy scalar's type, or (shape, dtype)
# strict_float=True: XLA's algebraic simplifier off for this executable's computations only
# (not for other JAX code in the process).  It reassociates float arithmetic with constants
# (`-1.8 * (y * -1.5)` becomes `2.7 * y`: a third of f64 inputs then differ from NumPy in
# the last bit, which fuzzed programs iterate through `% 97.5` until it is every bit); off,
# W3-small runs about 3x slower, so it is for differential testing, not the default.
_STRICT_FLOAT = {"xla_disable_hlo_passes": "algsimp"}
# How often a growing stack may double before we give up (64 * 2**24 entries).
_MAX_DOUBLINGS = 24


@dataclass
class Compiled:
    """One argument signature's computation."""

    fn: Any  # the jax.jit of the computation, compiled for this signature
    lowered_text: str
    layout: StackLayout
    has_stacks: bool
    seconds: float
    # Per result: None, or the axis along which it comes padded, followed by its true size
    # (a data-dependent size, nexus.backends.xla.dynamic); it is sliced after the call.
    padded: list[int | None]
    # The most trips a loop that grows a list on a run-time trip count ran in the last run
    # (its Trace's cell, written by a callback); None where no loop grows one.
    trips: TripCount | None = None
    # The first error a host kernel raised in the last run (its Trace's cell, written by a
    # callback; raised after the call); None where no host kernel runs.
    host_errors: HostErrors | None = None
    # The Asserts that may fail at run time (the computation's last output is then 0, or
    # 1 + the index here of the first that failed); empty where none may.
    checks: list[Check] = field(default_factory=list)
    # The signature it was compiled for: per argument its shape, dtype and whether it is a
    # Python number (weakly typed, see _weak); and the shape of each output (what an entry,
    # XlaExecutable.entry, checks and converts)
    args: list[tuple[tuple[int, ...], np.dtype[Any], bool]] = field(default_factory=list)
    outs: list[tuple[int, ...]] = field(default_factory=list)
    # Whether the stack buffers are lent to the computation (its last argument, donated, and
    # its last output; see StackLayout), and the buffers it gave back, for the next call.
    lends: bool = False
    spare: list[Any] = field(default_factory=list)

    def call(self, values: Sequence[Any]) -> Any:
        """The computation's outputs for ``values``; where it borrows the stack buffers,
        they are lent (a set from an earlier call, or zeros) and taken back."""
        if not self.lends:
            return self.fn(*values)
        heap = self.spare.pop() if self.spare else tuple(self.layout.buffers())
        *outs, heap = self.fn(*values, heap)
        self.spare.append(heap)
        return outs

    @property
    def plain(self) -> bool:
        """Whether its outputs are just the results (no depth, check code or true size):
        the call's fast path (XlaExecutable.__call__)."""
        return not self.layout.kinds and self.trips is None and self.host_errors is None and not self.checks and \
            all(a is None for a in self.padded)


class XlaExecutable(Executable):
    """``g`` compiled by XLA (through JAX), per argument signature."""

    backend = BACKEND

    def __init__(self, g: Graph, dynamic_bound: int | None = None, strict_float: bool = False):
        self.graph = g
        self.dynamic_bound = dynamic_bound
        self.strict_float = strict_float
        self.compiles = 0
        self.compile_seconds = 0.0
        self._cache: dict[Key, Compiled] = {}
        self._plain: dict[Key, Compiled] = {}  # the entries of _cache whose call needs no reading back
        self._version = g.version
        self._convert = signature(g).convert  # the current version's (see _refresh)
        self._last: Compiled | None = None
        # Nodes found to check at run time besides Asserts (see Trace.fail_where), learnt
        # while tracing and kept for every later tracing of this version of the graph.
        self._failing: set[Node] = set()
        regions(g)  # refuse an irreducible graph now, not at the first call

    # --- the three steps ------------------------------------------------------------
    def build_arguments(self, args: Sequence[Any]) -> list[Any]:
        """The arguments as values of the declared types (checked, dims bound)."""
        return list(signature(self.graph).convert(tuple(args)))

    def execute_graph(self, layout: StackLayout, args: Sequence[Any],
                      trips: TripCount | None = None, heap: Sequence[Any] | None = None,
                      host_errors: HostErrors | None = None) -> tuple[list[Any], Trace]:
        tr = Trace(layout, self.dynamic_bound, heap, self._failing)
        if trips is not None:
            tr.trips = trips
        if host_errors is not None:
            tr.host_errors = host_errors
        # A Python int or float argument (see _weak) is a weakly typed tracer: its dtype is
        # made strong first, so that it combines with other values as the declared type does.
        args = [lax.convert_element_type(a, a.dtype) if getattr(getattr(a, "aval", None), "weak_type", False) else a
                for a in args]
        try:
            outs = tr.run(self.graph, args)
        except TypeError as e:
            if tr.unsettled is None:
                raise
            raise carry_refused(e, tr) from e
        return outs, tr

    def build_computation(self, outs: list[Any], tr: Trace, padded: list[int | None],
                          checks: list[Check]) -> tuple[Any, ...]:
        """The output tuple: the results (a padded one followed by its true size; ``padded``
        receives their axes), then, where the graph has stacks or a list grown on a run-time
        trip count, the largest depth reached, which tells whether the buffers were large
        enough, then, where a check may fail at run time (``checks`` receives them), the
        code of the first that failed.  (Every output is a transfer at every call.)"""
        flat: list[Any] = []
        padded.clear()
        for o in outs:
            if isinstance(o, Padded):
                flat += [jnp.asarray(o.data), jnp.asarray(o.size)]
                padded.append(o.axis)
            else:
                flat.append(jnp.asarray(o))
                padded.append(None)
        if tr.layout.kinds or tr.trips.used:
            flat.append(_peak(tr))
        checks.clear()
        if not tr.checks or is_static(tr.status):
            return tuple(flat)  # no check left for run time: nothing to read after a call
        checks += tr.checks
        return (*flat, tr.status)

    # --- compiling ------------------------------------------------------------------
    def _compile(self, values: list[Any], layout: StackLayout) -> Compiled:
        t0 = time.perf_counter()
        padded: list[int | None] = []
        trips = TripCount()
        host_errors = HostErrors()
        checks: list[Check] = []
        # One stack (a gradient graph's tape): its buffers are lent to the computation.
        tape = self.graph.cached("xla.stack_news", stack_news) == 1

        def computation(*args: Any) -> tuple[Any, ...]:
            heap = None
            if tape and layout.kinds:
                *args, heap = args  # type: ignore[assignment]
            outs, tr = self.execute_graph(layout, args, trips, heap, host_errors)
            built = self.build_computation(outs, tr, padded, checks)
            return built if heap is None else (*built, tuple(tr.heap or ()))

        args = [(tuple(np.shape(v)), np.asarray(v).dtype, v.__class__ in _WEAK_CLASSES) for v in values]
        specs = [_spec(shape, dtype, weak) for shape, dtype, weak in args]
        options = dict(_STRICT_FLOAT) if self.strict_float else None
        while True:
            try:
                # Called through jit, not through lowered.compile(): jit's C++ dispatch costs a
                # few microseconds a call, an AOT Compiled's Python path several times more.
                lends = tape and bool(layout.kinds)
                fn = jax.jit(computation, compiler_options=options, donate_argnums=(len(specs),) if lends else ())
                # the trace, which jit's own cache keeps for the first call
                lowered = fn.lower(*specs, *([layout.specs()] if lends else []))
                break
            except (NewStackKind, NewCheck):
                continue  # the layout grew, or a region must carry a check's code: trace again
        # XLA compiles at the first call (jit's cache), so ``seconds`` counts tracing and lowering
        dt = time.perf_counter() - t0
        self.compile_seconds += dt
        outs = [tuple(o.shape) for o in jax.tree_util.tree_leaves(lowered.out_info[:-1] if lends
                                                                    else lowered.out_info)]
        return Compiled(fn, lowered.as_text(), layout, bool(layout.kinds), dt, padded,
                        trips if trips.used else None, host_errors if host_errors.used else None,
                        checks, args, outs, lends)

    def _refresh(self) -> None:
        if self.graph.version != self._version:
            self._cache.clear()
            self._plain.clear()
            self._failing.clear()
            self._version = self.graph.version
            self._convert = signature(self.graph).convert

    @staticmethod
    def key(values: Sequence[Any]) -> Key:
        # build_arguments gives NumPy arrays and scalars (and _weak Python numbers): a
        # scalar's type is its signature, an array's shape and dtype object (dtype.str
        # builds a string: ~1 us an argument).
        return tuple([type(v) if isinstance(v, np.generic) or v.__class__ in _WEAK_CLASSES
                      else (v.shape, v.dtype) if isinstance(v, np.ndarray)
                      else (np.shape(v), np.asarray(v).dtype) for v in values])

    def compiled(self, values: list[Any], key: Key | None = None) -> Compiled:
        """The computation for these arguments' signature (compiled on first use)."""
        self._refresh()
        key = self.key(values) if key is None else key
        entry = self._cache.get(key)
        if entry is None:
            with jax.enable_x64(True):
                entry = self._compile(values, StackLayout())
                if entry.has_stacks:
                    entry = self._fit(values, entry)
                self._cache[key] = entry
                self.compiles += 1
        return entry

    def _fit(self, values: list[Any], entry: Compiled) -> Compiled:
        """A signature's first call of a graph with stacks: its stacks' peak depth for these
        arguments, from the same computation with the peak as its only output (XLA drops
        everything the peak does not depend on, the arithmetic of the loops included, so
        it compiles in a fraction of the full one's time).  When the peak passes the
        capacity, the full computation is traced again for a capacity that holds it, before
        XLA compiles it once.  (A later call that goes deeper still grows it, see __call__.)"""
        layout = StackLayout(list(entry.layout.kinds), entry.layout.capacity)

        def depth(*args: Any) -> Any:
            return _peak(self.execute_graph(layout, args)[1])

        try:
            peak = int(np.asarray(jax.jit(depth)(*values)))
        except (NewStackKind, NewCheck):  # (the kinds were all learnt by the first trace; only a guess failed)
            return entry
        cap = entry.layout.capacity
        if peak <= cap:
            return entry
        return self._compile(values, StackLayout(list(entry.layout.kinds), _sized(cap, peak)))

    def __call__(self, *args: Any) -> Any:
        if self.graph.version == self._version:
            values = _weak(args, self._convert(args))  # = build_arguments, without looking up the signature
            key = self.key(values)
            entry = self._plain.get(key)
        else:
            values, key, entry = _weak(args, self.build_arguments(args)), None, None
        if entry is not None:  # the common case: nothing to read back but the results
            with jax.enable_x64(True):
                outs = entry.fn(*values)
            self._last = entry
            return _to_numpy(outs[0]) if len(outs) == 1 else tuple(_to_numpy(o) for o in outs)
        entry = self.compiled(values, key)
        key = self.key(values) if key is None else key
        if entry.plain:
            self._plain[key] = entry
            return self(*args)
        with jax.enable_x64(True):
            for _ in range(_MAX_DOUBLINGS):
                if entry.trips is not None:
                    entry.trips.most = 0
                if entry.host_errors is not None:
                    entry.host_errors.first = None
                outs = entry.call(values)
                if entry.checks:
                    failed, outs = outs[-1], outs[:-1]
                if not entry.layout.kinds and entry.trips is None:
                    break  # no stack, no list bounded by a trip count: no depth to read
                *outs, peak = outs
                peak = int(np.asarray(peak))  # (int() of a jax scalar costs several times more)
                if entry.trips is not None:
                    # Wait for the loops' trip-count callbacks.
                    jax.effects_barrier()  # type: ignore[no-untyped-call]
                    peak = max(peak, entry.trips.most)
                if peak <= entry.layout.capacity:
                    break
                # A stack outgrew its buffers, or a list grown on a run-time trip count its
                # bound: double the capacity until the peak fits, run again.
                cap = entry.layout.capacity
                while cap < int(peak):
                    cap *= 2
                grown = StackLayout(list(entry.layout.kinds), cap)
                entry = self._cache[key] = self._compile(values, grown)
                self.compiles += 1
        self._last = entry
        if entry.host_errors is not None:
            # A host kernel that raised ran before any check that failed after it (the
            # code after it ran on zeros): its error is Python's.
            jax.block_until_ready(outs)  # type: ignore[no-untyped-call]
            entry.host_errors.raise_first()
        if entry.checks:
            _raise_failed(entry.checks, failed)
        results = []
        it = iter(outs)
        for axis in entry.padded:
            o = next(it)
            results.append(_to_numpy(o) if axis is None else Padded(o, next(it), axis).sliced())
        return results[0] if len(results) == 1 else tuple(results)

    def entry(self, fallback: Any, fail: Any, convert: Any = None, cell: list[Any] | None = None,
              graph: Graph | None = None) -> Any:
        """A function that calls the computation of the last call's signature straight
        (:meth:`Executable.entry`, chained by ``nx.compile(script)``): it checks each
        argument's class, dtype and shape against that signature, switches x64 on, calls
        the jitted computation with the arguments as they are (a Python number becomes the
        NumPy scalar of its dtype) and returns its results as NumPy values (CPU buffers,
        not copied), converted by ``convert``.  None where that computation has more
        outputs to read than its results (stacks, checks, padded results)."""
        last = self._last
        if last is None or not last.plain or len(last.args) != len(self.graph.args):
            return None
        return _entry(last, self.graph, self._version, fallback, convert, cell, graph)

    # --- reading ----------------------------------------------------------------------
    def lower(self, *args: Any) -> str:
        """The StableHLO text of the computation for ``args``' signature."""
        return self.compiled(self.build_arguments(args)).lowered_text

    def source(self) -> str:
        if self._last is None:
            if not self.graph.args:
                return self.lower()
            raise ValueError("nothing compiled yet: call it (or .lower(*args)) once, so that a signature is known")
        return self._last.lowered_text


# x64 on around a call, as ``with jax.enable_x64(True)`` does, without building a context
# manager per call (that costs a microsecond, a tenth of a small computation's whole call).
_X64 = jax.enable_x64
_SWAP = getattr(_X64, "swap_local", None)
# Python numbers passed to XLA as they are: JAX's dispatch takes a Python int in about 0.8 us
# less than the NumPy scalar it would become (a tenth of a small computation's call).
_WEAK_CLASSES = {int: np.int64, float: np.float64}


def _weak(args: Sequence[Any], values: Sequence[Any]) -> list[Any]:
    """``values`` (the converted ``args``), with each Python int or float that became the
    NumPy scalar of its own dtype (i64, f64) given back as the Python number."""
    return [a if a.__class__ in _WEAK_CLASSES and v.__class__ is _WEAK_CLASSES[a.__class__] else v
            for a, v in zip(args, values)]


def _entry(c: Compiled, g: Graph, version: int, fallback: Any, convert: Any, cell: list[Any] | None,
           graph: Graph | None) -> Any:
    """The generated function of :meth:`XlaExecutable.entry` for the signature of ``c``."""
    if _SWAP is None:
        return None
    ns: dict[str, Any] = {"_fn": c.fn, "_g": g, "_v": version, "_fallback": fallback, "_convert": convert,
                          "_cell": cell, "_graph": graph, "_swap": _SWAP, "_set": _X64.set_local,
                          "_np": np.asarray, "_nd": np.ndarray}
    n = len(c.args)
    names = [f"a{k}" for k in range(n)]
    lines = ["def entry(*args):", f"    if len(args) != {n} or _g.version != _v:", "        return _fallback(*args)"]
    if n:
        lines.append(f"    {', '.join(names)}, = args")
    for k, (shape, dtype, weak) in enumerate(c.args):
        a = names[k]
        if weak:  # a Python int or float, passed as it is
            ns[f"_w{k}"] = type(dtype.type(0).item())
            ok = f" or not -{2**63} <= {a} < {2**63}" if ns[f"_w{k}"] is int else ""
            lines += [f"    if {a}.__class__ is not _w{k}{ok}:", "        return _fallback(*args)"]
            continue
        if shape == ():
            ns[f"_s{k}"] = dtype.type
            if dtype.name == "bool":  # a Python bool becomes NumPy's
                lines += [f"    if {a}.__class__ is bool:", f"        {a} = _s{k}({a})",
                          f"    elif {a}.__class__ is not _s{k}:", "        return _fallback(*args)"]
            else:
                lines += [f"    if {a}.__class__ is not _s{k}:", "        return _fallback(*args)"]
            continue
        ns[f"_d{k}"] = dtype
        lines += [f"    if {a}.__class__ is not _nd or {a}.dtype is not _d{k} or {a}.shape != {shape!r}:",
                  "        return _fallback(*args)"]
    lines += ["    p = _swap(True)", "    try:", f"        outs = _fn({', '.join(names)})", "    finally:",
              "        _set(p)"]
    if cell is not None:
        lines.append("    _cell[0] = _graph")
    results = [f"_np(outs[{r}])" + ("[()]" if shape == () else "") for r, shape in enumerate(c.outs)]
    if len(results) == 1:
        # a weak scalar result (int, float, bool) converts from the 0-d array directly
        ret = results[0].removesuffix("[()]") if convert in (int, float, bool) else results[0]
    else:
        ret = f"({', '.join(results)},)" if results else "()"
    lines.append(f"    return {ret}" if convert is None else f"    return _convert({ret})")
    source = "\n".join(lines)
    exec(compile(source, f"<xla entry {g.name}>", "exec"), ns)  # noqa: S102
    entry = ns["entry"]
    entry.source = source  # for reading
    return entry


def _peak(tr: Trace) -> Any:
    """The largest depth any stack of the trace reached (0 without stacks)."""
    top = tr.top or {}
    peaks = [v[0] for k, v in top.items() if isinstance(getattr(k, "type", None), StackType)]
    return jnp.max(jnp.stack(peaks)) if peaks else jnp.zeros((), np.int64)


def _raise_failed(checks: list[Check], failed: Any) -> None:
    """Raise the python backend's error for the check whose code ``failed`` is (0: none)."""
    code = int(np.asarray(failed))
    if code:
        checks[code - 1].raise_()


def _to_numpy(v: Any) -> Any:
    arr = np.asarray(v)
    return arr[()] if not arr.shape else arr


def compile_xla(g: Graph, dynamic_bound: int | None = None, strict_float: bool = False) -> XlaExecutable:
    """The xla backend's executable for ``g`` (one per graph and options, cached on it).
    ``dynamic_bound``: the most results a data-dependent op (NMS, NonZero, ...) may have,
    where its own bound from the input shapes is larger (see nexus.backends.xla.dynamic).
    ``strict_float``: no reassociation of float arithmetic by XLA (slower; see above)."""
    exe: XlaExecutable = g.cached(f"xla.exe.{dynamic_bound}.{strict_float}",
                                  lambda g: XlaExecutable(g, dynamic_bound, strict_float))
    return exe


def _spec(shape: tuple[int, ...], dtype: Any, weak: bool = False) -> Any:
    return jax.ShapeDtypeStruct(shape, dtype, weak_type=weak)  # type: ignore[no-untyped-call]


def _sized(cap: int, peak: int) -> int:
    """The stacks' capacity for a signature's first call, whose depth ``peak`` passes
    ``cap``: the least of ``cap * 2**k * (1, 5/4, 3/2, 7/4)`` that holds it.  The buffers
    are kept between calls (Compiled.spare), W4-large's gradient's (a peak of 300 entries
    of [64, 512]) 42 MB at this capacity against 67 MB at 512; a later call that goes
    deeper doubles it (see __call__), so a growing trip count still compiles O(log) times."""
    while cap * 2 <= peak:
        cap *= 2
    return next(cap * q // 4 for q in (4, 5, 6, 7, 8) if cap * q // 4 >= peak)
