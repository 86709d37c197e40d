"""Graphs that use ops emitted by transformations (Assert from @nx.script, the stack and
adjoint ops of graph-mode autodiff) load in a fresh process that imported only nexus."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np

import nexus as nx
from nexus.autodiff.graph_mode import vjp_graph
from nexus.ir import Graph, TensorType
from nexus.seeds import _B


def _fresh_load_and_run(path: Path, arg: float) -> list[float]:
    code = (
        "import json, numpy as np, nexus as nx\n"
        f"g = nx.load({str(path)!r})\n"
        "nx.verify(g)\n"
        f"out = nx.run(g, np.float64({arg!r}))\n"
        "print(json.dumps([float(np.asarray(v)) for v in (out if isinstance(out, tuple) else (out,))]))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return list(json.loads(done.stdout))


def test_gradient_graph_loads_in_a_fresh_process(tmp_path: Path) -> None:
    # f(x) = x * x * x; the gradient graph returns f(x) and then df/dx = 3 x^2.
    g = Graph("cube", [TensorType("f64", ())], ["x"])
    b = _B(g)
    x = g.args[0]
    b.ret(b.op("Mul", b.op("Mul", x, x), x))
    grad_graph = vjp_graph(g, (0,), "ones")
    path = tmp_path / "grad.nx"
    nx.save(grad_graph, str(path))
    values = _fresh_load_and_run(path, 1.5)
    assert np.isclose(values[-1], 3 * 1.5**2)


def test_script_assert_loads_in_a_fresh_process(tmp_path: Path) -> None:
    @nx.script
    def checked(x: float) -> float:
        assert x > 0.0, "x must be positive"
        return x * 2.0

    g = checked.graph_for(1.0) if hasattr(checked, "graph_for") else checked.graph
    path = tmp_path / "assert.nx"
    nx.save(g, str(path))
    assert _fresh_load_and_run(path, 2.0) == [4.0]
