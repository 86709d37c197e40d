"""What ``nexus compile FILE --backend llvm --emit llvm-ir|asm [--target TRIPLE]`` prints.

The ``compile`` subcommand (``nexus/cli/compile.py``) owns parsing and loading; this
module adds the llvm options (:func:`add_llvm_emit`) and produces the text
(:func:`emit_text`), so the CLI needs nothing of LLVM until the backend is asked for."""

from __future__ import annotations

import argparse

from nexus.backends.llvm.backend import asm, llvm_ir
from nexus.backends.llvm.target import TRIPLES
from nexus.ir.graph import Graph

EMITS = ("llvm-ir", "llvm-ir-raw", "asm")


def add_llvm_emit(p: argparse.ArgumentParser) -> None:
    """The llvm backend's options of ``nexus compile``."""
    p.add_argument("--emit", choices=EMITS, default="llvm-ir",
                   help="llvm-ir: after O3; llvm-ir-raw: as emitted; asm: optimised assembly (default llvm-ir)")
    p.add_argument("--target", metavar="TRIPLE", default=None,
                   help=f"host (default), {', '.join(TRIPLES)} or any LLVM target triple")


def emit_text(g: Graph, emit: str, target: str | None = None, opt_level: int | None = None) -> str:
    """LLVM IR (optimised or raw) or assembly of ``g`` for ``target`` (None: the host), at
    ``opt_level`` (None: chosen by the module's size)."""
    if emit == "asm":
        return asm(g, target, opt_level)
    return llvm_ir(g, optimized=emit == "llvm-ir", triple=target, opt_level=opt_level)
