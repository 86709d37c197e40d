"""A graph as an LLVM function: control flow one to one, scalars in registers.

Each reachable Block is a basic block; a scalar Phi is an LLVM ``phi``; a Cond with its
two Projs is ``br i1``; a Jmp is ``br``; a Return stores the results through the output
pointers.  Every control edge gets a small block of its own, where the tensor Phis of
its target are written (all into temporaries first, then copied: a parallel copy).

The ABI of ``@<name>``: per argument, a scalar by value (bools as ``i8``) or a tensor as
a data pointer followed by its dims (``i64`` each); then one output pointer per result.
It returns an ``i32`` status (0, or the code of the failure in :attr:`ModuleEmitter.errors`)
when something in it can fail, else ``void``; a function with a loop can always fail, since
it polls for Ctrl-C and ``max_iterations`` (:mod:`nexus.backends.llvm.poll`).  Tensor buffers (Phis, values read twice)
are ``malloc``-ed once on entry (every shape is a function of the argument dims) and
freed on the way out; a node overwrites its buffer each time it runs, which SSA allows
(a value's live range never contains its own definition).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import sympy
from llvmlite import ir

from nexus.backends.base import lowering_table, register_lowering
from nexus.backends.llvm import ahead, nn, rules
from nexus.backends.llvm.coalesce import coalesce
from nexus.backends.llvm.dimalias import dim_aliases, phi_dim_checks
from nexus.backends.llvm.dtypes import (
    I1,
    I8,
    I32,
    I64,
    PTR,
    Unsupported,
    constant,
    itemsize,
    kind,
    mem_type,
    reg_type,
    to_mem,
    to_reg,
)
from nexus.backends.llvm.matmul import gemm_may_fail, matmul_may_fail
from nexus.backends.llvm.poll import Poll, leave, polls
from nexus.backends.llvm.rules import BACKEND
from nexus.backends.llvm.tensors import Tensor, broadcast_index, dim_value, polynomial_dim, store_all
from nexus.ir.analysis import node_order, reverse_postorder
from nexus.ir.cfg import entries, role
from nexus.ir.graph import Graph
from nexus.ir.node import Block, Node
from nexus.ir.types import StackType, TensorType, numpy_dtype

RULES = lowering_table(BACKEND)
ELEMENTWISE = rules.ELEMENTWISE | nn.ELEMENTWISE  # the rules of one element, fused into chains
# Constant arrays of at least this many bytes go to the table of a JIT-compiled module.
TABLE_BYTES = 4096
CONST_TABLE = "nexus.consts"
RELEASE = "nexus_release"  # frees the buffers a module keeps between calls
# Branch weight of the likely side where the other is a failure (1): LLVM lays the failure
# blocks out of line and keeps them from shaping the hot code.
COLD = 1 << 20


@dataclass(frozen=True)
class Failure:
    """What a status code means: the exception to raise, its message and the node (None:
    the message says where, as the ``max_iterations`` one names graph and block)."""

    exc: str
    msg: str
    node: Node | None
    refusal: bool = False  # refused on entry, nothing run (base.NativeRefused)


INTERRUPTED = "KeyboardInterrupt"  # the exc of the failure a SIGINT ends a call with


def _shape(node: Node) -> tuple[Any, ...]:
    t = node.type
    if not isinstance(t, TensorType) or t.shape is None:
        raise Unsupported(f"{node.op.name} %{node.name or '?'}: type {t} (unknown rank or not a tensor)")
    return t.shape


def _dtype(node: Node) -> str:
    t = node.type
    assert isinstance(t, TensorType)
    return t.dtype


# Ops whose llvm rules can fail though the op is not marked may_fail (NumPy raises on an
# empty axis).
_FALLIBLE_HERE = frozenset({"ReduceMax", "ReduceMin", "ArgMax", "ArgMin", "TopK", "StackPush"})
# Ops whose llvm rules check at run time the dims their types do not prove.
_FALLIBLE_IF = {"Concat": nn.concat_may_fail, "Gemm": gemm_may_fail, "MatMul": matmul_may_fail}


def may_fail(g: Graph, seen: set[Graph] | None = None) -> bool:
    """Whether running ``g`` can fail (so its function returns a status)."""
    seen = seen if seen is not None else set()
    seen.add(g)
    if phi_dim_checks(g):
        return True
    for n in g.nodes():
        op = n.op
        if op.may_fail or op.name in _FALLIBLE_HERE:
            return True
        if op.name in _FALLIBLE_IF and _FALLIBLE_IF[op.name](n):
            return True
        if op.may_fail_on_int and any(isinstance(v.type, TensorType) and kind(v.type.dtype) in "iu" for v in n.inputs):
            return True
        callee = n.attrs.get("callee") if op.name == "Call" else None
        if isinstance(callee, Graph) and callee not in seen and may_fail(callee, seen):
            return True
    return False


class ModuleEmitter:
    """One LLVM module: the entry graph's function, its callees' and the failure table."""

    def __init__(self, name: str = "nexus", max_iterations: int | None = None, little_endian: bool = True,
                 table: bool = False, keep: bool = False):
        self.module = ir.Module(name)
        self.max_iterations = max_iterations
        self.little_endian = little_endian  # the target's byte order, for constant arrays
        # With ``table``, constant arrays of TABLE_BYTES or more stay out of the module: the
        # code reads their addresses from the global CONST_TABLE, which the loader fills
        # with ``tabled``'s data pointers (so a layer's weights are neither IR text nor part
        # of the object cache's key, and one object serves every set of weights).
        self.table = table
        self.tabled: list[np.ndarray] = []
        self._table_gv: ir.GlobalVariable | None = None
        # With ``keep``, tensor buffers outlive a call (a fresh large buffer per call costs
        # page faults: ~30% of a BERT layer's time); RELEASE frees them.
        self.keep = keep
        self._kept: list[tuple[ir.GlobalVariable, ir.GlobalVariable]] = []
        self._kept_fn: ir.Function | None = None
        self.errors: list[Failure] = []
        self._codes: dict[Any, int] = {}
        self.functions: dict[Graph, tuple[ir.Function, bool]] = {}
        self._math: dict[str, ir.Function] = {}
        self._consts = 0

    def error_code(self, f: Failure) -> int:
        self.errors.append(f)
        return len(self.errors)

    def interrupt_code(self) -> int:
        """The status of a call that a SIGINT stopped (one per module)."""
        if INTERRUPTED not in self._codes:
            self._codes[INTERRUPTED] = self.error_code(Failure(INTERRUPTED, "interrupted", None))
        return self._codes[INTERRUPTED]

    def limit_code(self, g: Graph, blk: Block, msg: str) -> int:
        """The status of a call of ``g`` that entered more blocks than ``max_iterations``
        and was about to enter ``blk``."""
        key = (g, blk)
        if key not in self._codes:
            self._codes[key] = self.error_code(Failure("NexusRuntimeError", msg, None))
        return self._codes[key]

    def function(self, g: Graph, name: str, internal: bool = False) -> tuple[ir.Function, bool]:
        """The function of ``g`` (emitted on first request) and whether it returns a status."""
        if g not in self.functions:
            FunctionEmitter(self, g, name, internal).emit()
        return self.functions[g]

    def declare(self, name: str, ret: ir.Type, args: list[ir.Type]) -> ir.Function:
        fn = self.module.globals.get(name)
        if fn is None:
            fn = ir.Function(self.module, ir.FunctionType(ret, args), name)
        return fn

    def math(self, name: str, dtype: str, nargs: int) -> ir.Function:
        t = reg_type(dtype)
        if name in ("tanh", "erf", "log1p"):  # libm (tanh of f32 is emitted inline, see FunctionEmitter.math)
            sym = {"float": name + "f", "double": name}.get(str(t))
            if sym is None:
                raise Unsupported(f"{name} on {dtype}")
            return self.declare(sym, t, [t] * nargs)
        return self.module.declare_intrinsic(f"llvm.{name}", [t], ir.FunctionType(t, [t] * nargs))

    def dummy(self) -> ir.GlobalVariable:
        """An 8-byte zero global of the module (see FunctionEmitter._dummy)."""
        gv = self.module.globals.get("nexus.dummy")
        if gv is None:
            gv = ir.GlobalVariable(self.module, I64, "nexus.dummy")
            gv.initializer = I64(0)
            gv.linkage = "internal"
            gv.align = 8
        return gv

    def const_slot(self, value: np.ndarray, dtype: str) -> ir.Value | None:
        """The address in CONST_TABLE holding constant ``value``'s data pointer, or None
        where it goes into the module (no table, or a small array)."""
        dt = numpy_dtype(dtype)
        if not self.table or value.size * dt.itemsize < TABLE_BYTES:
            return None
        if dt.kind == "b":
            dt = np.dtype(np.uint8)
        self.tabled.append(np.ascontiguousarray(value, dtype=dt))
        if self._table_gv is None:
            self._table_gv = ir.GlobalVariable(self.module, ir.ArrayType(PTR, 0), CONST_TABLE)
        # the table's size is known at the end (finish); an external definition, so that
        # LLVM cannot take its initial zeros for the values the loader writes
        return self._table_gv.gep([I32(0), I32(len(self.tabled) - 1)])

    def finish(self) -> None:
        """Size CONST_TABLE now that every constant is known; with ``keep``, define
        RELEASE, which frees the kept buffers."""
        if self._table_gv is not None:
            t = ir.ArrayType(PTR, len(self.tabled))
            self._table_gv.value_type = t
            self._table_gv.initializer = ir.Constant(t, None)
        if self.keep:
            fn = ir.Function(self.module, ir.FunctionType(ir.VoidType(), []), RELEASE)
            b = ir.IRBuilder(fn.append_basic_block("entry"))
            free = self.declare("free", ir.VoidType(), [PTR])
            for slot, size in self._kept:
                b.call(free, [b.load(slot, typ=PTR)])
                b.store(ir.Constant(PTR, None), slot)
                b.store(I64(0), size)
            b.ret_void()

    def kept_slot(self) -> tuple[ir.GlobalVariable, ir.GlobalVariable]:
        """The globals holding a kept buffer's address and size."""
        k = len(self._kept)
        slot = ir.GlobalVariable(self.module, PTR, f"kept.{k}")
        size = ir.GlobalVariable(self.module, I64, f"kept.{k}.n")
        for gv, init in ((slot, ir.Constant(PTR, None)), (size, I64(0))):
            gv.linkage = "internal"
            gv.initializer = init
        self._kept.append((slot, size))
        return slot, size

    def kept_buffer(self) -> ir.Function:
        """``buffer(slot, size, n, kept)``: with ``kept``, the buffer in ``slot`` (replaced
        by a new one where it has fewer than ``n`` bytes); otherwise a fresh one."""
        if self._kept_fn is not None:
            return self._kept_fn
        fn = self._kept_fn = ir.Function(self.module, ir.FunctionType(PTR, [PTR, PTR, I64, I1]), "nexus.buffer")
        fn.linkage = "internal"
        slot, size, n, kept = fn.args
        malloc = self.declare("malloc", PTR, [I64])
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        fresh, keep, grow, have = (fn.append_basic_block(x) for x in ("fresh", "keep", "grow", "have"))
        b.cbranch(kept, keep, fresh)
        b.position_at_end(fresh)
        b.ret(b.call(malloc, [n]))
        b.position_at_end(keep)
        b.cbranch(b.icmp_unsigned(">=", b.load(size, typ=I64), n), have, grow)
        b.position_at_end(grow)
        b.call(self.declare("free", ir.VoidType(), [PTR]), [b.load(slot, typ=PTR)])
        p = b.call(malloc, [n])
        b.store(p, slot)
        b.store(n, size)
        b.ret(p)
        b.position_at_end(have)
        b.ret(b.load(slot, typ=PTR))
        return fn

    def global_array(self, value: np.ndarray, dtype: str) -> ir.GlobalVariable:
        """A constant array as a global of the target's bytes (an ``i8`` array: one string
        constant, not an LLVM constant per element, which took seconds for a layer's
        weights); users address it with the element type."""
        dt = numpy_dtype(dtype)
        if dt.kind == "b":
            dt = np.dtype(np.uint8)
        arr = np.ascontiguousarray(value, dtype=dt.newbyteorder("<" if self.little_endian else ">")).reshape(-1)
        data = bytearray(arr.tobytes())
        self._consts += 1
        gv = ir.GlobalVariable(self.module, ir.ArrayType(I8, len(data)), f"const.{self._consts}")
        gv.initializer = ir.Constant(ir.ArrayType(I8, len(data)), data)
        gv.global_constant = True
        gv.linkage = "internal"
        gv.align = 16
        return gv


class FunctionEmitter:
    """Emits one graph's function (see the module docstring for its ABI)."""

    COLD = COLD

    def __init__(self, mod: ModuleEmitter, g: Graph, name: str, internal: bool):
        self.mod, self.g = mod, g
        self.internal = internal
        self.fallible = may_fail(g) or polls(g, mod.max_iterations)
        params: list[ir.Type] = []
        for t in g.arg_types:
            if not isinstance(t, TensorType) or t.shape is None:
                raise Unsupported(f"graph @{g.name}: argument type {t}")
            params += [mem_type(t.dtype)] if t.shape == () else [PTR] + [I64] * len(t.shape)
        params += [PTR] * len(g.result_types)
        fnty = ir.FunctionType(I32 if self.fallible else ir.VoidType(), params)
        self.fn = ir.Function(mod.module, fnty, name)
        if internal:
            self.fn.linkage = "internal"
        for a in self.fn.args:
            if a.type == PTR:
                a.add_attribute("noalias")
        mod.functions[g] = (self.fn, self.fallible)
        self.entry = self.fn.append_basic_block("entry")
        self.eb = ir.IRBuilder(self.entry)  # allocations go here, before the jump to the start block
        self.exit = self.fn.append_basic_block("exit")
        self.b = ir.IRBuilder()
        # Where the module keeps buffers between calls: whether this call has them (a call
        # on another thread meanwhile finds the flag set and allocates its own)
        self.kept: ir.Value | None = None
        if mod.keep:
            self._busy = ir.GlobalVariable(mod.module, I8, f"busy.{name}")
            self._busy.linkage = "internal"
            self._busy.initializer = I8(0)
            old = self.eb.atomic_rmw("xchg", self._busy, I8(1), "acquire")
            self.kept = self.eb.icmp_unsigned("==", old, I8(0))
        self.status = self.eb.alloca(I32, name="status") if self.fallible else None
        if self.status is not None:
            self.eb.store(I32(0), self.status)
        self.vals: dict[Node, Any] = {}
        self.env: dict[Any, ir.Value] = {}
        self.buffers: list[ir.Value] = []
        self.bbs: dict[Block, ir.Block] = {}
        self.temps: dict[Node, ir.Value] = {}
        self.outs: list[ir.Value] = []
        # id of a buffer this function allocated -> the nodes whose values live in it (a
        # SetItem of one of them may write in place; see nexus.backends.llvm.memory)
        self.owner: dict[int, set[Node]] = {}
        self.shared: dict[Node, Node] = {}
        # buffers allocated where a node runs (TopK), freed on exit; dims bound there
        self.slots: list[ir.Value] = []
        self.late: set[Any] = set()
        # (index, dim, signed) -> (index, dim, checked index) of this block's bounds checks
        # (the values are kept so that their ids stay theirs); see index()
        self.checked: dict[tuple[int, int, bool], tuple[ir.Value, ir.Value, ir.Value]] = {}
        # elements of arguments read ahead at loop headers (nexus.backends.llvm.ahead)
        self.ahead: dict[Node, ir.Value] = {}
        # the count of blocks entered and when to poll next (nexus.backends.llvm.poll)
        self.poll = Poll(self, mod.max_iterations) if polls(g, mod.max_iterations) else None
        # the StackNew behind each stack value and its buffer's slots (nexus.backends.llvm.stack)
        self.stack_origins: dict[Node, Node] | None = None
        self.stack_buffers: dict[Node, tuple[ir.Value, ir.Value]] = {}

    # --- what rules use ---------------------------------------------------------------------
    def fail(self, cond: ir.Value, node: Node, exc: str, msg: str, refusal: bool = False) -> None:
        if self.status is None:
            raise Unsupported(f"{node.op.name} may fail, but graph @{self.g.name} was thought infallible")
        self.fail_code(cond, self.mod.error_code(Failure(exc, msg, node, refusal)))

    def fail_code(self, cond: ir.Value, code: int) -> None:
        """Where ``cond`` holds, leave with status ``code``; go on here otherwise."""
        bad = self.b.append_basic_block("fail")
        ok = self.b.append_basic_block("ok")
        # failing is the rare case: the weights keep the failure blocks out of the hot code
        self.b.cbranch(cond, bad, ok).set_weights([1, COLD])
        self.b.position_at_end(bad)
        self.b.store(I32(code), self.status)
        self.b.branch(self.exit)
        self.b.position_at_end(ok)

    def index(self, i: ir.Value, dim: ir.Value, signed: bool, node: Node, msg: str, reuse: bool = True) -> ir.Value:
        """``i`` as an in-bounds i64 index into an axis of ``dim`` elements, a negative one
        counting from the end as NumPy's does; fails with IndexError(``msg``) otherwise.
        The usual case, ``0 <= i < dim``, costs one unsigned compare: the negative case is
        a cold block of its own (a select there would cost every access a few instructions).

        Call it where the node stands, not inside a loop nest the rule emits: the checked
        index is reused by the later nodes of the same block (``boxes[i, 0]``, ``boxes[i, 1]``
        check ``i`` once), which LLVM cannot do across the cold blocks.  A rule that must
        check inside its loop nest passes ``reuse=False``: its check is neither taken from
        nor left for the others (a later node's use of it would not be dominated by it)."""
        key = (id(i), id(dim), signed)
        if reuse and key in self.checked:
            return self.checked[key][2]
        b = self.b
        i0 = i
        if i.type.width < 64:
            i = b.sext(i, I64) if signed else b.zext(i, I64)
        if not signed:
            self.fail(b.icmp_unsigned(">=", i, dim), node, "IndexError", msg)
            if reuse:
                self.checked[key] = (i0, dim, i)
            return i
        here = b.block
        neg = b.append_basic_block("index.neg")
        done = b.append_basic_block("index.ok")
        b.cbranch(b.icmp_unsigned("<", i, dim), done, neg).set_weights([COLD, 1])
        b.position_at_end(neg)
        # i < 0 or i >= dim: i + dim is in range exactly when -dim <= i < 0 (as unsigned,
        # i >= dim gives i + dim >= dim without wrapping, and i < -dim gives a huge value)
        wrapped = b.add(i, dim)
        self.fail(b.icmp_unsigned(">=", wrapped, dim), node, "IndexError", msg)
        neg_ok = b.block
        b.branch(done)
        b.position_at_end(done)
        phi = b.phi(I64)
        phi.add_incoming(i, here)
        phi.add_incoming(wrapped, neg_ok)
        if reuse:
            self.checked[key] = (i0, dim, phi)
        return phi

    def math(self, name: str, dtype: str, args: list[ir.Value]) -> ir.Value:
        if name == "tanh" and dtype == "f32":
            return _tanh_f32(self.b, args[0])
        return self.b.call(self.mod.math(name, dtype, len(args)), args)

    def dims(self, shape: tuple[Any, ...], b: ir.IRBuilder | None = None) -> list[ir.Value]:
        if b is self.eb and self.late and any(sympy.sympify(d).free_symbols & self.late for d in shape):
            raise Unsupported(f"a buffer of shape {shape} on entry, whose dims are known only later")
        return [dim_value(b or self.b, d, self.env) for d in shape]

    def alloc(self, shape: tuple[Any, ...], dtype: str) -> ir.Value:
        """A buffer for a tensor of ``shape``, allocated on entry, freed on exit; in a
        module that keeps its buffers, the one kept from the last call where it is big
        enough (see ModuleEmitter.kept_buffer)."""
        eb = self.eb
        n = I64(itemsize(dtype))
        for d in self.dims(shape, eb):
            n = eb.mul(n, d)
        if self.kept is not None:
            slot, size = self.mod.kept_slot()
            p = eb.call(self.mod.kept_buffer(), [slot, size, n, self.kept])
        else:
            p = eb.call(self.mod.declare("malloc", PTR, [I64]), [n])
        self.buffers.append(p)
        return p

    # --- the function -------------------------------------------------------------------------
    def emit(self) -> None:
        g = self.g
        self._bind_args()
        given = dict(self.env)  # the arguments' dims, before a Phi's alias replaces one
        # the dims of Phis and those computed from shapes, bound on entry (see dimalias)
        self.aliased = dim_aliases(g)
        for sym, rep in self.aliased.items():
            if sympy.sympify(rep).free_symbols <= self.env.keys():
                self.env[sym] = dim_value(self.eb, rep, self.env)
        blocks = [blk for blk in reverse_postorder(g) if blk is not g.end_block]
        for blk in blocks:
            self.bbs[blk] = self.fn.append_basic_block(f"b.{blk.name or len(self.bbs)}")
        self.shared = coalesce(g)
        self._ahead_plan = ahead.plan(g)
        for blk in blocks:  # Phis exist before any edge is emitted (back edges reach them first)
            self.b.position_at_end(self.bbs[blk])
            for n in blk.members:
                if n.op.kind == "phi":
                    self._make_phi(n)
        for blk in blocks:
            self.b.position_at_end(self.bbs[blk])
            self._block(blk)
        self._check_phi_dims(given)
        xb = ir.IRBuilder(self.exit)
        for p in self.buffers:  # none of them where the buffers are kept
            p = p if self.kept is None else xb.select(self.kept, ir.Constant(PTR, None), p)
            xb.call(self.mod.declare("free", ir.VoidType(), [PTR]), [p])
        if self.kept is not None:
            with xb.if_then(self.kept):
                xb.store_atomic(ir.Constant(I8, 0), self._busy, "release", 1)
        for slot in self.slots:
            xb.call(self.mod.declare("free", ir.VoidType(), [PTR]), [xb.load(slot, typ=PTR)])
        if not self.internal and self.poll is not None:
            leave(self, xb)
        if self.status is not None:
            xb.ret(xb.load(self.status, typ=I32))
        else:
            xb.ret_void()

    def _check_phi_dims(self, given: dict[Any, ir.Value]) -> None:
        """On entry: the sizes that a loop-carried array's one buffer takes to be equal
        (``dimalias.phi_dim_checks``).  Where they differ, Python would carry an array of
        another size; the call is refused there, naming the Phi, not run past a buffer."""
        checks = phi_dim_checks(self.g)
        if not checks:
            self.eb.branch(self.bbs[self.g.start_block])
            return
        self.b.position_at_end(self.fn.append_basic_block("phi.dims"))
        self.eb.branch(self.b.block)
        for a, b, phi in checks:
            va, vb = (I64(d) if isinstance(d, int) else given.get(d) for d in (a, b))
            if va is None or vb is None:
                continue
            self.fail(self.b.icmp_unsigned("!=", va, vb), phi, "NotImplementedError",
                      f"the llvm backend gives the loop-carried %{phi.name or '?'} one buffer, of a size it takes "
                      f"from {a} and {b}, which differ in this call (Python carries an array whose size changes "
                      f"from one iteration to the next): run it on the python backend", refusal=True)
        self.b.branch(self.bbs[self.g.start_block])

    def _bind_args(self) -> None:
        params = iter(self.fn.args)
        for node, t in zip(self.g.args, self.g.arg_types):
            assert isinstance(t, TensorType) and t.shape is not None
            if t.shape == ():
                self.vals[node] = to_reg(self.eb, next(params), t.dtype)
                continue
            ptr = next(params)
            dims = [next(params) for _ in t.shape]
            for k, (d, v) in enumerate(zip(t.shape, dims)):
                # The call binding has checked that a symbol sizes its dims alike and an int
                # dim is that int: one value per size lets LLVM share the checks against it.
                if isinstance(d, int):
                    dims[k] = I64(d)
                elif isinstance(d, sympy.Symbol):
                    dims[k] = self.env.setdefault(d, v)
            self.vals[node] = Tensor(t.dtype, t.shape, dims, ptr=ptr)
        self.outs = list(params)

    def _make_phi(self, n: Node) -> None:
        if isinstance(n.type, StackType):  # a stack is the offset of its top
            self.vals[n] = self.b.phi(I64, name=n.name or "")
            return
        shape = _shape(n)
        if shape == ():
            self.vals[n] = self.b.phi(reg_type(_dtype(n)), name=n.name or "")
            return
        other = self.vals.get(self.shared[n]) if n in self.shared else None
        buf = other.ptr if isinstance(other, Tensor) else self.alloc(shape, _dtype(n))
        self.vals[n] = Tensor(_dtype(n), shape, self.dims(shape, self.eb), ptr=buf)
        self.owner.setdefault(id(buf), set()).add(n)
        self.temps[n] = self.alloc(shape, _dtype(n))

    def _block(self, blk: Block) -> None:
        self.checked.clear()  # a check made in another block need not dominate this one
        for a in self._ahead_plan.get(blk, ()):
            self.ahead[a.node] = ahead.read(self, a, self._dummy())
        if self.poll is not None and blk in self.poll.blocks:
            self.poll.check(blk)
        for n in node_order(blk):
            op = n.op.name
            if role(n) in ("phi", "control", "argument", "exit"):  # bound on entry, or control
                continue
            if op == "Proj":
                self.vals[n] = self.vals[n.input(0)][int(n.attrs["num"])]
            elif op == "Jmp":
                self._edge(n)
            elif op == "Cond":
                self._cond(n)
            elif op == "Return":
                self._return(n)
            elif op == "Constant":
                self.vals[n] = self._constant(n)
            elif op in ELEMENTWISE:
                self.vals[n] = self._elementwise(n)
                if self.poll is not None:
                    self.poll.spend_node(n, self.vals[n], [self.vals[v] for v in n.inputs])
            else:
                ins = [self.vals[v] for v in n.inputs]
                self.vals[n] = RULES.rule(n)(self, n, ins)
                self._check_computed_dims(n, self.vals[n])
                if self.poll is not None:
                    self.poll.spend_node(n, self.vals[n], ins)

    def _check_computed_dims(self, n: Node, v: Any) -> None:
        """Where a rule computed a dim that the analysis of shapes bound on entry (a
        Reshape's dims from its shape input), check once here that the two agree: the later
        nodes size their loops and buffers by the binding."""
        t = n.type
        if not isinstance(v, Tensor) or not isinstance(t, TensorType) or not t.shape or self.status is None:
            return
        for d, dv in zip(t.shape, v.dims):
            if d in self.aliased and isinstance(d, sympy.Symbol) and d in self.env and dv is not self.env[d]:
                self.fail(self.b.icmp_unsigned("!=", dv, self.env[d]), n, "ValueError",
                          f"a dim computed at run time is not {self.aliased[d]}, as the shapes it was computed "
                          f"from say")

    def _dummy(self) -> ir.Value:
        """Eight zero bytes: where a read ahead goes when its indices are out of bounds.
        A global, not an alloca: LLVM turns a load from a select of a stack slot back into
        branches around the load, which then stays in the loop."""
        return self.mod.dummy()

    def _constant(self, n: Node) -> Any:
        value = np.asarray(n.attrs["value"])
        if value.ndim == 0:
            return constant(_dtype(n), value[()])
        shape = _shape(n)
        return Tensor(_dtype(n), shape, self.dims(shape), ptr=self.const_array(value, _dtype(n)))

    def const_array(self, value: np.ndarray, dtype: str) -> ir.Value:
        """The address of a constant array: a global of the module, or read on entry from
        the module's table of constants (see ModuleEmitter.const_slot)."""
        slot = self.mod.const_slot(value, dtype)
        if slot is None:
            return self.mod.global_array(value, dtype)
        return self.eb.load(slot, typ=PTR)

    def _elementwise(self, n: Node) -> Any:
        rule = RULES.rule(n)
        ins = [self.vals[v] for v in n.inputs]
        dts = [_dtype(v) for v in n.inputs]
        if not any(isinstance(v, Tensor) for v in ins):
            return rule(self, n, ins, dts)
        shape = _shape(n)
        b = self.b

        def elem(idx: list[ir.Value]) -> ir.Value:
            args = [v.load(b, broadcast_index(b, idx, shape, v)) if isinstance(v, Tensor) else v for v in ins]
            return rule(self, n, args, dts)

        t = Tensor(_dtype(n), shape, self.dims(shape), elem=elem)
        if len(n.users) > 1:  # read twice: compute once, into a buffer of its own
            buf = self.alloc(shape, t.dtype)
            store_all(b, t, buf)
            t = Tensor(t.dtype, shape, t.dims, ptr=buf)
            self.owner[id(buf)] = {n}
        return t

    # --- control --------------------------------------------------------------------------------
    def _edge(self, control: Node) -> None:
        """Leave by the control edge ``control`` (a Jmp or a Cond's Proj): write the
        target's Phis and branch."""
        targets = entries(control)
        if len(targets) != 1:
            raise Unsupported(f"control value {control!r} enters {len(targets)} blocks")
        target, index = targets[0]
        b = self.b
        phis = [p for p in target.members if p.op.kind == "phi"]
        tensors = [p for p in phis if isinstance(self.vals[p], Tensor)]
        srcs: dict[Node, ir.Value] = {}
        for p in tensors:  # phase 1: compute every incoming value before any Phi changes
            v = self.vals[p.input(index)]
            # a buffer of its own is copied straight into the Phi's; a lazy value, a view into
            # another buffer or a Phi of the target (which phase 2 may overwrite) via a temporary
            src = p.input(index)
            if v.elem is None and not v.view and not (src.op.kind == "phi" and src.block is target):
                srcs[p] = v.ptr
            else:
                store_all(b, v, self.temps[p])
                srcs[p] = self.temps[p]
        for p in tensors:  # phase 2: copy into the Phis' buffers
            if srcs[p] is self.vals[p].ptr:
                continue
            t = self.vals[p]
            n = I64(itemsize(t.dtype))
            for d in t.dims:
                n = b.mul(n, d)
            memcpy = self.mod.module.declare_intrinsic("llvm.memcpy", [PTR, PTR, I64])
            b.call(memcpy, [t.ptr, srcs[p], n, I1(0)])
            if self.poll is not None:
                self.poll.spend(t.dims)
        for p in phis:
            if p not in tensors:
                self.vals[p].add_incoming(self.vals[p.input(index)], b.block)
        b.branch(self.bbs[target])

    def _cond(self, n: Node) -> None:
        exits = {int(u.attrs["num"]): u for u in n.users if u.op.name == "Proj"}
        if set(exits) != {0, 1}:
            raise Unsupported(f"Cond %{n.name or '?'} without both exits")
        b = self.b
        edge_bbs = [b.append_basic_block("edge.f"), b.append_basic_block("edge.t")]
        b.cbranch(self.vals[n.input(0)], edge_bbs[1], edge_bbs[0])
        for num in (0, 1):
            b.position_at_end(edge_bbs[num])
            self._edge(exits[num])

    def _return(self, n: Node) -> None:
        b = self.b
        for v, out in zip(n.inputs, self.outs):
            val = self.vals[v]
            if not self.internal and isinstance(val, Tensor) and not all(polynomial_dim(d) for d in val.shape):
                raise Unsupported(f"a result of shape {val.shape}, which the call cannot size")
            if isinstance(val, Tensor):
                store_all(b, val, out)
            else:
                b.store(to_mem(b, val, _dtype(v)), out)
        b.branch(self.exit)


def _tanh_f32(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    """tanh on f32 as a rational function (Eigen's ``ptanh_float``, also XLA's), within a
    few ulp: pure arithmetic, so loops over it vectorise where a libm call would not."""
    f = ir.FloatType()

    def c(v: float) -> ir.Constant:
        return ir.Constant(f, v)

    # |x| < 0.0004 returns x; beyond +-7.9053 the result is +-1 to float precision.
    clamp = c(7.90531110763549805)
    xc = b.select(b.fcmp_ordered(">", x, clamp), clamp, x)
    xc = b.select(b.fcmp_ordered("<", xc, c(-7.90531110763549805)), c(-7.90531110763549805), xc)
    x2 = b.fmul(xc, xc)
    alpha = [4.89352455891786e-03, 6.37261928875436e-04, 1.48572235717979e-05, 5.12229709037114e-08,
             -8.60467152213735e-11, 2.00018790482477e-13, -2.76076847742355e-16]
    beta = [4.89352518554385e-03, 2.26843463243900e-03, 1.18534705686654e-04, 1.19825839466702e-06]
    p = c(alpha[-1])
    for a in reversed(alpha[:-1]):
        p = b.fadd(b.fmul(p, x2), c(a))
    p = b.fmul(p, xc)
    q = c(beta[-1])
    for a in reversed(beta[:-1]):
        q = b.fadd(b.fmul(q, x2), c(a))
    r = b.fdiv(p, q)
    small = b.fcmp_ordered("<", b.call(b.module.declare_intrinsic("llvm.fabs", [f]), [x]), c(0.0004))
    return b.select(small, x, r)


# --- rules that are not elementwise: fe is the FunctionEmitter, ins the inputs' values ----------
@register_lowering(BACKEND, "DimSize")
def _dim_size(fe: FunctionEmitter, n: Node, ins: list[Any]) -> ir.Value:
    t = ins[0]
    axis = int(n.attrs["axis"])
    if not isinstance(t, Tensor):
        raise Unsupported("DimSize of a scalar")
    return t.dims[axis if axis >= 0 else axis + t.rank]


@register_lowering(BACKEND, "Gather")
def _gather(fe: FunctionEmitter, n: Node, ins: list[Any]) -> Any:
    data, i = ins
    if not isinstance(data, Tensor):
        raise Unsupported("Gather from a scalar")
    b = fe.b
    axis = int(n.attrs.get("axis", 0))
    axis = axis if axis >= 0 else axis + data.rank
    if isinstance(i, Tensor):
        return nn.gather_rows(fe, n, data, i, axis)
    dim = data.dims[axis]
    ik = kind(_dtype(n.input(1)))
    if ik == "b":
        raise Unsupported("Gather with a bool index (a mask)")
    i = fe.index(i, dim, ik == "i", n, f"index out of bounds for axis {axis}")
    if n in fe.ahead:  # read at the loop's header; the checks up to here say it is this element
        return fe.ahead[n]
    if data.rank == 1:
        return data.load(b, [i])
    shape = _shape(n)
    if axis == 0 and data.ptr is not None:  # a row of a buffer is a buffer: BLAS reads it in place
        row = I64(1)
        for d in data.dims[1:]:
            row = b.mul(row, d)
        p = b.gep(data.ptr, [b.mul(i, row)], inbounds=True, source_etype=mem_type(data.dtype))
        return Tensor(data.dtype, shape, data.dims[1:], ptr=p, view=True)

    def elem(idx: list[ir.Value]) -> ir.Value:
        return data.load(fe.b, [*idx[:axis], i, *idx[axis:]])

    return Tensor(data.dtype, shape, data.dims[:axis] + data.dims[axis + 1:], elem=elem)


@register_lowering(BACKEND, "Assert")
def _assert(fe: FunctionEmitter, n: Node, ins: list[Any]) -> ir.Value:
    fe.fail(fe.b.not_(ins[0]), n, "AssertionError", str(n.attrs.get("message", "")))
    return ins[0]


@register_lowering(BACKEND, "Call")
def _call(fe: FunctionEmitter, n: Node, ins: list[Any]) -> Any:
    callee = n.attrs["callee"]
    if any(isinstance(v, Tensor) for v in ins):
        raise Unsupported("Call with tensor arguments")
    fn, fallible = fe.mod.function(callee, f"{callee.name}.{len(fe.mod.functions)}", internal=True)
    b = fe.b
    outs = []
    for t in callee.result_types:
        if not isinstance(t, TensorType) or t.shape != ():
            raise Unsupported("Call with tensor results")
        outs.append(fe.eb.alloca(mem_type(t.dtype)))
    args = [to_mem(b, v, _dtype(a)) for v, a in zip(ins, n.inputs)]
    status = b.call(fn, args + outs)
    if fallible:
        bad, ok = b.append_basic_block("call.fail"), b.append_basic_block("call.ok")
        b.cbranch(b.icmp_unsigned("!=", status, I32(0)), bad, ok)
        b.position_at_end(bad)
        if fe.status is None:
            raise Unsupported("a fallible callee in an infallible graph")
        b.store(status, fe.status)
        b.branch(fe.exit)
        b.position_at_end(ok)
    vals = [to_reg(b, b.load(p, typ=mem_type(t.dtype)), t.dtype)
            for p, t in zip(outs, callee.result_types)]
    return vals[0] if len(vals) == 1 else tuple(vals)



