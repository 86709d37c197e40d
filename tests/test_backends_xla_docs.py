"""The examples of docs/xla.md run as written (their asserts compare with plain Python,
NumPy and finite differences)."""

from __future__ import annotations

import re
import runpy
from pathlib import Path

import pytest

from nexus.testing.extras import require

DOC = Path(__file__).resolve().parents[1] / "docs" / "xla.md"


def test_xla_doc_examples_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    require("jax", "xla")
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S)
    assert len(blocks) >= 3
    monkeypatch.chdir(tmp_path)
    script = tmp_path / "xla_doc.py"  # a file: @nx.script reads its functions' source
    script.write_text("\n".join(blocks))
    runpy.run_path(str(script), run_name="xla_doc")
