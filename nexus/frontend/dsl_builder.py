"""The state of one DSL graph under construction: the current block, the open regions
(function, while_loop, if_cond, then/else branches), and the SSA variable maps.

Variables are the Python variables of the frames that opened a region, keyed by
``(frame token, name)``.  At the end of a block (``sync``) the builder records the value
each of them holds; on entering a block (``enter``) it rebinds each of them to a
*variable read* in that block, resolved on first use by the SSA builder (so an unused
variable costs no Phi).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from types import FrameType
from typing import Any, NoReturn

import numpy as np

from nexus.frontend.dsl_frames import frame_locals, set_frame_locals, user_loc, with_statement
from nexus.frontend.dsl_ssa import PhiTypeError, PyScalar, SSABuilder, Stale, Undefined, Var
from nexus.frontend.dsl_value import Value
from nexus.frontend.values import is_python_scalar, to_array, weak_dtype
from nexus.ir.graph import Graph, GraphError
from nexus.ir.node import Block, Node, SourceLoc
from nexus.ir.opdef import OpDef, OpTypeError, get_op
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
        self.ssa = SSABuilder(self.g, lambda v: self.const_node(v, None, fresh=True))
        self.ssa.sealed.add(self.g.start_block)
        self.block: Block = self.g.start_block
        self.regions: list[Region] = [Region("function", frame, loc)]
        self.epoch = 0
        self.closed = False
        self.num_returns = 0
        self._frames: dict[int, tuple[int, FrameType]] = {}  # id -> (token, frame kept alive)
        self._consts: dict[tuple[str, tuple, bytes], Node] = {}
        self.merge_info: dict[Block, Region] = {}
        self.placement: dict[str, str] = {}  # `with nx.device(...)`: attrs of the data nodes built
        # Per frame: names that are graph variables although they may hold a Python number
        # (they held a graph value once, or different numbers on different paths).
        self._rebound: dict[int, set[str]] = {}
        self._numbers: dict[Var, set[tuple[type, Any]]] = {}
        for n in self.g.args:
            n.loc = loc

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
                    self.ssa.write(var, self.block, self._binding(name, v))
                elif _is_number(v):
                    # A Python number becomes a Constant only if a graph value needs it.
                    self.ssa.write(var, self.block, PyScalar(v))
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
                     if (isinstance(v, Value) and v._builder is self) or (name in rebound and _is_number(v))]
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
            return self.ssa.read(var, block)
        except PhiTypeError as e:
            self._phi_type_error(e)

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
            node = self.g.add("Constant", [], self.g.start_block, {"value": arr}, loc=loc)
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
        if self.placement and opdef.kind == "data":
            attrs = {**self.placement, **(attrs or {})}
        try:
            return self.g.add(opdef, inputs, block or self.block, attrs, name=name, loc=user_loc())
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

    # --- while_loop ----------------------------------------------------------------
    def loop_enter(self, cond: Any, frame: FrameType | None, loc: SourceLoc) -> LoopRegion:
        self.check_can_emit("nx.while_loop")
        region = LoopRegion("while_loop", frame, loc)
        self.regions.append(region)
        self.sync()
        info = with_statement(frame) if frame is not None else None
        assigned = info.assigned if info is not None else None
        region.cond_names = set(info.reads) if info is not None else None
        # A condition written on the `with` line is re-evaluated in the header like a
        # callable (exact Python semantics); one built earlier is re-emitted from its DAG.
        inline = None
        if isinstance(cond, Value) and info is not None and not info.bare and frame is not None:
            code = info.compile_argument()
            if code is not None:
                inline = (code, frame)
        for fr in self._tracked_frames():
            rebound = self._rebound.setdefault(self._token(fr), set())
            for name, v in frame_locals(fr).items():
                if not _is_number(v):
                    continue
                if fr is frame and assigned is not None and name in assigned:
                    # a Python number the body updates: loop-carried as a graph value
                    if inline is None:
                        self._check_literal_condition(cond, name, v, loc, name in (info.reads if info else ()))
                    rebound.add(name)
                elif name not in rebound:
                    region.numbers[(fr, name)] = v
        pre = self.block
        entry = self._entry_values(pre) if isinstance(cond, Value) and inline is None else {}
        header = self.g.new_block(f"while_L{loc.line}", [self.add("Jmp", [])])
        region.header = header
        self.merge_info[header] = region
        self.enter(header)
        if inline is not None:
            code, fr = inline
            node = self.condition(lambda: eval(code, fr.f_globals, frame_locals(fr)), "nx.while_loop")  # noqa: S307
            self._erase_if_dead(self.use(cond))
        elif isinstance(cond, Value):
            self.use(cond)  # checks it is valid here before it is re-emitted
            node = self._reemit(self.use(cond), entry, header, region)
            t = node.type
            if not (isinstance(t, TensorType) and t.dtype == "bool" and t.shape == ()):
                self.fail(f"nx.while_loop: the condition must be a bool scalar, got {t}")
        elif cond is True:  # `while True`: left only by break/return, no Cond
            node = None
        else:
            node = self.condition(cond, "nx.while_loop")
        if node is None:
            into_body = self.add("Jmp", [])
        else:
            c = self.add("Cond", [node])
            region.exit_proj = self.add("Proj", [c], {"num": 0})
            into_body = self.add("Proj", [c], {"num": 1})
        body = self.g.new_block(f"body_L{loc.line}", [into_body])
        self.ssa.sealed.add(body)
        self.enter(body)
        return region

    def _erase_if_dead(self, node: Node) -> None:
        """Drop the first evaluation of an inline loop condition: nothing can use it."""
        if not node.has_uses() and node.op.kind == "data" and node.op.pure and node.op.name != "Constant":
            self.g.erase(node)

    def _check_literal_condition(self, cond: Any, name: str, number: Any, loc: SourceLoc, named: bool) -> None:
        """A condition built before the loop from a Python-number variable holds its value
        as a literal, which the loop cannot update: refuse it rather than loop wrongly.
        Precise when the condition is written in the ``with`` line (``named``); for a
        condition built earlier (``cond``) any equal literal in it is suspect."""
        if callable(cond) and not isinstance(cond, Value):
            return
        if named:
            self._literal_condition_error(name, number, loc)
        if not isinstance(cond, Value):
            return
        seen: set[Node] = set()
        work = [self.use(cond)]
        while work:
            n = work.pop()
            if n in seen:
                continue
            seen.add(n)
            if n.op.name == "Constant" and self._consts.get(_const_key(n)) is n and n.attrs["value"].ndim == 0 \
                    and n.attrs["value"] == number:
                self._literal_condition_error(name, number, loc)
            work.extend(n.inputs)

    def _literal_condition_error(self, name: str, number: Any, loc: SourceLoc) -> NoReturn:
        self.fail(f"the condition of the while_loop at line {loc.line} was built from the Python number "
                  f"{name} = {number!r}, which the loop updates; make it a graph value "
                  f"({name} = nx.constant({number!r})) or pass a callable (nx.while_loop(lambda: ...))")

    def _entry_values(self, pre: Block) -> dict[Node, list[Var]]:
        """Node -> the tracked variables holding it at the end of ``pre``."""
        out: dict[Node, list[Var]] = {}
        for frame in self._tracked_frames():
            tok = self._token(frame)
            for name, _ in self._own_values(frame):
                var = (tok, name)
                if self.ssa.undefined(var, pre) is None:
                    out.setdefault(self._read(var, pre), []).append(var)
        return out

    def _reemit(self, root: Node, entry: dict[Node, list[Var]], header: Block, region: LoopRegion) -> Node:
        """Re-emit the condition's expression DAG in the loop header, each value a tracked
        variable held at loop entry replaced by that variable's current value."""
        memo: dict[Node, Node] = {}

        def cloneable(n: Node) -> bool:
            return n.op.kind == "data" and n.op.pure and n.num_inputs > 0

        def walk(n: Node, is_root: bool) -> Node:
            if n in memo:
                return memo[n]
            holders = entry.get(n)
            if holders and len(holders) > 1 and region.cond_names:
                # several variables hold this value: prefer those the `with` line names
                named: list[Var] = [v for v in holders if isinstance(v, tuple) and v[1] in region.cond_names]
                holders = named or holders
            if holders and not (is_root and cloneable(n)):
                out = self._read(holders[0], header)
                if len(holders) > 1:
                    region.aliases.append(holders)
            elif cloneable(n):
                ins = [walk(i, False) for i in n.inputs]
                changed = any(a is not b for a, b in zip(ins, n.inputs))
                out = self.g.add(n.op, ins, header, dict(n.attrs), name=n.name, loc=n.loc) if changed else n
            else:
                out = n
            memo[n] = out
            return out

        return walk(root, True)

    def loop_exit(self, region: LoopRegion, reachable: bool) -> None:
        assert region.header is not None
        if reachable:
            self._check_numbers(region)
            self.sync()
            region.header.append_input(self.add("Jmp", []))
        try:
            self.ssa.seal(region.header)
        except PhiTypeError as e:
            self._phi_type_error(e)
        for holders in region.aliases:
            values = {self._read(v, region.header) for v in holders}
            if len(values) > 1:
                names = ", ".join(repr(v[1]) for v in holders if isinstance(v, tuple))
                self.fail(f"the condition of {region.describe()} uses a value held by several variables "
                          f"({names}) that the loop updates differently; pass a callable instead, "
                          "e.g. nx.while_loop(lambda: x < limit)")
        exits = [region.exit_proj] if region.exit_proj is not None else []
        if not exits and not region.breaks:
            self._pop(region)
            raise Unreachable()  # `while True` without break: nothing after it runs
        exit_block = self.g.new_block(f"after_L{region.loc.line}", [*exits, *region.breaks])
        self.ssa.sealed.add(exit_block)
        self.merge_info[exit_block] = region
        self._pop(region)
        self.enter(exit_block, closed=region)

    def _check_numbers(self, region: LoopRegion) -> None:
        """A Python number cannot be loop-carried: the body already ran with its value."""
        for (frame, name), before in region.numbers.items():
            now = frame_locals(frame).get(name, before)
            if now is before or (_is_number(now) and type(now) is type(before) and now == before):
                continue
            shown = "a graph value" if isinstance(now, Value) else repr(now)
            self.fail(f"variable {name!r} holds the Python number {before!r} when {region.describe()} starts "
                      f"and {shown} at the end of an iteration; a Python number is not loop-carried: "
                      f"make it a graph value before the loop, e.g. {name} = nx.constant({before!r})")

    def innermost_loop(self, what: str) -> LoopRegion:
        if isinstance(self.region, IfRegion):
            self.fail(f"{what}: inside `with nx.if_cond(...)`, put it in `with nx.then():` or `with nx.else_():`")
        for r in reversed(self.regions):
            if isinstance(r, LoopRegion):
                return r
        self.fail(f"{what} is only allowed inside `with nx.while_loop(...)`")

    def jump_out(self, what: str, to_header: bool) -> NoReturn:
        loop = self.innermost_loop(what)
        if to_header:
            self._check_numbers(loop)
        self.sync()
        jmp = self.add("Jmp", [])
        if to_header:
            assert loop.header is not None
            loop.header.append_input(jmp)
        else:
            loop.breaks.append(jmp)
        raise Unreachable()

    # --- if_cond -------------------------------------------------------------------
    def if_enter(self, cond: Any, frame: FrameType | None, loc: SourceLoc) -> IfRegion:
        self.check_can_emit("nx.if_cond")
        node = self.condition(cond, "nx.if_cond")
        region = IfRegion("if_cond", frame, loc)
        self.regions.append(region)
        self.sync()
        c = self.add("Cond", [node])
        region.cond_block = self.block
        region.false_proj = self.add("Proj", [c], {"num": 0})
        region.true_proj = self.add("Proj", [c], {"num": 1})
        return region

    def branch_enter(self, kind: str, frame: FrameType | None, loc: SourceLoc) -> BranchRegion:
        what = f"nx.{kind}()"
        parent = self.region
        if not isinstance(parent, IfRegion):
            self.fail(f"{what} must be used directly inside `with nx.if_cond(...)`")
        if kind in parent.used:
            self.fail(f"{what} is used twice in {parent.describe()}")
        parent.used.add(kind)
        proj = parent.true_proj if kind == "then" else parent.false_proj
        assert proj is not None
        block = self.g.new_block(f"{kind.rstrip('_')}_L{parent.loc.line}", [proj])
        self.ssa.sealed.add(block)
        region = BranchRegion(kind, frame, loc, parent=parent)
        self.regions.append(region)
        self.enter(block)
        return region

    def branch_exit(self, region: BranchRegion, reachable: bool) -> None:
        parent = region.parent
        assert parent is not None and parent.cond_block is not None
        edge = None
        if reachable:
            self.sync()
            edge = self.add("Jmp", [])
        parent.edges[region.kind] = edge
        self._pop(region)
        self.block = parent.cond_block  # nothing is emitted here (if_cond forbids it)

    def if_exit(self, region: IfRegion) -> None:
        self._pop(region)
        then_edge = region.edges["then"] if "then" in region.used else region.true_proj
        else_edge = region.edges["else_"] if "else_" in region.used else region.false_proj
        preds = [e for e in (then_edge, else_edge) if e is not None]
        if not preds:
            raise Unreachable()  # both branches left by break/continue/return
        join = self.g.new_block(f"join_L{region.loc.line}", preds)
        self.ssa.sealed.add(join)
        self.merge_info[join] = region
        self.enter(join, closed=region)

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


def _const_key(n: Node) -> tuple[str, tuple, bytes]:
    return _array_key(n.attrs["value"])


def _is_number(v: Any) -> bool:
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


Thunk = Callable[[], Any]
