"""``nexus convert``: ONNX <-> Nexus (``model.onnx -o model.nx`` imports, ``model.nx -o
model.onnx`` exports); the direction follows the file extensions.  A TensorFlow GraphDef
(``graph.pb`` / ``graph.pbtxt``) imports to ``.nx``, its tensors named by ``--inputs`` and
``--outputs``."""

from __future__ import annotations

import argparse
from typing import Any

from nexus.cli.files import FILE_HELP, load_graph, writing
from nexus.ir.extras import needing
from nexus.ir.graph import Graph


class ConvertError(ValueError):
    """A conversion the command cannot do; the message says why."""


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add the ``convert`` subcommand to the ``nexus`` command's subparsers."""
    p: argparse.ArgumentParser = subparsers.add_parser(
        "convert", help="convert between ONNX (.onnx) and Nexus (.nx) files",
        description="Import an ONNX model as a Nexus graph, or export a Nexus graph as ONNX (checked with "
                    "onnx.checker); the direction follows the extensions.  Loading never executes code: "
                    "external data is read only from inside the model's directory.",
        epilog="examples:\n  nexus convert model.onnx -o model.nx\n  nexus convert model.nx -o model.onnx",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("file", metavar="FILE",
                   help=f"model.onnx, model.pt2, graph.pb or graph.pbtxt to import; to export to ONNX: {FILE_HELP}")
    p.add_argument("-o", "--output", metavar="OUT", required=True, help="model.nx or model.onnx")
    _add_tf_options(p)
    p.set_defaults(func=cmd_convert)
    return p


def cmd_convert(args: argparse.Namespace) -> int:
    src, dst = str(args.file), str(args.output)
    if src.endswith(TF_SUFFIXES):
        return _convert_tf(args, src, dst)
    if src.endswith(".pt2"):
        return _convert_pt2(src, dst)
    if src.endswith(".onnx") and not dst.endswith(".onnx"):
        with needing("reading .onnx files"):
            from nexus.frontend.onnx.importer import from_onnx

            g = from_onnx(src)
        _save(g, dst)
        return 0
    if dst.endswith(".onnx") and not src.endswith(".onnx"):
        from nexus.backends.base import MissingLoweringError

        g = load_graph(src)
        with needing("writing .onnx files"):
            from nexus.backends.onnx.export import to_onnx

            try:
                data = to_onnx(g).SerializeToString()
            except MissingLoweringError as e:
                raise ConvertError(str(e)) from None
        with writing(dst), open(dst, "wb") as f:
            f.write(data)
        return 0
    raise ConvertError(f"cannot tell the direction from {src!r} -> {dst!r}: one side must end in .onnx")


def _save(g: Graph, dst: str) -> None:
    from nexus.io import save

    with writing(dst):
        save(g, dst)


# --- TensorFlow GraphDef (.pb / .pbtxt) -> .nx ------------------------------------------------
TF_SUFFIXES = (".pb", ".pbtxt")


def _add_tf_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--inputs", metavar="NAMES", default=None,
                   help="TensorFlow GraphDef only: the input tensors, comma-separated (x:0,h:0); "
                        "default: the Placeholders in GraphDef order")
    p.add_argument("--outputs", metavar="NAMES", default=None,
                   help="TensorFlow GraphDef only: the output tensors, comma-separated; "
                        "default: output 0 of every node nothing consumes")
    p.epilog = (p.epilog or "") + "\n  nexus convert graph.pb -o g.nx --inputs input:0 --outputs output:0"


def _convert_tf(args: argparse.Namespace, src: str, dst: str) -> int:
    """Import a TensorFlow GraphDef (binary .pb or text .pbtxt) and save it as .nx."""
    from nexus.frontend.tf.importer import from_tf

    if dst.endswith((".onnx", *TF_SUFFIXES)):
        raise ConvertError(f"a TensorFlow GraphDef converts to a Nexus graph (.nx), not to {dst!r}")

    def names(text: str | None) -> list[str] | None:
        return None if text is None else [s.strip() for s in text.split(",") if s.strip()]

    _save(from_tf(src, names(args.inputs), names(args.outputs)), dst)
    return 0


def _convert_pt2(src: str, dst: str) -> int:
    """A ``torch.export.save`` file -> a Nexus graph (parameters become named constants)."""
    if dst.endswith((".onnx", ".pt2")):
        raise ConvertError(f"{src!r} -> {dst!r}: a .pt2 file converts to a Nexus file (.nx)")
    with needing("reading .pt2 files"):
        from nexus.frontend.torch.pt2 import from_pt2

        g = from_pt2(src).graph
    _save(g, dst)
    return 0
