"""``nexus.testing.extras.require``: only a missing optional third-party package skips a
test (fails under CI); an ImportError from Nexus's own code is an error, never a skip."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import nexus
from nexus.testing.extras import require


def outcome(fn: Callable[[], Any]) -> tuple[str, BaseException | None]:
    """What a test calling ``fn`` would see: "ok", "skip", "fail" or "error" (an exception)."""
    try:
        fn()
    except pytest.skip.Exception as e:
        return "skip", e
    except pytest.fail.Exception as e:
        return "fail", e
    except Exception as e:  # noqa: BLE001  (the exception is the outcome)
        return "error", e
    return "ok", None


@pytest.fixture(autouse=True)
def no_expected_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests set the list themselves (.ci/run sets it on some interpreters)."""
    monkeypatch.delenv("NEXUS_EXPECT_MISSING", raising=False)


@pytest.fixture
def outside_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CI", raising=False)


@pytest.fixture
def fake_modules(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[str, str], None]]:
    """Write modules for one test: a third-party one on sys.path, or one inside the nexus
    package (``nexus.<name>``, through a directory added to ``nexus.__path__``)."""
    third_party, inside = tmp_path / "site", tmp_path / "nexus_ext"
    third_party.mkdir()
    inside.mkdir()
    monkeypatch.syspath_prepend(str(third_party))
    monkeypatch.setattr(nexus, "__path__", [*nexus.__path__, str(inside)])
    written: list[str] = []

    def write(name: str, source: str) -> None:
        if name.startswith("nexus."):
            (inside / f"{name.removeprefix('nexus.')}.py").write_text(source)
        else:
            (third_party / f"{name}.py").write_text(source)
        written.append(name)

    yield write
    for name in written:
        sys.modules.pop(name, None)


def test_missing_third_party_package_skips_outside_ci(outside_ci: None) -> None:
    kind, e = outcome(lambda: require("nexus_test_no_such_package", "onnx"))
    assert kind == "skip"
    assert "nexus_test_no_such_package" in str(e) and "nexus-ir[onnx]" in str(e)


def test_missing_third_party_package_fails_in_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CI", "true")
    kind, e = outcome(lambda: require("nexus_test_no_such_package", "onnx"))
    assert kind == "fail", (kind, e)


def test_expected_missing_extra_skips_in_ci_and_says_why(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CI", "true")
    monkeypatch.setenv("NEXUS_EXPECT_MISSING", "torch, onnx")
    kind, e = outcome(lambda: require("nexus_test_no_such_package", "onnx"))
    assert kind == "skip" and "NEXUS_EXPECT_MISSING=torch, onnx" in str(e), (kind, e)
    kind, e = outcome(lambda: require("nexus_test_no_such_package", "jax"))
    assert kind == "fail", (kind, e)  # only the extras it names


def test_expected_missing_extra_is_still_returned_when_present(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CI", "true")
    monkeypatch.setenv("NEXUS_EXPECT_MISSING", "test")
    assert require("json", "test").__name__ == "json"


MODULE_LEVEL = """
from nexus.testing.extras import require

require("nexus_test_no_such_package", "onnx")


def test_never_runs() -> None:
    raise AssertionError("the module should have been skipped")
"""


@pytest.mark.parametrize("env, skipped", [
    ({}, True),
    ({"CI": "true"}, False),
    ({"CI": "true", "NEXUS_EXPECT_MISSING": "onnx"}, True),
])
def test_module_level_require_skips_or_fails_that_module(tmp_path: Path, env: dict[str, str], skipped: bool) -> None:
    """A real pytest run of a module that requires a missing extra at module level: the
    module is skipped with its reason (never a collection error that fails the whole run),
    and under CI it fails unless the extra is declared missing."""
    (tmp_path / "test_needs_extra.py").write_text(MODULE_LEVEL)
    (tmp_path / "test_other.py").write_text("def test_runs() -> None:\n    pass\n")
    repo = str(Path(__file__).resolve().parent.parent)
    child_env = {k: v for k, v in os.environ.items() if k not in ("CI", "NEXUS_EXPECT_MISSING")}
    child_env["PYTHONPATH"] = os.pathsep.join(filter(None, [repo, os.environ.get("PYTHONPATH")]))
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider"],
                         cwd=tmp_path, env={**child_env, **env}, capture_output=True, text=True, timeout=120)
    out = run.stdout + run.stderr
    assert "nexus_test_no_such_package is not installed (pip install 'nexus-ir[onnx]')" in out, out
    if skipped:
        assert run.returncode == 0 and "1 passed, 1 skipped" in out, out
        assert "SKIPPED [1] " in out and "test_needs_extra.py: nexus_test_no_such_package" in out, out
    else:
        assert run.returncode != 0 and "1 error" in out and "skipped" not in out, out


def test_missing_dependency_of_a_third_party_package_skips(outside_ci: None, fake_modules: Any) -> None:
    """The extra is installed but broken for want of its own dependency: still the extra."""
    fake_modules("nexus_test_half_installed", "import nexus_test_no_such_dependency\n")
    kind, e = outcome(lambda: require("nexus_test_half_installed", "jax"))
    assert kind == "skip" and "nexus_test_no_such_dependency" in str(e)


def test_present_package_is_returned() -> None:
    assert require("json", "test").__name__ == "json"


def test_import_error_inside_a_nexus_module_is_an_error(outside_ci: None, fake_modules: Any) -> None:
    fake_modules("nexus._test_broken", "raise ImportError('broken inside nexus')\n")
    kind, e = outcome(lambda: require("nexus._test_broken", "script"))
    assert kind == "error" and isinstance(e, ImportError) and "broken inside nexus" in str(e), (kind, e)


def test_missing_nexus_module_is_an_error(outside_ci: None) -> None:
    kind, e = outcome(lambda: require("nexus.no_such_module", "script"))
    assert kind == "error" and isinstance(e, ModuleNotFoundError), (kind, e)


def test_nexus_import_error_reached_through_a_third_party_package_is_an_error(
        outside_ci: None, fake_modules: Any) -> None:
    """A package that imports Nexus (a plugin) and meets a broken Nexus module."""
    fake_modules("nexus._test_broken_too", "raise ImportError('broken inside nexus')\n")
    fake_modules("nexus_test_plugin", "import nexus._test_broken_too\n")
    kind, e = outcome(lambda: require("nexus_test_plugin", "torch"))
    assert kind == "error" and "broken inside nexus" in str(e), (kind, e)
    fake_modules("nexus_test_plugin2", "from nexus.ir.types import no_such_name\n")
    kind, e = outcome(lambda: require("nexus_test_plugin2", "torch"))
    assert kind == "error" and "no_such_name" in str(e), (kind, e)


def test_nexus_errors_propagate_under_ci_too(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CI", "true")
    kind, e = outcome(lambda: require("nexus.no_such_module", "script"))
    assert kind == "error", (kind, e)


def test_no_test_requires_a_nexus_module() -> None:
    """Nexus's own modules are imported directly: an import error there must fail."""
    root = Path(__file__).resolve().parent
    pattern = ("require(\"nexus", "require('nexus", "importorskip(\"nexus", "importorskip('nexus",
               "find_spec(\"nexus")
    offenders = [p.name for p in root.glob("test_*.py") if p.name != Path(__file__).name
                 and any(s in p.read_text() for s in pattern)]
    assert not offenders, offenders
