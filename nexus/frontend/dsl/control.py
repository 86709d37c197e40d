"""Control-flow regions of the DSL: while_loop, if_cond with then/else_ branches,
break_/continue_.  Each function edits the graph of a :class:`Builder` at a region
boundary: it records the variables (``sync``), builds the blocks and control nodes, and
makes the next block current (``enter``), which rebinds the user's variables there.
"""

from __future__ import annotations

from types import FrameType
from typing import Any, NoReturn

from nexus.frontend.dsl.builder import (
    BranchRegion,
    Builder,
    IfRegion,
    LoopRegion,
    Unreachable,
    const_key,
    is_number,
)
from nexus.frontend.dsl.frames import frame_locals, with_statement
from nexus.frontend.dsl.ssa import Var
from nexus.frontend.dsl.value import Value
from nexus.ir.cons import PhiTypeError
from nexus.ir.node import Block, Node, SourceLoc
from nexus.ir.types import TensorType


# --- while_loop ------------------------------------------------------------------------
def loop_enter(b: Builder, cond: Any, frame: FrameType | None, loc: SourceLoc) -> LoopRegion:
    b.check_can_emit("nx.while_loop")
    just_built = b.last_added  # the condition, if it was just built on the `with` line
    region = LoopRegion("while_loop", frame, loc)
    b.regions.append(region)
    b.sync()
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
    for fr in b._tracked_frames():
        rebound = b._rebound.setdefault(b._token(fr), set())
        for name, v in frame_locals(fr).items():
            if not is_number(v):
                continue
            if fr is frame and assigned is not None and name in assigned:
                # a Python number the body updates: loop-carried as a graph value
                if inline is None:
                    _check_literal_condition(b, cond, name, v, loc, name in (info.reads if info else ()))
                rebound.add(name)
            elif name not in rebound:
                region.numbers[(fr, name)] = v
    pre = b.block
    entry = _entry_values(b, pre) if isinstance(cond, Value) and inline is None else {}
    header = b.g.new_block(f"while_L{loc.line}", [b.add("Jmp", [])])
    region.header = header
    b.merge_info[header] = region
    b.enter(header)
    if inline is not None:
        code, fr = inline
        node = b.condition(lambda: eval(code, fr.f_globals, frame_locals(fr)), "nx.while_loop")  # noqa: S307
        if b.use(cond) is just_built:
            _erase_if_dead(b, b.use(cond))
    elif isinstance(cond, Value):
        b.use(cond)  # checks it is valid here before it is re-emitted
        node = _reemit(b, b.use(cond), entry, header, region)
        t = node.type
        if not (isinstance(t, TensorType) and t.dtype == "bool" and t.shape == ()):
            b.fail(f"nx.while_loop: the condition must be a bool scalar, got {t}")
    elif cond is True:  # `while True`: left only by break/return, no Cond
        node = None
    else:
        node = b.condition(cond, "nx.while_loop")
    if node is None:
        into_body = b.add("Jmp", [])
    else:
        c = b.add("Cond", [node])
        region.exit_proj = b.add("Proj", [c], {"num": 0})
        into_body = b.add("Proj", [c], {"num": 1})
    body = b.g.new_block(f"body_L{loc.line}", [into_body])
    b.ssa.seal(body)
    b.enter(body)
    return region


def _erase_if_dead(b: Builder, node: Node) -> None:
    """Drop the first evaluation of an inline loop condition: nothing uses it."""
    if not node.has_uses() and node.op.kind == "data" and node.op.pure and node.op.name != "Constant":
        b.g.erase(node)


def _check_literal_condition(b: Builder, cond: Any, name: str, number: Any, loc: SourceLoc, named: bool) -> None:
    """A condition built before the loop from a Python-number variable holds its value
    as a literal, which the loop cannot update: refuse it rather than loop wrongly.
    Precise when the condition is written in the ``with`` line (``named``); for a
    condition built earlier (``cond``) any equal literal in it is suspect."""
    if callable(cond) and not isinstance(cond, Value):
        return
    if named:
        _literal_condition_error(b, name, number, loc)
    if not isinstance(cond, Value):
        return
    seen: set[Node] = set()
    work = [b.use(cond)]
    while work:
        n = work.pop()
        if n in seen:
            continue
        seen.add(n)
        if n.op.name == "Constant" and b._consts.get(const_key(n)) is n and n.attrs["value"].ndim == 0 \
                and n.attrs["value"] == number:
            _literal_condition_error(b, name, number, loc)
        work.extend(n.inputs)


def _literal_condition_error(b: Builder, name: str, number: Any, loc: SourceLoc) -> NoReturn:
    b.fail(f"the condition of the while_loop at line {loc.line} was built from the Python number "
              f"{name} = {number!r}, which the loop updates; make it a graph value "
              f"({name} = nx.constant({number!r})) or pass a callable (nx.while_loop(lambda: ...))")


def _entry_values(b: Builder, pre: Block) -> dict[Node, list[Var]]:
    """Node -> the tracked variables holding it at the end of ``pre``."""
    out: dict[Node, list[Var]] = {}
    for frame in b._tracked_frames():
        tok = b._token(frame)
        for name, _ in b._own_values(frame):
            var = (tok, name)
            if b.ssa.undefined(var, pre) is None:
                out.setdefault(b._read(var, pre), []).append(var)
    return out


def _reemit(b: Builder, root: Node, entry: dict[Node, list[Var]], header: Block, region: LoopRegion) -> Node:
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
            out = b._read(holders[0], header)
            if len(holders) > 1:
                region.aliases.append(holders)
        elif cloneable(n):
            ins = [walk(i, False) for i in n.inputs]
            changed = any(a is not b for a, b in zip(ins, n.inputs))
            out = b.g.add(n.op, ins, header, dict(n.attrs), name=n.name, loc=n.loc) if changed else n
        else:
            out = n
        memo[n] = out
        return out

    return walk(root, True)


def loop_exit(b: Builder, region: LoopRegion, reachable: bool) -> None:
    assert region.header is not None
    if reachable:
        _check_numbers(b, region)
        b.sync()
        region.header.append_input(b.add("Jmp", []))
    try:
        b.ssa.seal(region.header)
    except PhiTypeError as e:
        b._phi_type_error(e)
    for holders in region.aliases:
        values = {b._read(v, region.header) for v in holders}
        if len(values) > 1:
            names = ", ".join(repr(v[1]) for v in holders if isinstance(v, tuple))
            b.fail(f"the condition of {region.describe()} uses a value held by several variables "
                      f"({names}) that the loop updates differently; pass a callable instead, "
                      "e.g. nx.while_loop(lambda: x < limit)")
    exits = [region.exit_proj] if region.exit_proj is not None else []
    if not exits and not region.breaks:
        b._pop(region)
        raise Unreachable()  # `while True` without break: nothing after it runs
    exit_block = b.g.new_block(f"after_L{region.loc.line}", [*exits, *region.breaks])
    b.ssa.seal(exit_block)
    b.merge_info[exit_block] = region
    b._pop(region)
    b.enter(exit_block, closed=region)


def _check_numbers(b: Builder, region: LoopRegion) -> None:
    """A Python number cannot be loop-carried: the body already ran with its value."""
    for (frame, name), before in region.numbers.items():
        now = frame_locals(frame).get(name, before)
        if now is before or (is_number(now) and type(now) is type(before) and now == before):
            continue
        shown = "a graph value" if isinstance(now, Value) else repr(now)
        b.fail(f"variable {name!r} holds the Python number {before!r} when {region.describe()} starts "
                  f"and {shown} at the end of an iteration; a Python number is not loop-carried: "
                  f"make it a graph value before the loop, e.g. {name} = nx.constant({before!r})")


def innermost_loop(b: Builder, what: str) -> LoopRegion:
    if isinstance(b.region, IfRegion):
        b.fail(f"{what}: inside `with nx.if_cond(...)`, put it in `with nx.then():` or `with nx.else_():`")
    for r in reversed(b.regions):
        if isinstance(r, LoopRegion):
            return r
    b.fail(f"{what} is only allowed inside `with nx.while_loop(...)`")


def jump_out(b: Builder, what: str, to_header: bool) -> NoReturn:
    loop = innermost_loop(b, what)
    if to_header:
        _check_numbers(b, loop)
    b.sync()
    jmp = b.add("Jmp", [])
    if to_header:
        assert loop.header is not None
        loop.header.append_input(jmp)
    else:
        loop.breaks.append(jmp)
    raise Unreachable()

# --- if_cond ---------------------------------------------------------------------------
def if_enter(b: Builder, cond: Any, frame: FrameType | None, loc: SourceLoc) -> IfRegion:
    b.check_can_emit("nx.if_cond")
    node = b.condition(cond, "nx.if_cond")
    region = IfRegion("if_cond", frame, loc)
    b.regions.append(region)
    b.sync()
    c = b.add("Cond", [node])
    region.cond_block = b.block
    region.false_proj = b.add("Proj", [c], {"num": 0})
    region.true_proj = b.add("Proj", [c], {"num": 1})
    return region


def branch_enter(b: Builder, kind: str, frame: FrameType | None, loc: SourceLoc) -> BranchRegion:
    what = f"nx.{kind}()"
    parent = b.region
    if not isinstance(parent, IfRegion):
        b.fail(f"{what} must be used directly inside `with nx.if_cond(...)`")
    if kind in parent.used:
        b.fail(f"{what} is used twice in {parent.describe()}")
    parent.used.add(kind)
    proj = parent.true_proj if kind == "then" else parent.false_proj
    assert proj is not None
    block = b.g.new_block(f"{kind.rstrip('_')}_L{parent.loc.line}", [proj])
    b.ssa.seal(block)
    region = BranchRegion(kind, frame, loc, parent=parent)
    b.regions.append(region)
    b.enter(block)
    return region


def branch_exit(b: Builder, region: BranchRegion, reachable: bool) -> None:
    parent = region.parent
    assert parent is not None and parent.cond_block is not None
    edge = None
    if reachable:
        b.sync()
        edge = b.add("Jmp", [])
    parent.edges[region.kind] = edge
    b._pop(region)
    b.block = parent.cond_block  # nothing is emitted here (if_cond forbids it)


def if_exit(b: Builder, region: IfRegion) -> None:
    b._pop(region)
    then_edge = region.edges["then"] if "then" in region.used else region.true_proj
    else_edge = region.edges["else_"] if "else_" in region.used else region.false_proj
    preds = [e for e in (then_edge, else_edge) if e is not None]
    if not preds:
        raise Unreachable()  # both branches left by break/continue/return
    join = b.g.new_block(f"join_L{region.loc.line}", preds)
    b.ssa.seal(join)
    b.merge_info[join] = region
    b.enter(join, closed=region)
