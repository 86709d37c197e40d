"""C peers: small C files compiled with ``gcc -O3`` at benchmark time (in a temporary
directory) and called through ctypes.  No gcc: the peer is skipped with a reason."""

from __future__ import annotations

import ctypes
import shutil
import subprocess
import tempfile
from pathlib import Path

from bench.common import Skip

_DIRS: list[tempfile.TemporaryDirectory[str]] = []  # kept alive while the libraries are loaded


def build(source: str, flags: tuple[str, ...] = ("-O3", "-march=native")) -> ctypes.CDLL:
    """``source`` compiled to a shared library with gcc and ``flags``, loaded."""
    gcc = shutil.which("gcc")
    if gcc is None:
        raise Skip("gcc is not installed")
    tmp = tempfile.TemporaryDirectory(prefix="nexus-cpeer-")
    _DIRS.append(tmp)
    src, lib = Path(tmp.name) / "peer.c", Path(tmp.name) / "peer.so"
    src.write_text(source)
    proc = subprocess.run([gcc, *flags, "-shared", "-fPIC", str(src), "-o", str(lib), "-lm"],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise Skip(f"gcc failed: {proc.stderr.strip()[:200]}")
    return ctypes.CDLL(str(lib))
