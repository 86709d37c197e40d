"""Argument values given on the command line: ``name=[[1, 2], [3, 4]]``.

Values are JSON numbers, booleans and nested lists (plus the words ``inf``, ``-inf`` and
``nan``); they are parsed with :mod:`json`, never evaluated, and converted to the dtype
of the graph argument they are given for, refusing values that do not fit it.  Lists nest
at most ``MAX_NESTING`` deep and a number has at most ``MAX_NUMBER_CHARS`` characters
(:mod:`nexus.ir.limits`), on every interpreter.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

import numpy as np

from nexus.ir.graph import Graph
from nexus.ir.limits import LimitError, load_json
from nexus.ir.types import TensorType, numpy_dtype

_WORDS = re.compile(r"(?<![A-Za-z_\"])(inf|nan)(?![A-Za-z_\"])")


class InputError(ValueError):
    """A command-line value that is malformed or does not fit its argument."""


def parse_value(text: str) -> Any:
    """The Python value (number, bool or nested list) written in ``text``."""
    src = _WORDS.sub(lambda m: "Infinity" if m.group(1) == "inf" else "NaN", text.strip())
    try:
        value = load_json(src)
    except json.JSONDecodeError as e:
        raise InputError(f"{_clip(text)} is not a number or a nested list ({e.msg} at character {e.pos})") from None
    except LimitError as e:
        raise InputError(f"{_clip(text)}: {e}") from None
    _check_items(value, text)
    return value


def _clip(text: str) -> str:
    return repr(text) if len(text) <= 40 else f"{text[:30]!r}..."


def _check_items(value: Any, text: str) -> None:
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, list):
            stack.extend(v)
        elif not isinstance(v, (int, float, bool)):
            raise InputError(f"{text!r}: values are numbers, true/false or lists, not {json.dumps(v)}")


def to_array(value: Any, t: TensorType, what: str) -> np.ndarray:
    """``value`` as an array of ``t``'s dtype, checked against its static shape."""
    dt = numpy_dtype(t.dtype)
    try:
        raw = np.array(value)
        if raw.dtype == object and dt.kind == "f" and _has_int_beyond_64_bits(value):
            raw = np.array(value, dtype=np.float64)  # as a float literal of the same size would be
    except OverflowError:
        raise InputError(f"{what}: a value is out of range for {t.dtype}") from None
    except ValueError as e:
        raise InputError(f"{what}: {e}") from None
    if raw.dtype == object:
        if not _has_int_beyond_64_bits(value):
            raise InputError(f"{what}: the nested lists are ragged")
        if dt.kind == "b":
            raise InputError(f"{what}: bool takes true/false (or 0/1)")
        info = np.iinfo(dt)
        raise InputError(f"{what}: a value is out of range for {t.dtype} [{info.min}, {info.max}]")
    if raw.dtype.kind == "f" and dt.kind in "iub":
        if not np.all(np.isfinite(raw)) or not np.all(raw == np.round(raw)):
            raise InputError(f"{what}: {t.dtype} takes whole numbers (within its range)")
    if dt.kind == "b" and raw.size and not np.isin(raw, [0, 1]).all():
        raise InputError(f"{what}: bool takes true/false (or 0/1)")
    if dt.kind in "iu" and raw.size:
        info = np.iinfo(dt)
        lo, hi = raw.min(), raw.max()
        if lo < info.min or hi > info.max:
            raise InputError(f"{what}: a value is out of range for {t.dtype} [{info.min}, {info.max}]")
    try:
        with np.errstate(over="ignore"):
            arr = raw.astype(dt)
    except (OverflowError, ValueError) as e:
        raise InputError(f"{what}: {e}") from None
    if dt.kind == "f" and raw.size and (np.isinf(arr) & np.isfinite(raw)).any():
        limit = float(np.finfo(dt).max)
        raise InputError(f"{what}: a value is out of range for {t.dtype} (finite values lie within ±{limit:.4g})")
    if t.shape is not None:
        if arr.ndim != len(t.shape):
            raise InputError(f"{what}: expected {t} (rank {len(t.shape)}), got shape {list(arr.shape)}")
        for i, (want, got) in enumerate(zip(t.shape, arr.shape)):
            if isinstance(want, int) and want != got:
                raise InputError(f"{what}: dim {i} is {got}, {t} needs {want}")
    return arr


def _has_int_beyond_64_bits(value: Any) -> bool:
    """Whether a nested list holds an int that no NumPy integer dtype holds (NumPy makes an
    object array of it)."""
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, list):
            stack.extend(v)
        elif isinstance(v, int) and not -(2**63) <= v < 2**64:
            return True
    return False


def parse_inputs(g: Graph, items: Sequence[str]) -> list[np.ndarray]:
    """The argument values of ``g`` from ``name=value`` items (a position may stand
    for the name)."""
    names = [a.name or str(i) for i, a in enumerate(g.args)]
    given: dict[int, str] = {}
    for item in items:
        key, sep, text = item.partition("=")
        key = key.strip()
        if not sep:
            raise InputError(f"--input {item!r}: write NAME=VALUE")
        if key in names:
            index = names.index(key)
        elif key.isdigit() and int(key) < len(names):
            index = int(key)
        else:
            raise InputError(f"graph @{g.name} has no argument {key!r}; its arguments: {_signature(g) or 'none'}")
        if index in given:
            raise InputError(f"argument {names[index]!r} is given twice")
        given[index] = text
    missing = [names[i] for i in range(len(names)) if i not in given]
    if missing:
        raise InputError(f"missing --input for {', '.join(missing)}; graph @{g.name} takes {_signature(g)}")
    out = []
    for i, t in enumerate(g.arg_types):
        if not isinstance(t, TensorType):
            raise InputError(f"argument {names[i]!r} has type {t}, which cannot be given on the command line")
        what = f"argument {names[i]!r}"
        try:
            value = parse_value(given[i])
        except InputError as e:
            raise InputError(f"{what} ({t}): {e}") from None
        out.append(to_array(value, t, what))
    return out


def _signature(g: Graph) -> str:
    return ", ".join(f"{a.name or i}: {t}" for i, (a, t) in enumerate(zip(g.args, g.arg_types)))
