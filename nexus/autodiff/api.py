"""The public API: ``nx.grad``, ``nx.value_and_grad``, ``nx.vjp``.

``f`` is a :class:`~nexus.ir.graph.Graph` or anything that yields one: an object with a
``.graph`` attribute or a ``graph_for(*args)`` method (``@nx.script`` functions).
``mode="graph"`` builds (once per graph, cached) the gradient graph and runs it on the
interpreter; ``mode="tape"`` records a forward run and differentiates the record.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from nexus.autodiff import tape as tape_mode
from nexus.autodiff.checkpoint import checkpointed_vjp
from nexus.autodiff.graph_mode import GradError, vjp_graph
from nexus.backends.python import run
from nexus.ir.graph import Graph
from nexus.passes.manager import optimize as run_optimizer

MODES = ("graph", "tape")


def graph_of(f: Any, args: Sequence[Any]) -> Graph:
    """The Graph behind ``f`` for these arguments."""
    if isinstance(f, Graph):
        return f
    graph_for = getattr(f, "graph_for", None)
    if callable(graph_for):
        g = graph_for(*args)
        if isinstance(g, Graph):
            return g
    g = getattr(f, "graph", None)
    if isinstance(g, Graph):
        return g
    if callable(f) and g is None:
        # a script function whose graph appears after its first call
        f(*args)
        g = getattr(f, "graph", None)
        if isinstance(g, Graph):
            return g
    raise TypeError(f"cannot differentiate {f!r}: expected a nexus Graph or an @nx.script function "
                    "(something with .graph or .graph_for(*args))")


def _argnums(argnums: int | Sequence[int]) -> tuple[tuple[int, ...], bool]:
    if isinstance(argnums, int):
        return (argnums,), True
    return tuple(argnums), False


def _check_mode(mode: str) -> None:
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")


_CACHE_KEY = "autodiff.vjp_graph"

# What a gradient graph goes through before it runs: folding of the adjoint helpers whose
# input has the target shape already and of transposes of transposes, CSE, DCE, then
# LICM (loop-invariant work of the reverse loop goes to its preheader) and a final clean-up.
GRADIENT_PIPELINE = "canonicalize,licm,canonicalize"


def refuse_state(g: Graph) -> None:
    """GradError when ``g`` (or a graph it calls) reads or writes state: the derivative
    through values kept across calls is not defined here (a stream's state is an input
    of the next call, not of this one)."""
    for h in (g, *g.callees()):
        for n in h.nodes():
            if n.op.kind == "state":
                where = f" (created at {n.loc})" if n.loc is not None else ""
                raise GradError(f"cannot differentiate graph @{g.name}: {n.op.name} %{n.name or '?'} of state "
                                f"{n.attrs.get('name')!r} in ^{n.block.name if n.block else '?'}{where}; autodiff "
                                "through state ops is not supported (pass the state in as an argument and "
                                "return the new one to differentiate a step)")


def gradient_graph(g: Graph, argnums: Sequence[int], seed: str = "args", optimize: bool = True) -> Graph:
    """The (cached) gradient graph of ``g``, optimised with :data:`GRADIENT_PIPELINE`
    unless ``optimize`` is false; see :func:`nexus.autodiff.graph_mode.vjp_graph`."""
    refuse_state(g)
    cache: dict[tuple[tuple[int, ...], str, bool], Graph] = g.cached(_CACHE_KEY, lambda _: {})
    key = (tuple(argnums), seed, optimize)
    out = cache.get(key)
    if out is None:
        out = vjp_graph(g, argnums, seed)
        if optimize:
            run_optimizer(out, GRADIENT_PIPELINE)
        cache[key] = out
    return out


def _vjp_values(f: Any, args: Sequence[Any], argnums: tuple[int, ...], cts: Sequence[Any] | None,
                mode: str, max_iterations: int | None, checkpoint: int | None = None) -> tuple[list[Any], list[Any]]:
    """Results of ``f(*args)`` and the cotangents of ``args[argnums]``; ``cts=None`` seeds
    every result with ones."""
    _check_mode(mode)
    g = graph_of(f, args)
    refuse_state(g)
    if checkpoint is not None:
        if mode != "tape":
            raise ValueError("checkpoint= is implemented for mode='tape' (graph mode stores every iteration)")
        return checkpointed_vjp(g, args, argnums, cts, checkpoint, max_iterations)
    if mode == "tape":
        return tape_mode.vjp_values(g, args, argnums, cts, max_iterations)
    # Sequential: a gradient graph's independent heavy nodes are BLAS calls that use the
    # cores already; running them on the pool measured 1.1x-3.5x slower (bench/w4_grad.py).
    if cts is None:
        gg = gradient_graph(g, argnums, "ones")
        res = run(gg, *args, max_iterations=max_iterations, parallel=False)
    else:
        gg = gradient_graph(g, argnums, "args")
        res = run(gg, *args, *cts, max_iterations=max_iterations, parallel=False)
    res = list(res) if isinstance(res, tuple) else [res]
    n = len(res) - len(argnums)
    return res[:n], res[n:]


class GradFunction:
    """What :func:`value_and_grad` and :func:`grad` return: call it, or compile it
    (``nx.compile(nx.grad(f), backend="xla")``): it builds one gradient graph per argument
    signature (:meth:`specialize`, the protocol ``nx.compile`` takes)."""

    def __init__(self, f: Any, nums: tuple[int, ...], single: bool, with_value: bool, mode: str,
                 max_iterations: int | None, checkpoint: int | None):
        self.f, self.nums, self.single, self.with_value = f, nums, single, with_value
        self.mode, self.max_iterations, self.checkpoint = mode, max_iterations, checkpoint

    def _pack(self, outs: list[Any], grads: list[Any]) -> Any:
        if len(outs) != 1 or np.ndim(outs[0]) != 0:
            shapes = ", ".join(str(np.shape(o)) for o in outs)
            raise GradError(f"grad needs a function with one scalar result, got results of shapes {shapes}; "
                            "use nx.vjp for others")
        g = grads[0] if self.single else tuple(grads)
        return (outs[0], g) if self.with_value else g

    def __call__(self, *args: Any) -> Any:
        try:
            outs, grads = _vjp_values(self.f, args, self.nums, None, self.mode, self.max_iterations, self.checkpoint)
        except RuntimeError as e:  # a script's UnboundLocalError or `raise`, as nx.compile(grad) raises it
            err = self.run_error(e)
            if err is e:
                raise
            raise err from e
        return self._pack(outs, grads)

    def specialize(self, args: tuple[Any, ...]) -> tuple[Graph, Callable[[Any], Any]]:
        """The gradient graph for ``args``' signature (seeded with ones) and the conversion
        of its results into what calling this function returns."""
        g = graph_of(self.f, args)
        gg = gradient_graph(g, self.nums, "ones")
        n = len(gg.result_types) - len(self.nums)

        def convert(res: Any) -> Any:
            res = list(res) if isinstance(res, tuple) else [res]
            return self._pack(res[:n], res[n:])

        return gg, convert

    def run_error(self, e: RuntimeError) -> Exception:
        """As the differentiated function's language names the failure (a script's
        UnboundLocalError), or ``e``; a function that returns None there has no gradient."""
        inner = getattr(self.f, "run_error", None)
        err = inner(e) if inner is not None else e
        return err if err is not None else TypeError(f"the differentiated function returned None: {e}")


def value_and_grad(f: Any, argnums: int | Sequence[int] = 0, mode: str = "graph",
                   max_iterations: int | None = None, checkpoint: int | None = None) -> GradFunction:
    """A function returning ``(f(*args), gradient)``; ``f`` must return one scalar.  With
    a sequence ``argnums`` the gradient is a tuple.  ``checkpoint=k`` (tape mode) keeps a
    checkpoint every k loop iterations (entries of a loop header or join) and recomputes the
    rest (memory O(T/k + k))."""
    nums, single = _argnums(argnums)
    _check_mode(mode)
    return GradFunction(f, nums, single, True, mode, max_iterations, checkpoint)


def grad(f: Any, argnums: int | Sequence[int] = 0, mode: str = "graph",
         max_iterations: int | None = None, checkpoint: int | None = None) -> GradFunction:
    """The gradient of a scalar-valued ``f`` with respect to ``args[argnums]``."""
    nums, single = _argnums(argnums)
    _check_mode(mode)
    return GradFunction(f, nums, single, False, mode, max_iterations, checkpoint)


def vjp(f: Any, *args: Any, argnums: int | Sequence[int] | None = None, mode: str = "graph",
        max_iterations: int | None = None) -> tuple[Any, Callable[..., Any]]:
    """``(f(*args), vjp_fn)``; ``vjp_fn(cotangent)`` (one per result) returns the
    cotangents of the arguments (all float ones unless ``argnums`` says), as a tuple."""
    nums = tuple(range(len(args))) if argnums is None else _argnums(argnums)[0]
    outs, _ = _vjp_values(f, args, (), None, "tape", max_iterations) if mode == "tape" else (None, None)
    if outs is None:
        g = graph_of(f, args)
        refuse_state(g)
        res = run(g, *args, max_iterations=max_iterations)
        outs = list(res) if isinstance(res, tuple) else [res]

    def vjp_fn(*cts: Any) -> tuple[Any, ...]:
        if len(cts) != len(outs):
            raise TypeError(f"vjp_fn takes one cotangent per result ({len(outs)}), got {len(cts)}")
        _, grads = _vjp_values(f, args, nums, list(cts), mode, max_iterations)
        return tuple(grads)

    return (outs[0] if len(outs) == 1 else tuple(outs)), vjp_fn
