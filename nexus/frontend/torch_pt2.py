"""Reading ``.pt2`` files (``torch.export.save``) without running code from them.

``torch.export.load`` may unpickle: weights and constants marked ``use_pickle``, custom
and opaque objects, legacy ``.pt`` payloads, and, when the restricted unpickler refuses
the sample inputs, those with the full one; it also loads AOTInductor shared libraries.
:func:`load_pt2` first checks the archive: only the files of the plain format (JSON
program and configs, raw weight and constant bytes, extra text files), no pickled
payload, and sample inputs that torch's ``weights_only`` unpickler (which builds tensors
and containers, never calls arbitrary code) accepts.  Only then is ``torch.export.load``
called, and it takes the paths that read no pickle.
"""

from __future__ import annotations

import io
import json
import os
import re
import zipfile
from typing import Any

from nexus.frontend.torch_import import TorchImportError, TorchProgram, import_exported

# Paths inside the archive (below its top folder) that the plain format has.
_ALLOWED = re.compile(
    r"(archive_format|archive_version|byteorder|\.data/[A-Za-z0-9_.]+|models/[A-Za-z0-9_]+\.json"
    r"|data/weights/(weight_\d+|[A-Za-z0-9_]+_weights_config\.json)"
    r"|data/constants/(tensor_\d+|[A-Za-z0-9_]+_constants_config\.json)"
    r"|data/sample_inputs/[A-Za-z0-9_]+\.pt|extra/[^/]+)")


def check_pt2(path: str) -> None:
    """Raise :class:`TorchImportError` unless ``path`` is a ``.pt2`` archive that loads
    without unpickling anything beyond tensors (see the module docstring)."""
    import torch

    if not os.path.isfile(path):
        raise TorchImportError(f"{path}: no such file")
    if not zipfile.is_zipfile(path):
        raise TorchImportError(f"{path}: not a .pt2 file (torch.export.save writes a zip archive)")
    with zipfile.ZipFile(path) as z:
        names = [n for n in z.namelist() if not n.endswith("/")]
        tops = {n.split("/", 1)[0] for n in names}
        if len(tops) != 1 or any("/" not in n for n in names):
            raise TorchImportError(f"{path}: not a .pt2 archive of torch.export.save (one top folder expected)")
        top = tops.pop() + "/"
        for n in names:
            rest = n[len(top):]
            if not _ALLOWED.fullmatch(rest):
                raise TorchImportError(f"{path}: archive entry {rest!r} is not part of a plain exported program "
                                       f"(pickled payloads, custom objects and compiled code are refused)")
        if f"{top}models/model.json" not in names:
            raise TorchImportError(f"{path}: the archive has no models/model.json")
        for kind in ("weights", "constants"):
            cfg = f"{top}data/{kind}/model_{kind}_config.json"
            if cfg not in names:
                continue
            try:
                entries = json.loads(z.read(cfg)).get("config", {})
            except (ValueError, AttributeError):
                raise TorchImportError(f"{path}: {cfg[len(top):]} is not valid JSON") from None
            for key, meta in entries.items():
                if not isinstance(meta, dict) or meta.get("use_pickle", True):
                    raise TorchImportError(f"{path}: {kind[:-1]} {key!r} is stored pickled, which Nexus does not "
                                           f"load (it could run code)")
        sample = f"{top}data/sample_inputs/model.pt"
        if sample in names:
            try:
                torch.load(io.BytesIO(z.read(sample)), weights_only=True)
            except Exception as e:  # noqa: BLE001  (the restricted unpickler raises UnpicklingError and others)
                raise TorchImportError(f"{path}: the sample inputs are not plain tensors ({type(e).__name__}); "
                                       f"refusing to unpickle them") from None


def load_pt2(path: str | os.PathLike[str]) -> Any:
    """The ``ExportedProgram`` saved in ``path``, checked by :func:`check_pt2` first."""
    import torch

    p = os.fspath(path)
    check_pt2(p)
    try:
        return torch.export.load(p)
    except Exception as e:  # noqa: BLE001  (torch raises many kinds on a damaged file)
        raise TorchImportError(f"{p}: torch.export.load failed: {type(e).__name__}: {e}") from None


def from_pt2(path: str | os.PathLike[str], *, params: str = "constants") -> TorchProgram:
    """Import a ``.pt2`` file as a :class:`TorchProgram`."""
    name = os.path.splitext(os.path.basename(os.fspath(path)))[0]
    return import_exported(load_pt2(path), params=params, name=name)
