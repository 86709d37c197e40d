"""An on-disk cache of compiled objects, so that a second process loads what the first one
compiled instead of running LLVM's O3 pipeline and code generation again.

On only where asked: ``NEXUS_CACHE_DIR=/some/dir`` in the environment, or
``nx.compile(g, backend="llvm", cache="/some/dir")``; ``cache=False`` turns it off even
where the variable is set.  An entry is keyed by the SHA-256 of everything its object code
depends on (:func:`key`): the emitted LLVM IR (which holds the graph), the target triple,
CPU and features, the LLVM and llvmlite versions and the optimisation pipeline's settings.
A file holds the object's own SHA-256 before the object; one that does not match (a torn
write, a damaged disk) is ignored and compiled again.  Writes go to a temporary file that
is renamed into place, so two processes filling the cache at once never see half a file.

The cache holds machine code that this process will run: keep it in a directory only you
can write (as for Python's ``__pycache__`` or numba's ``cache=True``).
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path

ENV = "NEXUS_CACHE_DIR"
FORMAT = b"nexus-llvm-object-1\n"  # changes when the file layout does


def cache_dir(option: str | os.PathLike[str] | bool | None) -> Path | None:
    """The directory ``option`` asks for: a path; False for none; None or True for
    ``$NEXUS_CACHE_DIR`` (none where it is unset or empty)."""
    if option is False:
        return None
    if option is None or option is True:
        env = os.environ.get(ENV, "")
        return Path(env) if env else None
    if isinstance(option, (str, os.PathLike)):
        return Path(option)
    raise TypeError(f"cache is a directory, True, False or None, got {option!r}")


def key(*parts: str) -> str:
    """The entry name of an object compiled from ``parts``."""
    h = hashlib.sha256()
    for p in parts:
        b = p.encode()
        h.update(len(b).to_bytes(8, "little"))
        h.update(b)
    return h.hexdigest()


def load(directory: Path, name: str) -> bytes | None:
    """The object stored under ``name``, or None where there is none or it is damaged."""
    try:
        data = (directory / f"{name}.o").read_bytes()
    except OSError:
        return None
    head = len(FORMAT) + 32
    if not data.startswith(FORMAT) or len(data) < head:
        return None
    obj = data[head:]
    return obj if hashlib.sha256(obj).digest() == data[len(FORMAT):head] else None


def store(directory: Path, name: str, obj: bytes) -> None:
    """Store ``obj`` under ``name``; a directory that cannot be written is left alone (the
    cache is an optimisation, never a reason for a compile to fail)."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{name[:16]}-", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(FORMAT + hashlib.sha256(obj).digest() + obj)
            os.replace(tmp, directory / f"{name}.o")
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    except OSError:
        pass
