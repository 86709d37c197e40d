"""python -m nexus.demo: the README's main job."""

from __future__ import annotations

import os

from nexus import demo, seeds
from nexus.io import load
from nexus.ir import structurally_equal
from nexus.viz import dot


def test_demo_builds_runs_and_draws(tmp_path, capsys) -> None:
    assert demo.main(["--out", str(tmp_path), "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "3 of 3 examples agree with plain Python" in out
    assert "run: 31 (plain Python: 31) ok" in out and "run: 6.0 (plain Python: 6.0) ok" in out
    for name, build in seeds.ALL.items():
        assert structurally_equal(load(tmp_path / f"{name}.nx"), build())
        if dot.dot_program():
            assert "<svg" in (tmp_path / f"{name}.svg").read_text()


def test_demo_without_graphviz_writes_dot(tmp_path, capsys, monkeypatch) -> None:
    monkeypatch.setattr(dot, "dot_program", lambda: None)
    assert demo.main(["--out", str(tmp_path / "d")]) == 0
    out = capsys.readouterr().out
    assert "Debian package 'graphviz'" in out and "graph @skip5 {" in out
    assert sorted(f for f in os.listdir(tmp_path / "d") if f.endswith(".dot")) == [
        "first_example.dot", "ifelse.dot", "skip5_loop.dot"]


def test_plain_python_oracles_match_seed_000() -> None:
    # The answers seed 000 states: d = 6, sum = 31, and the first example's notes.
    assert demo._ifelse_py() == 6.0 and demo._skip5_py() == 31
    assert demo._first_example_py(50.0) == 5000.0 and demo._first_example_py(2.0) == 10.0
