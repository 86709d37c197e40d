"""The state of one DSL graph under construction: the current block, the open regions
(function, while_loop, if_cond, then/else branches), and the SSA variable maps.

Variables are the Python variables of the frames that opened a region, keyed by
``(frame token, name)``.  At the end of a block (``sync``) the builder records the value
each of them holds; on entering a block (``enter``) it rebinds each of them to a
*variable read* in that block, resolved on first use by the SSA builder (so an unused
variable costs no Phi).
"""

from __future__ import annotations

from collections.abc import Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from types import FrameType
from typing import Any, NoReturn

import numpy as np

from nexus.frontend.dsl.frames import frame_locals, set_frame_locals, user_loc
from nexus.frontend.dsl.ssa import DSLSSA, PyScalar, Stale, Undefined, Var
from nexus.frontend.dsl.value import Value
from nexus.frontend.values import is_python_scalar, to_array, weak_dtype
from nexus.ir.cons import PhiTypeError
from nexus.ir.graph import Graph, GraphError
from nexus.ir.node import Block, Node, SourceLoc
from nexus.ir.opdef import DATAFLOW_KINDS, OpDef, OpTypeError, get_op
from nexus.ir.types import TensorType, TupleType, Type
from nexus.ir.verify import VerifyError, verify


class DSLError(ValueError):
    """A misuse of the graph-building DSL, reported at the user's source line."""

    def __init__(self, msg: str, loc: SourceLoc | None = None):
        self.loc = loc
        super().__init__(f"{loc.file}:{loc.line}: {msg}" if loc is not None else msg)


class Unreachable(BaseException):
    """Raised by break_/continue_/returns: the rest of the Python block must not run.
    The enclosing region's ``__exit__`` swallows it (a BaseException, so that a user's
    ``except Exception`` does not)."""


_CURRENT: ContextVar[Builder | None] = ContextVar("nexus_dsl_builder", default=None)

# Inputs that are indices or shapes: a Python int there is i64, whatever the data dtype.
_INDEX_INPUTS = frozenset({"indices", "shape", "axes", "perm", "k", "depth", "ends", "starts", "pads", "repeats",
                           "sizes", "axes_then_steps", "max_output_boxes_per_class", "seed"})


def current_builder(what: str) -> Builder:
    b = _CURRENT.get()
    if b is None:
        raise DSLError(f"{what}: no graph is being built; use `with nx.function(name) as f:` or @nx.graph",
                       user_loc())
    return b


@dataclass(eq=False)
class Region:
    kind: str  # "function", "while_loop", "if_cond", "then", "else_"
    frame: FrameType | None
    loc: SourceLoc
    closed: bool = False

    def describe(self) -> str:
        what = {"then": "then() branch", "else_": "else_() branch"}.get(self.kind, self.kind)
        return f"the {what} at {self.loc.file}:{self.loc.line}"


@dataclass(eq=False)
class LoopRegion(Region):
    header: Block | None = None
    exit_proj: Node | None = None
    breaks: list[Node] = field(default_factory=list)
    aliases: list[list[Var]] = field(default_factory=list)
    numbers: dict[tuple[FrameType, str], Any] = field(default_factory=dict)  # Python numbers at entry
    cond_names: set[str] | None = None  # names the `with` line reads, when the source is known


@dataclass(eq=False)
class IfRegion(Region):
    cond_block: Block | None = None
    true_proj: Node | None = None
    false_proj: Node | None = None
    used: set[str] = field(default_factory=set)
    edges: dict[str, Node | None] = field(default_factory=dict)


@dataclass(eq=False)
class BranchRegion(Region):
    parent: IfRegion | None = None


class Builder:
    """One graph under construction (``nx.function`` / ``@nx.graph`` make it)."""

    def __init__(self, name: str, arg_types: Sequence[Type], arg_names: Sequence[str], frame: FrameType | None,
                 loc: SourceLoc):
        self.g = Graph(name, arg_types, list(arg_names))
        # A Python-number variable read as a graph value gets its own Constant: sharing
        # the cached literal would make the loop-condition re-emission mistake a literal
        # for the variable.
        self.ssa = DSLSSA(self.g, lambda v: self.const_node(v, None, fresh=True), self._phi_loc)
        self.block: Block = self.g.start_block
        self.regions: list[Region] = [Region("function", frame, loc)]
        self.epoch = 0
        self.closed = False
        self.num_returns = 0
        self._frames: dict[int, tuple[int, FrameType]] = {}  # id -> (token, frame kept alive)
        self._consts: dict[tuple[str, tuple, bytes], Node] = {}
        self.merge_info: dict[Block, Region] = {}
        self.last_added: Node | None = None
        self.placement: dict[str, str] = {}  # `with nx.device(...)`: attrs of the data nodes built
        # Per frame: names that are graph variables although they may hold a Python number
        # (they held a graph value once, or different numbers on different paths).
        self._rebound: dict[int, set[str]] = {}
        self._numbers: dict[Var, set[tuple[type, Any]]] = {}
        for n in self.g.args:
            n.loc = loc

    def _phi_loc(self, block: Block) -> SourceLoc:
        region = self.merge_info.get(block)
        return region.loc if region is not None else user_loc()

    # --- errors --------------------------------------------------------------------
    def fail(self, msg: str) -> NoReturn:
        raise DSLError(msg, user_loc())

    @property
    def region(self) -> Region:
        return self.regions[-1]

    def check_can_emit(self, what: str) -> None:
        if self.closed:
            self.fail(f"{what}: graph @{self.g.name} is finished; build a new one")
        if isinstance(self.region, IfRegion):
            self.fail(f"{what}: inside `with nx.if_cond(...)`, put code in `with nx.then():` or `with nx.else_():`")

    # --- variables -----------------------------------------------------------------
    def _token(self, frame: FrameType) -> int:
        hit = self._frames.get(id(frame))
        if hit is None:
            hit = (len(self._frames), frame)
            self._frames[id(frame)] = hit
        return hit[0]

    def _tracked_frames(self) -> list[FrameType]:
        seen: dict[int, FrameType] = {}
        for r in self.regions:
            if r.frame is not None:
                seen.setdefault(id(r.frame), r.frame)
        return list(seen.values())

    def _own_values(self, frame: FrameType) -> list[tuple[str, Value]]:
        return [(k, v) for k, v in frame_locals(frame).items() if isinstance(v, Value) and v._builder is self]

    def sync(self) -> None:
        """Record, at the end of the current block, what each tracked variable holds."""
        for frame in self._tracked_frames():
            tok = self._token(frame)
            rebound = self._rebound.setdefault(tok, set())
            for name, v in frame_locals(frame).items():
                var = (tok, name)
                if isinstance(v, Value) and v._builder is self:
                    if v._node is None and v._var == var and v._epoch == self.epoch:
                        continue  # not reassigned since this block began
                    self.ssa.set_value(var, self.block, self._binding(name, v))
                elif is_number(v):
                    # A Python number becomes a Constant only if a graph value needs it.
                    self.ssa.set_value(var, self.block, PyScalar(v))
                    seen = self._numbers.setdefault(var, set())
                    seen.add((type(v), v))
                    if len(seen) > 1:
                        rebound.add(name)  # different numbers on different paths: a graph variable

    def _binding(self, name: str, v: Value) -> Node | Stale:
        if v._region.closed:
            return Stale(f"variable {name!r} holds a value created inside {v._region.describe()}, "
                         "which has ended")
        if v._node is not None:
            return self.ssa.resolve(v._node)
        assert v._block is not None
        und = self.ssa.undefined(v._var, v._block)
        if und is not None:
            return Stale(self._undefined_message(v._var[1], und))
        return self._read(v._var, v._block)

    def enter(self, block: Block, closed: Region | None = None) -> None:
        """Make ``block`` current and rebind every tracked variable to a read there
        (including those of the frame of the region ``closed`` just now)."""
        self.block = block
        self.epoch += 1
        frames = self._tracked_frames()
        if closed is not None and closed.frame is not None and all(f is not closed.frame for f in frames):
            frames.append(closed.frame)
        for frame in frames:
            tok = self._token(frame)
            rebound = self._rebound.setdefault(tok, set())
            names = [name for name, v in frame_locals(frame).items()
                     if (isinstance(v, Value) and v._builder is self) or (name in rebound and is_number(v))]
            updates = {name: self._entry_value((tok, name), block) for name in names}
            rebound.update(updates)
            set_frame_locals(frame, updates)

    def _entry_value(self, var: Var, block: Block) -> Value:
        """The variable's value on entering ``block`` (read now: later writes to the block
        must not change it); a variable without one errors when used."""
        if self.ssa.undefined(var, block) is None:
            return Value(self, self.region, self._read(var, block))
        return Value(self, self.region, var=var, block=block, epoch=self.epoch)

    def _read(self, var: Var, block: Block) -> Node:
        try:
            node = self.ssa.get_value(var, block)
        except PhiTypeError as e:
            self._phi_type_error(e)
        assert node is not None, f"variable {var!r} has no value (check undefined() first)"
        return node

    def _phi_type_error(self, e: PhiTypeError) -> NoReturn:
        name = e.var[1] if isinstance(e.var, tuple) else e.var
        where = self.merge_info.get(e.phi.block) if e.phi.block is not None else None
        at = f" at {where.describe()}" if where is not None else ""
        self.fail(f"variable {name!r} has values of different types on the paths that meet{at}: "
                  f"{', '.join(map(str, e.types))}; make them agree (for example with nx.cast)")

    def _undefined_message(self, name: str, und: Undefined) -> str:
        if und.stale is not None:
            return und.stale.reason
        region = self.merge_info.get(und.merge) if und.merge is not None else None
        if isinstance(region, IfRegion):
            return (f"variable {name!r} is assigned on only some paths through {region.describe()} and "
                    "used after it; assign it before the if_cond or in every branch")
        if isinstance(region, LoopRegion):
            return (f"variable {name!r} is assigned inside {region.describe()} but not before it, so it has "
                    "no value if the loop body does not run; assign it before the loop")
        return f"variable {name!r} has no value here"

    def use(self, v: Value) -> Node:
        """The node a Value stands for here, after checking it may be used."""
        if v._builder is not self:
            self.fail(f"this value belongs to graph @{v._builder.g.name}, not to @{self.g.name}; "
                      "values cannot be mixed between graphs")
        if v._region.closed:
            self.fail(f"this value was created inside {v._region.describe()}, which has ended; values leave "
                      "a region only through variables (assign a variable that exists before the region)")
        if v._node is not None:
            return self.ssa.resolve(v._node)
        assert v._block is not None
        und = self.ssa.undefined(v._var, v._block)
        if und is not None:
            self.fail(self._undefined_message(v._var[1], und))
        return self._read(v._var, v._block)

    # --- nodes ---------------------------------------------------------------------
    def wrap(self, node: Node) -> Value:
        return Value(self, self.region, node)

    def const_node(self, value: Any, like: TensorType | None, loc: SourceLoc | None = None,
                   fresh: bool = False) -> Node:
        """A Constant for a Python/NumPy value, shared per graph (unless ``fresh``), in the
        entry block."""
        dtype = weak_dtype(value, like.dtype if like is not None else None) if is_python_scalar(value) else None
        try:
            arr = to_array(value, dtype)
        except (ValueError, TypeError) as e:
            self.fail(f"cannot make a constant of {value!r}: {e}")
        key = _array_key(arr)
        node = None if fresh else self._consts.get(key)
        if node is None:
            node = self.g.add("Constant", [], self.g.start_block, {"value": arr}, loc=loc or user_loc())
            if not fresh:
                self._consts[key] = node
        return node

    def input_node(self, x: Any, like: TensorType | None, what: str) -> Node:
        if isinstance(x, Value):
            if x._builder is not self:
                self.fail(f"{what}: this value belongs to graph @{x._builder.g.name}, not to @{self.g.name}; "
                          "values cannot be mixed between graphs")
            return self.use(x)
        if isinstance(x, (bool, int, float, list, tuple, np.ndarray, np.generic)):
            return self.const_node(x, like, user_loc())
        self.fail(f"{what}: cannot use {type(x).__name__} {x!r} as a graph value")

    def emit(self, op: str | OpDef, inputs: Sequence[Any], attrs: dict[str, Any], name: str | None = None,
             public: str | None = None) -> Any:
        """Build ``op`` on ``inputs`` in the current block: a Value (a tuple of Values
        for ops with several results)."""
        opdef = get_op(op) if isinstance(op, str) else op
        what = f"nx.{public}" if public else opdef.name
        cur = _CURRENT.get()
        if cur is not self:
            other = f"graph @{cur.g.name} is being built" if cur is not None else "no graph is being built"
            self.fail(f"{what}: a value of graph @{self.g.name} is used, but {other}")
        self.check_can_emit(what)
        like = _weak_like(self, opdef, inputs)
        nodes = []
        for i, x in enumerate(inputs):
            in_name = opdef.inputs[min(i, len(opdef.inputs) - 1)] if opdef.inputs else ""
            nodes.append(self.input_node(x, None if in_name in _INDEX_INPUTS else like, what))
        node = self.add(opdef, nodes, attrs, name=name, what=what)
        if isinstance(node.type, TupleType):  # several results (TopK, NMS, ...): one Value each
            return tuple(self.wrap(self.add("Proj", [node], {"num": i})) for i in range(len(node.type.elems)))
        return self.wrap(node)

    def add(self, op: str | OpDef, inputs: Sequence[Node], attrs: dict[str, Any] | None = None, *,
            name: str | None = None, what: str = "", block: Block | None = None) -> Node:
        opdef = get_op(op) if isinstance(op, str) else op
        if self.placement and opdef.kind in DATAFLOW_KINDS:
            attrs = {**self.placement, **(attrs or {})}
        try:
            node = self.g.add(opdef, inputs, block or self.block, attrs, name=name, loc=user_loc())
            self.last_added = node
            return node
        except (OpTypeError, GraphError) as e:
            self.fail(f"{what + ': ' if what and not str(e).startswith(what) else ''}{e}")

    def condition(self, c: Any, what: str) -> Node:
        """A bool scalar node for a condition (a Value, a Python bool or a callable)."""
        if callable(c) and not isinstance(c, Value):
            c = c()
        node = self.input_node(c, None, what)
        t = node.type
        if not (isinstance(t, TensorType) and t.dtype == "bool" and t.shape == ()):
            self.fail(f"{what}: the condition must be a bool scalar, got {t}")
        return node

    # --- function ------------------------------------------------------------------
    def emit_return(self, values: Sequence[Any]) -> None:
        self.check_can_emit("returns")
        nodes = [self.input_node(v, None, "returns") for v in values]
        rets = self.g.returns
        if rets:
            before = [v.type for v in rets[0].inputs]
            if len(before) != len(nodes):
                self.fail(f"returns {len(nodes)} values here but {len(before)} at an earlier return")
        r = self.add("Return", nodes)
        self.g.end_block.append_input(r)
        self.num_returns += 1

    def finish(self, reachable: bool) -> Graph:
        if reachable:
            if self.num_returns:
                self.fail(f"graph @{self.g.name}: the end of the function is reachable without a return")
            self.emit_return([])
        self.regions[0].closed = True
        self.closed = True
        self.ssa.finish()  # drops the Phis of variables read at a block entry but never used
        try:
            verify(self.g)
        except VerifyError as e:  # a bug in the DSL, not in the user's program
            raise AssertionError(f"the DSL built an invalid graph:\n{e}") from e
        return self.g

    def _pop(self, region: Region) -> None:
        assert self.regions[-1] is region, "regions closed out of order"
        self.regions.pop()
        region.closed = True

    def abandon(self, region: Region) -> None:
        """Close a region that an exception is leaving (the graph is not finished)."""
        while self.regions and self.regions[-1] is not region:
            self.regions.pop().closed = True
        if self.regions:
            self._pop(region)


def _array_key(arr: np.ndarray) -> tuple[str, tuple, bytes]:
    return (arr.dtype.str, arr.shape, arr.tobytes())


def const_key(n: Node) -> tuple[str, tuple, bytes]:
    return _array_key(n.attrs["value"])


def is_number(v: Any) -> bool:
    return isinstance(v, (bool, int, float, np.bool_, np.integer, np.floating))


def _weak_like(b: Builder, opdef: OpDef, inputs: Sequence[Any]) -> TensorType | None:
    """The tensor type Python scalars among ``inputs`` take their dtype from."""
    first: TensorType | None = None
    for i, x in enumerate(inputs):
        in_name = opdef.inputs[min(i, len(opdef.inputs) - 1)] if opdef.inputs else ""
        if not isinstance(x, Value) or x._builder is not b or in_name in _INDEX_INPUTS:
            continue
        t = x.type
        if isinstance(t, TensorType):
            if t.dtype != "bool":
                return t
            first = first or t
    return first


def set_current(b: Builder | None) -> Any:
    return _CURRENT.set(b)


def reset_current(token: Any) -> None:
    _CURRENT.reset(token)

