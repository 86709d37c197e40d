"""The viewer page without a browser: offline (nothing fetched), every id in the index
is in Graphviz's SVG, the panel's facts are the node's, the templates ship as package
data, and the command line (the server: test_viz_serve.py)."""

from __future__ import annotations

import inspect
import json
import re
from pathlib import Path

import numpy as np
import pytest

import nexus as nx
from nexus import seeds
from nexus.cli.main import main
from nexus.ir import print_graph
from nexus.testing.extras import require_program
from nexus.viz import html, to_dot
from nexus.viz.runpath import run_path

ROOT = Path(__file__).resolve().parents[1]


def _data(text: str) -> dict:
    m = re.search(r'<script id="nexus-data" type="application/json">(.*?)</script>', text, re.S)
    assert m is not None
    return json.loads(m.group(1))


@pytest.mark.parametrize("name", sorted(seeds.ALL))
def test_page_is_offline_and_indexes_the_svg(name: str) -> None:
    require_program("dot", "graphviz")
    g = seeds.ALL[name]()
    before = print_graph(g)
    text = html.page(g, run_path(g))
    assert print_graph(g) == before  # drawing never edits the graph: the text form is unchanged
    # Nothing is loaded from elsewhere: no src/href attributes, no URL but SVG's namespaces.
    assert not re.search(r"\b(src|href)\s*=", text)
    urls = set(re.findall(r"https?://[^\s\"'<>)]+", text))
    assert urls <= {"http://www.w3.org/2000/svg", "http://www.w3.org/1999/xlink"}, urls
    data = _data(text)
    svg_ids = set(re.findall(r'<g id="([^"]+)" class="', text))
    assert set(data["nodes"]) | set(data["echoes"]) | set(data["edges"]) | set(data["blocks"]) <= svg_ids
    # One index entry per node of the graph, with its op and block.
    members = [n for b in g.blocks for n in b.members]
    assert sorted(v["op"] for v in data["nodes"].values()) == sorted(n.op.name for n in members)
    assert sorted(b["name"] for b in data["blocks"].values()) == sorted(b.name for b in g.blocks)


def test_panel_facts_come_from_the_node() -> None:
    from nexus import Tensor

    @nx.script
    def f(x: Tensor["N", 3]):  # noqa: F821, UP037
        y = nx.tanh(x)
        return y * 2.0

    g = f.graph
    tanh = next(n for n in g.nodes() if n.op.name == "Tanh")
    tanh.attrs = {**tanh.attrs, "device": "gpu:1"}
    d = html.drawing(g)
    info = html.index(g, d)["nodes"][d.node_ids[tanh]]
    src, first = inspect.getsourcelines(f.fn)
    line = first + next(i for i, s in enumerate(src) if "nx.tanh" in s)
    assert info["op"] == "Tanh" and info["name"] == "y" and info["device"] == "gpu:1"
    assert info["loc"].startswith(f"{__file__}:{line}:")
    assert info["shape"] == "[N, 3]" and info["dtype"] == "f32" and info["type"] == "f32[N, 3]"
    const = next(n for n in g.nodes() if n.op.name == "Constant")
    cinfo = html.index(g, d)["nodes"][d.node_ids[const]]
    assert cinfo["attrs"] == [["value", "tensor<f32: 2.0>"]]


def test_big_tensors_are_summarised() -> None:
    assert html._attr_text(np.arange(100, dtype=np.float32)).startswith("tensor<float32[100]> (100 values, min 0.0")
    assert html._attr_text(np.array([1, 2], np.int32)) == "tensor<i32[2]: [1, 2]>"


def test_script_json_cannot_close_the_script() -> None:
    text = html._script_json({"name": "</script><script>alert(1)</script>"})
    assert "</script" not in text and json.loads(text)["name"].startswith("</script>")


def test_run_counts_by_svg_id() -> None:
    g = seeds.skip5_loop()
    d = html.drawing(g)
    run = html.index(g, d, run_path(g))["run"]
    by_name = {d.labels[b]: run["blocks"].get(cid, 0) for b, cid in d.clusters.items()}
    # seed 000's loop (plain Python): the test runs 8 times, the skip once, the latch 6 times.
    assert by_name["header"] == 8 and by_name["skip"] == 1 and by_name["latch"] == 6
    assert run["result"] == "31" and run["error"] is None
    # The control edge from the latch back into the header was taken 6 times.
    latch_jmp = next(b for b in g.blocks if b.name == "latch").terminator
    flow = [e for e in d.edges if e.kind == "flow" and e.src == d.node_ids[latch_jmp]]
    assert [run["edges"][e.id] for e in flow] == [6]


def test_templates_are_package_data() -> None:
    # Read through the installed package: in .ci/run's wheel smoke this is the wheel's copy.
    from importlib.resources import files

    names = sorted(p.name for p in files("nexus.viz").joinpath("templates").iterdir() if not p.name.startswith("."))
    assert names == ["page.html", "viewer.css", "viewer.js"]


def test_cli_html_and_errors(tmp_path, capsys) -> None:
    require_program("dot", "graphviz")
    out = tmp_path / "loop.html"
    assert main(["viz", "seed:skip5_loop", "--html", str(out), "--run"]) == 0
    assert _data(out.read_text())["run"]["result"] == "31"
    assert main(["viz", "seed:skip5_loop", "--run"]) == 1
    assert "--html" in capsys.readouterr().err
    assert main(["viz", "seed:ifelse", "--html", str(out), "-o", str(tmp_path / "x.svg")]) == 1
    assert main(["viz", "seed:ifelse", "--html", str(tmp_path / "missing" / "x.html")]) == 1
    assert "the directory" in capsys.readouterr().err and not (tmp_path / "missing").exists()


def test_echoes_keep_constant_edges_inside_blocks() -> None:
    """No edge leaves a constant's block: each use elsewhere reads a copy drawn beside it
    (read back from the DOT text: edge ends and cluster membership)."""
    for build in seeds.ALL.values():
        g = build()
        text = to_dot(g)
        home = {}
        cluster = None
        for line in text.splitlines():
            m = re.match(r"\s*subgraph (cluster_\d+)", line)
            if m:
                cluster = m.group(1)
            m = re.match(r"\s{4}(\w+) \[id=\w+, label=\"([^\"\\\\]+)", line)
            if m:
                home[m.group(1)] = (cluster, m.group(2))
        for src, dst in re.findall(r"^\s*(\w+) -> (\w+) \[id=", text, re.M):
            if home[src][1] == "Constant" or home[src][1].startswith("%"):  # a constant or an echo
                assert home[src][0] == home[dst][0], (src, dst)


def test_without_graphviz_the_page_says_so(tmp_path, monkeypatch, capsys) -> None:
    from nexus.viz import GraphvizMissing, dot

    monkeypatch.setattr(dot, "dot_program", lambda: None)
    with pytest.raises(GraphvizMissing, match="Debian package 'graphviz'") as info:
        html.page(seeds.ifelse())
    assert info.value.dot_path == ""
    assert main(["viz", "seed:ifelse", "--html", str(tmp_path / "x.html")]) == 1
    assert "graphviz" in capsys.readouterr().err and not (tmp_path / "x.html").exists()
