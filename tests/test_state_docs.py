"""The examples of docs/state.md run as written (their asserts compare chunked and
whole-sequence runs, and a restored snapshot with the run it was taken before)."""

from __future__ import annotations

import re
import runpy
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parents[1] / "docs" / "state.md"


def test_state_doc_examples_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                capsys: pytest.CaptureFixture[str]) -> None:
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S)
    assert len(blocks) >= 3
    monkeypatch.chdir(tmp_path)
    script = tmp_path / "state_doc.py"  # a file: @nx.script reads its functions' source
    script.write_text("\n".join(blocks))
    runpy.run_path(str(script), run_name="state_doc")
    # The printed results the comments promise, in order.
    assert capsys.readouterr().out.split("\n")[:3] == ["[2. 2. 2.]", "[1. 1. 1.]", "[2. 2. 2.]"]
