"""``nexus.testing.extras.require``: only a missing optional third-party package skips a
test (fails under CI); an ImportError from Nexus's own code is an error, never a skip."""

from __future__ import annotations

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
    assert "nexus_test_no_such_package" in str(e) and "nexus[onnx]" in str(e)


def test_missing_third_party_package_fails_in_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CI", "true")
    kind, e = outcome(lambda: require("nexus_test_no_such_package", "onnx"))
    assert kind == "fail", (kind, e)


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
