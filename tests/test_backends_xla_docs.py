"""The examples of docs/xla.md run as written (their asserts compare with plain Python,
NumPy and finite differences)."""

from __future__ import annotations

import runpy
from pathlib import Path

import pytest

from nexus.testing.docs import examples_file
from nexus.testing.extras import require

DOC = Path(__file__).resolve().parents[1] / "docs" / "xla.md"


def test_xla_doc_examples_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    require("jax", "xla")
    monkeypatch.chdir(tmp_path)
    runpy.run_path(str(examples_file(DOC, tmp_path, at_least=3)), run_name="xla_doc")
