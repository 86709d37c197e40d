"""The examples of docs/engines.md run as written (their asserts compare with NumPy and plain
Python), and the partitions they print say what the page says."""

from __future__ import annotations

import runpy
from pathlib import Path

import pytest

from nexus.testing.docs import examples_file
from nexus.testing.extras import require

DOC = Path(__file__).resolve().parents[1] / "docs" / "engines.md"


def test_engines_doc_examples_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    require("onnxruntime", "onnx")
    require("llvmlite", "llvm")
    runpy.run_path(str(examples_file(DOC, tmp_path, at_least=2)), run_name="engines_doc")
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("onnxruntime: 3 node(s) (the whole graph exports")
    assert out[1].startswith("llvm:") and "compile natively" in out[1]
    assert any(line.startswith("python:") and "by request" in line for line in out[2:])
