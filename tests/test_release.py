"""The release: one version everywhere, ``python -m nexus`` is the ``nexus`` command, and the
wheel and sdist carry every file of the package.

Oracles: the version is compared across its independent readers (setuptools' metadata of
the installed distribution, the CLI's output, the changelog's headings); the package's
file list is git's list of tracked files, compared with what ``python -m build`` packed.
.ci/run also installs the wheel into a fresh venv and runs the demo and smoke tests on it.
"""

from __future__ import annotations

import email
import importlib.metadata as md
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tomllib
import zipfile
from pathlib import Path

import pytest

import nexus
from nexus.testing.extras import in_ci, require

ROOT = Path(__file__).resolve().parents[1]
VERSION_RE = re.compile(r"^\d+\.\d+\.\d+((a|b|rc)\d+)?(\.post\d+)?(\.dev\d+)?$")


def pyproject() -> dict:
    with open(ROOT / "pyproject.toml", "rb") as f:
        return tomllib.load(f)


def nexus_command(*args: str) -> subprocess.CompletedProcess[str]:
    """``python -m nexus ARGS`` from outside the checkout, with the package this test
    imported first on the path (the checkout's, or the installed wheel's in CI's smoke run)."""
    env = {**os.environ, "PYTHONPATH": str(Path(nexus.__file__).resolve().parents[1])}
    return subprocess.run([sys.executable, "-m", "nexus", *args], capture_output=True, text=True,
                          env=env, cwd=ROOT / "tests", timeout=120)


# --- one version ------------------------------------------------------------------------
def test_the_version_is_set_in_one_place() -> None:
    project = pyproject()["project"]
    assert project["name"] == "nexus-ir"
    assert "version" not in project and "version" in project["dynamic"]
    assert pyproject()["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "nexus.__version__"}
    assert VERSION_RE.match(nexus.__version__), nexus.__version__


def test_nexus_version_prints_the_package_version() -> None:
    done = nexus_command("--version")
    assert done.returncode == 0, done.stderr
    assert done.stdout.split()[:2] == ["nexus", nexus.__version__], done.stdout


def test_the_changelog_has_a_section_for_this_version() -> None:
    text = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    headings = re.findall(r"^## \[([^\]]+)\]", text, re.M)
    assert headings[0] == "Unreleased", headings
    assert nexus.__version__ in headings, f"CHANGELOG.md has no section for {nexus.__version__}: {headings}"
    released = [h for h in headings if h != "Unreleased"]
    assert released == sorted(released, key=lambda v: [int(p) for p in re.findall(r"\d+", v)], reverse=True)


def test_installed_metadata_agrees() -> None:
    try:
        installed = md.version("nexus-ir")
    except md.PackageNotFoundError:
        if in_ci():
            pytest.fail("nexus-ir is not installed (.ci/run installs it with pip install -e)")
        pytest.skip("nexus-ir is not installed here (pip install -e .)")
    assert installed == nexus.__version__


def test_the_smoke_run_tests_the_installed_wheel() -> None:
    """.ci/run installs the wheel into a fresh venv and runs some tests from outside the
    checkout with NEXUS_SMOKE_WHEEL=1: they must import the installed package."""
    if not os.environ.get("NEXUS_SMOKE_WHEEL"):
        pytest.skip("not the wheel's smoke run (.ci/run sets NEXUS_SMOKE_WHEEL=1 there)")
    where = Path(nexus.__file__).resolve()
    assert ROOT / "nexus" not in where.parents, f"imported the checkout's nexus ({where}), not the wheel's"
    assert Path(sys.prefix).resolve() in where.parents and "site-packages" in where.parts, where
    direct = json.loads(md.distribution("nexus-ir").read_text("direct_url.json") or "{}")
    assert not direct.get("dir_info", {}).get("editable"), direct  # the wheel, not pip install -e


# --- python -m nexus --------------------------------------------------------------------
def test_python_dash_m_nexus_is_the_command() -> None:
    done = nexus_command("--help")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: nexus ")
    for command in ("show", "verify", "viz", "run", "opt", "convert", "compile"):
        assert command in done.stdout

    done = nexus_command("run", "seed:skip5_loop")
    assert (done.returncode, done.stdout) == (0, "result 0: i32 = 31\n")  # seed 000: sum 1..10 skip 5, break > 25

    done = nexus_command("show", "no-such-file.nx")
    assert done.returncode == 1 and done.stderr.startswith("nexus: error: ") and "Traceback" not in done.stderr

    done = nexus_command()
    assert done.returncode == 2 and "usage: nexus" in done.stderr  # argparse: a command is required


# --- the wheel and the sdist ------------------------------------------------------------
def tracked_files() -> list[str]:
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout: no list of the package's files to compare with")
    out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    return [f for f in out.split("\0") if f and (ROOT / f).is_file()]


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, list[str]]:
    """A wheel and an sdist built from a copy of the tracked files (so nothing untracked in
    the checkout can hide a missing file), without network (setuptools as installed), after
    the README's quick start ran the demo there: its output folder, ./nexus-demo/, lies
    beside nexus/ as it does in a user's checkout, and must not be packed."""
    # build.__main__, not build: the checkout's build/ folder (CI's venvs) imports as an empty
    # namespace package named build where the tool is not installed.
    require("build.__main__", "release")
    files = tracked_files()
    tmp = tmp_path_factory.mktemp("release")
    src = tmp / "src"
    for f in files:
        (src / f).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / f, src / f)
    demo = subprocess.run([sys.executable, "-m", "nexus.demo", "--quiet"], capture_output=True, text=True,
                          cwd=src, env={**os.environ, "PYTHONPATH": str(src)}, timeout=300)
    assert demo.returncode == 0 and (src / "nexus-demo" / "skip5_loop.nx").is_file(), demo.stdout + demo.stderr
    done = subprocess.run([sys.executable, "-m", "build", "--no-isolation", "--outdir", str(tmp / "dist"), str(src)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (wheel,) = (tmp / "dist").glob("*.whl")
    (sdist,) = (tmp / "dist").glob("*.tar.gz")
    return wheel, sdist, files


def test_the_wheel_holds_every_file_of_the_package(built: tuple[Path, Path, list[str]]) -> None:
    wheel, _, files = built
    assert wheel.name == f"nexus_ir-{nexus.__version__}-py3-none-any.whl"
    names = zipfile.ZipFile(wheel).namelist()
    package = sorted(n for n in names if not n.startswith(f"nexus_ir-{nexus.__version__}.dist-info/"))
    assert package == sorted(f for f in files if f.startswith("nexus/"))
    assert "nexus/py.typed" in package  # package data: typed (PEP 561)


def test_the_wheel_holds_only_the_package(built: tuple[Path, Path, list[str]]) -> None:
    """Nothing beside nexus/ is installed into site-packages: package discovery once matched
    `nexus*`, so the demo's ./nexus-demo/ went into the wheel as a namespace package."""
    wheel, _, _ = built
    top = {name.split("/")[0] for name in zipfile.ZipFile(wheel).namelist()}
    assert top == {"nexus", f"nexus_ir-{nexus.__version__}.dist-info"}, sorted(top)


def test_the_installed_wheel_holds_only_the_package() -> None:
    """The wheel .ci/run built from the checkout (after running the demo there) and installed:
    its files are nexus/, its .dist-info and the `nexus` script, nothing else."""
    if not os.environ.get("NEXUS_SMOKE_WHEEL"):
        pytest.skip("not the wheel's smoke run (.ci/run sets NEXUS_SMOKE_WHEEL=1 there)")
    files = md.distribution("nexus-ir").files or []
    # RECORD names the script as ../../../bin/nexus: outside site-packages, not a package.
    top = {f.parts[0] for f in files if f.parts[0] != ".."}
    assert top == {"nexus", f"nexus_ir-{nexus.__version__}.dist-info"}, sorted(top)


def test_the_wheel_metadata(built: tuple[Path, Path, list[str]]) -> None:
    wheel, _, _ = built
    info = f"nexus_ir-{nexus.__version__}.dist-info"
    with zipfile.ZipFile(wheel) as z:
        meta = email.message_from_bytes(z.read(f"{info}/METADATA"))
        entry_points = z.read(f"{info}/entry_points.txt").decode()
    assert (meta["Name"], meta["Version"]) == ("nexus-ir", nexus.__version__)
    assert sorted(meta.get_all("Provides-Extra")) == sorted(pyproject()["project"]["optional-dependencies"])
    core = [r for r in meta.get_all("Requires-Dist") if "extra ==" not in r]
    assert sorted(core) == sorted(pyproject()["project"]["dependencies"])
    assert "nexus = nexus.cli.main:main" in entry_points
    assert meta["Requires-Python"] == ">=3.11"


def test_the_sdist_holds_the_sources_docs_and_tests(built: tuple[Path, Path, list[str]]) -> None:
    _, sdist, files = built
    top = f"nexus_ir-{nexus.__version__}/"
    with tarfile.open(sdist) as t:
        names = {n[len(top):] for n in t.getnames() if n.startswith(top)}
    wanted = {f for f in files if f.startswith(("nexus/", "docs/", "tests/"))
              and not f.startswith("docs/_generated/")}
    wanted |= {"pyproject.toml", "README.md", "CHANGELOG.md", "MANIFEST.in"}
    assert not wanted - names, sorted(wanted - names)[:20]
    assert not any(n.startswith("nexus-demo/") for n in names), "the sdist packed the demo's output"


# --- the nx namespace (documented by the API reference) ------------------------------------
def test_nx_names_stay_what_they_are_after_every_submodule_is_imported() -> None:
    """A submodule imported by name (``import nexus.stream``) must not replace the public
    ``nx.<name>`` of the same name, whatever was imported first (in a fresh process)."""
    code = (
        "import importlib, pathlib, types, nexus\n"
        "root = pathlib.Path(nexus.__file__).parent\n"
        "for path in sorted(root.rglob('*.py')):\n"
        "    parts = list(path.relative_to(root.parent).with_suffix('').parts)\n"
        "    if parts[-1] in ('__init__', '__main__'):\n"
        "        continue\n"
        "    try:\n"
        "        importlib.import_module('.'.join(parts))\n"
        "    except Exception:\n"
        "        pass  # an extra not installed here (test_release_extras.py checks the imports)\n"
        "bad = []\n"
        "for name in nexus._EXPORTS:\n"
        "    try:\n"
        "        value = getattr(nexus, name)\n"
        "    except ImportError:\n"
        "        continue  # its extra is not installed here\n"
        "    if isinstance(value, types.ModuleType):\n"
        "        bad.append(name)\n"
        "print(bad)\n")
    env = {**os.environ, "PYTHONPATH": str(Path(nexus.__file__).resolve().parents[1])}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1] == "[]", done.stdout
