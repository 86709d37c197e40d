"""The examples of docs/llvm.md run as written (their asserts compare with NumPy)."""

from __future__ import annotations

import runpy
from pathlib import Path

import pytest

from nexus.testing.docs import examples_file
from nexus.testing.extras import require

require("llvmlite", "llvm")

DOC = Path(__file__).resolve().parents[1] / "docs" / "llvm.md"


def test_llvm_doc_examples_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    runpy.run_path(str(examples_file(DOC, tmp_path, at_least=3)), run_name="llvm_doc")
    assert capsys.readouterr().out.strip() == "[]"
