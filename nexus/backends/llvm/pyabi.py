"""A compiled graph called from Python without ctypes: an entry function in CPython's ABI.

A call through ctypes costs about 0.5 us before any work (it builds converter objects for
every argument); numba's dispatcher calls the same loop in a quarter of that.  So, as
numba does, each module that the llvm backend loads gets an entry of the ``METH_FASTCALL``
kind next to its kernel, ``PyObject *entry(PyObject *self, PyObject *const *args,
Py_ssize_t nargs)``, exposed as a builtin function object (:func:`builtin`).  It

- accepts the arguments that need no conversion: per scalar argument a Python ``bool``,
  ``int`` or ``float`` for ``bool``, ``i64`` and ``f64`` (an ``int`` that does not fit is
  not accepted), or the NumPy scalar of the dtype; per tensor argument an ``ndarray`` of
  the dtype (native byte order), rank and int dims, C-contiguous and aligned, whose
  symbolic dims agree where a symbol sizes several;
- allocates the array results (``PyArray_Empty``), reusing the array of the previous call
  when nothing else holds it any more (a fresh large array costs more in page faults than
  the loop that fills it), releases the GIL and calls the kernel;
- boxes the results: NumPy scalars (``PyArray_Scalar``), or, in the ``weak`` entry of a
  graph with one ``bool``/``i64``/``f64`` result, Python's own ``bool``/``int``/``float``
  (what a script returns); then applies an optional conversion (a Python callable);
- and hands any other call (another signature, a list, a non-contiguous array) to its
  fallback, a Python callable that converts, compiles and raises as the ctypes path does.

A failure status calls ``fail(status)``, which raises the backend's error.  The entry
reads CPython's and NumPy's objects by their C layouts (the offsets below, the stable
ones both projects' headers expose to extensions); :func:`supported` checks each offset
on live objects once per process and the entries are not used where one does not match
(another interpreter, a free-threaded build).  The C API functions and objects are
external symbols of the module, bound to their addresses in this process
(``ctypes.pythonapi``) before the module is loaded, so a cached object
(:mod:`nexus.backends.llvm.cache`) holds no address of the process that compiled it.

The ``self`` of the builtin is a tuple, laid out by :data:`SLOT`: the fallback, the
conversion (or None), a list whose item 0 the entry sets to the graph it ran (or None:
nothing to record), that graph, ``fail``, the method definition and the executable (kept
alive with the function), then per result its dtype and its last array (or None).
"""

from __future__ import annotations

import ctypes
import functools
import sys
from collections.abc import Callable
from typing import Any

import numpy as np
import sympy
from llvmlite import ir

from nexus.backends.llvm.dimalias import dim_aliases
from nexus.backends.llvm.dtypes import I8, I32, I64, PTR, Unsupported, mem_type
from nexus.backends.llvm.target import bind_symbol
from nexus.ir.graph import Graph
from nexus.ir.types import TensorType, numpy_dtype

ENTRY, WEAK_ENTRY = "nexus_py", "nexus_py_weak"
METH_FASTCALL = 0x0080
# Offsets into CPython's and NumPy's objects (checked by `supported`).
OB_REFCNT, OB_TYPE, HEAD = 0, 8, 16
FLOAT_VALUE = SCALAR_VALUE = HEAD  # PyFloatObject.ob_fval, the value of a NumPy scalar
TUPLE_ITEMS = 24  # PyTupleObject.ob_item
LIST_ITEMS = 24  # PyListObject.ob_item (a pointer to the items)
ARR_DATA, ARR_ND, ARR_DIMS, ARR_DESCR, ARR_FLAGS = 16, 24, 32, 56, 64
DESCR_BYTEORDER, DESCR_TYPE_NUM = 26, 28
C_CONTIGUOUS_ALIGNED, WRITEABLE = 0x0001 | 0x0100, 0x0400
SLOT = {"fallback": 0, "convert": 1, "cell": 2, "graph": 3, "fail": 4, "method": 5, "owner": 6}
RESULTS = 7  # per result r: its dtype at RESULTS + 2r, its last array at RESULTS + 2r + 1
WEAK = {"bool": bool, "i64": int, "f64": float}  # dtypes with a Python type of their own

# The C API the entries call: name -> (return, arguments); and the objects they compare with.
_FUNCTIONS: dict[str, tuple[ir.Type, list[ir.Type]]] = {
    "PyLong_AsLongLongAndOverflow": (I64, [PTR, PTR]),
    "PyLong_FromLongLong": (PTR, [I64]),
    "PyFloat_FromDouble": (PTR, [ir.DoubleType()]),
    "PyBool_FromLong": (PTR, [I64]),
    "PyObject_Vectorcall": (PTR, [PTR, PTR, I64, PTR]),
    "PyObject_CallOneArg": (PTR, [PTR, PTR]),
    "PyTuple_New": (PTR, [I64]),
    "Py_IncRef": (ir.VoidType(), [PTR]),
    "Py_DecRef": (ir.VoidType(), [PTR]),
    "PyEval_SaveThread": (PTR, []),
    "PyEval_RestoreThread": (ir.VoidType(), [PTR]),
    "nexus_np_Empty": (PTR, [I32, PTR, PTR, I32]),
    "nexus_np_Scalar": (PTR, [PTR, PTR, PTR]),
}
_OBJECTS = ("PyLong_Type", "PyFloat_Type", "PyBool_Type", "_Py_TrueStruct", "_Py_NoneStruct", "nexus_np_ndarray")
_NUMPY_API = {"nexus_np_Empty": 184, "nexus_np_Scalar": 60}  # indices into NumPy's C API table


@functools.cache
def supported() -> bool:
    """Whether this interpreter's and NumPy's objects have the layout the entries read."""
    if sys.implementation.name != "cpython" or object.__basicsize__ != HEAD or not hasattr(ctypes, "pythonapi"):
        return False
    if getattr(sys, "_is_gil_enabled", lambda: True)() is False:
        return False
    try:
        _bind_symbols()
    except (AttributeError, ValueError, OSError):
        return False

    def at(obj: object, offset: int, ctype: Any) -> Any:
        return ctype.from_address(id(obj) + offset).value

    a = np.zeros((3, 5), np.float32)
    t, lst = (a, None), [a]
    checks = [at(a, OB_TYPE, ctypes.c_void_p) == id(np.ndarray), at(a, ARR_DATA, ctypes.c_void_p) == a.ctypes.data,
              at(a, ARR_ND, ctypes.c_int) == 2, at(a, ARR_DESCR, ctypes.c_void_p) == id(a.dtype),
              at(a, ARR_FLAGS, ctypes.c_int) & (C_CONTIGUOUS_ALIGNED | WRITEABLE) == C_CONTIGUOUS_ALIGNED | WRITEABLE,
              ctypes.c_int64.from_address(at(a, ARR_DIMS, ctypes.c_void_p) + 8).value == 5,
              at(a.dtype, DESCR_TYPE_NUM, ctypes.c_int) == a.dtype.num,
              at(a.dtype, DESCR_BYTEORDER, ctypes.c_char) == a.dtype.byteorder.encode(),
              at(1.5, FLOAT_VALUE, ctypes.c_double) == 1.5, at(np.float32(2.5), SCALAR_VALUE, ctypes.c_float) == 2.5,
              at(np.int64(-7), SCALAR_VALUE, ctypes.c_int64) == -7, at(t, TUPLE_ITEMS, ctypes.c_void_p) == id(a),
              ctypes.c_void_p.from_address(at(lst, LIST_ITEMS, ctypes.c_void_p)).value == id(a)]
    b = np.zeros(2)
    checks.append(at(b, OB_REFCNT, ctypes.c_ssize_t) == sys.getrefcount(b))  # both count their argument
    return all(checks)


def _bind_symbols() -> None:
    """Give the external symbols of the entries their addresses in this process."""
    try:
        from numpy._core import _multiarray_umath  # type: ignore[attr-defined]
    except ImportError:  # NumPy 1.x
        from numpy.core import _multiarray_umath  # type: ignore[no-redef,unused-ignore]

    api = ctypes.pythonapi
    get_pointer = api.PyCapsule_GetPointer
    get_pointer.restype, get_pointer.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
    table = get_pointer(_multiarray_umath._ARRAY_API, None)
    for name in _FUNCTIONS:
        if name in _NUMPY_API:
            address = ctypes.c_void_p.from_address(table + 8 * _NUMPY_API[name]).value
        else:
            address = ctypes.cast(getattr(api, name), ctypes.c_void_p).value
        if not address:
            raise ValueError(f"no address for {name}")
        bind_symbol(name, address)
    for name in _OBJECTS:
        bind_symbol(name, id(np.ndarray) if name == "nexus_np_ndarray" else
                    ctypes.addressof(ctypes.c_char.in_dll(api, name)))
    for dt in _SCALAR_TYPES:
        bind_symbol(_scalar_symbol(dt), id(np.dtype(dt).type))


_SCALAR_TYPES = ("bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
                 "float16", "float32", "float64")


def _scalar_symbol(np_name: str) -> str:
    return f"nexus_np_{np_name}"


class _Emitter:
    """The entry of one graph's kernel (see the module docstring)."""

    def __init__(self, module: ir.Module, g: Graph, kernel: ir.Function, fallible: bool, name: str, weak: bool):
        self.m, self.g, self.kernel, self.fallible, self.weak = module, g, kernel, fallible, weak
        self.fn = ir.Function(module, ir.FunctionType(PTR, [PTR, PTR, I64]), name)
        self.self_, self.args, self.nargs = self.fn.args
        self.b = ir.IRBuilder(self.fn.append_basic_block("entry"))
        self.slow = self.fn.append_basic_block("slow")
        self.dims: dict[Any, ir.Value] = {}

    # --- helpers ------------------------------------------------------------------------------
    def api(self, name: str) -> ir.Function:
        fn = self.m.globals.get(name)
        if fn is None:
            ret, args = _FUNCTIONS[name]
            fn = ir.Function(self.m, ir.FunctionType(ret, args), name)
        assert isinstance(fn, ir.Function)
        return fn

    def obj(self, name: str) -> ir.GlobalVariable:
        gv = self.m.globals.get(name)
        if gv is None:
            gv = ir.GlobalVariable(self.m, I8, name)  # external: its address is the object
        assert isinstance(gv, ir.GlobalVariable)
        return gv

    def load(self, base: ir.Value, offset: int, t: ir.Type) -> ir.Value:
        return self.b.load(self.b.gep(base, [I64(offset)], source_etype=I8), typ=t)

    def item(self, slot: int) -> ir.Value:
        return self.load(self.self_, TUPLE_ITEMS + 8 * slot, PTR)

    def require(self, ok: ir.Value) -> None:
        """Go on where ``ok``, else to the fallback."""
        go = self.fn.append_basic_block("ok")
        self.b.cbranch(ok, go, self.slow)
        self.b.position_at_end(go)

    def is_(self, a: ir.Value, b: ir.Value) -> ir.Value:
        return self.b.icmp_unsigned("==", a, b)

    # --- arguments ----------------------------------------------------------------------------
    def scalar(self, a: ir.Value, dtype: str) -> ir.Value:
        """The value of scalar argument ``a`` (a PyObject*) in the kernel's type."""
        b = self.b
        np_name = numpy_dtype(dtype).name
        if np_name not in _SCALAR_TYPES:
            raise Unsupported(f"scalar argument of dtype {dtype}")
        cls = self.load(a, OB_TYPE, PTR)
        np_type = self.obj(_scalar_symbol(np_name))
        t = mem_type(dtype)
        py = {"bool": "PyBool_Type", "i64": "PyLong_Type", "f64": "PyFloat_Type"}.get(dtype)
        if py is None:
            self.require(self.is_(cls, np_type))
            return self.load(a, SCALAR_VALUE, t)
        is_np = self.is_(cls, np_type)
        python, numpy_, done = (self.fn.append_basic_block(n) for n in ("python", "numpy", "scalar"))
        b.cbranch(is_np, numpy_, python)
        b.position_at_end(numpy_)
        v_np = self.load(a, SCALAR_VALUE, t)
        b.branch(done)
        b.position_at_end(python)
        self.require(self.is_(cls, self.obj(py)))
        if dtype == "bool":
            v_py = b.zext(self.is_(a, self.obj("_Py_TrueStruct")), I8)
        elif dtype == "f64":
            v_py = self.load(a, FLOAT_VALUE, t)
        else:
            overflow = self._entry_alloca(I32)
            b.store(I32(0), overflow)
            v_py = b.call(self.api("PyLong_AsLongLongAndOverflow"), [a, overflow])
            self.require(self.is_(b.load(overflow), I32(0)))
        py_end = b.block
        b.branch(done)
        b.position_at_end(done)
        phi = b.phi(t)
        phi.add_incoming(v_np, numpy_)
        phi.add_incoming(v_py, py_end)
        return phi

    def _entry_alloca(self, t: ir.Type, count: int = 1) -> ir.Value:
        with self.b.goto_block(self.fn.entry_basic_block):
            return self.b.alloca(t, count)

    def array(self, a: ir.Value, t: TensorType, k: int) -> list[ir.Value]:
        """Data pointer and dims of array argument ``a`` (checked against ``t``)."""
        b = self.b
        dt = numpy_dtype(t.dtype)
        assert t.shape is not None
        if dt.name not in _SCALAR_TYPES:
            raise Unsupported(f"argument {k} of dtype {t.dtype}")
        self.require(self.is_(self.load(a, OB_TYPE, PTR), self.obj("nexus_np_ndarray")))
        self.require(self.is_(self.load(a, ARR_ND, I32), I32(len(t.shape))))
        descr = self.load(a, ARR_DESCR, PTR)
        self.require(self.is_(self.load(descr, DESCR_TYPE_NUM, I32), I32(dt.num)))
        foreign = ord(">" if sys.byteorder == "little" else "<")
        self.require(b.icmp_unsigned("!=", self.load(descr, DESCR_BYTEORDER, I8), I8(foreign)))
        flags = b.and_(self.load(a, ARR_FLAGS, I32), I32(C_CONTIGUOUS_ALIGNED))
        self.require(self.is_(flags, I32(C_CONTIGUOUS_ALIGNED)))
        dims_ptr = self.load(a, ARR_DIMS, PTR)
        out = [self.load(a, ARR_DATA, PTR)]
        for i, d in enumerate(t.shape):
            n = self.load(dims_ptr, 8 * i, I64)
            if isinstance(d, int):
                self.require(self.is_(n, I64(d)))
            elif isinstance(d, sympy.Symbol):
                if d in self.dims:
                    self.require(self.is_(n, self.dims[d]))
                else:
                    self.dims[d] = n
            else:  # an expression (2*N) takes the solver: the fallback's
                raise Unsupported(f"argument {k} has dim {d}")
            out.append(n)
        return out

    # --- results ------------------------------------------------------------------------------
    def dim(self, d: Any) -> ir.Value:
        if isinstance(d, int):
            return I64(d)
        expr = sympy.sympify(d)
        if expr.is_Integer:
            return I64(int(expr))
        if expr.is_Symbol:
            if expr not in self.dims:
                raise Unsupported(f"result dim {d} is bound by no argument")
            return self.dims[expr]
        if expr.is_Add or expr.is_Mul:
            parts = [self.dim(a) for a in expr.args]
            acc = parts[0]
            for p in parts[1:]:
                acc = self.b.add(acc, p) if expr.is_Add else self.b.mul(acc, p)
            return acc
        raise Unsupported(f"result dim {d}")

    def result_array(self, r: int, t: TensorType) -> tuple[ir.Value, ir.Value]:
        """The array result ``r`` is written into, and its data pointer: the previous call's
        when only the tuple holds it and its shape is right, else a new one."""
        b = self.b
        assert t.shape is not None
        rank = len(t.shape)
        dims = [self.dim(d) for d in t.shape]
        slot = RESULTS + 2 * r + 1
        old = self.item(slot)
        fresh, check, reuse, done = (self.fn.append_basic_block(n) for n in ("fresh", "check", "reuse", "array"))
        b.cbranch(self.is_(old, self.obj("_Py_NoneStruct")), fresh, check)
        b.position_at_end(check)
        ok = self.is_(self.load(old, OB_REFCNT, I64), I64(1))
        flags = b.and_(self.load(old, ARR_FLAGS, I32), I32(C_CONTIGUOUS_ALIGNED | WRITEABLE))
        ok = b.and_(ok, self.is_(flags, I32(C_CONTIGUOUS_ALIGNED | WRITEABLE)))
        old_dims = self.load(old, ARR_DIMS, PTR)
        for i, n in enumerate(dims):
            ok = b.and_(ok, self.is_(self.load(old_dims, 8 * i, I64), n))
        b.cbranch(ok, reuse, fresh)
        b.position_at_end(fresh)
        shape = self._entry_alloca(I64, max(rank, 1))
        for i, n in enumerate(dims):
            b.store(n, b.gep(shape, [I64(i)], source_etype=I64))
        descr = self.item(RESULTS + 2 * r)
        b.call(self.api("Py_IncRef"), [descr])  # PyArray_Empty steals it
        new = b.call(self.api("nexus_np_Empty"), [I32(rank), shape, descr, I32(0)])
        failed = self.fn.append_basic_block("no_memory")
        stored = self.fn.append_basic_block("stored")
        b.cbranch(self.is_(new, ir.Constant(PTR, None)), failed, stored)
        b.position_at_end(failed)
        b.ret(ir.Constant(PTR, None))  # NumPy has set MemoryError
        b.position_at_end(stored)
        where = b.gep(self.self_, [I64(TUPLE_ITEMS + 8 * slot)], source_etype=I8)
        b.store(new, where)  # the tuple's reference moves to the new array
        b.call(self.api("Py_DecRef"), [old])
        b.branch(done)
        b.position_at_end(reuse)
        b.branch(done)
        b.position_at_end(done)
        arr = b.phi(PTR)
        arr.add_incoming(new, stored)
        arr.add_incoming(old, reuse)
        return arr, self.load(arr, ARR_DATA, PTR)

    def box(self, r: int, t: TensorType, where: ir.Value) -> ir.Value:
        """The result object of scalar result ``r`` stored at ``where``."""
        b = self.b
        if self.weak:
            v = b.load(where, typ=mem_type(t.dtype))
            if t.dtype == "bool":
                return b.call(self.api("PyBool_FromLong"), [b.zext(v, I64)])
            if t.dtype == "i64":
                return b.call(self.api("PyLong_FromLongLong"), [v])
            return b.call(self.api("PyFloat_FromDouble"), [v])
        return b.call(self.api("nexus_np_Scalar"), [where, self.item(RESULTS + 2 * r), ir.Constant(PTR, None)])

    # --- the entry ----------------------------------------------------------------------------
    def emit(self) -> None:
        b, g = self.b, self.g
        self.require(self.is_(self.nargs, I64(len(g.args))))
        values: list[ir.Value] = []
        for k, t in enumerate(g.arg_types):
            assert isinstance(t, TensorType) and t.shape is not None
            a = self.load(self.args, 8 * k, PTR)
            values += [self.scalar(a, t.dtype)] if t.shape == () else self.array(a, t, k)
        for sym, rep in dim_aliases(g).items():
            if sympy.sympify(rep).free_symbols <= self.dims.keys():
                self.dims[sym] = self.dim(rep)
        arrays: list[ir.Value | None] = []
        outs: list[ir.Value] = []
        for r, t in enumerate(g.result_types):
            if not isinstance(t, TensorType) or t.shape is None:
                raise Unsupported(f"result type {t}")
            if t.shape == ():
                slot = self._entry_alloca(mem_type(t.dtype))
                arrays.append(None)
                outs.append(slot)
            else:
                arr, data = self.result_array(r, t)
                arrays.append(arr)
                outs.append(data)
        # The caller's references to the arrays, taken before the GIL is let go: another
        # thread calling meanwhile sees them held and allocates its own.
        for arr in arrays:
            if arr is not None:
                b.call(self.api("Py_IncRef"), [arr])
        state = b.call(self.api("PyEval_SaveThread"), [])
        rc = b.call(self.kernel, values + outs)
        b.call(self.api("PyEval_RestoreThread"), [state])
        if self.fallible:
            failed = self.fn.append_basic_block("failed")
            ok = self.fn.append_basic_block("succeeded")
            b.cbranch(self.is_(rc, I32(0)), ok, failed)
            b.position_at_end(failed)
            for arr in arrays:
                if arr is not None:
                    b.call(self.api("Py_DecRef"), [arr])
            code = b.call(self.api("PyLong_FromLongLong"), [b.sext(rc, I64)])
            b.ret(self._call_one(self.item(SLOT["fail"]), code))
            b.position_at_end(ok)
        boxed = [self.box(r, t, outs[r]) if arrays[r] is None else arrays[r]  # type: ignore[arg-type]
                 for r, t in enumerate(g.result_types)]
        out = self._pack(boxed)
        self._record()
        # the conversion, where there is one
        convert = self.item(SLOT["convert"])
        none = self.obj("_Py_NoneStruct")
        with b.if_then(b.icmp_unsigned("!=", convert, none)):
            b.ret(self._call_one(convert, out))
        b.ret(out)
        b.position_at_end(self.slow)
        b.ret(b.call(self.api("PyObject_Vectorcall"), [self.item(SLOT["fallback"]), self.args, self.nargs,
                                                        ir.Constant(PTR, None)]))

    def _call_one(self, fn: ir.Value, arg: ir.Value) -> ir.Value:
        """``fn(arg)``, dropping this function's reference to ``arg`` (NULL if ``arg`` is)."""
        b = self.b
        is_null = self.is_(arg, ir.Constant(PTR, None))
        with b.if_then(is_null, likely=False):
            b.ret(ir.Constant(PTR, None))
        res = b.call(self.api("PyObject_CallOneArg"), [fn, arg])
        b.call(self.api("Py_DecRef"), [arg])
        return res

    def _pack(self, boxed: list[ir.Value]) -> ir.Value:
        """None, the one result, or a tuple of them (NULL where boxing one failed)."""
        b = self.b
        if not boxed:
            none = self.obj("_Py_NoneStruct")
            b.call(self.api("Py_IncRef"), [none])
            return none
        if len(boxed) == 1:
            return boxed[0]
        tup = b.call(self.api("PyTuple_New"), [I64(len(boxed))])
        failed = self.is_(tup, ir.Constant(PTR, None))
        for v in boxed:
            failed = b.or_(failed, self.is_(v, ir.Constant(PTR, None)))
        with b.if_then(failed, likely=False):
            for v in [tup, *boxed]:
                with b.if_then(b.icmp_unsigned("!=", v, ir.Constant(PTR, None))):
                    b.call(self.api("Py_DecRef"), [v])
            b.ret(ir.Constant(PTR, None))
        for i, v in enumerate(boxed):
            b.store(v, b.gep(tup, [I64(TUPLE_ITEMS + 8 * i)], source_etype=I8))
        return tup

    def _record(self) -> None:
        """``cell[0] = graph`` where the tuple has a cell and it holds another graph."""
        b = self.b
        cell, graph = self.item(SLOT["cell"]), self.item(SLOT["graph"])
        with b.if_then(b.icmp_unsigned("!=", cell, self.obj("_Py_NoneStruct")), likely=False):
            where = self.load(cell, LIST_ITEMS, PTR)
            old = b.load(where, typ=PTR)
            with b.if_then(b.icmp_unsigned("!=", old, graph), likely=False):
                b.call(self.api("Py_IncRef"), [graph])
                b.store(graph, where)
                b.call(self.api("Py_DecRef"), [old])


def emit_entries(module: ir.Module, g: Graph, kernel: ir.Function, fallible: bool) -> tuple[str, ...]:
    """Add the entries of ``kernel`` (``g``'s function) to ``module``; the names of those
    added: none where this interpreter is not :func:`supported` or ``g`` has what the
    entries leave to the fallback alone (an argument dim ``2*N``, say)."""
    if not supported():
        return ()
    names = [ENTRY]
    results = g.result_types
    if len(results) == 1 and isinstance(results[0], TensorType) and results[0].shape == () and \
            results[0].dtype in WEAK:
        names.append(WEAK_ENTRY)
    # a trial in a module of its own first: what the entries cannot take shows up as
    # Unsupported half-way through, and a half-emitted function cannot be taken back
    trial = ir.Module("trial")
    try:
        _Emitter(trial, g, ir.Function(trial, kernel.ftype, kernel.name), fallible, ENTRY, weak=False).emit()
    except Unsupported:
        return ()
    for name in names:
        _Emitter(module, g, kernel, fallible, name, weak=name == WEAK_ENTRY).emit()
    kernel.attributes.add("noinline")  # one copy of the kernel, however many entries call it
    return tuple(names)


class _MethodDef(ctypes.Structure):
    _fields_ = [("ml_name", ctypes.c_char_p), ("ml_meth", ctypes.c_void_p), ("ml_flags", ctypes.c_int),
                ("ml_doc", ctypes.c_char_p)]


_new_function = ctypes.pythonapi.PyCFunction_NewEx
_new_function.restype = ctypes.py_object
_new_function.argtypes = [ctypes.c_void_p, ctypes.py_object, ctypes.c_void_p]


def builtin(address: int, name: str, owner: object, graph: Graph | None, result_types: list[Any],
            fallback: Callable[..., Any], fail: Callable[[int], Any], convert: Callable[[Any], Any] | None = None,
            cell: list[Any] | None = None) -> Callable[..., Any]:
    """A builtin function object calling the entry at ``address`` (see the module
    docstring for what each argument becomes)."""
    method = _MethodDef(name.encode(), address, METH_FASTCALL, None)
    items: list[Any] = [fallback, convert, cell, graph, fail, method, owner]
    for t in result_types:
        assert isinstance(t, TensorType)
        items += [numpy_dtype(t.dtype), None]
    fn: Callable[..., Any] = _new_function(ctypes.addressof(method), tuple(items), None)
    return fn
