"""Every ``nexus`` subcommand over hostile inputs (issue 18), each in an audited child
process: status 1 or 2 for a hostile file (0 allowed for a valid one), one error report on
stderr and never a traceback, within the time limit, and no file opened outside the
model's directory (``sys.addaudithook`` on ``open``).

The default run takes a sample (every case of the issue once, ~30 s); the full corpus,
every case under every subcommand, runs with ``python -m nexus.testing.cli_corpus`` (or
``NEXUS_CLI_CORPUS=full`` here)."""

from __future__ import annotations

import os

import pytest

from nexus.testing import cli_corpus
from nexus.testing.extras import require_program

FULL = os.environ.get("NEXUS_CLI_CORPUS") == "full"


@pytest.fixture(scope="module")
def cases(tmp_path_factory) -> list[cli_corpus.Case]:
    return cli_corpus.build(str(tmp_path_factory.mktemp("corpus")))


def test_every_subcommand_survives_hostile_inputs(cases) -> None:
    require_program("dot", "graphviz")
    runs = cli_corpus.all_runs(cases) if FULL else cli_corpus.sample(cases, 36)
    failures = []
    for case, cmd in runs:
        out = cli_corpus.run_case(case, cmd)
        bad = cli_corpus.problems(case, cmd, out)
        if bad:
            failures.append(f"{case.name}: nexus {' '.join(cmd)}: {'; '.join(bad)}: {out.stderr[:300]!r}")
    assert not failures, "\n".join(failures)


def test_the_audit_hook_sees_files_opened_outside(cases) -> None:
    """The watcher itself: a symlinked payload read the old way would be reported."""
    case = next(c for c in cases if c.name == "payload")
    outside = [c for c in cases if c.name == "payload_outside"][0]
    out = cli_corpus.run_case(case, ["show"])
    assert out.status == 0 and not out.opened_outside, out.stderr
    link = os.path.join(outside.folder, "model.nx.safetensors")
    assert os.path.islink(link) and not os.path.realpath(link).startswith(outside.folder)
