"""``nexus viz``: a picture of a graph (SVG, PNG, PDF, DOT), or the interactive viewer
page (``--html OUT.html``, or ``--serve`` on 127.0.0.1), optionally with the path that
one run of the python backend took (``--run``, ``--input``)."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from nexus.cli.files import FILE_HELP, CliError, load_graph, writing
from nexus.viz.serve import DEFAULT_SECONDS, PageServer, ServeError, make_server, serve

# The backends whose executables say which engine runs each node (``exe.partitions``).
PARTITIONING = ("auto", "onnxruntime")


class VizUsageError(ValueError):
    """Options that do not go together; reported as one line by the ``nexus`` command."""


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add the ``viz`` subcommand to the ``nexus`` command's subparsers."""
    p: argparse.ArgumentParser = subparsers.add_parser(
        "viz", help="draw a graph (SVG, PNG, PDF, DOT) or open it in the interactive viewer",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Draw a graph: blocks are light-blue clusters, dataflow nodes orange,\n"
                    "control nodes red, Phis green; constants are drawn again next to their uses.\n"
                    "The output suffix picks the format; SVG/PNG/PDF and the viewer need\n"
                    "Graphviz's dot program (Debian package graphviz).\n"
                    "--html writes a self-contained page (works offline): collapse blocks, search,\n"
                    "click a node for its attributes, type, shape, device and source line, and with\n"
                    "--run the path one run took, with the times each edge was taken.",
        epilog="examples:\n  nexus viz model.nx -o model.svg\n  nexus viz seed:skip5_loop -o loop.png\n"
               "  nexus viz seed:skip5_loop --html loop.html --run\n"
               "  nexus viz model.onnx --backend auto --html parts.html\n"
               "  nexus viz model.nx --serve --input x=[1,2]")
    p.add_argument("file", metavar="FILE", help=FILE_HELP)
    p.add_argument("-o", "--output", metavar="OUT",
                   help="output file (.svg, .png, .pdf, .dot); default: FILE's stem + .svg")
    p.add_argument("--html", metavar="OUT", help="write the interactive viewer page (one .html file)")
    p.add_argument("--serve", action="store_true",
                   help="serve the viewer page on http://127.0.0.1 (this machine only) and print its URL")
    p.add_argument("--port", type=int, default=0, metavar="N", help="port for --serve (default: a free one)")
    p.add_argument("--serve-for", type=float, default=DEFAULT_SECONDS, metavar="SECONDS",
                   help="stop serving after this long (default %(default)s; Ctrl-C stops earlier)")
    p.add_argument("--run", action="store_true",
                   help="run the graph once (python backend) and show the path it took in the page")
    p.add_argument("--input", "-i", action="append", metavar="NAME=VALUE",
                   help="an argument value for --run (repeatable; implies --run), as for nexus run")
    p.add_argument("--no-types", action="store_true", help="leave the types out of the node labels")
    p.add_argument("--backend", metavar="NAME",
                   help="compile the graph with this backend (auto, onnxruntime) and colour each node by the engine "
                        "its partition runs on; edges between engines (transfers) are drawn thick")
    p.set_defaults(func=cmd_viz)
    return p


def cmd_viz(args: argparse.Namespace) -> int:
    g = load_graph(args.file)
    types = not args.no_types
    viewer = args.html or args.serve
    if (args.run or args.input) and not viewer:
        raise VizUsageError("--run and --input show a run in the viewer: add --html OUT.html or --serve")
    if args.output and viewer:
        raise VizUsageError("give either -o (a picture) or --html/--serve (the viewer), not both")
    if not viewer:
        from nexus.viz import render

        out = args.output or _picture_name(args.file)
        engines = _engines(g, args.backend)
        with _drawing(), writing(out):
            written = render(g, out, types=types, engines=engines)
        print(f"wrote {written}")
        return 0
    folder = os.path.dirname(args.html or "") or "."
    if args.html and not os.path.isdir(folder):  # before the layout, which may take a while
        raise CliError(f"cannot write {args.html}: the directory {folder} does not exist")
    if not 0 <= args.port <= 65535:
        raise VizUsageError(f"--port {args.port}: a port is 0..65535")
    server = _server(args.port) if args.serve else None  # bound before the layout: a busy port shows at once
    try:
        with _drawing():
            text = _page(g, args, types)
        if args.html:
            with writing(args.html), open(args.html, "w", encoding="utf-8") as f:
                f.write(text)
            print(f"wrote {args.html}")
        if server is not None:
            server.set_page(text)
            serve(server, args.serve_for,
                  ready=lambda url: print(f"serving graph @{g.name} at {url} (Ctrl-C stops)", flush=True))
    finally:
        if server is not None:
            server.server_close()  # serve closed it already, unless the page could not be made
    return 0


def _picture_name(file: str) -> str:
    """The default picture of FILE: its stem (a seed's or example's name) + .svg, here."""
    for prefix in ("seed:", "example:"):
        if file.startswith(prefix):
            return file[len(prefix):] + ".svg"
    return os.path.splitext(os.path.basename(file))[0] + ".svg"


@contextmanager
def _drawing() -> Iterator[None]:
    """Graphviz missing, or failing on this graph: one line."""
    from nexus.viz import DrawError, GraphvizMissing

    try:
        yield
    except (GraphvizMissing, DrawError) as e:
        raise CliError(str(e)) from None


def _server(port: int) -> PageServer:
    try:
        return make_server("", port)
    except ServeError as e:
        raise CliError(str(e)) from None


def _page(g: Any, args: argparse.Namespace, types: bool) -> str:
    from nexus.viz.html import page

    path = None
    if args.run or args.input:
        from nexus.cli.values import parse_inputs
        from nexus.ir.verify import verify
        from nexus.viz.runpath import run_path

        verify(g)
        path = run_path(g, parse_inputs(g, args.input or []))
        if path.error:
            print(f"nexus viz: the run stopped ({path.error}); the page shows the path up to there",
                  file=sys.stderr)
    return page(g, path, types=types, engines=_engines(g, args.backend))


def _engines(g: Any, backend: str | None) -> dict[Any, str] | None:
    """The engine of each node of ``g`` when compiled with ``backend`` (its partitions)."""
    if backend is None:
        return None
    if backend not in PARTITIONING:  # before compiling the graph for nothing
        raise VizUsageError(f"--backend {backend}: that backend does not split a graph into partitions "
                            "(use auto or onnxruntime)")
    from nexus.backends.base import compile as compile_graph
    from nexus.ir.extras import needing
    from nexus.ir.verify import verify

    verify(g)
    with needing(f"colouring by the {backend} backend's partitions"):
        exe = compile_graph(g, backend=backend)
    return {n: p.engine for p in exe.partitions for n in p.members}  # type: ignore[attr-defined]
