"""Reading ``.pt2`` files (``torch.export.save``) without running code from them.

``torch.export.load`` runs code from a crafted archive in more ways than by unpickling:

- it unpickles weights and constants marked ``use_pickle``, custom and opaque objects,
  legacy ``.pt`` payloads and, when the restricted unpickler refuses them, the sample
  inputs of *every* program under ``models/`` (not only ``model``), and it loads
  AOTInductor shared libraries;
- it hands every symbolic size (``expr_str``) to ``sympy.sympify``, which evaluates the
  string as Python;
- ``ep.module()`` (which decomposition may call) executes the program's ``guards_code``;
- a treespec (``in_spec``/``out_spec``) may name a module to import (``defaultdict``
  factories, enum members);
- a node's target is looked up by name under ``torch``, and called when the program is
  traced again;
- and it inflates archive entries whole (a deflate bomb in a JSON entry) and allocates
  the sizes a weight's metadata declares.

So torch never sees the user's file.  :func:`read_pt2` reads the archive with bounded
sizes, checks every entry against the plain format (an allow-list of entry names, only
the program ``model``), parses its JSON with bounded nesting and integers, and checks every
fact torch would evaluate: targets resolve to ATen ops, the control-flow operators or a
fixed set of Python ones; symbolic sizes are sympy's ``srepr`` of arithmetic on symbols
and small numbers (checked as a Python syntax tree, never evaluated); treespecs name only
tuples, lists and dicts; weights and constants are raw bytes within the bound.  It drops
what Nexus does not use (sample inputs, which are a pickle; guards; extra files).
:func:`load_pt2` writes the checked parts as a fresh archive and only that reaches
``torch.export.load``, so a difference between two zip readers cannot smuggle anything past.
"""

from __future__ import annotations

import ast
import builtins
import json
import os
import re
import tempfile
import zipfile
from dataclasses import dataclass, field
from typing import Any

import sympy

from nexus.frontend.torch.data import TorchImportError
from nexus.frontend.torch.importer import TorchProgram, decompositions, import_exported
from nexus.ir.limits import json_nesting_excess

MAX_BYTES = 16 << 30
"""What a ``.pt2`` may inflate to in all (weights included), and what its weights' metadata may
ask to allocate; ``max_bytes=`` of :func:`load_pt2` and :func:`from_pt2` changes it."""

MAX_JSON_BYTES = 256 << 20
"""One JSON entry (the program, a weights or constants config), inflated."""

MAX_JSON_NESTING = 256
"""Arrays and objects inside each other in a JSON entry (subgraphs nest the program's)."""

MAX_INT_BITS = 64
"""An integer in the JSON: sizes, strides, hints and constants are int64 in torch."""

MAX_EXPR_CHARS = 2000
"""One symbolic size's expression (``expr_str``)."""

_COPY_CHUNK = 1 << 20

# Entry names below the archive's top folder that the plain format has.  Only the program
# ``model`` is read; another program's entries are refused rather than read.
_ALLOWED = re.compile(
    r"(archive_format|archive_version|byteorder|\.data/[A-Za-z0-9_.]+|models/model\.json"
    r"|data/weights/(weight_\d+|model_weights_config\.json)"
    r"|data/constants/(tensor_\d+|model_constants_config\.json)"
    r"|data/sample_inputs/model\.pt|extra/[^/]+)")
_VALUES = {"archive_format": b"pt2", "archive_version": b"0", "byteorder": (b"little", b"big")}


@dataclass
class Pt2Parts:
    """What :func:`read_pt2` checked: the entries (name below the top folder -> bytes) that
    :func:`load_pt2` writes as a fresh archive, and the data entries to copy from ``path``."""

    path: str
    small: dict[str, bytes] = field(default_factory=dict)
    data: dict[str, zipfile.ZipInfo] = field(default_factory=dict)


def read_pt2(path: str, *, max_bytes: int = MAX_BYTES) -> Pt2Parts:
    """Check the archive ``path`` (see the module docstring); raise :class:`TorchImportError`
    with one line naming the file and the entry for anything outside the plain format."""
    if not os.path.isfile(path):
        raise TorchImportError(f"{path}: no such file")
    if not zipfile.is_zipfile(path):
        raise TorchImportError(f"{path}: not a .pt2 file (torch.export.save writes a zip archive)")
    try:
        with zipfile.ZipFile(path) as z:
            return _Checker(path, z, max_bytes).run()
    except (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, NotImplementedError) as e:
        raise TorchImportError(f"{path}: a damaged archive ({e})") from None
    except OSError as e:
        raise TorchImportError(f"{path}: cannot read it ({e.strerror or e})") from None


def load_pt2(path: str | os.PathLike[str], *, max_bytes: int = MAX_BYTES) -> Any:
    """The ``ExportedProgram`` saved in ``path``: checked by :func:`read_pt2`, then loaded
    by torch from a fresh archive of the checked entries only."""
    import torch

    p = os.fspath(path)
    parts = read_pt2(p, max_bytes=max_bytes)
    with tempfile.TemporaryDirectory(prefix="nexus-pt2-") as tmp:
        clean = os.path.join(tmp, "model.pt2")
        try:
            _write(parts, clean)
        except (zipfile.BadZipFile, EOFError, OSError, NotImplementedError) as e:  # a bad CRC or method
            raise TorchImportError(f"{p}: a damaged archive ({e})") from None
        try:
            return torch.export.load(clean)
        except Exception as e:  # noqa: BLE001  (torch raises many kinds on a damaged file)
            raise TorchImportError(f"{p}: torch.export.load failed: {type(e).__name__}: {e}") from None


def from_pt2(path: str | os.PathLike[str], *, params: str = "constants", max_bytes: int = MAX_BYTES) -> TorchProgram:
    """Import a ``.pt2`` file as a :class:`TorchProgram`."""
    p = os.fspath(path)
    ep = load_pt2(p, max_bytes=max_bytes)
    # torch.export.load checks little of the program's structure; what it accepts but cannot
    # run (a module call graph out of order, say) fails here, inside torch: a refusal too
    try:
        ep = decompositions(ep)
    except Exception as e:  # noqa: BLE001
        raise TorchImportError(f"{p}: torch cannot run the program in it: {type(e).__name__}: {e}") from None
    name = os.path.splitext(os.path.basename(p))[0]
    return import_exported(ep, params=params, name=name, decompose=False)


def _write(parts: Pt2Parts, dst: str) -> None:
    """The checked entries as an archive of torch's layout, under the top folder ``model``;
    data entries are copied from the source in chunks, uncompressed (as torch writes them)."""
    with zipfile.ZipFile(parts.path) as src, zipfile.ZipFile(dst, "w", zipfile.ZIP_STORED) as out:
        for name, data in parts.small.items():
            out.writestr(f"model/{name}", data)
        for name, info in parts.data.items():
            with src.open(info) as f, out.open(f"model/{name}", "w") as g:
                left = info.file_size
                while chunk := f.read(min(_COPY_CHUNK, left + 1)):
                    left -= len(chunk)
                    if left < 0:
                        raise TorchImportError(f"{parts.path}: entry {name!r} inflates past its declared size")
                    g.write(chunk)


# --- the archive -------------------------------------------------------------------------------
class _Checker:
    def __init__(self, path: str, z: zipfile.ZipFile, max_bytes: int):
        self.path, self.z, self.max_bytes = path, z, max_bytes

    def fail(self, msg: str) -> TorchImportError:
        return TorchImportError(f"{self.path}: {msg}")

    def run(self) -> Pt2Parts:
        infos = [i for i in self.z.infolist() if not i.is_dir()]
        names = [i.filename for i in infos]
        if len(set(names)) != len(names):
            dup = next(n for n in names if names.count(n) > 1)
            raise self.fail(f"archive entry {dup!r} appears twice (zip readers disagree on which one counts)")
        tops = {n.split("/", 1)[0] for n in names}
        if len(tops) != 1 or any("/" not in n for n in names):
            raise self.fail("not a .pt2 archive of torch.export.save (one top folder expected)")
        top = tops.pop() + "/"
        entries = {i.filename[len(top):]: i for i in infos}
        for rest, info in entries.items():
            if not _ALLOWED.fullmatch(rest):
                raise self.fail(f"archive entry {rest!r} is not part of a plain exported program with one program, "
                                f"'model' (pickled payloads, custom objects, compiled code and further programs "
                                f"are refused)")
            if info.flag_bits & 0x1:
                raise self.fail(f"archive entry {rest!r} is encrypted")
        total = sum(i.file_size for i in infos)
        if total > self.max_bytes:
            raise self.fail(f"the archive inflates to {total:,} bytes, more than the bound of {self.max_bytes:,} "
                            f"(max_bytes=)")
        if "models/model.json" not in entries:
            raise self.fail("the archive has no models/model.json")
        parts = Pt2Parts(self.path)
        for name, want in _VALUES.items():
            got = self.read(entries, name, 64)
            if got is not None and got.strip() not in (want if isinstance(want, tuple) else (want,)):
                raise self.fail(f"archive entry {name!r} is {got[:20]!r}, not a plain exported program's")
            if got is not None:
                parts.small[name] = got
        for rest in entries:
            if rest.startswith(".data/"):
                got = self.read(entries, rest, 64)
                assert got is not None
                if not re.fullmatch(rb"[A-Za-z0-9_.\-]*\s*", got):
                    raise self.fail(f"archive entry {rest!r} is not a version record")
                parts.small[rest] = got
        program = self.json(entries, "models/model.json")
        _check_program(program, self.fail)
        program["guards_code"] = []  # Python that ep.module() would exec
        parts.small["models/model.json"] = json.dumps(program).encode()
        for kind, prefix in (("weights", "weight_"), ("constants", "tensor_")):
            cfg_name = f"data/{kind}/model_{kind}_config.json"
            if cfg_name not in entries:
                continue
            cfg = self.json(entries, cfg_name)
            for rest in self.payloads(cfg, kind, prefix, entries):
                parts.data[rest] = entries[rest]
            parts.small[cfg_name] = json.dumps(cfg).encode()
        # torch reads the sample inputs of a program it loads (a pickle): an empty record is
        # "none", and Nexus never needs them
        parts.small["data/sample_inputs/model.pt"] = b""
        return parts

    def read(self, entries: dict[str, zipfile.ZipInfo], name: str, limit: int) -> bytes | None:
        """An entry's bytes, refused when it would inflate past ``limit``."""
        info = entries.get(name)
        if info is None:
            return None
        if info.file_size > limit:
            raise self.fail(f"archive entry {name!r} inflates to {info.file_size:,} bytes, more than the "
                            f"{limit:,} allowed for it")
        with self.z.open(info) as f:
            data = f.read(limit + 1)
        if len(data) > limit:
            raise self.fail(f"archive entry {name!r} inflates past {limit:,} bytes")
        return data

    def json(self, entries: dict[str, zipfile.ZipInfo], name: str) -> Any:
        data = self.read(entries, name, MAX_JSON_BYTES)
        assert data is not None
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            raise self.fail(f"archive entry {name!r} is not UTF-8 text") from None
        pos = json_nesting_excess(text, MAX_JSON_NESTING)
        if pos is not None:
            raise self.fail(f"archive entry {name!r} nests more than {MAX_JSON_NESTING} levels deep")
        try:
            value = json.loads(text, parse_int=self.int)
        except ValueError as e:
            raise self.fail(f"archive entry {name!r} is not valid JSON ({e})") from None
        if not isinstance(value, dict):
            raise self.fail(f"archive entry {name!r} is not a JSON object")
        return value

    def int(self, literal: str) -> int:
        if len(literal) > 24 or abs(v := int(literal)).bit_length() > MAX_INT_BITS:
            raise ValueError(f"the integer {literal[:30]} is out of the int64 range")
        return v

    def payloads(self, cfg: dict[str, Any], kind: str, prefix: str, entries: dict[str, zipfile.ZipInfo]) -> set[str]:
        """The data entries of a weights or constants config, each checked: raw bytes (never
        pickled), a known dtype, sizes whose storage fits the bound."""
        from torch._export.serde.serialize import _SERIALIZE_TO_TORCH_DTYPE

        config = cfg.get("config")
        if set(cfg) != {"config"} or not isinstance(config, dict):
            raise self.fail(f"data/{kind}/model_{kind}_config.json is not a payload config")
        used: set[str] = set()
        for key, meta in config.items():
            what = f"{kind[:-1]} {key[:40]!r}"
            _check_name(key, self.fail)
            if not isinstance(meta, dict) or meta.get("use_pickle") is not False:
                raise self.fail(f"{what} is stored pickled, which Nexus does not load (it could run code)")
            path_name = meta.get("path_name")
            if not isinstance(path_name, str) or not re.fullmatch(rf"{prefix}\d+", path_name):
                raise self.fail(f"{what} is stored as {path_name!r}: custom and opaque objects are refused "
                                f"(they are pickled)")
            rest = f"data/{kind}/{path_name}"
            if rest not in entries:
                raise self.fail(f"{what}: the archive has no entry {rest!r}")
            tm: Any = meta.get("tensor_meta")
            dtype = _SERIALIZE_TO_TORCH_DTYPE.get(tm.get("dtype")) if isinstance(tm, dict) else None
            if dtype is None:
                raise self.fail(f"{what} has no tensor metadata of a known dtype")
            sizes, strides = _ints(tm.get("sizes")), _ints(tm.get("strides"))
            offset = _ints([tm.get("storage_offset")])
            if sizes is None or strides is None or offset is None or len(sizes) != len(strides) \
                    or min(sizes, default=0) < 0 or offset[0] < 0:
                raise self.fail(f"{what} has sizes, strides or an offset that are not plain integers")
            numel = 1
            for s in sizes:
                numel *= s
            if numel * dtype.itemsize > self.max_bytes:
                raise self.fail(f"{what} of sizes {sizes} needs {numel * dtype.itemsize:,} bytes, more than the "
                                f"bound of {self.max_bytes:,} (max_bytes=)")
            used.add(rest)
        return used


def _ints(items: Any) -> list[int] | None:
    """The values of a list of ``{"as_int": n}``, or None when one is anything else."""
    if not isinstance(items, list):
        return None
    out = []
    for it in items:
        if not (isinstance(it, dict) and set(it) == {"as_int"} and type(it["as_int"]) is int):
            return None
        out.append(it["as_int"])
    return out


# --- the program -------------------------------------------------------------------------------
# What a name in the program may hold: FX writes names of submodules, parameters and buffers
# into the Python source it generates (``getattr(self, "NAME")`` for one that is not an
# identifier), so a quote there would be code.
_NAME = re.compile(r"[A-Za-z0-9_.\-]*")


def _check_program(program: dict[str, Any], fail: Any) -> None:
    """Every fact of the program's JSON that torch would evaluate, resolve, call or write into
    generated code; and that the module call graph starts with the whole model's signature
    (torch reads its calling convention from there)."""
    module = program.get("graph_module") if isinstance(program, dict) else None
    calls = module.get("module_call_graph") if isinstance(module, dict) else None
    first = calls[0] if isinstance(calls, list) and calls else None
    if not (isinstance(first, dict) and first.get("fqn") == "" and isinstance(first.get("signature"), dict)):
        raise fail("the program's module_call_graph does not start with the whole model's signature")
    stack: list[Any] = [program]
    while stack:
        obj = stack.pop()
        if isinstance(obj, list):
            stack.extend(obj)
            continue
        if not isinstance(obj, dict):
            continue
        if "target" in obj and "inputs" in obj:
            _check_target(obj["target"], fail)
        for key, value in obj.items():
            if not _NAME.fullmatch(key):
                raise fail(f"the program has the key {key[:40]!r}, which is not a name")
            if key == "name" or key.endswith("_name") or key == "fqn":
                _check_name(value, fail)
            elif key.endswith("_names") and isinstance(value, list):
                for v in value:
                    _check_name(v, fail)
            if key == "expr_str":
                _check_expr(value, fail)
            elif key in ("in_spec", "out_spec") and isinstance(value, str):
                _check_treespec(value, fail)
            elif key == "as_operator":
                _check_target(value, fail)
            elif key == "as_custom_obj":
                raise fail("the program takes a custom object (a pickle): refused")
            elif isinstance(value, (dict, list)):
                stack.append(value)


# Python functions torch's verifier lets a graph call (torch/_export/verifier.py), as torch
# serialises them.
_PY_TARGETS = frozenset(
    [f"_operator.{n}" for n in ("getitem", "add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "neg", "pos",
                                "abs", "eq", "ne", "lt", "le", "gt", "ge", "and_", "or_", "not_", "lshift", "rshift")]
    + [f"math.{n}" for n in ("ceil", "floor", "trunc")]
    + [f"torch.{n}" for n in ("sym_int", "sym_float", "sym_ite", "sym_max", "sym_min", "sym_not", "sym_sqrt",
                              "_sym_sqrt", "sym_sum")]
    + ["torch._C._set_grad_enabled", "torch.autograd.grad_mode.set_grad_enabled"])
def _check_name(value: Any, fail: Any) -> None:
    if not (isinstance(value, str) and _NAME.fullmatch(value)):
        raise fail(f"the program has the name {str(value)[:40]!r}: names hold letters, digits, '_', '.' and '-'")


# Higher-order operators: the control flow the importer converts, and the grad-mode and
# autocast regions export leaves around code.
_HOPS = frozenset({"cond", "while_loop", "wrap_with_set_grad_enabled", "wrap_with_autocast"})


def _check_target(target: Any, fail: Any) -> None:
    if not isinstance(target, str):
        raise fail(f"a node's target {target!r} is not an operator name")
    if target in _PY_TARGETS:
        return
    if not re.fullmatch(r"torch\.ops\.(aten|prims|higher_order)(\.[A-Za-z][A-Za-z0-9_]*|\._[A-Za-z0-9][A-Za-z0-9_]*)+",
                        target) or target.count(".") > 4:
        raise fail(f"the program calls {target!r}, which is not an ATen operator: refused (torch would look it up "
                   f"by name and call it)")
    import torch

    obj: Any = torch.ops
    try:
        for part in target.split(".")[2:]:
            obj = getattr(obj, part)
    except Exception:  # noqa: BLE001  (an unknown op raises AttributeError or RuntimeError)
        raise fail(f"the program calls {target!r}, which this torch does not have") from None
    if isinstance(obj, torch._ops.HigherOrderOperator):
        if obj.name() in _HOPS:
            return
    elif isinstance(obj, (torch._ops.OpOverload, torch._ops.OpOverloadPacket)):
        return
    raise fail(f"the program calls {target!r}, which is not an ATen operator: refused")


# The names a symbolic size may use: sympy's constructors as ``srepr`` prints them, torch's
# own sympy functions (torch/_export/serde/serialize.py), and a few atoms.
_EXPR_CALLS = frozenset({
    "Symbol", "Integer", "Float", "Rational", "Add", "Mul", "Pow", "Max", "Min", "Abs", "floor", "ceiling", "Mod",
    "Eq", "Ne", "Lt", "Le", "Gt", "Ge", "Equality", "Unequality", "StrictLessThan", "LessThan", "StrictGreaterThan",
    "GreaterThan", "And", "Or", "Not", "Piecewise", "ExprCondPair", "ITE", "sqrt",
    "FloorDiv", "ModularIndexing", "Where", "PythonMod", "CleanDiv", "CeilToInt", "FloorToInt", "CeilDiv", "LShift",
    "RShift", "PowByNatural", "FloatPow", "FloatTrueDiv", "IntTrueDiv", "IsNonOverlappingAndDenseIndicator",
    "TruncToFloat", "TruncToInt", "RoundToInt", "RoundDecimal", "ToFloat", "Identity"})
_EXPR_ATOMS = frozenset({"oo", "zoo", "nan", "true", "false", "True", "False"})
_POWERS = frozenset({"Pow", "PowByNatural", "FloatPow"})
_ASSUMPTIONS = frozenset({"positive", "negative", "nonnegative", "nonpositive", "integer", "real", "finite",
                          "infinite", "zero", "nonzero", "even", "odd", "rational", "commutative", "precision"})
_NODES = (ast.Expression, ast.Call, ast.Name, ast.Load, ast.Constant, ast.keyword, ast.BinOp, ast.UnaryOp,
          ast.Compare, ast.BoolOp, ast.Tuple, ast.Add, ast.Sub, ast.Mult, ast.Div, ast.FloorDiv, ast.Mod, ast.Pow,
          ast.USub, ast.UAdd, ast.Not, ast.Invert, ast.BitAnd, ast.BitOr, ast.And, ast.Or, ast.Eq, ast.NotEq, ast.Lt,
          ast.LtE, ast.Gt, ast.GtE)
_SYMBOL = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")
_NUMBER = re.compile(r"[-+]?(\d{1,40}(\.\d{0,40})?|\.\d{1,40})([eE][-+]?\d{1,3})?|[-+]?(inf|nan)")
_TAKEN = frozenset(vars(sympy)) | frozenset(vars(builtins))


def _check_expr(text: Any, fail: Any) -> None:
    """``text`` is the kind of expression torch writes for a symbolic size, which
    ``sympy.sympify`` may evaluate: calls of the names above, arithmetic, symbols and small
    numbers, and powers with a small literal exponent whose base has no power (so the value
    stays small); anything else is refused before sympy sees it."""
    def bad(why: str) -> TorchImportError:
        return fail(f"a symbolic size {str(text)[:60]!r} {why}: refused (sympy would evaluate it as Python)")

    if not isinstance(text, str):
        raise bad("is not a string")
    if len(text) > MAX_EXPR_CHARS:
        raise bad(f"is longer than {MAX_EXPR_CHARS} characters")
    depth = 0
    for ch in text:
        depth += (ch == "(") - (ch == ")")
        if depth > 50:
            raise bad("nests parentheses more than 50 deep")
    try:
        tree = ast.parse(text, mode="eval")
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        raise bad("is not an expression") from None
    for node in ast.walk(tree):
        if not isinstance(node, _NODES):
            raise bad(f"uses Python syntax ({type(node).__name__}) that sizes do not")
        if isinstance(node, ast.Name) and node.id not in _EXPR_CALLS | _EXPR_ATOMS \
                and (not _SYMBOL.fullmatch(node.id) or node.id in _TAKEN or node.id.startswith("_")):
            raise bad(f"names {node.id!r}")
        if isinstance(node, ast.Constant):
            v = node.value
            if isinstance(v, bool) or v is None or (isinstance(v, int) and v.bit_length() <= 128):
                continue
            if isinstance(v, float) or (isinstance(v, str) and (_NUMBER.fullmatch(v) or _SYMBOL.fullmatch(v))):
                continue
            raise bad(f"holds the constant {str(v)[:30]!r}")
        if isinstance(node, ast.keyword):
            if node.arg not in _ASSUMPTIONS or not isinstance(node.value, ast.Constant):
                raise bad(f"passes {node.arg!r}")
        if isinstance(node, ast.Call):
            if not isinstance(node.func, ast.Name) or node.func.id not in _EXPR_CALLS:
                raise bad("calls something other than sympy's constructors")
            if node.func.id in _POWERS:
                if len(node.args) != 2:
                    raise bad("has a power without base and exponent")
                _check_power(node.args[0], node.args[1], bad)
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Pow):
            _check_power(node.left, node.right, bad)


def _check_power(base: ast.AST, exponent: ast.AST, bad: Any) -> None:
    if _small_literal(exponent) is None:
        raise bad("raises to a power that is not a literal between -64 and 64")
    for sub in ast.walk(base):
        if (isinstance(sub, ast.Call) and isinstance(sub.func, ast.Name) and sub.func.id in _POWERS) \
                or (isinstance(sub, ast.BinOp) and isinstance(sub.op, ast.Pow)):
            raise bad("raises a power to a power")


def _small_literal(node: ast.AST) -> float | None:
    """The value of an exponent written as a literal (``2``, ``-1``, ``Integer(3)``,
    ``Rational(1, 2)``) when it lies in [-64, 64], else None."""
    v: float
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        inner = _small_literal(node.operand)
        return None if inner is None else -inner
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("Integer", "Rational") \
            and 1 <= len(node.args) <= 2 and not node.keywords:
        vals = [_small_literal(a) for a in node.args]
        if None in vals or (len(vals) == 2 and vals[1] == 0):
            return None
        v = vals[0] / (vals[1] if len(vals) == 2 else 1)  # type: ignore[operator]
    elif isinstance(node, ast.Constant) and type(node.value) in (int, float):
        value: Any = node.value
        if isinstance(value, int) and value.bit_length() > 64:
            return None
        v = float(value)
    else:
        return None
    return v if abs(v) <= 64 else None


_TREESPEC_TYPES = frozenset({None, "builtins.tuple", "builtins.list", "builtins.dict", "collections.OrderedDict",
                             "torch.fx.immutable_collections.immutable_list",
                             "torch.fx.immutable_collections.immutable_dict"})


def _check_treespec(text: str, fail: Any) -> None:
    """A serialised pytree spec of tuples, lists and dicts only (torch imports the module a
    ``defaultdict`` factory or an enum key names)."""
    def bad(why: str) -> TorchImportError:
        return fail(f"an input or output spec {why}: refused (torch would import what it names)")

    def parse(s: str) -> Any:
        if json_nesting_excess(s, MAX_JSON_NESTING) is not None:
            raise bad("nests too deep")
        try:
            return json.loads(s)
        except ValueError:
            raise bad("is not JSON") from None

    spec = parse(text)
    if not (isinstance(spec, list) and len(spec) == 2 and type(spec[0]) is int):
        raise bad("is not a versioned treespec")
    stack = [spec[1]]
    while stack:
        node = stack.pop()
        if not isinstance(node, dict) or set(node) != {"type", "context", "children_spec"}:
            raise bad("has a node that is not a treespec")
        if node["type"] not in _TREESPEC_TYPES:
            raise bad(f"names the type {node['type']!r}")
        ctx = node["context"]
        if ctx is not None:
            if not isinstance(ctx, str):
                raise bad("has a context that is not a string")
            inner = [parse(ctx)]
            while inner:
                c = inner.pop()
                if isinstance(c, list):
                    inner.extend(c)
                elif not (c is None or isinstance(c, (str, int, float, bool))):
                    raise bad("has keys that are not strings or numbers")
        if not isinstance(node["children_spec"], list):
            raise bad("has children that are not a list")
        stack.extend(node["children_spec"])
