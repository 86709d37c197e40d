"""The ``auto`` backend: one graph split across engines by a cost model you can read.

Each engine gets what it does best, and ``exe.partitions`` says which node runs where and
why:

- a loop without dense ops (no Conv, and matrix products only by constant weights or
  small right operands: scalar, elementwise and matrix-vector work and a layer's products,
  which ONNX Runtime's ``Loop`` and the python backend both run op by op) becomes a native
  kernel of the llvm backend, its products BLAS calls or its own kernel of packed weights;
- a graph with loops whose every op compiles so (and only such ops) runs whole as native
  code, with no Python between its loops;
- a graph with no such loop that ``nx.to_onnx`` exports runs whole as one ONNX Runtime
  session: its fused kernels, and its ``Loop`` bodies of dense ops at ORT's own speed.  A
  recurrent op that an importer brought in (ONNX's or torch's LSTM, GRU, RNN) is a ``Call``
  of its loop (:mod:`nexus.frontend.recurrent`), not a loop of the graph: it goes to ONNX
  Runtime, whose fused kernel it exports as, whole or as a region of the split below;
- otherwise the python backend runs the blocks, the Phis and branches (control flow and
  data-dependent glue, the calls of the native kernels), and hands each block's dense
  dataflow worth a session call to ONNX Runtime
  (:func:`nexus.backends.onnx.runtime.outline_regions`).

The options override the choices: ``dense="python"`` keeps dense regions on the python
backend, ``loops="python"`` keeps loops interpreted.  An engine whose extra is missing is
skipped by default (and named in ``exe.partitions``); asked for by name, it is an error.
"""

from __future__ import annotations

import importlib.util
import math
import time
from typing import Any

from nexus.backends.base import Executable, MissingLoweringError, Partition, in_graph, register_backend
from nexus.backends.python.interpreter import compile_python
from nexus.ir.cfg import role
from nexus.ir.extras import MissingExtra
from nexus.ir.graph import Graph
from nexus.ir.types import is_container

BACKEND = "auto"
_MODULE = {"onnxruntime": "onnxruntime", "llvm": "llvmlite"}
# Ops that ONNX Runtime runs faster than a native loop of the llvm backend.
DENSE_OPS = frozenset({"Conv", "ConvTranspose", "Einsum"})
# A matrix product in a loop goes native when its right operand is a constant (a layer's
# weights: the llvm backend packs them when compiling, see nexus.backends.llvm.matmul's
# PANEL_ROWS), or else has a static size of at most SMALL_PRODUCT elements (a BLAS call;
# a bigger run-time operand stays with ONNX Runtime's GEMM, as measured before the packing).
# Measured on this project's 2-core machine, per call: a 20-step tanh relay with a 256 x 256
# weight, llvm 1.42 ms, ONNX Runtime 1.73 ms (8 x 8: 9 us against 100 us); the model suite's
# RNN cell (64 x 64) 0.15x ONNX Runtime's time; its greedy decoder (a 128 x 1000 output
# layer) 0.7x at batch 1 and 8 with the packed weights (2.5x at batch 8 through BLAS).
SMALL_PRODUCT = 1 << 16
PRODUCTS = frozenset({"MatMul", "Gemm"})


def _native_product(n: Any) -> bool:
    """A matrix product by constant weights, or whose right operand has a static size of at
    most SMALL_PRODUCT."""
    from nexus.backends.llvm.matmul import constant_weight

    if not n.attrs.get("transA", False) and constant_weight(n.input(1), bool(n.attrs.get("transB", False)),
                                                            str(getattr(n.type, "dtype", ""))) is not None:
        return True
    t = n.input(1).type
    shape = getattr(t, "shape", None)
    return shape is not None and all(isinstance(d, int) for d in shape) and math.prod(shape) <= SMALL_PRODUCT


def _engine(asked: str | None, default: str, option: str) -> tuple[str, str]:
    """The engine for ``option`` and why: ``asked`` (None: ``default`` when installed)."""
    if asked is not None:
        if asked not in ("python", default):
            raise ValueError(f"{option} is {default!r} or 'python', not {asked!r}")
        if asked != "python" and importlib.util.find_spec(_MODULE[asked]) is None:
            raise MissingExtra(f"{option}={asked!r}", _MODULE[asked])
        return asked, "by request"
    if importlib.util.find_spec(_MODULE[default]) is None:
        return "python", f"{_MODULE[default]} is not installed"
    return default, "installed"


def _native_loop(callee: Graph) -> bool:
    # llvm holds no sequence or optional values: a loop that carries one stays interpreted.
    return not any(n.op.name in DENSE_OPS or n.op.name in PRODUCTS and not _native_product(n) or is_container(n.type)
                   for n in callee.nodes())


class Mixed(Executable):
    """``g`` split across the python backend, ONNX Runtime sessions and native kernels."""

    backend = BACKEND

    def __init__(self, g: Graph, dense: str | None = None, loops: str | None = None, threads: int = 0,
                 max_iterations: int | None = None, parallel: bool | None = None):
        t0 = time.perf_counter()
        self.graph = g
        dense, dense_why = _engine(dense, "onnxruntime", "dense")
        loops, loops_why = _engine(loops, "llvm", "loops")
        self.partitions: list[Partition] = []
        self.whole: Executable | None = None
        self.host, copy = g.clone()
        kernels: list[Any] = []
        if loops != "llvm":
            self.partitions.append(Partition("python", [], f"loops interpreted: llvm {loops_why}"))
        elif (whole := self._native(g, max_iterations)) is not None:
            self.whole = whole
        else:
            from nexus.backends.llvm.partition import outline_loops

            kernels = outline_loops(self.host, max_iterations, accept=_native_loop)
            why = "a loop without dense ops (products by constant weights or small)"
            self.partitions += [Partition("llvm", [], why, members=k.outlined) for k in kernels]
        if self.whole is None and dense == "onnxruntime" and not kernels:
            self.whole = self._whole(g, threads)
        if self.whole is not None:
            self._run: Executable = self.whole
            self.host = g
        else:
            if dense == "onnxruntime":
                from nexus.backends.onnx.runtime import Settings, outline_regions

                self.partitions += outline_regions(self.host, Settings(threads))[1]
            else:
                self.partitions.append(Partition("python", [], f"dense regions interpreted: onnxruntime {dense_why}"))
            self._run = compile_python(self.host, max_iterations, parallel)
        self.partitions = in_graph(self.partitions, g, {c: n for n, c in copy.items()})
        self.compile_time = time.perf_counter() - t0

    def _native(self, g: Graph, max_iterations: int | None) -> Executable | None:
        """``g`` compiled whole to native code where it has loops, every op has an llvm rule
        and none is dense (no Python between the loops and the code around them), else None."""
        from nexus.backends.llvm.backend import LLVMExecutable
        from nexus.backends.llvm.dtypes import Unsupported
        from nexus.backends.llvm.partition import unsupported_ops
        from nexus.passes.loops import loop_forest

        if not loop_forest(g).top_level or not _native_loop(g) or unsupported_ops(g):
            return None
        try:
            exe = LLVMExecutable(g, max_iterations)
        except (Unsupported, MissingLoweringError):
            return None
        why = "loops and all around them compile natively (products by constant weights or small)"
        self.partitions.append(Partition("llvm", [], why,
                                         members=tuple(n for n in g.nodes() if role(n) == "data")))
        return exe

    def _whole(self, g: Graph, threads: int) -> Executable | None:
        from nexus.backends.onnx.export import ExportError
        from nexus.backends.onnx.runtime import _REFUSALS, Session, Settings

        try:
            exe = Session(g, Settings(threads))
        except (ExportError, NotImplementedError, *_REFUSALS) as e:
            self.partitions.append(Partition("python", [], f"not one session: {type(e).__name__}"))
            return None
        self.partitions.append(Partition("onnxruntime", [], "no loop for llvm, and the whole graph exports",
                                         members=tuple(n for n in g.nodes() if role(n) == "data")))
        return exe

    def __call__(self, *args: Any) -> Any:
        return self._run(*args)

    def source(self) -> str:
        return "".join(f"# {p}\n" for p in self.partitions) + self._run.source()


def compile_auto(g: Graph, dense: str | None = None, loops: str | None = None, threads: int = 0,
                 max_iterations: int | None = None, parallel: bool | None = None) -> Executable:
    """``g`` split across engines (see the module docstring); ``dense``/``loops`` override
    the engine of dense regions (``"onnxruntime"``/``"python"``) and of loops
    (``"llvm"``/``"python"``); ``threads``: ONNX Runtime's intra-op threads (0: its own);
    ``parallel``: the python backend's option, for the part that it runs."""
    return Mixed(g, dense, loops, threads, max_iterations, parallel)


register_backend(BACKEND, compile_auto, options=("dense", "loops", "threads", "max_iterations", "parallel"),
                 doc="each region on the engine that runs it best: ONNX Runtime, LLVM, or the python backend",
                 containers=True)
