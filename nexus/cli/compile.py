"""``nexus compile FILE --backend NAME``: what a backend generates for a saved graph.

For ``--backend llvm`` it prints LLVM IR or assembly for the host or another target
(``--emit llvm-ir|asm --target aarch64``); the options come from the backend
(``nexus.backends.llvm.cli``), imported only when it is chosen."""

from __future__ import annotations

import argparse
import sys
from typing import Any

EPILOG = """\
examples:
  nexus compile example:seed004 --backend llvm --emit asm
      the host's code for ((input - 2) + 5) + 100: a single add of 103
  nexus compile example:seed004 --backend llvm --emit asm --target aarch64
  nexus compile model.nx --backend llvm --emit llvm-ir"""


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add the ``compile`` subcommand to the ``nexus`` command's subparsers."""
    p: argparse.ArgumentParser = subparsers.add_parser(
        "compile", help="print what a backend generates for a graph (LLVM IR, assembly)",
        formatter_class=argparse.RawDescriptionHelpFormatter, description=__doc__, epilog=EPILOG)
    p.add_argument("file", metavar="FILE", help="a graph saved with nx.save, seed:NAME or example:seed004")
    p.add_argument("--backend", default="llvm", choices=["llvm"], help="the backend (default llvm)")
    p.add_argument("--emit", default="llvm-ir", choices=["llvm-ir", "llvm-ir-raw", "asm"],
                   help="llvm-ir: after O3; llvm-ir-raw: as emitted; asm: optimised assembly")
    p.add_argument("--target", metavar="TRIPLE", default=None,
                   help="host (default), x86_64, aarch64, armv7 or any LLVM target triple")
    p.set_defaults(func=run_compile)
    return p


def run_compile(args: argparse.Namespace) -> int:
    from nexus.backends.llvm.cli import emit_text
    from nexus.cli.opt import _load

    sys.stdout.write(emit_text(_load(args.file), args.emit, args.target))
    return 0
