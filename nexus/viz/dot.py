"""Graphviz pictures of graphs in seed 000's visual language.

Each Block is a light-blue cluster labelled with its name; dataflow nodes are orange
rounded boxes; control nodes (Start, Cond, its Proj exits, Jmp, Return, End) are red;
Phis are green.  Data edges are black, control edges red, ordering edges (deps) dashed,
Phi inputs dashed green and labelled with their predecessor position.  Edges that go
backwards in the printer's block order (loop back edges, Phis reading the latch) do not
constrain the layout, so the picture reads top-down.
"""

from __future__ import annotations

import os
import shutil
import subprocess

import numpy as np

from nexus.ir.analysis import block_order, node_order
from nexus.ir.graph import Graph
from nexus.ir.node import Block, Node
from nexus.ir.printer import _name_graph
from nexus.ir.types import TensorType, shape_str

# Colours, one per kind of node and edge; the tests read them from here.
BLOCK_FILL = "#dbeeff"
BLOCK_BORDER = "#5b8db8"
DATA_FILL = "#ffc078"
DATA_BORDER = "#e8590c"
CONTROL_FILL = "#ff8787"
CONTROL_BORDER = "#c92a2a"
PHI_FILL = "#8ce99a"
PHI_BORDER = "#2b8a3e"
DATA_EDGE = "black"
CONTROL_EDGE = "#c92a2a"
PHI_EDGE = "#2b8a3e"
DEP_EDGE = "#495057"

CONTROL_OPS = frozenset({"Start", "End", "Return", "Jmp", "Cond"})


class GraphvizMissing(RuntimeError):
    """The ``dot`` program is not installed; ``dot_path`` holds the DOT text written instead."""

    def __init__(self, dot_path: str):
        self.dot_path = dot_path
        super().__init__(
            "the Graphviz 'dot' program is not installed, so no picture was drawn "
            f"(install the Debian package 'graphviz': apt-get install graphviz); wrote {dot_path} instead")


def node_kind(n: Node) -> str:
    """'control', 'phi' or 'data': how a node is drawn."""
    if n.op.kind == "phi":
        return "phi"
    if n.op.name in CONTROL_OPS:
        return "control"
    if n.op.name == "Proj" and n.inputs and n.input(0).op.name == "Cond":
        return "control"
    return "data"


_STYLE = {
    "data": f'shape=box, style="rounded,filled", fillcolor="{DATA_FILL}", color="{DATA_BORDER}"',
    "control": f'shape=box, style="filled", fillcolor="{CONTROL_FILL}", color="{CONTROL_BORDER}"',
    "phi": f'shape=box, style="rounded,filled", fillcolor="{PHI_FILL}", color="{PHI_BORDER}"',
}


# Placed nodes (seed 001, section 4.2) are filled by device kind; the label names the device
# (and machine).  Unplaced nodes keep their kind's colour.
DEVICE_FILLS = {"CPU": "#ffe066", "TORCH": "#b197fc", "GPU": "#74c0fc"}
TRANSFER_FILL = "#f783ac"  # Memcpy, Send, Recv: data moving between devices or machines
TRANSFER_OPS = frozenset({"Memcpy", "Send", "Recv"})


def device_style(n: Node) -> tuple[str, str]:
    """(label suffix, extra DOT attributes) for a node's placement; ("", "") unplaced."""
    attrs = n.attrs or {}
    device, machine = attrs.get("device"), attrs.get("machine")
    if not device and not machine and n.op.name not in TRANSFER_OPS:
        return "", ""
    where = "@" + "".join(p for p in (str(machine) if machine else "", str(device) if device else "") if p)
    kind = str(device).lstrip("/").split(":")[0].upper() if device else ""
    fill = TRANSFER_FILL if n.op.name in TRANSFER_OPS else DEVICE_FILLS.get(kind)
    return "\n" + where, f', fillcolor="{fill}"' if fill else ""


def _q(text: str) -> str:
    """A DOT string literal (labels use \\n for line breaks)."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def _label(n: Node, name: str, types: bool) -> str:
    if n.op.name == "Proj" and n.inputs and n.input(0).op.name == "Cond":
        head = "Proj true" if n.attrs.get("num") == 1 else "Proj false"
    elif n.op.name == "Proj" and n.inputs and n.input(0).op.name == "Start":
        head = f"arg {n.attrs.get('num')}"
    else:
        head = n.op.name
    text = f"{head}\n%{name}" if n.op.name != "End" else head
    if n.op.name == "Constant":
        value = n.attrs.get("value")
        if isinstance(value, np.ndarray) and value.size == 1:
            text += f" = {value.reshape(-1)[0]}"
    if types and n.op.name not in ("End", "Jmp", "Return") and node_kind(n) != "control":
        text += f"\n{n.type}"
    return text


def to_dot(g: Graph, *, types: bool = True) -> str:
    """The DOT text of ``g``: one cluster per block, nodes and edges styled by kind."""
    blocks = block_order(g)
    values, labels = _name_graph(g, blocks)
    rank = {b: i for i, b in enumerate(blocks)}
    ids: dict[Node, str] = {}
    lines = [
        f"digraph {_q(g.name)} {{",
        "  compound=true; rankdir=TB; nodesep=0.3; ranksep=0.35;",
        f"  label={_q('graph @' + g.name)}; labelloc=t; fontname=Helvetica;",
        "  node [fontname=Helvetica, fontsize=10, margin=\"0.08,0.03\"];",
        "  edge [fontname=Helvetica, fontsize=9, arrowsize=0.6];",
    ]
    anchors: dict[Block, str] = {}
    for bi, b in enumerate(blocks):
        lines.append(f"  subgraph cluster_{bi} {{")
        lines.append(f'    label={_q("^" + labels[b])}; style="rounded,filled"; '
                     f'fillcolor="{BLOCK_FILL}"; color="{BLOCK_BORDER}"; fontsize=11;')
        members = node_order(b)
        for n in members:
            ids[n] = f"n{len(ids)}"
            suffix, style = device_style(n)
            label = _q(_label(n, values[n], types) + suffix)
            lines.append(f"    {ids[n]} [label={label}, {_STYLE[node_kind(n)]}{style}];")
        lines += _terminator_last(b, members, ids)
        if members:
            anchors[b] = ids[members[0]]
        else:  # an empty block (under construction): keep the cluster visible
            anchors[b] = f"empty{bi}"
            lines.append(f'    empty{bi} [label="(empty)", shape=plaintext];')
        lines.append("  }")

    def back(src: Node, dst_block: Block | None) -> bool:
        sb = src.block
        if sb is None or dst_block is None or sb is dst_block:
            return False
        return rank.get(dst_block, 0) <= rank.get(sb, 0)

    for n in ids:
        for i, v in enumerate(n.inputs):
            if v not in ids:
                continue
            attrs = []
            if n.op.kind == "phi":
                attrs += [f'color="{PHI_EDGE}"', "style=dashed", f'fontcolor="{PHI_EDGE}"', f'label=" {i}"']
                # A Phi's inputs arrive along predecessor edges, often from later blocks.
                attrs.append("constraint=false")
            else:
                control = node_kind(v) == "control" and v.op.name != "Start"
                attrs.append(f'color="{CONTROL_EDGE}"' if control else f'color="{DATA_EDGE}"')
                if types and not control and isinstance(v.type, TensorType) and v.type.shape != ():
                    # Tensor edges carry their shape (symbolic dims included); scalars stay quiet.
                    attrs += [f"label={_q(' ' + shape_str(v.type.shape))}", "fontsize=9"]
                # Only edges inside a block shape the layout; the control edges between
                # blocks place the blocks, so the picture follows the CFG top-down.
                if v.block is not n.block:
                    attrs.append("constraint=false")
            lines.append(f"  {ids[v]} -> {ids[n]} [{', '.join(attrs)}];")
        for v in n.deps:
            if v in ids:
                lines.append(f'  {ids[v]} -> {ids[n]} [style=dashed, color="{DEP_EDGE}", arrowhead=empty];')
    # Control edges into blocks: from the exit (Jmp, Proj of a Cond, Return) to the cluster.
    for bi, b in enumerate(blocks):
        many = b.num_inputs > 1
        for i, p in enumerate(b.inputs):
            if p not in ids:
                continue
            attrs = [f'color="{CONTROL_EDGE}"', "penwidth=1.6", f"lhead=cluster_{bi}"]
            if many:
                attrs += [f'label=" {i}"', f'fontcolor="{CONTROL_EDGE}"']
            if back(p, b):
                attrs.append("constraint=false")
            lines.append(f"  {ids[p]} -> {anchors[b]} [{', '.join(attrs)}];")
    lines.append("}")
    return "\n".join(lines) + "\n"


def _terminator_last(b: Block, members: list[Node], ids: dict[Node, str]) -> list[str]:
    """Invisible edges that put the terminator below every other node of its block."""
    term = b.terminator
    if term is None or term not in ids:
        return []
    out = []
    for n in members:
        if n is term or node_kind(n) == "control" and n.op.name != "Start":
            continue
        if not any(u.block is b and u is not n for u in n.users):
            out.append(f"    {ids[n]} -> {ids[term]} [style=invis];")
    return out


def dot_program() -> str | None:
    """The path of Graphviz's ``dot`` program, or None when it is not installed."""
    return shutil.which("dot")


MAX_DRAWN_NODES = 5_000
"""Nodes that ``render`` hands to Graphviz: its layout grows faster than linearly and takes
minutes on graphs much larger than this, so larger ones are refused (the .dot text of any
size is written)."""
DOT_TIMEOUT = 120  # seconds


class DrawError(RuntimeError):
    """A graph that cannot be drawn where asked: the reason in one line."""


def render(g: Graph, path: str | os.PathLike[str], *, types: bool = True) -> str:
    """Draw ``g`` to ``path``; the suffix picks the format (.svg, .png, .pdf, or .dot for
    the DOT text).  Returns the path written.  Without Graphviz the DOT text is written
    next to it (suffix .dot) and :class:`GraphvizMissing` is raised; a missing output
    directory, a graph of more than :data:`MAX_DRAWN_NODES` nodes (for a picture) and a
    failure of ``dot`` raise :class:`DrawError`."""
    out = os.fspath(path)
    fmt = os.path.splitext(out)[1].lstrip(".").lower()
    folder = os.path.dirname(out) or "."
    if not os.path.isdir(folder):
        raise DrawError(f"cannot write {out}: the directory {folder} does not exist")
    if fmt in ("svg", "png", "pdf") and g.num_nodes() > MAX_DRAWN_NODES:
        raise DrawError(f"graph @{g.name} has {g.num_nodes()} nodes; pictures are limited to {MAX_DRAWN_NODES} "
                        "(Graphviz would take minutes): write a .dot file instead")
    text = to_dot(g, types=types)
    if fmt in ("dot", "gv"):
        with open(out, "w", encoding="utf-8") as f:
            f.write(text)
        return out
    if fmt not in ("svg", "png", "pdf"):
        raise ValueError(f"cannot draw to {out!r}: use a .svg, .png, .pdf or .dot file name")
    exe = dot_program()
    if exe is None:
        dot_path = os.path.splitext(out)[0] + ".dot"
        with open(dot_path, "w", encoding="utf-8") as f:
            f.write(text)
        raise GraphvizMissing(dot_path)
    try:
        proc = subprocess.run([exe, f"-T{fmt}", "-o", out], input=text.encode(), capture_output=True,
                              timeout=DOT_TIMEOUT)
    except subprocess.TimeoutExpired:
        raise DrawError(f"Graphviz dot took more than {DOT_TIMEOUT} s on graph @{g.name}") from None
    if proc.returncode != 0:
        why = proc.stderr.decode(errors="replace").strip().splitlines() or ["no message"]
        raise DrawError(f"Graphviz dot failed on graph @{g.name}: {why[0][:200]}")
    return out
