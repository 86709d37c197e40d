"""The ``onnxruntime`` backend: a graph, or each dense region of it, as an ONNX Runtime session.

ONNX Runtime has fused, pre-packed CPU kernels that Nexus should not write again; what it
runs poorly is control flow (a ``Loop`` body runs op by op, with a session call's
overhead per iteration) and what ONNX cannot say.  So there are two ways to run a graph:

- **whole** (the default for a graph that ``nx.to_onnx`` exports): one session built from
  the exported model.  Symbolic dims become ``dim_param`` names, so one session serves
  every size (ONNX Runtime plans its buffers per call); the arguments are converted and
  checked at the call boundary every backend shares (:mod:`nexus.ir.binding`) and passed
  to the session as they are, without copies.
- **split** (``split=True``, or when the whole graph does not export or load): each block's
  dense dataflow becomes a callee graph run by a session of its own, and the rest (the
  blocks, Phis and branches, the ops ONNX cannot say) runs on the python backend, which
  calls the sessions through ``Call`` nodes (as it calls the llvm backend's kernels).

The regions of a block are *convex*: no path between two of their nodes leaves the
region, so one call can stand for all of them.  Each node that ONNX can run gets an epoch,
the greatest epoch among its inputs, plus one for an input that cannot run there; nodes
of one epoch form one region (a path out of a region and back in would pass an outside
node and so raise the epoch).  A region becomes a session only where the cost model of
:func:`_worth` says a session call (about 20 us) costs less than the python backend's
own nodes.  ``exe.partitions`` says, for each region, where it runs and why.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnxruntime as ort

from nexus.backends.base import (
    Executable,
    MissingLoweringError,
    NexusRuntimeError,
    Partition,
    in_graph,
    register_backend,
)
from nexus.backends.onnx.export import RULES, ExportError, to_onnx
from nexus.backends.python.cost import estimate_ns
from nexus.backends.python.interpreter import NATIVE_CALLS, compile_python
from nexus.frontend.recurrent import spec_of
from nexus.ir.binding import signature
from nexus.ir.cfg import kahn_groups, role
from nexus.ir.graph import Graph
from nexus.ir.node import Block, Node
from nexus.ir.types import TensorType, TupleType, Type
from nexus.ops.sequence import SeqValue

BACKEND = "onnxruntime"
# The cost model of the regions (see _worth), in nanoseconds, measured on a 2-core x86 machine.
SESSION_CALL_NS = 20_000.0  # one call of a small region's session, argument checks included (~17 us)
PYTHON_NODE_NS = 2_000.0  # the python backend's own cost of one node, dispatch and NumPy call
SLOW_FACTOR = 4.0  # the python backend's convolutions and pools against ONNX Runtime's
SLOW_OPS = frozenset({"Conv", "ConvTranspose", "MaxPool", "AveragePool"})
_ORT = ort.capi.onnxruntime_pybind11_state
_FAILURES = (_ORT.Fail, _ORT.InvalidArgument, _ORT.RuntimeException)
_REFUSALS = (_ORT.Fail, _ORT.InvalidGraph, _ORT.InvalidArgument, _ORT.NotImplemented)
_LEVELS = {"all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
           "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
           "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
           "none": ort.GraphOptimizationLevel.ORT_DISABLE_ALL}


@dataclass(frozen=True)
class Settings:
    """ONNX Runtime's session settings: ``threads`` (intra-op; 0 lets ONNX Runtime choose),
    ``optimization`` (``"all"``, ``"extended"``, ``"basic"`` or ``"none"``)."""

    threads: int = 0
    optimization: str = "all"

    def options(self) -> ort.SessionOptions:
        if self.optimization not in _LEVELS:
            raise ValueError(f"optimization is one of {', '.join(_LEVELS)}, not {self.optimization!r}")
        so = ort.SessionOptions()
        so.intra_op_num_threads = self.threads
        so.inter_op_num_threads = 1
        so.graph_optimization_level = _LEVELS[self.optimization]
        so.log_severity_level = 3  # errors only: ONNX Runtime warns about every unused initializer
        # Its threads would spin after each run, taking a core from the python backend's work between calls.
        so.add_session_config_entry("session.intra_op.allow_spinning", "0")
        return so


class Session(Executable):
    """``g`` whole as one ONNX Runtime session."""

    backend = BACKEND

    def __init__(self, g: Graph, settings: Settings = Settings()):
        self.graph = g
        self.model = to_onnx(g)
        self.session = ort.InferenceSession(self.model.SerializeToString(), settings.options(),
                                            providers=["CPUExecutionProvider"])
        self._names = [i.name for i in self.session.get_inputs()]
        self._outputs = [o.name for o in self.session.get_outputs()]
        self._scalar = [isinstance(t, TensorType) and t.shape == () for t in g.result_types]
        self._convert = signature(g).convert
        self._run = self.session.run
        self.partitions: list[Partition] = []  # set by compile_onnxruntime for a whole graph

    def __call__(self, *args: Any) -> Any:
        feeds = {k: v if v.__class__ is np.ndarray or v is None or v.__class__ is list else _feed(v)
                 for k, v in zip(self._names, self._convert(args))}
        try:
            outs = self._run(self._outputs, feeds)
        except _FAILURES as e:  # a size ONNX Runtime found wrong: the python backend's error kind
            raise NexusRuntimeError(f"graph @{self.graph.name} on ONNX Runtime: {_first_line(e)}") from None
        if len(outs) == 1:
            return outs[0][()] if self._scalar[0] else outs[0]
        return tuple(o[()] if s else o for o, s in zip(outs, self._scalar))

    def source(self) -> str:
        import onnx

        return str(onnx.printer.to_text(self.model))


def _feed(v: Any) -> Any:
    """A value as ONNX Runtime takes it: a sequence as a list of arrays (the python
    backend's SeqValue too, when a session runs one region of a graph), else an array."""
    if isinstance(v, SeqValue):
        return v.tolist()
    return v if isinstance(v, list) else np.asarray(v)


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.split("Status Message: ")[-1].splitlines()[0] if text else type(e).__name__


def _runs_there(n: Node) -> bool:
    """Whether ``n`` can move into a session: pure dataflow with an ONNX rule, of tensor
    types, ordered by nothing but its data (a tuple-valued node: read only by its Projs)."""
    if n.op.name == "Proj":
        return n.num_inputs == 1 and role(n) == "data" and _runs_there(n.input(0))
    if isinstance(n.type, TupleType) and any(u.op.name != "Proj" for u in n.users):
        return False
    return (role(n) == "data" and (n.op.kind == "data" and n.op.pure and n.op.name in RULES or _recurrent(n))
            and not n.deps and not any(i < 0 for _, i in n.uses) and _tensors(n.type))


def _recurrent(n: Node) -> bool:
    """A Call of a recurrent op's loop that the export writes as the ONNX op (its fused kernel)."""
    return n.op.name == "Call" and spec_of(n) is not None


def _tensors(t: Type) -> bool:
    if isinstance(t, TupleType):
        return all(_tensors(e) for e in t.elems)
    return isinstance(t, TensorType) and t.shape is not None


def regions(block: Block) -> list[list[Node]]:
    """The convex regions of ``block``'s nodes that a session can run, in program order.

    A node's epoch is the greatest among its inputs in the block, plus one for an input
    that stays outside while the node moves in; constants and arguments do not count (each
    region gets its own copy of a constant).  Epochs never fall along an edge and rise from an outside node to an
    inside one, so a path that leaves a region never comes back into the same epoch."""
    members = [n for n in block.members if role(n) == "data"]
    order = [n for group in kahn_groups(members, block) for n in group]
    epoch: dict[Node, int] = {}
    there: dict[Node, bool] = {}
    groups: dict[int, list[Node]] = {}
    for n in order:
        moves = _runs_there(n)
        e = 0
        for v in (*n.inputs, *n.deps):
            if v in epoch:
                e = max(e, epoch[v] + (1 if moves and not there[v] else 0))
        epoch[n], there[n] = e, moves
        if moves:
            groups.setdefault(e, []).append(n)
    return [groups[e] for e in sorted(groups)]


def _worth(region: list[Node]) -> tuple[bool, str]:
    """Whether ``region`` runs faster as a session than on the python backend, and why.

    The python backend pays ``PYTHON_NODE_NS`` per node on top of the work
    (:func:`~nexus.backends.python.cost.estimate_ns`), and its NumPy convolutions and
    pools take ``SLOW_FACTOR`` times ONNX Runtime's; a session pays ``SESSION_CALL_NS``
    once.  Unknown sizes count as no work, so a region with symbolic sizes is judged by
    its node count and its ops."""
    ops = sorted({spec.op for n in region if n.op.name == "Call" and (spec := spec_of(n)) is not None})
    if ops:  # its loop on the python backend runs a dozen nodes per time step
        return True, f"ONNX Runtime's fused {', '.join(ops)} kernel"
    work = sum(estimate_ns(n) for n in region)
    slow = sum(estimate_ns(n) for n in region if n.op.name in SLOW_OPS)
    python = len(region) * PYTHON_NODE_NS + work + (SLOW_FACTOR - 1) * slow
    session = SESSION_CALL_NS + work
    ops = sorted({n.op.name for n in region if n.op.name in SLOW_OPS})
    if ops and slow == 0:  # sizes unknown: a convolution is always worth a call
        return True, f"{', '.join(ops)} of unknown size"
    text = f"python ~{python / 1000:.0f} us, a session ~{session / 1000:.0f} us"
    return session < python, text


def _outline(g: Graph, region: list[Node], k: int) -> tuple[Graph, list[Node], list[Node]]:
    """The region as a graph of its own: (callee, live-ins, live-outs); ``g`` unchanged."""
    rset = set(region)
    live_in: dict[Node, None] = {}
    live_out: dict[Node, None] = {}
    for n in region:
        for v in n.inputs:
            if v not in rset:
                live_in[v] = None
        if any(u not in rset for u in n.users) and not isinstance(n.type, TupleType):
            live_out[n] = None
    consts = [v for v in live_in if v.op.name == "Constant"]
    args = [v for v in live_in if v.op.name != "Constant"]
    callee = Graph(f"{g.name}.ort{k}", [v.type for v in args], [v.name or f"in{i}" for i, v in enumerate(args)])
    m: dict[Node, Node] = dict(zip(args, callee.args))
    body = callee.new_block("body", [callee.add("Jmp", [], callee.start_block)])
    for c in consts:
        m[c] = callee.add("Constant", [], body, c.attrs, type=c.type, name=c.name)
    for n in region:
        m[n] = callee.add(n.op, [m[v] for v in n.inputs], body, n.attrs, type=n.type, name=n.name, loc=n.loc)
    ret = callee.add("Return", [m[v] for v in live_out], body)
    callee.end_block.append_input(ret)
    return callee, args, list(live_out)


def _replace(g: Graph, region: list[Node], callee: Graph, args: list[Node], outs: list[Node]) -> Node:
    """Put a ``Call`` of ``callee`` where ``region`` was, and erase the region."""
    block = region[0].block
    assert block is not None
    call = g.add("Call", args, block, {"callee": callee}, name=callee.name)
    results = [call] if len(outs) == 1 else [g.add("Proj", [call], block, {"num": i}) for i in range(len(outs))]
    rset = set(region)
    for v, r in zip(outs, results):
        for u, i in list(v.uses):
            if u not in rset:
                g.set_input(u, i, r)
    g.erase_dead(region)
    return call


def outline_regions(host: Graph, settings: Settings = Settings()) -> tuple[list[Session], list[Partition]]:
    """Outline each region of ``host`` (changed in place) worth a session as a ``Call`` of a
    session the python backend runs; the sessions, and where every region runs and why
    (partitions of ``host``'s nodes, named by :func:`nexus.backends.base.in_graph`)."""
    sessions: list[Session] = []
    partitions: list[Partition] = []
    for block in list(host.blocks):
        for region in regions(block):
            worth, why = _worth(region)
            if worth:
                callee, args, outs = _outline(host, region, len(sessions))
                try:
                    session = Session(callee, settings)
                except (ExportError, MissingLoweringError, *_REFUSALS) as e:
                    worth, why = False, f"ONNX Runtime refused it: {type(e).__name__}: {_first_line(e)}"
                else:
                    _replace(host, region, callee, args, outs)
                    NATIVE_CALLS[callee] = session
                    sessions.append(session)
            partitions.append(Partition(BACKEND if worth else "python", [], why, block.name or "", tuple(region)))
    return sessions, partitions


class Split(Executable):
    """``g`` on the python backend with its dense regions as ONNX Runtime sessions."""

    backend = BACKEND

    def __init__(self, g: Graph, settings: Settings = Settings(), max_iterations: int | None = None,
                 reason: str = ""):
        t0 = time.perf_counter()
        self.graph, self.reason = g, reason
        self.host, copy = g.clone()
        self.sessions, parts = outline_regions(self.host, settings)
        self.partitions = in_graph(parts, g, {c: n for n, c in copy.items()})
        self._run = compile_python(self.host, max_iterations)
        self.compile_time = time.perf_counter() - t0

    def __call__(self, *args: Any) -> Any:
        return self._run(*args)

    def source(self) -> str:
        head = "".join(f"# {p}\n" for p in self.partitions)
        return f"# {self.reason}\n{head}{self._run.source()}"


def compile_onnxruntime(g: Graph, split: bool = False, threads: int = 0, optimization: str = "all",
                        max_iterations: int | None = None) -> Executable:
    """Run ``g`` on ONNX Runtime: whole as one session when it exports (and ``split`` is
    off), else its dense regions as sessions inside the python backend (see the module
    docstring).  ``threads``: ONNX Runtime's intra-op threads (0: its default);
    ``optimization``: its graph optimisation level; ``max_iterations``: as on the python
    backend, for the blocks it runs."""
    settings = Settings(threads, optimization)
    settings.options()  # a bad level is the caller's error, not a reason to split
    reason = "split by request"
    if not split:
        try:
            exe = Session(g, settings)
        except (ExportError, MissingLoweringError) as e:
            reason = f"the whole graph does not export: {e}"
        except _REFUSALS as e:
            reason = f"ONNX Runtime does not load the whole graph: {e}"
        else:
            exe.partitions = in_graph([Partition(BACKEND, [], "the whole graph exports", members=tuple(
                n for n in g.nodes() if role(n) == "data"))], g)
            return exe
    return Split(g, settings, max_iterations, reason)


register_backend(BACKEND, compile_onnxruntime, options=("split", "threads", "optimization", "max_iterations"),
                 doc="ONNX Runtime sessions for the graph or its dense regions; control flow on the python backend",
                 containers=True)
