"""Every ``OSError`` a ``nexus`` subcommand meets is one line on stderr naming the file and
the reason (issue 32): a full disk (Linux's ``/dev/full``, reached through a link whose
name has the suffix the command wants), a missing directory, a file that cannot be read,
and standard output on a full disk.  Each runs in a child process, so that a traceback or
a second report at exit would show."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

import nexus as nx
from nexus import seeds

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")])}

linux_only = pytest.mark.skipif(not os.path.exists("/dev/full") or not os.path.exists("/proc/self/mem"),
                                reason="needs Linux's /dev/full and /proc/self/mem")


def _nexus(*args: str, stdout=subprocess.PIPE, cwd: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "nexus", *args], stdout=stdout, stderr=subprocess.PIPE, text=True,
                          timeout=120, env=ENV, stdin=subprocess.DEVNULL, cwd=cwd)


def _one_line(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode == 1, (proc.returncode, proc.stderr[-2000:])
    assert "Traceback" not in proc.stderr and proc.stderr.count("\n") == 1, proc.stderr[-2000:]
    assert proc.stderr.startswith("nexus: error: "), proc.stderr
    return proc.stderr


def _full(tmp_path, name: str) -> str:
    """A path ending in ``name`` whose writes meet a full disk."""
    link = tmp_path / name
    link.symlink_to("/dev/full")
    return str(link)


@linux_only
@pytest.mark.parametrize("name", ["out.nx", "out.dot"])
def test_a_full_disk_is_one_line(tmp_path, name: str) -> None:
    out = _full(tmp_path, name)
    command = ["opt", "seed:skip5_loop", "-o", out] if name.endswith(".nx") else ["viz", "seed:ifelse", "-o", out]
    err = _one_line(_nexus(*command))
    assert out in err and "No space left on device" in err


@linux_only
def test_convert_to_a_full_disk_is_one_line(tmp_path) -> None:
    nx.save(seeds.ifelse(), tmp_path / "g.nx")
    out = _full(tmp_path, "g.onnx")
    err = _one_line(_nexus("convert", str(tmp_path / "g.nx"), "-o", out))
    assert out in err and "No space left on device" in err


@linux_only
def test_html_to_a_full_disk_is_one_line(tmp_path, monkeypatch, capsys) -> None:
    # In-process with the page stubbed: drawing it needs Graphviz, which is not the point here.
    from nexus.cli.main import main
    from nexus.viz import html

    monkeypatch.setattr(html, "page", lambda g, path=None, types=True, engines=None: "<html>graph</html>")
    out = _full(tmp_path, "g.html")
    assert main(["viz", "seed:ifelse", "--html", out]) == 1
    captured = capsys.readouterr()
    assert captured.err == f"nexus: error: cannot write {out}: No space left on device\n"
    assert "wrote" not in captured.out


@linux_only
def test_standard_output_on_a_full_disk_is_one_line() -> None:
    with open("/dev/full", "w") as full:
        err = _one_line(_nexus("show", "seed:skip5_loop", stdout=full))
    assert "standard output" in err and "No space left on device" in err


def test_writing_into_a_missing_directory_is_one_line(tmp_path) -> None:
    out = str(tmp_path / "missing" / "g.nx")
    err = _one_line(_nexus("opt", "seed:ifelse", "-o", out))
    assert err == f"nexus: error: cannot write {out}: the directory {tmp_path / 'missing'} does not exist\n"
    nx.save(seeds.ifelse(), tmp_path / "g.nx")
    out = str(tmp_path / "missing" / "g.onnx")
    err = _one_line(_nexus("convert", str(tmp_path / "g.nx"), "-o", out))
    assert "cannot write" in err and "does not exist" in err


@linux_only
@pytest.mark.parametrize("command", [["show"], ["verify"], ["run"], ["opt"], ["viz"], ["compile", "--backend=python"],
                                     ["convert", "-o", "x.onnx"]])
def test_a_file_that_cannot_be_read_is_one_line(tmp_path, command: list[str]) -> None:
    # /proc/self/mem is a regular file whose first page cannot be read (EIO), even by root,
    # for whom a chmod 000 file would be readable.
    src = tmp_path / "g.nx"
    src.symlink_to("/proc/self/mem")
    err = _one_line(_nexus(command[0], str(src), *command[1:], cwd=str(tmp_path)))
    assert str(src) in err and "Input/output error" in err
