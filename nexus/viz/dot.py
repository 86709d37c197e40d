"""Graphviz pictures of graphs in seed 000's visual language.

Each Block is a light-blue cluster labelled with its name; dataflow nodes are orange
rounded boxes; control nodes (Start, Cond, its Proj exits, Jmp, Return, End) are red;
Phis are green.  Data edges are black, control edges red, ordering edges (deps) dashed,
Phi inputs dashed green and labelled with their predecessor position.  Edges that go
backwards in the printer's block order (loop back edges, Phis reading the latch) do not
constrain the layout, so the picture reads top-down.

Constants and graph arguments used in other blocks are drawn again next to each use, as
Netron draws initializers: a small dashed copy (an *echo*) right above each node that
reads them, so that no edge runs from ``^entry`` across every block to reach them.  The node itself stays
where the text form defines it; only the picture repeats it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from nexus.ir.analysis import block_order, node_order
from nexus.ir.cfg import is_argument, is_exit, role
from nexus.ir.graph import Graph
from nexus.ir.node import Block, Node
from nexus.ir.printer import _name_graph
from nexus.ir.types import TensorType, is_container, shape_str

# Colours, one per kind of node and edge; the tests read them from here.
BLOCK_FILL = "#dbeeff"
BLOCK_BORDER = "#5b8db8"
DATA_FILL = "#ffc078"
DATA_BORDER = "#e8590c"
CONTROL_FILL = "#ff8787"
CONTROL_BORDER = "#c92a2a"
PHI_FILL = "#8ce99a"
PHI_BORDER = "#2b8a3e"
ECHO_FILL = "#fff4e6"
DATA_EDGE = "black"
CONTROL_EDGE = "#c92a2a"
PHI_EDGE = "#2b8a3e"
DEP_EDGE = "#495057"

SMALL_GRAPH = 500  # nodes; see drawing()


class GraphvizMissing(RuntimeError):
    """The ``dot`` program is not installed; ``dot_path`` holds the DOT text written instead
    ("" when nothing was written)."""

    def __init__(self, dot_path: str = ""):
        self.dot_path = dot_path
        wrote = f"; wrote {dot_path} instead" if dot_path else ""
        super().__init__(
            "the Graphviz 'dot' program is not installed, so no picture was drawn "
            f"(install the Debian package 'graphviz': apt-get install graphviz){wrote}")


def node_kind(n: Node) -> str:
    """'control', 'phi' or 'data': how a node is drawn."""
    r = role(n)
    if r == "phi":
        return "phi"
    return "control" if r in ("control", "terminator", "exit") else "data"


def echoed(n: Node) -> bool:
    """Whether ``n`` is drawn again next to its uses in other blocks: constants and graph
    arguments, which cost nothing and are often used all over the graph."""
    return role(n) in ("constant", "argument")


_STYLE = {
    "data": f'shape=box, style="rounded,filled", fillcolor="{DATA_FILL}", color="{DATA_BORDER}"',
    "control": f'shape=box, style="filled", fillcolor="{CONTROL_FILL}", color="{CONTROL_BORDER}"',
    "phi": f'shape=box, style="rounded,filled", fillcolor="{PHI_FILL}", color="{PHI_BORDER}"',
    "echo": f'shape=box, style="rounded,filled,dashed", fillcolor="{ECHO_FILL}", color="{DATA_BORDER}", '
            'fontsize=9, margin="0.05,0.02", class="echo"',
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


# With ``engines`` (``nexus viz --backend auto``), each node that a partition of a mixed
# executable runs is filled by its engine and labelled with it; a data edge between two
# engines (a transfer at a partition's boundary) is drawn thick, in the colour below.
ENGINE_FILLS = {"onnxruntime": "#a5d8ff", "llvm": "#eebefa", "xla": "#ffec99", "python": "#ffe8cc"}
BOUNDARY_EDGE = "#1971c2"


def engine_style(n: Node, engines: Mapping[Node, str] | None) -> tuple[str, str]:
    """(label suffix, extra DOT attributes) for the engine that runs ``n``; ("", "") for none."""
    engine = engines.get(n) if engines else None
    if engine is None:
        return "", ""
    return f"\n[{engine}]", f', fillcolor="{ENGINE_FILLS.get(engine, ECHO_FILL)}"'


@dataclass
class DrawnEdge:
    """One edge of a drawing.  ``kind``: 'data', 'phi', 'dep', 'exit' (a Cond to its Proj)
    or 'flow' (a control edge into ``block`` at input ``index``).  Data and Phi edges
    record the using node and the input position (``user``, ``index``)."""

    id: str
    src: str
    dst: str
    kind: str
    user: Node | None = None
    index: int = -1
    block: Block | None = None


@dataclass
class Drawing:
    """A graph's DOT text and what its ids stand for (the interactive viewer's index)."""

    text: str
    node_ids: dict[Node, str] = field(default_factory=dict)  # each drawn node's DOT id
    echoes: dict[str, Node] = field(default_factory=dict)    # an echo's id -> the node it repeats
    echo_blocks: dict[str, Block] = field(default_factory=dict)
    clusters: dict[Block, str] = field(default_factory=dict)
    edges: list[DrawnEdge] = field(default_factory=list)
    names: dict[Node, str] = field(default_factory=dict)     # the text form's value names
    labels: dict[Block, str] = field(default_factory=dict)   # and block labels


def _q(text: str) -> str:
    """A DOT string literal (labels use \\n for line breaks)."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def _head(n: Node) -> str:
    if is_exit(n):
        return f"Proj {n.input(0).op.results[n.attrs['num']]}"
    if is_argument(n):
        return f"arg {n.attrs.get('num')}"
    return n.op.name


def _scalar(n: Node) -> str:
    """`` = 2.5`` for a one-element constant, else nothing."""
    value = n.attrs.get("value") if n.op.name == "Constant" else None
    if isinstance(value, np.ndarray) and value.size == 1:
        return f" = {value.reshape(-1)[0]}"
    return ""


def _label(n: Node, name: str, types: bool) -> str:
    text = f"{_head(n)}\n%{name}" if n.op.name != "End" else _head(n)
    text += _scalar(n)
    if types and node_kind(n) != "control":
        text += f"\n{n.type}"
    return text


def _echo_label(n: Node, name: str, types: bool) -> str:
    text = f"%{name}{_scalar(n)}"
    if n.op.name != "Constant":
        text = f"{_head(n)} {text}"
    if types and not _scalar(n):
        text += f"\n{n.type}"
    return text


def to_dot(g: Graph, *, types: bool = True, echoes: bool = True, engines: Mapping[Node, str] | None = None) -> str:
    """The DOT text of ``g``: one cluster per block, nodes and edges styled by kind.
    ``echoes=False`` draws each constant once, with edges to all its uses; ``engines``
    (node -> engine name, from a mixed executable's partitions) colours nodes by engine."""
    return drawing(g, types=types, echoes=echoes, engines=engines).text


def drawing(g: Graph, *, types: bool = True, echoes: bool = True,
            engines: Mapping[Node, str] | None = None) -> Drawing:
    """The DOT text of ``g`` with the index from its ids to nodes, edges and blocks."""
    blocks = block_order(g)
    values, labels = _name_graph(g, blocks)
    rank = {b: i for i, b in enumerate(blocks)}
    d = Drawing("", names={n: values[n] for b in blocks for n in b.members},
                labels={b: labels[b] for b in blocks})
    ids = d.node_ids
    # Small graphs get four times Graphviz's default effort at removing crossings: on seed
    # 000's first example that takes the edges crossing a block from 3 to 0, in no time.
    effort = " mclimit=4;" if g.num_nodes() <= SMALL_GRAPH else ""
    lines = [
        f"digraph {_q(g.name)} {{",
        f"  compound=true; rankdir=TB; nodesep=0.3; ranksep=0.35;{effort}",
        f"  label={_q('graph @' + g.name)}; labelloc=t; fontname=Helvetica;",
        "  node [fontname=Helvetica, fontsize=10, margin=\"0.08,0.03\"];",
        "  edge [fontname=Helvetica, fontsize=9, arrowsize=0.6];",
    ]
    # The echoes: (node, user) -> echo id, made while the blocks are written.
    echo_of: dict[tuple[Node, Node], str] = {}
    anchors: dict[Block, str] = {}
    for bi, b in enumerate(blocks):
        d.clusters[b] = f"cluster_{bi}"
        lines.append(f"  subgraph cluster_{bi} {{")
        lines.append(f'    id="cluster_{bi}"; label={_q("^" + labels[b])}; style="rounded,filled"; '
                     f'fillcolor="{BLOCK_FILL}"; color="{BLOCK_BORDER}"; fontsize=11;')
        members = node_order(b)
        for n in members:
            ids[n] = f"n{len(ids)}"
            suffix, style = device_style(n)
            if engines and n in engines:
                suffix, style = engine_style(n, engines)
            lines.append(f"    {ids[n]} [id={ids[n]}, label={_q(_label(n, values[n], types) + suffix)}, "
                         f"{_STYLE[node_kind(n)]}{style}];")
        if echoes:
            for v, user in _far_cheap_inputs(b, members):
                eid = echo_of[v, user] = f"c{len(echo_of)}"
                d.echoes[eid] = v
                d.echo_blocks[eid] = b
                lines.append(f"    {eid} [id={eid}, label={_q(_echo_label(v, values[v], types))}, {_STYLE['echo']}];")
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

    def edge(src: str, dst: str, attrs: list[str], kind: str, user: Node | None = None, index: int = -1,
             block: Block | None = None) -> None:
        eid = f"e{len(d.edges)}"
        d.edges.append(DrawnEdge(eid, src, dst, kind, user, index, block))
        lines.append(f"  {src} -> {dst} [{', '.join([f'id={eid}', *attrs])}];")

    for n in list(ids):
        for i, v in enumerate(n.inputs):
            if v not in ids:
                continue
            src = echo_of.get((v, n), ids[v])
            attrs = []
            if n.op.kind == "phi":
                attrs += [f'color="{PHI_EDGE}"', "style=dashed", f'fontcolor="{PHI_EDGE}"', f'label=" {i}"']
                # A Phi's inputs arrive along predecessor edges, often from later blocks.
                if src == ids[v]:
                    attrs.append("constraint=false")
                edge(src, ids[n], attrs, "phi", n, i)
                continue
            control = node_kind(v) == "control" and v.op.name != "Start"
            boundary = engines is not None and not control and v in engines and n in engines \
                and engines[v] != engines[n]
            attrs.append(f'color="{CONTROL_EDGE}"' if control else f'color="{BOUNDARY_EDGE}", penwidth=2.4'
                         if boundary else f'color="{DATA_EDGE}"')
            if types and not control and isinstance(v.type, TensorType) and v.type.shape != ():
                # Tensor edges carry their shape (symbolic dims included); scalars stay quiet.
                attrs += [f"label={_q(' ' + shape_str(v.type.shape))}", "fontsize=9"]
            elif types and not control and is_container(v.type):  # a sequence or optional: its type
                attrs += [f"label={_q(' ' + str(v.type))}", "fontsize=9"]
            # Only edges inside a block shape the layout; the control edges between
            # blocks place the blocks, so the picture follows the CFG top-down.
            if v.block is not n.block and src == ids[v]:
                # A value used in a later block may pull that block down (rank) but not
                # sideways (weight 0); a use in an earlier block must not turn the CFG over.
                forward = v.block is not None and n.block is not None and rank.get(v.block, 0) < rank.get(n.block, 0)
                attrs.append("weight=0" if forward else "constraint=false")
            edge(src, ids[n], attrs, "exit" if control else "data", n, i)
        for v in n.deps:
            if v in ids:
                edge(ids[v], ids[n], ["style=dashed", f'color="{DEP_EDGE}"', "arrowhead=empty"], "dep", n)
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
            edge(ids[p], anchors[b], attrs, "flow", None, i, b)
    lines.append("}")
    d.text = "\n".join(lines) + "\n"
    return d


def _far_cheap_inputs(b: Block, members: list[Node]) -> list[tuple[Node, Node]]:
    """The echoed nodes that members of ``b`` read although they live in another block:
    ``(node, user)``, one per user (which may read it twice), so that each echo sits
    right above its user and no edge runs down the block."""
    out: dict[tuple[Node, Node], None] = {}
    for n in members:
        for v in n.inputs:
            if v.block is not b and v.block is not None and echoed(v):
                out[v, n] = None
    return list(out)


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


# Graphs with more nodes than this are drawn with straight edges: Graphviz's spline
# router takes most of the time on them, and the 2.43 build in Debian 12 crashes in it
# on some big clustered graphs (a 5,000-node one here).
BIG_GRAPH = 1500
STRAIGHT = "-Gsplines=line"


def run_dot(text: str, fmt: str, what: str, out: str | None = None, *, straight: bool = False,
            timeout: float = DOT_TIMEOUT) -> bytes:
    """Run ``dot -T<fmt>`` on ``text`` (to ``out``, or returning the output); ``what``
    names the graph in errors.  ``straight`` draws edges as straight lines; a ``dot``
    that crashes is tried once more that way.  Raises :class:`GraphvizMissing` without
    Graphviz (after writing the DOT text next to ``out``, when given) and
    :class:`DrawError` when ``dot`` fails or takes longer than ``timeout`` seconds."""
    exe = dot_program()
    if exe is None:
        if out is None:
            raise GraphvizMissing()
        dot_path = os.path.splitext(out)[0] + ".dot"
        with open(dot_path, "w", encoding="utf-8") as f:
            f.write(text)
        raise GraphvizMissing(dot_path)
    cmd = [exe, f"-T{fmt}"] + ([STRAIGHT] if straight else []) + (["-o", out] if out else [])
    try:
        proc = subprocess.run(cmd, input=text.encode(), capture_output=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise DrawError(f"Graphviz dot took more than {timeout:g} s on {what}") from None
    if proc.returncode < 0 and not straight:  # killed by a signal: a crash in the spline router
        return run_dot(text, fmt, what, out, straight=True, timeout=timeout)
    if proc.returncode != 0:
        why = proc.stderr.decode(errors="replace").strip().splitlines() or ["no message"]
        raise DrawError(f"Graphviz dot failed on {what}: {why[0][:200]}")
    return proc.stdout


def render(g: Graph, path: str | os.PathLike[str], *, types: bool = True,
           engines: Mapping[Node, str] | None = None) -> str:
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
    text = to_dot(g, types=types, engines=engines)
    if fmt in ("dot", "gv"):
        with open(out, "w", encoding="utf-8") as f:
            f.write(text)
        return out
    if fmt not in ("svg", "png", "pdf"):
        raise ValueError(f"cannot draw to {out!r}: use a .svg, .png, .pdf or .dot file name")
    run_dot(text, fmt, f"graph @{g.name}", out, straight=g.num_nodes() > BIG_GRAPH)
    return out
