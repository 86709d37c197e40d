"""The examples of docs/llvm.md run as written (their asserts compare with NumPy)."""

from __future__ import annotations

import re
import runpy
from pathlib import Path

import pytest

from nexus.testing.extras import require

require("llvmlite", "llvm")

DOC = Path(__file__).resolve().parents[1] / "docs" / "llvm.md"


def test_llvm_doc_examples_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S)
    assert len(blocks) >= 3
    script = tmp_path / "llvm_doc.py"  # a file: @nx.script reads its functions' source
    script.write_text("\n".join(blocks))
    runpy.run_path(str(script), run_name="llvm_doc")
    assert capsys.readouterr().out.strip() == "['ConstantOfShape', 'Reshape', 'Slice']"
