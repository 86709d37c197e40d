"""Generate the op table (docs/ops.md) from the registry: ``python -m nexus.ops.doc``.

Everything in the table comes from the OpDef records: name, inputs, attributes with
kinds and defaults, the properties passes read (differentiable, pure, may fail,
commutative, broadcasting, multithreaded, shape only), the Python operator, the named results and
the data-dependent size among them, the public names, doc.  The dtypes column
is found by asking each op's type rule which dtypes of its first input it accepts (the
other inputs probed with that dtype, i64 or bool), so it cannot drift from the rules.
"""

from __future__ import annotations

import argparse
import itertools
import sys
from pathlib import Path
from typing import Any

import numpy as np

from nexus.ir.opdef import REQUIRED, OpDef, all_ops
from nexus.ir.types import DTYPES, TensorType, Type
from nexus.ops import FAMILIES

# Sample values for required attributes, so that the rules can be probed.
PROBE_ATTRS: dict[str, dict[str, Any]] = {
    "Einsum": {"equation": "i->i"},
    "Unsqueeze": {"axes": (0,)},
    "Concat": {"axis": 0},
    "MaxPool": {"kernel_shape": (1,)},
    "MaxPoolIndices": {"kernel_shape": (1,)},
    "AveragePool": {"kernel_shape": (1,)},
    "DimSize": {"axis": 0},
    "Cast": {"to": "f32"},
    "Split": {"num_outputs": 1},
    "Constant": {"value": np.zeros((), np.float32)},
    "Roll": {"axes": (0,)},
    "Col2Im": {"image_shape": (2, 2), "block_shape": (1, 1)},
    "BitCast": {"to": "i32"},
    "Send": {"peer": 1},
    "Recv": {"peer": 1},
}
DEFAULT_PATH = Path("docs/ops.md")
_DTYPE_ORDER = list(DTYPES)


def accepted_dtypes(op: OpDef) -> list[str] | None:
    """Dtypes of the first input the rule accepts; None when the op has no inputs."""
    if not op.inputs or op.type_rule is None:
        return None
    try:
        attrs = op.complete_attrs(PROBE_ATTRS.get(op.name, {}))
    except Exception:  # noqa: BLE001  (a required attribute we have no sample for)
        return []
    n = len(op.inputs)
    out = []
    for d in _DTYPE_ORDER:
        for rest in itertools.product((d, "i64", "bool"), repeat=n - 1):
            ins: list[Type] = [TensorType(d, None)]
            ins += [TensorType(r, None) for r in rest]
            try:
                op.type_rule(ins, attrs, [None] * n)
            except Exception:  # noqa: BLE001  (a rejected combination)
                continue
            out.append(d)
            break
    return out


def _dtype_text(dtypes: list[str] | None) -> str:
    if dtypes is None:
        return "(attr)"
    if set(dtypes) == set(DTYPES):
        return "all"
    if set(dtypes) == set(DTYPES) - {"bool"}:
        return "numeric"
    if set(dtypes) == {"f16", "f32", "f64"}:
        return "float"
    return ", ".join(dtypes) or "?"


def _attr_text(op: OpDef) -> str:
    parts = []
    for name, a in op.attrs.items():
        if a.default is REQUIRED:
            parts.append(f"`{name}`: {a.kind}")
        elif isinstance(a.default, np.ndarray):
            parts.append(f"`{name}`: {a.kind} = {a.default.dtype}({a.default.tolist()})")
        else:
            parts.append(f"`{name}`: {a.kind} = {a.default!r}")
    return "<br>".join(parts)


def _inputs_text(op: OpDef) -> str:
    names = list(op.inputs)
    if op.variadic and names:
        names[-1] += "..."
    return ", ".join(names)


def _properties_text(op: OpDef) -> str:
    flags = [("differentiable", op.differentiable), ("impure", not op.pure), ("may fail", op.may_fail),
             ("may fail on ints", op.may_fail_on_int and not op.may_fail), ("commutative", op.commutative),
             ("broadcasting", op.broadcasting), ("multithreaded", op.multithreaded),
             ("shape only", op.shape_only)]
    return ", ".join(name for name, on in flags if on)


_ON_INTS = {"nonzero divisor": " (ints: a non-zero constant divisor)", "never": " (floats)"}


def _operator_text(op: OpDef) -> str:
    if not op.operator:
        return ""
    spelled = f"`{op.operator}x`" if len(op.inputs) == 1 else f"`a {op.operator} b`"
    return (spelled + _ON_INTS.get(op.operator_on_ints, "")).replace("|", "\\|")


def _results_text(op: OpDef) -> str:
    so = op.size_output
    parts = []
    for r in op.results:
        if so is not None and r == so.size:
            dim = f"`{so.dim}`" if isinstance(so.dim, str) else str(so.dim)
            r += f" (size: {so.of} dim {dim})"
        parts.append(r)
    return ", ".join(parts)


def op_row(op: OpDef) -> str:
    """One Markdown table row for ``op``."""
    cells = [f"**{op.name}**", _inputs_text(op), _attr_text(op), _dtype_text(accepted_dtypes(op)),
             _properties_text(op), _operator_text(op), _results_text(op),
             ", ".join(op.public_names), op.doc.replace("|", "\\|")]
    return "| " + " | ".join(cells) + " |"


def generate() -> str:
    ops = all_ops()
    # Only the families of nexus/ops: other packages register ops only when imported,
    # and the table must not depend on what happened to be imported.
    families = FAMILIES
    lines = [
        "# The op table",
        "",
        "Generated from the op registry by `python -m nexus.ops.doc`; do not edit by hand.",
        "Inputs ending in `...` repeat (variadic). Dtypes are those the type rule accepts for the first",
        "input; binary elementwise ops need equal dtypes (insert a Cast). Properties: `differentiable`",
        "ops have a vector-Jacobian product; `impure` ops are never folded, merged or moved; `may fail`",
        "marks ops that can raise on values their types allow (`on ints`: only on integers, as division",
        "by zero), which passes do not run speculatively; `commutative` ops may have their two inputs",
        "swapped; `broadcasting` ops are elementwise with NumPy broadcasting of all inputs (shape checks",
        "guard symbolic dims they assume to broadcast); `multithreaded` kernels use every core (BLAS);",
        "`shape only` ops read their input's shape, never its values (they fold once it is static).",
        "`operator` is the Python operator the python backend emits instead of a kernel call (where it",
        "computes the same). Multi-output ops return a tuple read with `Proj`, named in `results`; a",
        "data-dependent size is the last one and a fresh symbol in the shapes. `names` are the op's",
        "functions in the DSL and in scripts (`nx.<name>`).",
        "",
    ]
    header = ["| op | inputs | attributes | dtypes | properties | operator | results | names | doc |",
              "|---|---|---|---|---|---|---|---|---|"]
    for fam in families:
        lines += [f"## {fam}", "", *header]
        lines += [op_row(o) for o in sorted(ops.values(), key=lambda o: o.name) if o.family == fam]
        lines.append("")
    control = [o for o in ops.values() if not o.family]
    if control:
        lines += ["## control (nexus/ir/control.py)", "", "| op | kind | inputs | results | doc |",
                  "|---|---|---|---|---|"]
        lines += [f"| **{o.name}** | {o.kind} | {_inputs_text(o)} | {_results_text(o)} | {o.doc} |" for o in control]
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("-o", "--output", type=Path, default=DEFAULT_PATH, help="where to write (- for stdout)")
    args = p.parse_args(argv)
    text = generate()
    if str(args.output) == "-":
        sys.stdout.write(text)
    else:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(text)
        print(f"wrote {args.output} ({text.count(chr(10))} lines)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
