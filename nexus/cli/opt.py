"""``nexus opt``: run a pass pipeline over a saved graph (like ``mlir-opt`` / ``xdsl-opt``)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from nexus.cli.files import FILE_HELP, load_graph, writing
from nexus.ir.graph import Graph
from nexus.ir.printer import print_graph

DESCRIPTION = """\
Optimise a graph with a pipeline of passes and print (or save) the result.

A pipeline is a comma-separated list of pass names, run in order; options go in
braces, e.g. 'licm{speculate=false}'.  Without -p the default pipeline runs:
  {default}
Passes:
{passes}
The graph dumps of --print-after-all, the --stats table and --loops go to stderr, so
stdout holds only the final graph."""

EPILOG = """\
examples:
  nexus opt model.nx -p constfold,cse,dce -o model.opt.nx
  nexus opt example:seed004 -p constfold,dce --stats
      ((input - 2) + 5) + 100 on int32 becomes a single 'Add %input, 103'
  nexus opt seed:skip5_loop --print-after-all --verify-each
  nexus opt example:rnn --loops -p licm"""


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add the ``opt`` subcommand to the ``nexus`` command's subparsers."""
    from nexus.passes.manager import DEFAULT_PIPELINE, available_passes

    listing = "\n".join(f"  {name:<12} {doc}" for name, doc in available_passes().items())
    p: argparse.ArgumentParser = subparsers.add_parser(
        "opt", help="optimise a graph with a pass pipeline",
        formatter_class=lambda prog: argparse.RawDescriptionHelpFormatter(prog, max_help_position=32),
        description=DESCRIPTION.replace("{default}", DEFAULT_PIPELINE).replace("{passes}", listing),
        epilog=EPILOG)
    p.add_argument("file", metavar="FILE", help=FILE_HELP)
    p.add_argument("-p", "--passes", metavar="PIPELINE", default=None,
                   help="comma-separated pass names (default: the default pipeline)")
    p.add_argument("-o", "--output", metavar="OUT", help="save the result here (default: print it)")
    p.add_argument("--print-after-all", action="store_true", help="print the graph after every pass (stderr)")
    p.add_argument("--verify-each", action="store_true", help="verify the graph after every pass")
    p.add_argument("--stats", action="store_true", help="print what each pass changed (stderr)")
    p.add_argument("--loops", action="store_true", help="print the loop forest and reducibility first (stderr)")
    p.set_defaults(func=run_opt)
    return p


def run_opt(args: argparse.Namespace) -> int:
    from nexus.ir.verify import verify
    from nexus.passes.loops import loop_forest
    from nexus.passes.manager import optimize

    g = load_graph(args.file)
    verify(g)
    if args.loops:
        forest = loop_forest(g)
        print(forest.describe() or "no loops", file=sys.stderr)
        print("reducible" if forest.reducible else "IRREDUCIBLE", file=sys.stderr)

    def dump(name: str, graph: Graph) -> None:
        print(f"// ----- after {name} -----", file=sys.stderr)
        print(print_graph(graph), end="", file=sys.stderr)

    stats: dict[str, dict[str, int]] = {}
    optimize(g, args.passes, verify_each=args.verify_each, stats=stats,
             print_after_all=dump if args.print_after_all else False)
    if not args.verify_each:
        verify(g)
    if args.stats:
        print(format_stats(stats), file=sys.stderr)
    if args.output:
        from nexus.io import save

        with writing(args.output):
            save(g, args.output)
    else:
        print(print_graph(g), end="")
    return 0


def format_stats(stats: dict[str, dict[str, int]]) -> str:
    lines = ["pass          changes"]
    for name, counts in stats.items():
        text = ", ".join(f"{k}={v}" for k, v in counts.items()) or "-"
        lines.append(f"{name:<13} {text}")
    return "\n".join(lines)
