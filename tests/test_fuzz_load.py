"""A short smoke of the load fuzz target (nexus.testing.fuzz_load): seeded random
mutations of valid texts and payloads raise only the errors users are meant to meet.
Long runs: ``python -m nexus.testing.fuzz_load --seconds N`` (atheris when installed)."""

from __future__ import annotations

import os
import subprocess
import sys

from nexus.testing import fuzz_load

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_seeds_load() -> None:
    for data in fuzz_load.seeds():
        fuzz_load.one_input(data)  # valid inputs raise nothing


def test_random_mutations_raise_only_expected_errors(tmp_path) -> None:
    runner = fuzz_load.Runner(str(tmp_path), stop=False)
    fuzz_load.run_random(runner, seconds=3, seed=18)
    assert runner.runs > 1000 and not runner.found, runner.found


def test_the_command_runs_and_reports(tmp_path) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-m", "nexus.testing.fuzz_load", "--seconds", "2", "--random",
                           "--crashes", str(tmp_path)], capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0 and "0 crashes" in proc.stderr, proc.stderr[-2000:]
