"""Pictures: the DOT text is read back by Graphviz itself (``dot -Tjson``) and checked
against the graph: one labelled cluster per block, colours by node kind, edge styles."""

from __future__ import annotations

import json
import subprocess
from collections import Counter

import numpy as np
import pytest

from nexus import seeds
from nexus.ir import Graph
from nexus.testing.extras import require_program
from nexus.viz import GraphvizMissing, dot, render, to_dot

RED_OPS = {"Start", "End", "Return", "Jmp", "Cond", "Proj true", "Proj false"}


def _layout(g: Graph) -> dict:
    exe = require_program("dot", "graphviz")
    proc = subprocess.run([exe, "-Tjson"], input=to_dot(g).encode(), capture_output=True, timeout=60)
    assert proc.returncode == 0 and not proc.stderr, proc.stderr
    return json.loads(proc.stdout)


def _with_dep() -> Graph:
    g = seeds.ifelse()
    a, b = [n for n in g.start_block.members if n.op.name == "Constant"][:2]
    b.add_dep(a)
    return g


GRAPHS = {**{k: f for k, f in seeds.ALL.items()}, "with_dep": _with_dep}


@pytest.mark.parametrize("name", sorted(GRAPHS))
def test_dot_structure(name: str) -> None:
    g = GRAPHS[name]()
    layout = _layout(g)
    objs = layout["objects"]
    clusters = [o for o in objs if o["name"].startswith("cluster_")]
    # Echoes (a constant or argument drawn again next to a use in another block) aside.
    echoes = {o["_gvid"]: o for o in objs if "nodes" not in o and o.get("class") == "echo"}
    nodes = {o["_gvid"]: o for o in objs if "nodes" not in o and o["_gvid"] not in echoes}
    # One light-blue cluster per block, labelled ^name, holding exactly its members.
    assert sorted(c["label"] for c in clusters) == sorted("^" + b.name for b in g.blocks)  # type: ignore[operator]
    by_label = {c["label"]: c for c in clusters}
    for b in g.blocks:
        c = by_label["^" + b.name]  # type: ignore[operator]
        assert c["fillcolor"] == dot.BLOCK_FILL and "filled" in c["style"]
        assert len(set(c["nodes"]) - set(echoes)) == len(b.members)
    # Node colours follow the op, read from the label's first line.
    kinds = Counter()
    for o in nodes.values():
        head = o["label"].split("\\n")[0]
        if head == "Phi":
            assert o["fillcolor"] == dot.PHI_FILL
            kinds["phi"] += 1
        elif head in RED_OPS:
            assert o["fillcolor"] == dot.CONTROL_FILL and o["shape"] == "box"
            kinds["control"] += 1
        else:
            assert o["fillcolor"] == dot.DATA_FILL and "rounded" in o["style"]
            kinds["data"] += 1
    members = [n for b in g.blocks for n in b.members]
    assert kinds["phi"] == sum(n.op.name == "Phi" for n in members)
    # One echo per (constant or argument, user in another block), in the user's cluster.
    far = Counter()
    for b in g.blocks:
        for n in b.members:
            for v in dict.fromkeys(n.inputs):
                cheap = v.op.name == "Constant" or v.op.name == "Proj" and v.input(0).op.name == "Start"
                if v.block is not b and cheap:
                    far[b.name] += 1
    in_cluster = Counter(c["label"][1:] for c in clusters for k in c.get("nodes", []) if k in echoes)
    assert in_cluster == far
    for o in echoes.values():
        assert o["fillcolor"] == dot.ECHO_FILL and "dashed" in o["style"]
    # Edge styles: counted from the graph's use-def lists.
    edges = [e for e in layout["edges"] if e.get("style") != "invis"]
    style = Counter()
    for e in edges:
        if e.get("color") == dot.PHI_EDGE and e.get("style") == "dashed":
            style["phi"] += 1
        elif e.get("style") == "dashed":
            style["dep"] += 1
        elif e.get("color") == dot.CONTROL_EDGE:
            style["control"] += 1
        else:
            assert e.get("color") == "black"
            style["data"] += 1
    phi_inputs = sum(n.num_inputs for n in members if n.op.name == "Phi")
    cond_exits = sum(1 for n in members if n.op.name == "Proj" and n.input(0).op.name == "Cond")
    block_edges = sum(b.num_inputs for b in g.blocks)
    data = sum(n.num_inputs for n in members if n.op.name != "Phi") - cond_exits
    assert style == Counter({k: v for k, v in {"phi": phi_inputs, "control": block_edges + cond_exits,
                                               "data": data, "dep": sum(len(n.deps) for n in members)}.items() if v})


def test_loop_back_edges_do_not_constrain() -> None:
    g = seeds.skip5_loop()
    text = to_dot(g)
    header = next(b for b in g.blocks if b.name == "header")
    # Edges 1 and 2 into the header come from the continue and the latch: back edges.
    back = [ln for ln in text.splitlines() if "lhead=cluster_1" in ln]
    assert len(back) == 3
    assert sum("constraint=false" in ln for ln in back) == 2 == header.num_inputs - 1
    forward = [ln for ln in text.splitlines() if "lhead=" in ln and "constraint=false" in ln]
    assert len(forward) == 2  # no other control edge is released


def test_render_formats(tmp_path) -> None:
    require_program("dot", "graphviz")
    g = seeds.skip5_loop()
    svg = render(g, tmp_path / "a.svg")
    assert open(svg).read().lstrip().startswith("<?xml") and "^header" in open(svg).read()
    png = render(g, tmp_path / "a.png")
    assert open(png, "rb").read(8) == b"\x89PNG\r\n\x1a\n"
    assert open(render(g, tmp_path / "a.dot")).read() == to_dot(g)
    with pytest.raises(ValueError, match="use a .svg"):
        render(g, tmp_path / "a.jpeg2")


def test_without_graphviz_writes_dot_and_names_the_package(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(dot, "dot_program", lambda: None)
    with pytest.raises(GraphvizMissing, match="Debian package 'graphviz'") as info:
        render(seeds.ifelse(), tmp_path / "x.svg")
    assert info.value.dot_path.endswith("x.dot")
    assert open(info.value.dot_path).read() == to_dot(seeds.ifelse())


def test_labels_are_escaped() -> None:
    g = Graph('we"ird\\name')
    c = g.add("Constant", [], g.start_block, {"value": np.array(1.5, np.float32)}, name="q")
    r = g.add("Return", [c], g.start_block)
    g.end_block.append_input(r)
    layout = _layout(g)
    assert layout["name"] == 'we"ird\\\\name'  # Graphviz keeps label escapes (\\ is one backslash)
    assert any(o.get("label") == "Constant\\n%q = 1.5\\nf32" for o in layout["objects"])
