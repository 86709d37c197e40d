"""The ``nexus`` command: show, verify, draw, run (and optimise) graphs saved as text.

Every subcommand registers itself with ``parser.set_defaults(func=handler)``; a handler
takes the parsed arguments and returns the exit status.  Errors users meet (a missing
file, malformed text, an invalid graph, a failing run, a full disk, a missing optional
extra) print one message to stderr and exit with status 1, never a traceback.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import Any

import numpy as np

from nexus import __version__
from nexus.cli.files import FILE_HELP, CliError, load_graph
from nexus.cli.values import InputError, parse_inputs
from nexus.ir.extras import MissingExtra, missing_module
from nexus.ir.parser import ParseError
from nexus.ir.printer import print_graph
from nexus.ir.tensorio import LoadError
from nexus.ir.verify import VerifyError, verify


def _formatter(prog: str) -> argparse.HelpFormatter:
    return argparse.RawDescriptionHelpFormatter(prog, max_help_position=32)


# --- show ----------------------------------------------------------------------------------
def cmd_show(args: argparse.Namespace) -> int:
    g = load_graph(args.file)
    if args.types:
        from nexus.passes.shapes import infer_shapes

        infer_shapes(g)  # every value's type, symbolic dims solved across the whole CFG
        arg_text = ", ".join(f"%{a.name or i}: {t}" for i, (a, t) in enumerate(zip(g.args, g.arg_types)))
        res_text = ", ".join(str(t) for t in g.result_types)
        print(f"# @{g.name}({arg_text}) -> ({res_text})")
        print(f"# {len(g.blocks)} blocks, {g.num_nodes()} nodes")
    print(print_graph(g, locs=not args.no_locs), end="")
    return 0


# --- verify --------------------------------------------------------------------------------
def cmd_verify(args: argparse.Namespace) -> int:
    g = load_graph(args.file)
    verify(g)
    print(f"ok: graph @{g.name} is valid ({len(g.blocks)} blocks, {g.num_nodes()} nodes)")
    return 0


# --- run -----------------------------------------------------------------------------------
def cmd_run(args: argparse.Namespace) -> int:
    from nexus.backends.python import run

    g = load_graph(args.file)
    verify(g)
    values = parse_inputs(g, args.input or [])
    result = run(g, *values, max_iterations=args.max_iterations)
    results = result if isinstance(result, tuple) else (result,)
    for i, (value, t) in enumerate(zip(results, g.result_types)):
        print(f"result {i}: {t} = {format_value(value)}")
    return 0


def format_value(value: Any) -> str:
    arr = np.asarray(value)
    if arr.ndim == 0:
        return str(arr[()])
    return np.array2string(arr, separator=", ", threshold=200)


def version_text() -> str:
    """What ``nexus --version`` prints: the version of the package that is imported (the one
    place it is set is ``nexus.__version__``; the distribution's metadata is read from it)."""
    return f"nexus {__version__} (distribution nexus-ir, Python {sys.version.split()[0]})"


# --- the parser ----------------------------------------------------------------------------
# Lines that run as written, in order, in an empty folder (tests/test_cli_main.py runs them).
EPILOG = """\
examples:
  nexus show seed:skip5_loop                 print a built-in seed graph
  nexus run example:seed004 --input input=1  run a pass example with the reference interpreter
  nexus opt example:seed004 -o small.nx      optimise it and save it as text
  nexus verify small.nx                      check every invariant of the IR
  nexus viz small.nx -o small.svg            draw it (needs Graphviz's dot)
  nexus viz seed:skip5_loop --serve --run    explore a graph in a browser, with the path of a run
FILE is a saved graph, seed:NAME or example:NAME in every command.
run 'nexus COMMAND --help' for each command's options."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="nexus", formatter_class=_formatter,
        description="Nexus: one graph IR for deep-learning programs.  Work with graphs saved as text.",
        epilog=EPILOG)
    parser.add_argument("--version", action="version", version=version_text(),
                        help="print the version of Nexus (distribution nexus-ir) and exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    p = sub.add_parser("show", help="print a graph's text form", formatter_class=_formatter,
                       description="Print the canonical text form of a graph.",
                       epilog="examples:\n  nexus show example:seed004\n  nexus show --types seed:ifelse")
    p.add_argument("file", metavar="FILE", help=FILE_HELP)
    p.add_argument("--types", action="store_true",
                   help="infer every value's type and shape first (symbolic dims included), "
                        "and print the signature")
    p.add_argument("--no-locs", action="store_true", help="leave out source locations")
    p.set_defaults(func=cmd_show)

    p = sub.add_parser("verify", help="check a graph's invariants", formatter_class=_formatter,
                       description="Check structure, SSA dominance and every op's type rule.\n"
                                   "Exit status 0 when valid; otherwise each problem is printed and the status is 1.",
                       epilog="example:\n  nexus verify example:seed004\n"
                              "  ok: graph @seed004 is valid (2 blocks, 10 nodes)")
    p.add_argument("file", metavar="FILE", help=FILE_HELP)
    p.set_defaults(func=cmd_verify)

    from nexus.cli import viz

    viz.add_parser(sub)

    p = sub.add_parser("run", help="run a graph with the reference interpreter", formatter_class=_formatter,
                       description="Run a graph.  Each --input gives one argument by name (or position),\n"
                                   "as a number or nested list in JSON syntax (also inf, -inf, nan, true,\n"
                                   "false); it takes the argument's dtype.  Nothing is evaluated as Python.",
                       epilog="examples:\n"
                              "  nexus run seed:skip5_loop\n"
                              "  result 0: i32 = 31\n"
                              "  nexus run example:seed004 --input input=1\n"
                              "  result 0: i32 = 104\n"
                              "  nexus run model.nx --input x=[[1,2],[3,4]] --input n=3")
    p.add_argument("file", metavar="FILE", help=FILE_HELP)
    p.add_argument("--input", "-i", action="append", metavar="NAME=VALUE", help="an argument value (repeatable)")
    p.add_argument("--max-iterations", type=int, default=10_000_000, metavar="N",
                   help="stop after entering N blocks (guards against endless loops; default %(default)s)")
    p.set_defaults(func=cmd_run)

    _add_opt(sub)
    from nexus.cli import convert

    convert.add_parser(sub)
    from nexus.cli import compile as compile_cmd

    compile_cmd.add_parser(sub)
    return parser


def _add_opt(sub: Any) -> None:
    # `nexus opt` lives with the passes; the CLI must work before (and without) it.
    try:
        from nexus.cli import opt
    except ImportError as e:
        reason = str(e)
        p = sub.add_parser("opt", help="optimise a graph (unavailable)", formatter_class=_formatter,
                           description=f"The optimiser is not available: {reason}")
        p.add_argument("rest", nargs=argparse.REMAINDER)

        def unavailable(args: argparse.Namespace) -> int:
            raise CliError(f"nexus opt is not available: {reason}")

        p.set_defaults(func=unavailable)
        return
    opt.add_parser(sub)


ERRORS = (CliError, ParseError, VerifyError, LoadError, InputError, MissingExtra)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``nexus`` console script; returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    file = getattr(args, "file", None)
    func = getattr(args, "func", None)
    if func is None:  # a subcommand that did not set_defaults(func=...)
        parser.print_help(sys.stderr)
        return 2
    stdout = sys.stdout
    sys.stdout = _Stdout(stdout)  # type: ignore[assignment]
    try:
        status = int(func(args))
        sys.stdout.flush()  # a closed pipe or a full disk shows here, inside the handlers below
        return status
    except BrokenPipeError:
        return _closed_pipe()
    except KeyboardInterrupt:
        print("nexus: interrupted", file=sys.stderr)
        return 130  # 128 + SIGINT, as shells report it
    except ERRORS as e:
        return _fail(e, file)
    except OSError as e:  # one that no handler named: its file (if it has one) and the reason
        why = e.strerror or str(e) or type(e).__name__
        return _fail(CliError(why if e.filename is None else f"{e.filename}: {why}"), file)
    except ImportError as e:  # an optional module no handler expected: name its extra all the same
        module = missing_module(e)
        if module is None:
            raise
        return _fail(MissingExtra(f"nexus {args.command}", module, e), file)
    except Exception as e:  # noqa: BLE001  (runtime and type errors name their node; no traceback)
        from nexus.backends.python import NexusRuntimeError
        from nexus.ir.opdef import OpTypeError

        if isinstance(e, (NexusRuntimeError, OpTypeError, ValueError, RecursionError, MemoryError)):
            return _fail(e, file)
        raise
    finally:
        sys.stdout = stdout


class _Stdout:
    """Stands for ``sys.stdout`` while a subcommand runs, so that a write that fails (a full
    disk) says it was standard output: the OSError of a write has no file name."""

    def __init__(self, stream: Any):
        self._stream = stream

    def write(self, text: str) -> int:
        return int(self._guard(self._stream.write, text))

    def flush(self) -> None:
        self._guard(self._stream.flush)

    def _guard(self, method: Any, *args: Any) -> Any:
        try:
            return method(*args)
        except BrokenPipeError:
            raise
        except OSError as e:
            _closed_pipe()  # or Python reports the unwritten output again at exit
            raise CliError(f"cannot write standard output: {e.strerror or e}") from None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def _closed_pipe() -> int:
    """The reader of our output went away (``nexus show model.nx | head -1``): stop
    quietly.  Python would report the pipe again when it flushes stdout at exit, so
    stdout is pointed at /dev/null first."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass
    return 0


def _fail(e: BaseException, file: str | None) -> int:
    kind = {VerifyError: "invalid graph", ParseError: "parse error"}.get(type(e), "error")
    text = str(e) or type(e).__name__
    if isinstance(e, ParseError) and file and e.file is None:  # a ParseError from nx.load names its file
        text = f"{file}: {text}"
    print(f"nexus: {kind}: {text}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
