"""``nexus compile FILE --backend NAME``: compile a saved graph on a backend and print what
it generated.

- ``--backend xla --emit stablehlo``: the StableHLO text of tf2xla's three steps; symbolic
  dims are specialised (``--dim T=10``, default 1) or whole arguments given (``--input``);
- ``--backend llvm --emit llvm-ir|llvm-ir-raw|asm [--target TRIPLE]``: LLVM IR or assembly
  for the host or another target (the options come from ``nexus.backends.llvm.cli``,
  imported only when that backend is chosen);
- ``--backend llvm --emit obj|shared|exe [--target TRIPLE] -o OUT``: files that run without
  Python: an object file or shared library with its C header, or a program that takes
  ``name=value`` arguments (``nexus.backends.llvm.aot`` documents the calling convention);
- ``--backend python``: the generated Python."""

from __future__ import annotations

import argparse
import sys
from typing import Any

import numpy as np
import sympy

from nexus.cli.files import FILE_HELP, load_graph
from nexus.ir.extras import needing
from nexus.ir.graph import Graph
from nexus.ir.types import TensorType, numpy_dtype

EMITS = {"xla": ("stablehlo",), "llvm": ("llvm-ir", "llvm-ir-raw", "asm", "obj", "shared", "exe"),
         "python": ("python",)}
FILE_EMITS = ("obj", "shared", "exe")  # written to -o, not printed

EPILOG = """\
examples:
  nexus compile seed:skip5_loop --backend xla --emit stablehlo
  nexus compile model.nx --backend xla --dim T=10 --dim D=4
  nexus compile example:seed004 --backend llvm --emit asm
      the host's code for ((input - 2) + 5) + 100: a single add of 103
  nexus compile example:seed004 --backend llvm --emit asm --target aarch64
  nexus compile example:seed004 --backend llvm --emit exe -o seed004
      a program: ./seed004 input=10 prints result 0: i32 = 113
  nexus compile example:seed004 --backend llvm --emit obj -o seed004.o
      an object file and seed004.h, to call from C"""


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add the ``compile`` subcommand to the ``nexus`` command's subparsers."""
    p: argparse.ArgumentParser = subparsers.add_parser(
        "compile", help="compile a graph on a backend and print the generated code",
        formatter_class=argparse.RawDescriptionHelpFormatter, description=__doc__, epilog=EPILOG)
    p.add_argument("file", metavar="FILE", help=FILE_HELP)
    p.add_argument("--backend", default="xla", choices=sorted(EMITS), help="the backend (default %(default)s)")
    p.add_argument("--emit", default=None,
                   help="xla: stablehlo; llvm: llvm-ir (after O3, default), llvm-ir-raw (as emitted), asm, "
                        "or files with -o: obj (and a C header), shared (and a C header), exe; python: python")
    p.add_argument("--target", metavar="TRIPLE", default=None,
                   help="llvm: host (default), x86_64, aarch64, armv7 or any LLVM target triple")
    p.add_argument("-o", "--output", metavar="OUT", default=None, help="llvm obj/shared/exe: the file to write")
    p.add_argument("--name", default=None, help="llvm obj/shared: the C function's name (default: the graph's)")
    p.add_argument("--cc", default=None,
                   help="llvm shared/exe: the C compiler that links (default cc, or ARCH-linux-gnu-gcc for --target)")
    p.add_argument("-O", "--opt-level", type=int, choices=range(4), default=None, metavar="{0,1,2,3}",
                   help="llvm: LLVM's optimisation level (default: 3 for small modules, 2 for large ones)")
    p.add_argument("--dim", action="append", default=[], metavar="SYM=SIZE", help="xla: the size of a symbolic dim")
    p.add_argument("--input", "-i", action="append", metavar="NAME=VALUE", help="xla: an argument value")
    p.set_defaults(func=run_compile)
    return p


def example_args(g: Graph, dims: dict[str, int]) -> list[np.ndarray]:
    """Zeros of each argument's type, symbolic dims sized from ``dims`` (default 1)."""
    out = []
    for t in g.arg_types:
        if not isinstance(t, TensorType) or t.shape is None:
            raise ValueError(f"argument type {t} needs --input")
        shape = []
        for d in t.shape:
            if isinstance(d, int):
                shape.append(d)
            else:
                subs = {s: dims.get(str(s), 1) for s in sympy.sympify(d).free_symbols}
                shape.append(int(sympy.sympify(d).subs(subs)))
        out.append(np.zeros(shape, numpy_dtype(t.dtype)))
    return out


def run_compile(args: argparse.Namespace) -> int:
    from nexus.ir.verify import verify

    emits = EMITS[args.backend]
    if args.emit is not None and args.emit not in emits:
        raise ValueError(f"backend {args.backend!r} emits {', '.join(emits)}, not {args.emit!r}")
    if (args.emit in FILE_EMITS) != (args.output is not None):
        raise ValueError("-o is for --emit obj, shared or exe, and they need it" if args.output is None or
                         args.emit in FILE_EMITS else f"--emit {args.emit or 'the default'} prints: -o is for "
                         "obj, shared or exe")
    g = load_graph(args.file)
    verify(g)
    with needing(f"compiling with the {args.backend} backend"):
        if args.emit in FILE_EMITS:
            from nexus.backends.llvm.aot import build

            for path in build(g, args.emit, args.output, target=args.target, name=args.name, cc=args.cc,
                              opt_level=args.opt_level):
                print(f"wrote {path}")
            return 0
        sys.stdout.write(_generated(g, args))
    return 0


def _generated(g: Graph, args: argparse.Namespace) -> str:
    """The text ``nexus compile`` prints: what the backend generated for ``g``."""
    if args.backend == "llvm":
        from nexus.backends.llvm.cli import emit_text

        return emit_text(g, args.emit or "llvm-ir", args.target, args.opt_level)
    from nexus.backends import compile as compile_on
    from nexus.cli.values import parse_inputs

    exe = compile_on(g, backend=args.backend)
    if args.input:
        values: list[Any] = parse_inputs(g, args.input)
    else:
        dims = {}
        for item in args.dim:
            name, _, size = item.partition("=")
            dims[name.strip()] = int(size)
        values = example_args(g, dims)
    lower = getattr(exe, "lower", None)
    return str(lower(*values) if callable(lower) else exe.source())
