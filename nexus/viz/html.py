"""A self-contained HTML page for exploring a graph in a browser (``nexus viz --html``).

The layout is Graphviz's: the SVG that ``dot`` makes from :func:`nexus.viz.dot.drawing`
is put into the page as is, with a JSON index of what each SVG id stands for (node
attributes, type, shape, device, source line; the edges and blocks; optionally the path
of one run) and a small vanilla JavaScript file (``templates/viewer.js``) that makes it
interactive: pan and zoom, collapse and expand blocks, search, a panel for the clicked
node, and the run's path.  Nothing is fetched when the page opens: it works offline.
"""

from __future__ import annotations

import html
import json
import os
import re
from collections.abc import Mapping
from importlib import resources
from typing import Any

import numpy as np

from nexus.ir.graph import Graph
from nexus.ir.node import Node
from nexus.ir.opdef import UNIVERSAL_ATTRS
from nexus.ir.printer import format_attr
from nexus.ir.types import TensorType, shape_str
from nexus.viz.dot import BIG_GRAPH, DrawError, Drawing, drawing, node_kind, run_dot
from nexus.viz.runpath import RunPath

SMALL_TENSOR = 16  # attribute tensors with more elements are summarised in the panel

# The page's layout: the 5,000-node graph of bench/viz_page.py takes Graphviz 35-60 s here,
# so the page gets more time than a picture; far larger graphs are refused (as pictures are).
MAX_PAGE_NODES = 20_000
PAGE_DOT_TIMEOUT = 900.0


def _template(name: str) -> str:
    return resources.files("nexus.viz").joinpath("templates", name).read_text(encoding="utf-8")


def _attr_text(value: Any) -> str:
    """An attribute as the text form writes it; big tensors as dtype, shape and range."""
    if isinstance(value, np.ndarray) and value.size > SMALL_TENSOR:
        kind = f"tensor<{value.dtype}{list(value.shape)}>"
        if value.dtype.kind in "biuf" and value.size:
            return f"{kind} ({value.size} values, min {value.min()}, max {value.max()})"
        return f"{kind} ({value.size} values)"
    try:
        return format_attr(value, None, "")
    except TypeError:
        return repr(value)


def _node_info(n: Node, d: Drawing, engines: Mapping[Node, str] | None = None) -> dict[str, Any]:
    t = n.type
    info: dict[str, Any] = {
        "op": n.op.name, "name": d.names.get(n, "?"), "kind": node_kind(n),
        "block": d.clusters.get(n.block) if n.block is not None else None,
        "type": str(t),
        "attrs": [[k, _attr_text(v)] for k, v in n.attrs.items() if k not in UNIVERSAL_ATTRS],
        "ins": [d.node_ids.get(v) for v in n.inputs],
    }
    if isinstance(t, TensorType):
        info["shape"] = shape_str(t.shape)
        info["dtype"] = str(t.dtype)
    device = n.attrs.get("device")
    if device is not None:
        machine = n.attrs.get("machine")
        info["device"] = str(device) if machine is None else f"{device} on {machine}"
    if engines and n in engines:
        info["engine"] = engines[n]
    if n.loc is not None:
        info["loc"] = str(n.loc)
    if n.deps:
        info["deps"] = [d.node_ids.get(v) for v in n.deps]
    return info


def index(g: Graph, d: Drawing, path: RunPath | None = None,
          engines: Mapping[Node, str] | None = None) -> dict[str, Any]:
    """The JSON index of a drawing: nodes, echoes, blocks, edges (and the run) by SVG id."""
    nodes = {nid: _node_info(n, d, engines) for n, nid in d.node_ids.items()}
    users: dict[str, list[str]] = {}
    for nid, info in nodes.items():
        for v in info["ins"]:
            if v is not None:
                users.setdefault(v, []).append(nid)
    for nid, us in users.items():
        nodes[nid]["users"] = sorted(set(us), key=lambda s: int(s[1:]))
    members = {cid: [d.node_ids[n] for n in b.members if n in d.node_ids] for b, cid in d.clusters.items()}
    for eid, b in d.echo_blocks.items():
        members[d.clusters[b]].append(eid)
    blocks = {cid: {"name": d.labels[b], "nodes": members[cid]} for b, cid in d.clusters.items()}
    out: dict[str, Any] = {
        "graph": g.name,
        "nodes": nodes,
        "echoes": {eid: d.node_ids[v] for eid, v in d.echoes.items()},
        "echoBlocks": {eid: d.clusters[b] for eid, b in d.echo_blocks.items()},
        "blocks": blocks,
        "edges": {e.id: [e.src, e.dst, e.kind] for e in d.edges},
        "run": None,
    }
    if path is not None:
        out["run"] = _run_index(d, path)
    return out


def _run_index(d: Drawing, path: RunPath) -> dict[str, Any]:
    """Counts by SVG id: blocks entered, nodes run, edges taken."""
    blocks = {d.clusters[b]: k for b, k in path.blocks.items() if b in d.clusters}
    # A Cond's exit is taken as often as the control edges that leave through it.
    exits: dict[Node, int] = {}
    for (b, i), k in path.edges.items():
        exits[b.input(i)] = exits.get(b.input(i), 0) + k
    edges: dict[str, int] = {}
    for e in d.edges:
        if e.kind == "flow" and e.block is not None:
            k = path.edges.get((e.block, e.index), 0)
        elif e.kind == "phi" and e.user is not None and e.user.block is not None:
            k = path.edges.get((e.user.block, e.index), 0)
        elif e.kind == "exit" and e.user is not None:
            k = exits.get(e.user, 0)
        elif e.user is not None and e.user.block is not None:
            k = path.blocks.get(e.user.block, 0)
        else:
            k = 0
        if k:
            edges[e.id] = k
    nodes = {nid: path.blocks[n.block] for n, nid in d.node_ids.items()
             if n.block is not None and path.blocks.get(n.block)}
    nodes.update({eid: path.blocks[b] for eid, b in d.echo_blocks.items() if path.blocks.get(b)})
    result = path.result
    text = None
    if result is not None:
        parts = result if isinstance(result, tuple) else (result,)
        text = ", ".join(np.array2string(np.asarray(p), threshold=20) for p in parts)
    return {"blocks": blocks, "nodes": nodes, "edges": edges, "result": text, "error": path.error,
            "ambiguous": path.ambiguous}


def _svg_body(svg: str) -> str:
    """Graphviz's SVG without the XML prolog, doctype, comments, tooltips (``<title>``:
    only the DOT ids), line breaks between elements and font attributes (set once by the
    page's CSS): inline in HTML, and a fifth smaller for big graphs."""
    start = svg.find("<svg")
    body = svg[start:] if start >= 0 else svg
    body = re.sub(r"<!--.*?-->\n?", "", body, flags=re.S)
    body = re.sub(r"<title>[^<]*</title>\n?", "", body)
    # The line breaks between elements would each be a text node of the DOM (a third of a
    # big graph's nodes, all styled and laid out for nothing).
    body = re.sub(r">\n+<", "><", body)
    return body.replace(' font-family="Helvetica,sans-Serif"', "")


def _script_json(data: Any) -> str:
    """JSON safe inside a <script> element (no "</" can close it early)."""
    return json.dumps(data, separators=(",", ":")).replace("</", "<\\/").replace("<!--", "<\\!--")


def page(g: Graph, path: RunPath | None = None, *, types: bool = True, svg: str | None = None,
         engines: Mapping[Node, str] | None = None) -> str:
    """The HTML text of the viewer for ``g`` (``path``: a run to highlight; ``engines``: the
    engine of each node, which colours it).  Needs Graphviz's ``dot`` unless ``svg`` (the
    layout of :func:`drawing`'s text) is given."""
    if svg is None and g.num_nodes() > MAX_PAGE_NODES:
        raise DrawError(f"graph @{g.name} has {g.num_nodes()} nodes; the viewer lays out at most {MAX_PAGE_NODES} "
                        "(Graphviz would take too long): view a part of it, or write a .dot file")
    d = drawing(g, types=types, engines=engines)
    if svg is None:
        svg = run_dot(d.text, "svg", f"graph @{g.name}", straight=len(d.node_ids) > BIG_GRAPH,
                      timeout=PAGE_DOT_TIMEOUT).decode("utf-8")
    parts = {"title": html.escape(f"graph @{g.name}"), "css": _template("viewer.css"), "svg": _svg_body(svg),
             "data": _script_json(index(g, d, path, engines)), "js": _template("viewer.js")}
    # One pass, so that nothing inserted (a label, the script) is read as a placeholder.
    return re.sub(r"\{\{(\w+)\}\}", lambda m: parts[m.group(1)], _template("page.html"))


def write_html(g: Graph, out: str | os.PathLike[str], path: RunPath | None = None, *, types: bool = True) -> str:
    """Write the viewer page of ``g`` to ``out``; returns the path written."""
    text = page(g, path, types=types)
    with open(out, "w", encoding="utf-8") as f:
        f.write(text)
    return os.fspath(out)
