"""The examples of docs/state.md run as written (their asserts compare chunked and
whole-sequence runs, and a restored snapshot with the run it was taken before)."""

from __future__ import annotations

import runpy
from pathlib import Path

import pytest

from nexus.testing.docs import examples_file

DOC = Path(__file__).resolve().parents[1] / "docs" / "state.md"


def test_state_doc_examples_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    runpy.run_path(str(examples_file(DOC, tmp_path, at_least=3)), run_name="state_doc")
    # The printed results the comments promise, in order.
    assert capsys.readouterr().out.split("\n")[:3] == ["[2. 2. 2.]", "[1. 1. 1.]", "[2. 2. 2.]"]
