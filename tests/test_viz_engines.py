"""Pictures coloured by engine: ``nexus viz --backend auto`` fills each node with the engine
its partition of the mixed executable runs on and draws the data edges between engines
thick.  The oracle is the executable's own ``partitions`` (which name the nodes of the
compiled graph), compared with what the picture and the viewer's index say."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import nexus as nx
from nexus.cli.main import main
from nexus.ir.graph import Graph
from nexus.testing.extras import require, require_program
from nexus.viz.dot import BOUNDARY_EDGE, ENGINE_FILLS, drawing


def collatz_then_dense(x: Any, w: Any, n: int) -> Any:
    """A scalar loop (llvm under auto) and dense ops after it (python or ONNX Runtime)."""
    k = 0
    i = n
    while i > 1:
        if i % 2 == 0:
            i = i // 2
        else:
            i = 3 * i + 1
        k += 1
    return np.tanh(x @ w) @ w * k


def _graph() -> Graph:
    x, w = np.ones((4, 8), np.float32), np.ones((8, 8), np.float32)
    return nx.script(collatz_then_dense).graph_for(x, w, 7)


def _engines(g: Graph) -> dict[Any, str]:
    exe = nx.compile(g, backend="auto")
    return {n: p.engine for p in exe.partitions for n in p.members}  # type: ignore[attr-defined]


def test_partitions_name_the_compiled_graphs_nodes() -> None:
    require("llvmlite", "llvm")
    require("onnxruntime", "onnx")
    g = _graph()
    exe = nx.compile(g, backend="auto")
    loop = [p for p in exe.partitions if p.engine == "llvm"]  # type: ignore[attr-defined]
    assert len(loop) == 1 and {m.op.name for m in loop[0].members} >= {"Phi", "Mod", "FloorDiv"}
    assert all(m.graph is g for p in exe.partitions for m in p.members)  # type: ignore[attr-defined]
    assert not any("%?" in s for p in exe.partitions for s in p.nodes)  # type: ignore[attr-defined]


def test_the_picture_fills_each_node_by_its_engine() -> None:
    require("llvmlite", "llvm")
    require("onnxruntime", "onnx")
    g = _graph()
    engines = _engines(g)
    d = drawing(g, engines=engines)
    lines = {m.group(1): m.group(0) for m in re.finditer(r"^\s*(n\d+) \[.*$", d.text, re.M)}
    assert set(engines.values()) >= {"llvm"}
    for n, engine in engines.items():
        line = lines[d.node_ids[n]]
        assert f'fillcolor="{ENGINE_FILLS[engine]}"' in line and f"[{engine}]" in line
    for n, nid in d.node_ids.items():
        if n not in engines:
            assert "[llvm]" not in lines[nid] and "[onnxruntime]" not in lines[nid]
    # the loop's count k flows from the llvm loop into the dense code: a boundary edge
    crossing = [e for e in d.edges if e.kind == "data" and e.user is not None and
                e.user.inputs[e.index] in engines and e.user in engines and
                engines[e.user.inputs[e.index]] != engines[e.user]]
    assert crossing
    for e in crossing:
        assert re.search(rf"id={e.id}, [^\]]*color=\"{BOUNDARY_EDGE}\"", d.text)
    # without engines nothing changes colour
    assert BOUNDARY_EDGE not in drawing(g).text and "[llvm]" not in drawing(g).text


def test_nexus_viz_backend_auto_writes_the_coloured_viewer(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    require("llvmlite", "llvm")
    require("onnxruntime", "onnx")
    require_program("dot", "graphviz")
    src = tmp_path / "mixed.nx"
    nx.save(_graph(), src)
    out = tmp_path / "mixed.html"
    assert main(["viz", str(src), "--backend", "auto", "--html", str(out)]) == 0
    text = out.read_text()
    assert '"engine":"llvm"' in text and ENGINE_FILLS["llvm"] in text
    assert main(["viz", str(src), "--backend", "python", "-o", str(tmp_path / "x.svg")]) == 1
    assert "does not split a graph into partitions" in capsys.readouterr().err
