"""Hostile ``.pt2`` archives: every way we know in which ``torch.export.load`` would run code,
import a module, or allocate without bound, each built from a real ``torch.export.save``
file, and a fuzz of random mutations.  The oracle for "runs no code" is a canary: every
payload, if run, makes a directory; none may exist after the load.  Every archive is
either refused with one :class:`TorchImportError` line naming the file, or imports and
gives the model's own outputs."""

from __future__ import annotations

import json
import os
import pickle
import random
import sys
import warnings
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from nexus.testing.extras import require

torch = require("torch", "torch")
nn = torch.nn
Dim = torch.export.Dim

import nexus.frontend.torch.pt2 as pt2  # noqa: E402
from nexus.frontend.torch.data import TorchImportError  # noqa: E402

Files = dict[str, bytes]


class Net(nn.Module):
    """Parameters, a buffer, a lifted constant, a symbolic batch and a cond with subgraphs:
    the parts of the format that carry names, sizes and code-like strings."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(3, 3)
        self.register_buffer("shift", torch.ones(3))

    def forward(self, x: Any) -> Any:
        y = self.lin(x) + self.shift + torch.tensor([1.0, 2.0, 3.0])
        return torch.cond(y.sum() > 0, lambda v: v.sin(), lambda v: v.cos(), (y,))


@pytest.fixture(scope="module")
def base(tmp_path_factory: Any) -> tuple[Files, str, Any]:
    torch.manual_seed(0)
    model = Net().eval()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ep = torch.export.export(model, (torch.randn(4, 3),), dynamic_shapes=({0: Dim("batch", max=64)},))
        path = tmp_path_factory.mktemp("pt2") / "net.pt2"
        torch.export.save(ep, str(path))
    with zipfile.ZipFile(path) as z:
        files = {i.filename: z.read(i.filename) for i in z.infolist()}
    top = next(iter(files)).split("/")[0] + "/"
    return files, top, model


@pytest.fixture
def canary(tmp_path: Path, monkeypatch: Any) -> Path:
    """A path that every payload creates if it runs, and a module on sys.path that creates
    it when imported."""
    path = tmp_path / "canary"
    mod = tmp_path / "mods"
    mod.mkdir()
    (mod / "nexus_canary_mod.py").write_text(f"import os\nos.mkdir({str(path)!r})\nclass E: pass\n")
    monkeypatch.syspath_prepend(str(mod))
    yield path
    sys.modules.pop("nexus_canary_mod", None)


class _Boom:
    def __init__(self, path: Path) -> None:
        self.path = str(path)

    def __reduce__(self) -> Any:
        return (os.mkdir, (self.path,))


def _write(files: Files, dst: Path, compress: int = zipfile.ZIP_STORED) -> Path:
    with zipfile.ZipFile(dst, "w", compress) as z:
        for name, data in files.items():
            z.writestr(name, data)
    return dst


def _program(files: Files, top: str) -> dict[str, Any]:
    return json.loads(files[f"{top}models/model.json"])


def _with_program(files: Files, top: str, edit: Callable[[dict[str, Any]], None]) -> Files:
    j = _program(files, top)
    edit(j)
    return {**files, f"{top}models/model.json": json.dumps(j).encode()}


def _edit_strings(j: Any, key: str, new: Callable[[str], Any]) -> int:
    """Replace every string under ``key`` in ``j`` by ``new(old)``; how many there were."""
    n = 0
    stack = [j]
    while stack:
        o = stack.pop()
        if isinstance(o, dict):
            for k, v in o.items():
                if k == key and isinstance(v, str):
                    o[k] = new(v)
                    n += 1
                else:
                    stack.append(v)
        elif isinstance(o, list):
            stack.extend(o)
    return n


def _load(path: Path, **kw: Any) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return pt2.from_pt2(path, **kw)


def _agrees(prog: Any, model: Any) -> None:
    for b in (1, 5):
        x = torch.randn(b, 3)
        with torch.no_grad():
            np.testing.assert_allclose(prog.graph(x.numpy()), model(x).numpy(), rtol=1e-5, atol=1e-6)


def _refused(path: Path, words: str, canary: Path, **kw: Any) -> None:
    try:
        _load(path, **kw)
    except TorchImportError as e:
        msg = str(e)
    else:
        msg = ""
    assert not canary.exists(), "the payload ran"
    assert msg.startswith(str(path)) and "\n" not in msg and words in msg, msg or "it loaded"


# --- every program's pickles: weights, constants, custom objects, sample inputs ---------------------
def _pickled_weight(files: Files, top: str, payload: bytes, program: str = "model") -> Files:
    cfg_name = f"{top}data/weights/model_weights_config.json"
    cfg = json.loads(files[cfg_name])
    meta = next(iter(cfg["config"].values()))
    meta["use_pickle"] = True
    meta["path_name"] = "weight_99"
    out = {**files, f"{top}data/weights/weight_99": payload}
    out[f"{top}data/weights/{program}_weights_config.json"] = json.dumps(cfg).encode()
    return out


def test_a_second_program_never_reaches_torch(base: Any, canary: Path, tmp_path: Path) -> None:
    """The reported hole: torch.export.load reads every program under models/, and falls back
    to the full unpickler for sample inputs the restricted one refuses."""
    files, top, _ = base
    boom = pickle.dumps(_Boom(canary))
    second = {**files, f"{top}models/other.json": files[f"{top}models/model.json"],
              f"{top}data/sample_inputs/other.pt": boom,
              f"{top}data/weights/other_weights_config.json": files[f"{top}data/weights/model_weights_config.json"],
              f"{top}data/constants/other_constants_config.json":
                  files[f"{top}data/constants/model_constants_config.json"]}
    _refused(_write(second, tmp_path / "second.pt2"), "models/other.json", canary)
    _refused(_write(_pickled_weight(files, top, boom, "other"), tmp_path / "second_w.pt2"), "other_weights", canary)


def test_pickled_weights_constants_and_objects_are_refused(base: Any, canary: Path, tmp_path: Path) -> None:
    files, top, _ = base
    boom = pickle.dumps(_Boom(canary))
    _refused(_write(_pickled_weight(files, top, boom), tmp_path / "w.pt2"), "stored pickled", canary)
    for prefix in ("custom_obj_", "opaque_obj_"):
        cfg_name = f"{top}data/constants/model_constants_config.json"
        cfg = json.loads(files[cfg_name])
        meta = next(iter(cfg["config"].values()))
        meta["path_name"] = f"{prefix}0"
        bad = {**files, cfg_name: json.dumps(cfg).encode(), f"{top}data/constants/{prefix}0": boom}
        _refused(_write(bad, tmp_path / f"{prefix}.pt2"), f"{prefix}0", canary)
    legacy = {**files, f"{top}data/weights/model.pt": boom}
    _refused(_write(legacy, tmp_path / "legacy.pt2"), "data/weights/model.pt", canary)
    aoti = {**files, f"{top}data/aotinductor/model/model.so": b"\x7fELF"}
    _refused(_write(aoti, tmp_path / "aoti.pt2"), "aotinductor", canary)


def test_sample_inputs_and_guards_are_never_read(base: Any, canary: Path, tmp_path: Path) -> None:
    """A pickle as the sample inputs and Python as the guards: Nexus needs neither, so the
    model imports, gives the model's outputs, and neither ran."""
    files, top, model = base
    boom = pickle.dumps(_Boom(canary))
    bad = {**files, f"{top}data/sample_inputs/model.pt": boom}
    bad = _with_program(bad, top, lambda j: j.__setitem__(
        "guards_code", [f"__import__('os').mkdir({str(canary)!r}) is None"]))
    prog = _load(_write(bad, tmp_path / "inputs.pt2"))
    assert not canary.exists()
    _agrees(prog, model)


# --- what torch evaluates from the JSON: sizes, targets, specs, names ---------------------------------
def test_code_in_symbolic_sizes_is_refused(base: Any, canary: Path, tmp_path: Path) -> None:
    files, top, _ = base
    attacks = {
        "import": f"__import__('os').mkdir({str(canary)!r})",
        "chr": "Symbol(chr(115))",  # a builtin that builds strings, then eval: refused by name
        "attr": "Symbol('s0').func",
        "lambda": "(lambda: 1)()",
        "power tower": "Pow(Integer(9), Pow(Integer(9), Integer(99)))",
        "big exponent": "Pow(Symbol('s0', integer=True), Integer(100000))",
        "huge literal": "Integer(" + "9" * 200 + ")",
        "nesting": "(" * 60 + "1" + ")" * 60,
    }
    for label, expr in attacks.items():
        def edit(j: dict[str, Any], expr: str = expr) -> None:
            assert _edit_strings(j, "expr_str", lambda old: expr) > 0

        _refused(_write(_with_program(files, top, edit), tmp_path / f"{label}.pt2"), "symbolic size", canary)


def test_targets_that_are_not_aten_ops_are_refused(base: Any, canary: Path, tmp_path: Path) -> None:
    files, top, _ = base
    for target in ("torch.ops.load_library", "builtins.exec", "torch.hub.load", "torch.ops.aten.__class__",
                   "torch.ops.aten.add.overloads", "torch.ops.higher_order.triton_kernel_wrapper_functional",
                   "#custom_extension", "torch.ops.nexus_no_such_ns.op"):
        def edit(j: dict[str, Any], target: str = target) -> None:
            node = j["graph_module"]["graph"]["nodes"][0]
            node["target"] = target

        _refused(_write(_with_program(files, top, edit), tmp_path / "t.pt2"), repr(target), canary)


def test_specs_that_import_modules_are_refused(base: Any, canary: Path, tmp_path: Path) -> None:
    files, top, _ = base
    ddict = json.dumps([1, {"type": "collections.defaultdict", "children_spec": [],
                            "context": json.dumps({"default_factory_module": "nexus_canary_mod",
                                                   "default_factory_name": "E", "dict_context": []})}])
    enum = json.dumps([1, {"type": "builtins.dict", "children_spec": [],
                           "context": json.dumps([{"__enum__": True, "fqn": "nexus_canary_mod:E", "name": "x"}])}])
    for label, spec in (("defaultdict", ddict), ("enum", enum)):
        def edit(j: dict[str, Any], spec: str = spec) -> None:
            assert _edit_strings(j, "in_spec", lambda old: spec) == 1

        _refused(_write(_with_program(files, top, edit), tmp_path / f"{label}.pt2"), "spec", canary)


def test_names_that_generated_code_would_quote_are_refused(base: Any, canary: Path, tmp_path: Path) -> None:
    """FX writes a submodule name that is not an identifier as getattr(self, "NAME") into the
    code it generates and runs; a subgraph, parameter or buffer name with a quote is code."""
    files, top, _ = base
    inject = 'x"),exec(chr(1)),getattr(self,"y'
    for key in ("name", "parameter_name", "buffer_name", "fqn"):
        def edit(j: dict[str, Any], key: str = key) -> None:
            assert _edit_strings(j, key, lambda old: inject) > 0

        _refused(_write(_with_program(files, top, edit), tmp_path / f"{key}.pt2"), "name", canary)


# --- sizes: what the archive inflates to and what its metadata allocates --------------------------------
def test_a_deflate_bomb_is_refused_before_it_inflates(base: Any, canary: Path, tmp_path: Path,
                                                      monkeypatch: Any) -> None:
    files, top, _ = base
    monkeypatch.setattr(pt2, "MAX_JSON_BYTES", 1 << 20)  # the bound, made small enough to test
    j = files[f"{top}models/model.json"]
    bomb = {**files, f"{top}models/model.json": j[:-1] + b" " * (2 << 20) + j[-1:]}
    path = _write(bomb, tmp_path / "bomb.pt2", zipfile.ZIP_DEFLATED)
    assert path.stat().st_size < 100_000
    _refused(path, "inflates to", canary)
    weights = {**files, f"{top}data/weights/weight_0": bytes(4 << 20)}
    _refused(_write(weights, tmp_path / "wbomb.pt2", zipfile.ZIP_DEFLATED), "more than the bound", canary,
             max_bytes=1 << 20)


def test_declared_sizes_that_lie_are_refused(base: Any, canary: Path, tmp_path: Path) -> None:
    """An entry whose header declares fewer bytes than its data inflates to."""
    files, top, _ = base
    path = _write(files, tmp_path / "lie.pt2", zipfile.ZIP_DEFLATED)
    name = f"{top}models/model.json".encode()
    raw = bytearray(path.read_bytes())
    real = len(files[f"{top}models/model.json"]).to_bytes(4, "little")
    for sig in (b"PK\x03\x04", b"PK\x01\x02"):  # the local header and the central directory entry
        at = raw.find(sig + b"", 0)
        while at >= 0:
            off = 22 if sig == b"PK\x03\x04" else 24
            nlen_at = 26 if sig == b"PK\x03\x04" else 28
            nlen = int.from_bytes(raw[at + nlen_at:at + nlen_at + 2], "little")
            hdr = 30 if sig == b"PK\x03\x04" else 46
            if raw[at + hdr:at + hdr + nlen] == name and raw[at + off:at + off + 4] == real:
                raw[at + off:at + off + 4] = (100).to_bytes(4, "little")
            at = raw.find(sig, at + 4)
    path.write_bytes(bytes(raw))
    _refused(path, "", canary)


def test_metadata_that_allocates_past_the_bound_is_refused(base: Any, canary: Path, tmp_path: Path) -> None:
    files, top, _ = base
    cfg_name = f"{top}data/weights/model_weights_config.json"
    cfg = json.loads(files[cfg_name])
    meta = next(iter(cfg["config"].values()))
    meta["tensor_meta"]["sizes"] = [{"as_int": 1 << 20}, {"as_int": 1 << 20}]
    meta["tensor_meta"]["strides"] = [{"as_int": 1 << 20}, {"as_int": 1}]
    bad = {**files, cfg_name: json.dumps(cfg).encode(), f"{top}data/weights/{meta['path_name']}": b""}
    _refused(_write(bad, tmp_path / "alloc.pt2"), "more than the bound", canary)
    big_int = _with_program(files, top, lambda j: j["graph_module"]["graph"]["nodes"][0].__setitem__(
        "extra", 10 ** 30))
    _refused(_write(big_int, tmp_path / "int.pt2"), "int64", canary)
    deep = _with_program(files, top, lambda j: j.__setitem__("x", json.loads("[" * 300 + "]" * 300)))
    _refused(_write(deep, tmp_path / "deep.pt2"), "nests", canary)


def test_archive_structure(base: Any, canary: Path, tmp_path: Path) -> None:
    files, top, model = base
    dup = tmp_path / "dup.pt2"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # zipfile warns about the duplicate name
        with zipfile.ZipFile(dup, "w") as z:
            for name, data in files.items():
                z.writestr(name, data)
            z.writestr(f"{top}models/model.json", b"{}")
    _refused(dup, "appears twice", canary)
    _refused(_write({**files, "other/x": b""}, tmp_path / "tops.pt2"), "one top folder", canary)
    junk = tmp_path / "junk.pt2"
    junk.write_bytes(b"PK\x03\x04 not really")
    _refused(junk, "", canary)
    # the plain archive itself still imports and agrees (the oracle: the model)
    _agrees(_load(_write(files, tmp_path / "plain.pt2")), model)


def test_programs_torch_loads_but_cannot_run_are_refused(base: Any, canary: Path, tmp_path: Path) -> None:
    """torch.export.load returns these (its loader checks little structure) and then fails
    inside torch with an AttributeError or an IndexError; a CI fuzz run found the first."""
    files, top, model = base

    def calls(edit: Callable[[list[Any]], None]) -> Callable[[dict[str, Any]], None]:
        return lambda j: edit(j["graph_module"]["module_call_graph"])

    edits = [calls(lambda m: m[0].update(signature=None)), calls(list.reverse), calls(list.clear),
             lambda j: j.update(graph_module=[])]
    for k, edit in enumerate(edits):
        _refused(_write(_with_program(files, top, edit), tmp_path / f"c{k}.pt2"), "module_call_graph", canary)
    # a weight whose compression method zipfile cannot read: byte 10 of its central directory
    # record, whose name starts at byte 46 (the fuzz found this one)
    raw = bytearray(_write(files, tmp_path / "plain.pt2").read_bytes())
    name = next(n for n in files if "/data/weights/weight_" in n).encode()
    record = raw.rindex(name) - 46
    assert raw[record:record + 4] == b"PK\x01\x02"
    raw[record + 10] = 77
    bad = tmp_path / "method.pt2"
    bad.write_bytes(bytes(raw))
    _refused(bad, "", canary)


# --- the fuzz: random mutations of the archive and of its program -----------------------------------------
_FRAGMENTS = ['"', "\\", "__import__('os')", "'", "Symbol(", ")", "exec", "lambda", ".", "torch.ops.", "_operator.",
              "{", "[", "99999999999999999999999", "-1", "\\u0022"]


def test_fuzz_mutations_load_or_are_refused_in_one_line(base: Any, canary: Path, tmp_path: Path) -> None:
    files, top, model = base
    rng = random.Random(0)
    # torch writes a random serialization id: fix it, so that the same bytes mutate in every run
    files = {**files, f"{top}.data/serialization_id": b"0" * 40}
    plain = _write(files, tmp_path / "plain.pt2").read_bytes()
    program = files[f"{top}models/model.json"].decode()
    outcomes = {"loaded": 0, "refused": 0}
    for k in range(60):
        if k % 2 == 0:  # bytes of the archive
            raw = bytearray(plain)
            for _ in range(rng.randint(1, 8)):
                raw[rng.randrange(len(raw))] = rng.randrange(256)
            path = tmp_path / f"f{k}.pt2"
            path.write_bytes(bytes(raw))
        else:  # strings of the program
            text = program
            for _ in range(rng.randint(1, 4)):
                i = rng.randrange(len(text))
                text = text[:i] + rng.choice(_FRAGMENTS) + text[i + rng.randint(0, 3):]
            path = _write({**files, f"{top}models/model.json": text.encode()}, tmp_path / f"f{k}.pt2")
        try:
            prog = _load(path)
        except TorchImportError as e:
            assert "\n" not in str(e).strip() or "unsupported" in str(e), str(e)
            outcomes["refused"] += 1
        else:  # a mutated size or constant may change what the program computes: it only has to load
            outcomes["loaded"] += 1
            assert prog.graph is not None
        assert not canary.exists(), f"mutant {k} ran code"
    assert outcomes["refused"] > 0


# --- what the checks must let through: torch's own archives of varied programs ---------------------------
class _Sizes(nn.Module):
    """Symbolic sizes of several forms: a strided convolution over dynamic H and W (floor
    divisions), a flatten (products), concatenations (sums)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(2, 3, 3, stride=2, padding=1)

    def forward(self, x: Any, y: Any) -> Any:
        h = self.conv(x).relu()
        flat = h.flatten(1)
        return torch.cat([flat, flat * 2], dim=1).mean(dim=1), torch.cat([y, y * 2], dim=0).sum(0)


def test_torch_archives_of_symbolic_programs_load(tmp_path: Path) -> None:
    torch.manual_seed(1)
    model = _Sizes().eval()
    args = (torch.randn(2, 2, 9, 11), torch.randn(5, 3))
    dyn = ({0: Dim("n", max=8), 2: Dim("h", min=4, max=64), 3: Dim("w", min=4, max=64)}, {0: Dim("m", min=2, max=9)})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ep = torch.export.export(model, args, dynamic_shapes=dyn)
        torch.export.save(ep, str(tmp_path / "sizes.pt2"))
    exprs: list[str] = []
    with zipfile.ZipFile(tmp_path / "sizes.pt2") as z:
        program = json.loads(z.read(next(n for n in z.namelist() if n.endswith("models/model.json"))))
    _edit_strings(program, "expr_str", lambda s: exprs.append(s) or s)
    assert any("FloorDiv" in e or "floor" in e.lower() for e in exprs), exprs  # the forms above are there
    prog = _load(tmp_path / "sizes.pt2")
    for shape_x, rows in (((1, 2, 8, 8), 3), ((3, 2, 13, 17), 6)):
        x, y = torch.randn(*shape_x), torch.randn(rows, 3)
        with torch.no_grad():
            want = model(x, y)
        for got, w in zip(prog.graph(x.numpy(), y.numpy()), want):
            np.testing.assert_allclose(got, w.numpy(), rtol=1e-5, atol=1e-5)
