"""Ahead-of-time output: a graph as an object file, a shared library or a program, with a
C header, that runs with no Python and no Nexus installed.

``nexus compile FILE --backend llvm --emit obj|shared|exe [--target TRIPLE] -o OUT`` writes

- ``OUT`` (``--emit obj``: an object file; ``shared``: a shared library; ``exe``: a program);
- a C header beside it (``obj`` and ``shared``: ``model.o`` gives ``model.h``): one function,
  named after the graph (``--name`` changes it), and ``NAME_error``, the message of a status.

The calling convention (the header spells it out for each graph)::

    int32_t NAME(<arguments>, <results>);

- a scalar argument is passed by value, in its C type (``int32_t``, ``double``, ``bool``...);
- a tensor argument is ``const T *x`` (C order, contiguous) followed by its dims
  ``int64_t x_d0, int64_t x_d1, ...``; dims that the graph's type names alike (``f64[N]`` twice)
  must be equal: the function does not check them;
- each result is a ``T *`` the caller allocates: one element for a scalar, for a tensor the
  product of its dims, which the header gives as C expressions of the argument dims (a
  graph whose result size depends on the data is refused);
- the status is 0, or the code of the failure that stopped the call (an index out of range,
  an assertion): ``NAME_error(status)`` is its message, the one the python backend raises.

The object needs only the C library and libm (and a BLAS's ``sgemm_``/``dgemm_`` where the
graph multiplies large matrices: ``NAME.h`` lists such symbols).  It is position-independent
code; it does not stop on Ctrl-C (a program that gets SIGINT ends, as any C program does).

``--emit exe`` links the object with a generated C ``main`` using the target's C compiler
(``cc`` for the host, ``ARCH-linux-gnu-gcc`` for another target, ``--cc`` to choose): the
program takes its arguments as ``name=value`` (the syntax of ``nexus run --input``: numbers,
``true``/``false``, ``inf``/``nan`` and nested lists) and prints ``result i: TYPE = VALUE`` as
``nexus run`` does (a tensor as a nested list on one line); a failure prints
``error: MESSAGE`` and exits 1, a malformed argument exits 2.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from typing import Any

import sympy
from llvmlite import ir

from nexus.backends.llvm.backend import ENTRY, emit_module
from nexus.backends.llvm.dtypes import I32, Unsupported
from nexus.backends.llvm.interrupt import ARMED, LEAVE, TICK
from nexus.backends.llvm.target import TRIPLES, little_endian, object_code
from nexus.ir.graph import Graph
from nexus.ir.node import node_where
from nexus.ir.types import TensorType
from nexus.passes.shapes import infer_shapes

EMITS = ("obj", "shared", "exe")

_C_TYPES = {"bool": "bool", "i8": "int8_t", "i16": "int16_t", "i32": "int32_t", "i64": "int64_t",
            "u8": "uint8_t", "u16": "uint16_t", "u32": "uint32_t", "u64": "uint64_t",
            "f32": "float", "f64": "double"}


class AotError(ValueError):
    """A graph that cannot be compiled ahead of time, or a toolchain that is missing."""


@dataclass(frozen=True)
class Param:
    """One C parameter group: an argument or a result, its C type and its dims' C names."""

    name: str
    ctype: str
    t: TensorType
    dims: tuple[str, ...]  # the dim parameters of a tensor argument; C expressions of a result's dims


@dataclass(frozen=True)
class Interface:
    """The C function of a graph: its name, parameters, results, failure messages and the
    symbols it needs from outside the C library."""

    name: str
    args: tuple[Param, ...]
    results: tuple[Param, ...]
    bindings: dict[str, str]  # a symbolic dim's C name -> the argument dim that gives it
    checks: tuple[tuple[str, str], ...]  # (argument dim, the dim it must equal), checked by main
    errors: tuple[str, ...]
    needs: tuple[str, ...]


def c_name(text: str) -> str:
    """``text`` as a C identifier."""
    s = re.sub(r"\W", "_", text)
    return s if s and not s[0].isdigit() else f"_{s}"


def _tensor(t: Any, what: str) -> TensorType:
    if not isinstance(t, TensorType) or t.shape is None:
        raise AotError(f"{what} has type {t}: ahead-of-time code takes tensors and scalars of a known rank")
    if t.dtype not in _C_TYPES:
        raise AotError(f"{what} has dtype {t.dtype}, which has no C type here ({', '.join(_C_TYPES)})")
    return t


def interface(g: Graph, name: str, errors: list[str], needs: list[str]) -> Interface:
    """The C signature of ``g``'s function ``name`` (see the module docstring)."""
    args, bindings, checks = [], {}, []
    used = set()
    for k, (a, t) in enumerate(zip(g.args, g.arg_types)):
        t = _tensor(t, f"argument {k}")
        pname = c_name(a.name or f"arg{k}")
        while pname in used:
            pname += "_"
        used.add(pname)
        dims = tuple(f"{pname}_d{i}" for i in range(len(t.shape or ())))
        for dn, d in zip(dims, t.shape or ()):
            if isinstance(d, int):
                checks.append((dn, str(d)))
            elif isinstance(d, sympy.Symbol) and c_name(str(d)) not in bindings:
                bindings[c_name(str(d))] = dn
            elif isinstance(d, sympy.Symbol):
                checks.append((dn, bindings[c_name(str(d))]))
        args.append(Param(pname, _C_TYPES[t.dtype], t, dims))
    results = []
    for r, t in enumerate(g.result_types):
        t = _tensor(t, f"result {r}")
        results.append(Param(f"result{r}", _C_TYPES[t.dtype], t,
                             tuple(_c_dim(d, bindings, r) for d in t.shape or ())))
    return Interface(c_name(name), tuple(args), tuple(results), bindings, tuple(checks), tuple(errors), tuple(needs))


def _c_dim(d: Any, bindings: dict[str, str], r: int) -> str:
    """A result dim as a C expression of the argument dims (sums and products only)."""
    if isinstance(d, int):
        return str(d)
    expr = sympy.sympify(d)
    if not expr.is_polynomial() or any(not a.is_Integer and not a.is_Symbol for a in expr.atoms()):
        raise AotError(f"result {r} has the dim {d}, which ahead-of-time code cannot size (sums and products "
                       "of the argument dims only)")
    missing = sorted(str(s) for s in expr.free_symbols if c_name(str(s)) not in bindings)
    if missing:
        what = "which" if expr.is_Symbol else f"whose {', '.join(missing)}"
        raise AotError(f"result {r} has the dim {d}, {what} no argument's dims give (a size that depends on the "
                       "data): ahead-of-time code needs results the caller can allocate")
    named = expr.subs({s: sympy.Symbol(bindings[c_name(str(s))]) for s in expr.free_symbols})
    return f"(int64_t)({sympy.ccode(named)})"


def module_text(g: Graph, name: str, target: str | None = None) -> tuple[str, Interface]:
    """The LLVM IR of ``g`` for ahead-of-time use: its entry function internal, a public
    ``name`` that returns a status always, the runtime's Ctrl-C hooks as stubs.  Shape
    inference runs first (on a copy), so that a buffer sized by an argument's dim
    (``np.zeros(x.shape[0])``) has that dim and a result the caller can allocate."""
    g, _ = g.clone()
    infer_shapes(g)
    try:
        me = emit_module(g, little_endian=little_endian(target))
    except (Unsupported, NotImplementedError) as e:  # MissingLoweringError is one
        raise AotError(f"the llvm backend cannot compile all of @{g.name} natively ({e}); ahead-of-time code "
                       "needs every op lowered") from None
    m = me.module
    fn, fallible = me.functions[g]
    fn.linkage = "internal"
    for hook in (TICK, LEAVE):  # polls call them: no Ctrl-C handling outside Python
        f = m.globals.get(hook)
        if isinstance(f, ir.Function) and f.is_declaration:
            f.linkage = "internal"
            b = ir.IRBuilder(f.append_basic_block())
            b.ret(I32(0)) if hook == TICK else b.ret_void()
    armed = m.globals.get(ARMED)
    if isinstance(armed, ir.GlobalVariable):
        armed.initializer = I32(0)
        armed.linkage = "internal"
    cname = c_name(name)
    if cname == ENTRY or cname in m.globals:
        raise AotError(f"the name {cname!r} is taken inside the module: choose another with --name")
    wrapper = ir.Function(m, ir.FunctionType(I32, fn.function_type.args), cname)
    b = ir.IRBuilder(wrapper.append_basic_block())
    status = b.call(fn, wrapper.args)
    b.ret(status if fallible else I32(0))
    # every other declaration is the C library's, libm's or an LLVM intrinsic
    needs = sorted(f.name for f in m.functions if f.is_declaration and f.name.endswith("gemm_"))
    errors = [f"{node_where(f.node)}: {f.exc}: {f.msg}" if f.node is not None else f.msg for f in me.errors]
    return str(m), interface(g, name, errors, needs)


def header(itf: Interface, g: Graph) -> str:
    """The C header of ``itf``."""
    guard = f"NEXUS_{itf.name.upper()}_H"
    params = [f"{'const ' if a.dims else ''}{a.ctype} {'*' if a.dims else ''}{a.name}"
              + "".join(f", int64_t {d}" for d in a.dims) for a in itf.args]
    params += [f"{r.ctype} *{r.name}" for r in itf.results]
    doc = [f"/* {itf.name}: graph @{g.name}, compiled ahead of time by Nexus (nexus compile --emit).",
           " *"]
    for a in itf.args:
        doc.append(f" * {a.name}: {a.t}" + (f" (dims {', '.join(a.dims)})" if a.dims else ""))
    for r in itf.results:
        size = " * ".join(r.dims) if r.dims else "1"
        doc.append(f" * {r.name}: {r.t}, the caller allocates {size} element(s)")
    if itf.checks or len(itf.bindings) < sum(len(a.dims) for a in itf.args):
        doc.append(" * Dims the type names alike must be equal, fixed dims as written: the function does not check.")
    if itf.needs:
        doc.append(f" * Link with what provides: {', '.join(itf.needs)}.")
    doc += [" * Returns 0, or a status whose message NAME_error gives. */".replace("NAME", itf.name)]
    cases = [f"    case {i + 1}: return {_c_string(msg)};" for i, msg in enumerate(itf.errors)]
    return "\n".join([
        f"#ifndef {guard}", f"#define {guard}", "#include <stdbool.h>", "#include <stdint.h>",
        "#ifdef __cplusplus", 'extern "C" {', "#endif", "", *doc,
        f"int32_t {itf.name}({', '.join(params) or 'void'});", "",
        f"static inline const char *{itf.name}_error(int32_t status) {{",
        "  switch (status) {", '    case 0: return "ok";', *cases,
        '    default: return "an unknown status";', "  }", "}",
        "#ifdef __cplusplus", "}", "#endif", f"#endif  /* {guard} */", ""])


def _c_string(s: str) -> str:
    out = ['"']
    for ch in s:
        o = ord(ch)
        out.append("\\\\" if ch == "\\" else '\\"' if ch == '"' else ch if 32 <= o < 127 else
                   "".join(f"\\{b:03o}" for b in ch.encode()))
    return "".join(out) + '"'


_MAIN = r"""
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A value given as name=value: numbers (or true/false/inf/nan) in nested lists, read into
   doubles and integers with its shape; at most MAX_RANK nested lists. */
#define MAX_RANK 8
typedef struct { int rank; int64_t dims[MAX_RANK]; int64_t n, cap; double *f; long long *i; int *is_int; } value_t;

static void fail_arg(const char *name, const char *why) {
  fprintf(stderr, "error: argument %s: %s\n", name, why);
  exit(2);
}

static void push(value_t *v, double f, long long i, int is_int) {
  if (v->n == v->cap) {
    v->cap = v->cap ? 2 * v->cap : 16;
    v->f = realloc(v->f, v->cap * sizeof *v->f);
    v->i = realloc(v->i, v->cap * sizeof *v->i);
    v->is_int = realloc(v->is_int, v->cap * sizeof *v->is_int);
    if (!v->f || !v->i || !v->is_int) { fprintf(stderr, "error: out of memory\n"); exit(2); }
  }
  v->f[v->n] = f; v->i[v->n] = i; v->is_int[v->n] = is_int; v->n++;
}

static const char *parse_number(const char *s, value_t *v, const char *name) {
  while (*s == ' ') s++;
  if (!strncmp(s, "true", 4)) { push(v, 1, 1, 1); return s + 4; }
  if (!strncmp(s, "false", 5)) { push(v, 0, 0, 1); return s + 5; }
  char *end;
  errno = 0;
  long long i = strtoll(s, &end, 10);
  if (end != s && *end != '.' && *end != 'e' && *end != 'E' && errno == 0) { push(v, (double)i, i, 1); return end; }
  double f = strtod(s, &end);
  if (end == s) fail_arg(name, "not a number, true/false or a list");
  push(v, f, 0, 0);
  return end;
}

/* One list (or number) at depth d; sets or checks dims[d]. */
static const char *parse_item(const char *s, value_t *v, int d, const char *name) {
  while (*s == ' ') s++;
  if (*s != '[') {
    if (v->rank >= 0 && d != v->rank) fail_arg(name, "the lists are not rectangular");
    v->rank = d;
    return parse_number(s, v, name);
  }
  if (d >= MAX_RANK) fail_arg(name, "nested too deep");
  s++;
  int64_t count = 0;
  while (*s == ' ') s++;
  if (*s == ']') {
    s++;
    if (v->rank >= 0 && d + 1 != v->rank) fail_arg(name, "the lists are not rectangular");
    v->rank = d + 1;
  } else {
    for (;;) {
      s = parse_item(s, v, d + 1, name);
      count++;
      while (*s == ' ') s++;
      if (*s == ',') { s++; continue; }
      if (*s == ']') { s++; break; }
      fail_arg(name, "expected ',' or ']'");
    }
  }
  if (v->dims[d] < 0) v->dims[d] = count;
  else if (v->dims[d] != count) fail_arg(name, "the lists are not rectangular");
  return s;
}

static value_t parse_value(const char *text, const char *name) {
  value_t v = {-1, {-1, -1, -1, -1, -1, -1, -1, -1}, 0, 0, NULL, NULL, NULL};
  const char *end = parse_item(text, &v, 0, name);
  while (*end == ' ') end++;
  if (*end) fail_arg(name, "text after the value");
  return v;
}

static void check_rank(const value_t *v, int rank, const char *name) {
  if (v->rank != rank) {
    char why[64];
    snprintf(why, sizeof why, "has rank %d, the graph takes rank %d", v->rank, rank);
    fail_arg(name, why);
  }
}

/* The k-th element as the argument's C type: integers must be exact, bools 0/1. */
static long long int_at(const value_t *v, int64_t k, const char *name, long long lo, unsigned long long hi) {
  if (!v->is_int[k]) fail_arg(name, "a float where the graph takes integers");
  long long x = v->i[k];
  if (x < lo || (x > 0 && (unsigned long long)x > hi)) fail_arg(name, "a value out of its dtype's range");
  return x;
}

static void put_float(double x, int digits) {
  if (isnan(x)) { fputs("nan", stdout); return; }
  if (isinf(x)) { fputs(x < 0 ? "-inf" : "inf", stdout); return; }
  char buf[48];
  for (int p = 1; p <= digits; p++) {  /* the shortest text that reads back as x */
    snprintf(buf, sizeof buf, "%.*g", p, x);
    if ((digits == 9 ? (double)strtof(buf, NULL) : strtod(buf, NULL)) == x) break;
  }
  if (!strpbrk(buf, ".en")) strcat(buf, ".0");
  fputs(buf, stdout);
}

static const char *lookup(int argc, char **argv, const char *name, int index) {
  size_t len = strlen(name);
  const char *found = NULL;
  char pos[24];
  snprintf(pos, sizeof pos, "%d", index);
  size_t plen = strlen(pos);
  for (int a = 1; a < argc; a++) {
    if ((!strncmp(argv[a], name, len) && argv[a][len] == '=') || (!strncmp(argv[a], pos, plen) && argv[a][plen] == '='))
      found = strchr(argv[a], '=') + 1;
  }
  if (!found) fail_arg(name, "not given (name=value)");
  return found;
}
"""

_LIMITS = {"bool": ("0", "1"), "i8": ("INT8_MIN", "INT8_MAX"), "i16": ("INT16_MIN", "INT16_MAX"),
           "i32": ("INT32_MIN", "INT32_MAX"), "i64": ("INT64_MIN", "INT64_MAX"), "u8": ("0", "UINT8_MAX"),
           "u16": ("0", "UINT16_MAX"), "u32": ("0", "UINT32_MAX"), "u64": ("0", "INT64_MAX")}


def main_source(itf: Interface, header_text: str) -> str:
    """A C program that calls ``itf``'s function with its arguments from the command line
    and prints its results as ``nexus run`` does."""
    lines = [header_text, _MAIN, "int main(int argc, char **argv) {"]
    for k, a in enumerate(itf.args):
        dt = a.t.dtype
        lines.append(f'  value_t v{k} = parse_value(lookup(argc, argv, "{a.name}", {k}), "{a.name}");')
        lines.append(f'  check_rank(&v{k}, {len(a.dims)}, "{a.name}");')
        for i, dn in enumerate(a.dims):
            lines.append(f"  int64_t {dn} = v{k}.rank > {i} ? v{k}.dims[{i}] : 0;")
        lines.append(f"  {a.ctype} *p{k} = malloc((v{k}.n ? v{k}.n : 1) * sizeof *p{k});")
        lines.append(f"  for (int64_t e = 0; e < v{k}.n; e++) p{k}[e] = "
                     + (f"({a.ctype})v{k}.f[e];" if dt.startswith("f") else
                        f'({a.ctype})int_at(&v{k}, e, "{a.name}", {_LIMITS[dt][0]}, {_LIMITS[dt][1]});'))
    for dn, other in itf.checks:
        lines.append(f'  if ({dn} != {other}) {{ fprintf(stderr, "error: dim {dn} is %lld, the graph needs it equal '
                     f'to {other} (%lld)\\n", (long long){dn}, (long long)({other})); return 2; }}')
    for r, res in enumerate(itf.results):
        size = " * ".join(res.dims) if res.dims else "1"
        lines.append(f"  int64_t n{r} = {size};")
        lines.append(f"  {res.ctype} *{res.name} = malloc((n{r} ? n{r} : 1) * sizeof *{res.name});")
    call = [f"p{k}" + "".join(f", {d}" for d in a.dims) if a.dims else f"p{k}[0]" for k, a in enumerate(itf.args)]
    call += [r.name for r in itf.results]
    lines += [f"  int32_t status = {itf.name}({', '.join(call)});",
              f'  if (status) {{ fprintf(stderr, "error: %s\\n", {itf.name}_error(status)); return 1; }}']
    for r, res in enumerate(itf.results):
        lines.append(f'  fputs("result {r}: {res.t} = ", stdout);')
        lines += _print_result(r, res)
        lines.append('  fputs("\\n", stdout);')
    lines += ["  return 0;", "}", ""]
    return "\n".join(lines)


def _print_result(r: int, res: Param) -> list[str]:
    dt = res.t.dtype
    put = (f"put_float({res.name}[e], {9 if dt == 'f32' else 17});" if dt.startswith("f") else
           f'fputs({res.name}[e] ? "True" : "False", stdout);' if dt == "bool" else
           f'printf("%llu", (unsigned long long){res.name}[e]);' if dt.startswith("u") else
           f'printf("%lld", (long long){res.name}[e]);')
    if not res.dims:
        return [f"  {{ int64_t e = 0; {put} }}"]
    rank = len(res.dims)
    dims = ", ".join(res.dims)
    return [f"  {{ int64_t d[{rank}] = {{{dims}}}, idx[{rank}] = {{0}}; int k;",
            f"    if (n{r} == 0) fputs(\"[]\", stdout);",
            f"    for (int64_t e = 0; e < n{r}; e++) {{",
            f"      for (k = {rank} - 1; k >= 0 && idx[k] == 0; k--) continue;",
            "      if (e) fputs(\", \", stdout);",
            f"      for (int j = k + 1; j < {rank}; j++) fputs(\"[\", stdout);",
            f"      {put}",
            f"      for (k = {rank} - 1; k >= 0; k--) {{",
            "        if (++idx[k] < d[k]) break;",
            "        idx[k] = 0; fputs(\"]\", stdout); }",
            "    }", "  }"]


def default_cc(triple: str | None) -> str:
    """The C compiler for ``triple``: ``cc`` for the host, ``ARCH-linux-gnu-gcc`` (Debian's
    cross compilers) for another Linux target."""
    if triple is None or triple in ("host", "native"):
        return "cc"
    full = TRIPLES.get(triple, triple)
    parts = full.split("-")
    if len(parts) == 4 and parts[1] in ("unknown", "pc"):
        parts = [parts[0], parts[2], parts[3]]
    return "-".join(parts) + "-gcc"


def build(g: Graph, emit: str, out: str, *, target: str | None = None, name: str | None = None,
          cc: str | None = None, opt_level: int | None = None) -> list[str]:
    """Write ``out`` (and ``out.h`` for obj and shared), optimised at ``opt_level`` (None:
    chosen by the module's size); the paths written."""
    if emit not in EMITS:
        raise AotError(f"--emit is one of {', '.join(EMITS)} for files, not {emit!r}")
    text, itf = module_text(g, name or g.name, target)
    obj = object_code(text, target, opt_level)
    hdr = header(itf, g)
    h = os.path.splitext(out)[0] + ".h"
    if emit == "obj":
        _write(out, obj)
        _write(h, hdr.encode())
        return [out, h]
    compiler = cc or default_cc(target)
    if shutil.which(compiler) is None:
        hint = "" if target is None else f" (Debian: apt install gcc-{default_cc(target)[:-4]})"
        raise AotError(f"no C compiler {compiler!r} on PATH to link for {target or 'the host'}{hint}; --cc names one")
    with tempfile.TemporaryDirectory(prefix="nexus-aot-") as tmp:
        o = os.path.join(tmp, f"{itf.name}.o")
        _write(o, obj)
        if emit == "shared":
            cmd = [compiler, "-shared", "-o", out, o, "-lm"]
        else:
            src = os.path.join(tmp, "main.c")
            _write(src, main_source(itf, hdr).encode())
            cmd = [compiler, "-O1", "-o", out, src, o, "-lm"]
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode != 0:
            last = done.stderr.strip().splitlines()[-1] if done.stderr.strip() else f"exit {done.returncode}"
            raise AotError(f"{compiler} failed: {last}")
    if emit == "shared":
        _write(h, hdr.encode())
        return [out, h]
    return [out]


def _write(path: str, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)
