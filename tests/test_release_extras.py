"""Each extra of pyproject.toml installs what the Nexus modules that need it import, on its own.

We check this in the one environment CI has (every extra installed) rather than in one venv
per extra: a subprocess hides every installed third-party package except those an extra
brings (the extra's requirements and everything they require, read from the installed
distributions' metadata), plus what the core brings (numpy, sympy), and then imports
Nexus's modules.  The oracle is the package metadata and the import system:

- with no extra, every module that fails to import must fail on a hidden package, and that
  package must belong to some extra (else a dependency is not declared at all);
- with one extra, every module that failed on one of that extra's packages must import
  (else the extra lacks a requirement, or the module needs two extras at once);
- every third-party import anywhere in the package's source, inside functions too (read
  with ``ast``), is the core's or some extra's;
- ``all`` is every extra but the tool extras (test, docs, release).

A fresh venv per extra would also check that pip can resolve each one; .ci/run does that
for the wheel (pip install --dry-run of each extra), see the README, "Releases".
"""

from __future__ import annotations

import ast
import importlib.metadata as md
import json
import subprocess
import sys
import tomllib
from functools import cache
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from nexus.testing.extras import expected_missing, in_ci

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "nexus"
TOOL_EXTRAS = {"test", "docs", "release"}  # tools for developing Nexus, not parts of it
# Modules that cannot be the first of their family to be imported, with the error they give,
# until they are fixed (the test fails once they import, to have the entry removed).
KNOWN_IMPORT_ORDER_BUGS: dict[str, str] = {}

# Third-party packages that Nexus uses when they are there and does without otherwise, named
# by no extra on purpose (each with where it is used and what happens without it).
UNDECLARED_OPTIONAL = {
    "atheris": "nexus.testing.fuzz_load: coverage-guided fuzzing when installed, else seeded mutations",
}


def project() -> dict:
    with open(ROOT / "pyproject.toml", "rb") as f:
        return tomllib.load(f)["project"]


EXTRAS: dict[str, list[str]] = project()["optional-dependencies"]
DIST = canonicalize_name(project()["name"])


def closure(requirements: list[str]) -> set[str] | None:
    """The installed distributions these requirements bring, transitively (canonical
    names); None when one of them is not installed."""
    seen: set[str] = set()
    todo = [Requirement(r) for r in requirements]
    while todo:
        req = todo.pop()
        name = canonicalize_name(req.name)
        if name == DIST:  # `all` names the project's own extras
            for extra in req.extras:
                todo += [Requirement(r) for r in EXTRAS[extra]]
            continue
        if name in seen:
            continue
        try:
            requires = md.requires(name) or []
        except md.PackageNotFoundError:
            return None
        seen.add(name)
        for text in requires:
            sub = Requirement(text)
            if sub.marker is None or sub.marker.evaluate({"extra": ""}):
                todo.append(sub)
    return seen


@cache
def top_levels() -> dict[str, set[str]]:
    """Top-level import name -> the installed distributions that provide it."""
    return {top: {canonicalize_name(d) for d in dists} for top, dists in md.packages_distributions().items()}


def hidden_except(allowed: set[str]) -> list[str]:
    """The top-level names of every installed distribution outside ``allowed``."""
    return sorted(top for top, dists in top_levels().items()
                  if top != "nexus" and not dists & allowed)


def owners(top: str) -> list[str]:
    """The extras whose closure provides the top-level module ``top`` (for an extra that is
    not installed, one that names it: ``torch``, ``array_api_compat``)."""
    dists = top_levels().get(top, set())
    return sorted(e for e in EXTRAS if e != "all" and (dists & (closure(EXTRAS[e]) or set())
                                                       or top in declared_tops(e)))


def declared_tops(extra: str) -> set[str]:
    """The import names an extra's own requirements would have (their names, '-' as '_')."""
    return {canonicalize_name(Requirement(r).name).replace("-", "_") for r in EXTRAS[extra]}


def missing_tops() -> list[str]:
    """Import names of the extras this run expects to be missing (NEXUS_EXPECT_MISSING):
    hidden too, so a module that needs one counts as needing that extra."""
    return sorted({t for e in expected_missing() if e in EXTRAS for t in declared_tops(e)})


def modules() -> list[str]:
    names = []
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        names.append(".".join(parts))
    return names


# Run in a subprocess: hide some top-level modules, import others, report each one's fate.
PROBE = r"""
import importlib, importlib.abc, json, sys

hidden = set(json.loads(sys.argv[1]))

class Hide(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in hidden:
            raise ModuleNotFoundError(f"No module named {name!r} (hidden)", name=name)
        return None

sys.meta_path.insert(0, Hide())
result = {}
for module in json.loads(sys.argv[2]):
    try:
        importlib.import_module(module)
        result[module] = "ok"
    except BaseException as e:
        cause = e
        while cause is not None and not (isinstance(cause, ModuleNotFoundError) and cause.name):
            cause = cause.__cause__ or cause.__context__
        if cause is not None and cause.name.split(".")[0] in hidden:
            result[module] = "hidden:" + cause.name.split(".")[0]
        else:
            result[module] = f"error:{type(e).__name__}: {e}"
print(json.dumps(result))
"""


def probe(hidden: list[str], names: list[str]) -> dict[str, str]:
    done = subprocess.run([sys.executable, "-c", PROBE, json.dumps(hidden), json.dumps(names)],
                          capture_output=True, text=True, cwd=ROOT, timeout=300,
                          env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


@cache
def core() -> set[str]:
    found = closure(project()["dependencies"])
    assert found is not None, "the core's dependencies are not installed"
    return found


@cache
def without_extras() -> dict[str, str]:
    return probe(sorted(set(hidden_except(core())) | set(missing_tops())), modules())


def extra_closure_or_skip(extra: str) -> set[str]:
    found = closure(EXTRAS[extra])
    if found is None:
        msg = f"the {extra!r} extra is not installed (pip install 'nexus-ir[{extra}]')"
        if in_ci() and extra not in expected_missing():
            pytest.fail(msg)
        pytest.skip(msg)
    return found


def test_core_modules_fail_only_on_a_hidden_package_that_an_extra_installs() -> None:
    problems = []
    for module, fate in without_extras().items():
        known = KNOWN_IMPORT_ORDER_BUGS.get(module)
        if known is not None:
            if known not in fate:
                problems.append(f"{module} no longer fails with {known!r} ({fate}): "
                                f"remove it from KNOWN_IMPORT_ORDER_BUGS")
            continue
        if fate.startswith("error:"):
            problems.append(f"{module}: {fate[6:]}")
        elif fate.startswith("hidden:") and not owners(fate[7:]):
            problems.append(f"{module} imports {fate[7:]}, which no extra installs")
    assert not problems, "\n".join(problems)
    # The package itself and its command need nothing optional.
    fates = without_extras()
    for module in ("nexus", "nexus.cli.main", "nexus.__main__", "nexus.demo", "nexus.io", "nexus.seeds"):
        assert fates[module] == "ok", (module, fates[module])


@pytest.mark.parametrize("extra", sorted(e for e in EXTRAS if e != "all"))
def test_each_extra_alone_imports_the_modules_that_need_it(extra: str) -> None:
    allowed = core() | extra_closure_or_skip(extra)
    needing = sorted(m for m, fate in without_extras().items()
                     if fate.startswith("hidden:") and extra in owners(fate[7:]))
    if not needing:
        return  # a tool extra (docs, release) that no module imports
    fates = probe(hidden_except(allowed), needing)
    broken = {m: fate for m, fate in fates.items() if fate != "ok"}
    assert not broken, f"with only nexus-ir[{extra}]: {broken}"


def test_every_third_party_import_in_the_source_is_declared() -> None:
    declared = set(core())
    for extra in EXTRAS:
        declared |= closure(EXTRAS[extra]) or {canonicalize_name(Requirement(r).name) for r in EXTRAS[extra]}
    stdlib = set(sys.stdlib_module_names)
    problems = []
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                if top in stdlib or top in ("nexus", "__future__") or top in UNDECLARED_OPTIONAL:
                    continue
                dists = top_levels().get(top)
                if dists is None:
                    continue  # not installed here: the per-extra tests name what is missing
                if not dists & declared:
                    problems.append(f"{path.relative_to(ROOT)}:{node.lineno}: imports {top}, "
                                    f"which neither the core nor any extra installs")
    assert not problems, "\n".join(problems)


def test_all_is_every_extra_but_the_tools() -> None:
    (req,) = [Requirement(r) for r in EXTRAS["all"]]
    assert canonicalize_name(req.name) == DIST
    assert req.extras == set(EXTRAS) - TOOL_EXTRAS - {"all"}
