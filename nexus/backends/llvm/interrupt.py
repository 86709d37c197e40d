"""Ctrl-C for native code: a SIGINT handler of our own while a long native call runs.

Python's own SIGINT handler only marks the signal pending; the KeyboardInterrupt is
raised by the interpreter between bytecodes, which never come while a native loop runs.
So generated code polls (:mod:`nexus.backends.llvm.poll`): every ``CHUNK`` counted block
entries it calls the tick here (``nexus_rt_tick``, native, in a small module
of its own loaded once per process), which answers whether the call must stop.

The design, and why:

* **Armed lazily, from native code.** The first tick of a call on the main thread installs
  ``nexus_rt_on_sigint`` in place of Python's C-level handler (``sigaction``, keeping its
  mask and flags); the entry function's way out restores the saved action
  (``nexus_rt_leave``).  A call that ends before its first tick (``FIRST`` block entries,
  microseconds) costs no system call at all, so small calls stay as cheap as before; a
  SIGINT during those microseconds is Python's, as before: pending, raised as the call returns.
* **Only the main thread, only over Python's handler.** Python delivers signals to the
  main thread's handlers only, so a call on another thread is never armed and never
  stops.  Nor is the handler installed when SIGINT's C-level action is not Python's own
  (``signal.SIG_IGN``, ``SIG_DFL`` or another library's handler): Ctrl-C then does what
  that action does, as it did before.
* **Chained, so Python still sees the signal.** The handler sets a flag and calls
  Python's handler, which marks the signal pending (and writes the wakeup fd, if any).
  The stopped call returns its "interrupted" status; the first bytecode after it runs the
  Python-level handler (``default_int_handler`` raises KeyboardInterrupt, a handler of the
  user's runs as it would for Python code), and :func:`interrupted` raises
  KeyboardInterrupt if that handler returned: the call has no result to give.
* **Nothing is left half-written.** A stopped call leaves through the function's exit
  block like any failure (its buffers freed, the handler restored, the flag cleared), and
  its results are not returned, so the next call starts from the same state as the first.

Linux only (the layout of ``struct sigaction`` is read at two offsets of glibc's); elsewhere
the poll still runs but never arms, and Ctrl-C behaves as it did before.
"""

from __future__ import annotations

import ctypes
import functools
import signal
import sys
import threading

from llvmlite import ir

from nexus.backends.llvm.dtypes import I32, I64

FIRST = 1 << 10  # counted block entries before a call's first tick (it arms the handler)
CHUNK = 1 << 16  # counted block entries between two ticks after that
TICK, LEAVE, ARMED = "nexus_rt_tick", "nexus_rt_leave", "nexus_rt_armed"
_SIGACTION_SIZE = 256  # bytes kept for a struct sigaction (glibc's is 152 on 64-bit Linux)
_FLAGS_OFFSET = 136  # of sa_flags in glibc's struct sigaction on 64-bit Linux
_SA_SIGINFO = 4


def _build() -> str:
    """The runtime module's IR (see the module docstring for what each function does)."""
    m = ir.Module("nexus_rt")
    # a struct sigaction as {sa_handler, the rest}: the handler as an integer, since
    # llvmlite keeps the type of a pointer to a global, and only that field is touched here
    buf = ir.LiteralStructType([I64, ir.ArrayType(ir.IntType(8), _SIGACTION_SIZE - 8)])

    def var(name: str, typ: ir.Type, init: ir.Constant) -> ir.GlobalVariable:
        gv = ir.GlobalVariable(m, typ, name)
        gv.initializer = init
        gv.align = 16
        return gv

    stop, armed, main = var("nexus_rt_stop", I32, I32(0)), var(ARMED, I32, I32(0)), var("nexus_rt_main", I64, I64(0))
    python = var("nexus_rt_python", I64, I64(0))
    saved, ours = (var(name, buf, ir.Constant(buf, None)) for name in ("nexus_rt_saved", "nexus_rt_ours"))
    sigaction = ir.Function(m, ir.FunctionType(I32, [I32, buf.as_pointer(), buf.as_pointer()]), "sigaction")
    self_id = ir.Function(m, ir.FunctionType(I64, []), "pthread_self")
    sigint = I32(int(signal.SIGINT))
    null = ir.Constant(buf.as_pointer(), None)

    on_sigint = ir.Function(m, ir.FunctionType(ir.VoidType(), [I32]), "nexus_rt_on_sigint")
    b = ir.IRBuilder(on_sigint.append_basic_block())
    b.store_atomic(I32(1), stop, "seq_cst", 4)
    b.call(b.inttoptr(b.load(python, typ=I64), on_sigint.function_type.as_pointer()), [on_sigint.args[0]])
    b.ret_void()

    def on_main(fn: ir.Function) -> ir.IRBuilder:
        """A builder in ``fn`` past the test that this is the main thread (else ``ret 0``/void)."""
        b = ir.IRBuilder(fn.append_basic_block())
        yes, no = fn.append_basic_block("main"), fn.append_basic_block("other")
        b.cbranch(b.icmp_unsigned("==", b.call(self_id, []), b.load(main, typ=I64)), yes, no)
        b.position_at_end(no)
        b.ret(I32(0)) if fn.function_type.return_type == I32 else b.ret_void()
        b.position_at_end(yes)
        return b

    tick = ir.Function(m, ir.FunctionType(I32, []), TICK)
    b = on_main(tick)
    arm, done = tick.append_basic_block("arm"), tick.append_basic_block("armed")
    b.cbranch(b.icmp_unsigned("!=", b.load(armed, typ=I32), I32(0)), done, arm)
    b.position_at_end(done)
    b.ret(b.load_atomic(stop, "seq_cst", 4))
    b.position_at_end(arm)
    py = b.load(python, typ=I64)
    ok, out = tick.append_basic_block("python"), tick.append_basic_block("leave.alone")
    b.cbranch(b.icmp_unsigned("!=", py, I64(0)), ok, out)
    b.position_at_end(out)
    b.ret(I32(0))
    b.position_at_end(ok)
    b.call(sigaction, [sigint, null, ours])  # the action now: armed only over Python's own
    still, install = tick.append_basic_block("still"), tick.append_basic_block("install")
    handler = b.gep(ours, [I32(0), I32(0)], inbounds=True)
    b.cbranch(b.icmp_unsigned("==", b.load(handler, typ=I64), py), install, still)
    b.position_at_end(still)
    b.ret(I32(0))
    b.position_at_end(install)
    b.store(b.ptrtoint(on_sigint, I64), handler)  # sa_handler is the first field; mask and flags stay Python's
    b.store_atomic(I32(0), stop, "seq_cst", 4)
    b.call(sigaction, [sigint, ours, saved])
    b.store(I32(1), armed)
    b.ret(I32(0))

    leave = ir.Function(m, ir.FunctionType(ir.VoidType(), []), LEAVE)
    b = on_main(leave)
    b.call(sigaction, [sigint, saved, null])
    b.store(I32(0), armed)
    b.store_atomic(I32(0), stop, "seq_cst", 4)  # after the restore: no handler of ours sets it again
    b.ret_void()
    return str(m)


@functools.cache
def runtime() -> object:
    """Load the runtime module once and make its symbols known to every later module
    (generated code declares ``nexus_rt_tick``, ``nexus_rt_leave`` and ``nexus_rt_armed``)."""
    import llvmlite.binding as llvm

    from nexus.backends.llvm.target import Jitted

    jit = Jitted(_build())
    for name in (TICK, LEAVE, ARMED):
        llvm.add_symbol(name, jit.engine.get_global_value_address(name) if name == ARMED else jit.address(name))
    ctypes.c_uint64.from_address(jit.engine.get_global_value_address("nexus_rt_main")).value = \
        threading.main_thread().ident or 0
    learn_python_handler(jit)
    return jit


def learn_python_handler(jit: object | None = None) -> None:
    """Record Python's C-level SIGINT handler, the one action the runtime replaces and
    chains to.  It is known only while SIGINT has a Python-level handler (then the C-level
    one is Python's); called again by each compile until it is known."""
    jit = jit if jit is not None else runtime()
    slot = ctypes.c_uint64.from_address(jit.engine.get_global_value_address("nexus_rt_python"))  # type: ignore[attr-defined]
    if slot.value or not sys.platform.startswith("linux") or ctypes.sizeof(ctypes.c_void_p) != 8:
        return
    if not callable(signal.getsignal(signal.SIGINT)):
        return
    action = ctypes.create_string_buffer(_SIGACTION_SIZE)
    if ctypes.CDLL(None, use_errno=True).sigaction(int(signal.SIGINT), None, action) != 0:
        return
    flags = ctypes.c_int.from_buffer(action, _FLAGS_OFFSET).value
    if not flags & _SA_SIGINFO:  # Python's handler takes the signal number only
        slot.value = ctypes.c_uint64.from_buffer(action).value


def interrupted() -> None:
    """What a native call stopped by SIGINT raises, once Python's own handler has run
    (it ran on entering this function: the chained handler left the signal pending)."""
    raise KeyboardInterrupt
