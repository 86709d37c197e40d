"""``nexus compile``: compile a saved graph on a backend and print what it generated
(``--backend xla --emit stablehlo``: the StableHLO text of tf2xla's three steps)."""

from __future__ import annotations

import argparse
from typing import Any

import numpy as np
import sympy

from nexus.ir.graph import Graph
from nexus.ir.types import TensorType, numpy_dtype

EMITS = {"xla": ("stablehlo",), "python": ("python",)}


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add the ``compile`` subcommand to the ``nexus`` command's subparsers."""
    p: argparse.ArgumentParser = subparsers.add_parser(
        "compile", help="compile a graph on a backend and print the generated code",
        description="Compile a graph and print what the backend generated.  Symbolic dims "
                    "are specialised: give their sizes with --dim (default 1), or whole "
                    "arguments with --input.",
        epilog="examples:\n  nexus compile seed:skip5_loop --backend xla --emit stablehlo\n"
               "  nexus compile model.nx --backend xla --dim T=10 --dim D=4",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("file", metavar="FILE", help="a graph saved with nx.save, or seed:NAME")
    p.add_argument("--backend", default="xla", help="the backend (default %(default)s)")
    p.add_argument("--emit", default=None, help="what to print: stablehlo (xla), python (python)")
    p.add_argument("--dim", action="append", default=[], metavar="SYM=SIZE", help="the size of a symbolic dim")
    p.add_argument("--input", "-i", action="append", metavar="NAME=VALUE", help="an argument value")
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
    from nexus.backends import compile as compile_on
    from nexus.cli.main import load_graph
    from nexus.cli.values import parse_inputs
    from nexus.ir.verify import verify

    g = load_graph(args.file)
    verify(g)
    emits = EMITS.get(args.backend, ())
    if args.emit is not None and args.emit not in emits:
        raise ValueError(f"backend {args.backend!r} emits {', '.join(emits) or 'nothing printable'}, not {args.emit!r}")
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
    print(lower(*values) if callable(lower) else exe.source(), end="")
    return 0
