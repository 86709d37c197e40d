"""The official ONNX node tests against Nexus (and ONNX Runtime, in the same run).

Recent ``onnx`` wheels ship the test *generators* (``onnx.backend.test.case.node``), not
the data under ``onnx/backend/test/data/node``: :func:`node_cases` builds the cases in
memory, and each is run as ``onnx.backend.test`` runs it: ``backend.prepare(model)``, then
``rep.run(inputs)`` per data set, compared by the runner's ``assert_similar_outputs``
with the case's tolerances.

``python -m nexus.testing.onnx_conformance [--core] [--no-ort] [-v]`` prints the pass
rates (overall and on the cases whose ops are all in the issue-13 core set).  ``--all`` adds
the cases the wheel stores as files (``simple``, ``pytorch-converted``, ``pytorch-operator``
and the light real models, which run on ``onnx.backend.test``'s dummy inputs against their
stored outputs); ``--families`` prints the pass counts per family (:data:`FAMILIES`).
"""

from __future__ import annotations

import argparse
import contextlib
import glob
import io
import os
import re
import sys
import time
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Case:
    name: str
    model: Any
    data_sets: list[tuple[list[Any], list[Any]]]
    rtol: float
    atol: float
    ops: frozenset[str] = field(default_factory=frozenset)


def _ops(graph: Any) -> set[str]:
    out: set[str] = set()
    for n in graph.node:
        out.add(n.op_type if n.domain in ("", "ai.onnx") else f"{n.domain}.{n.op_type}")
        for a in n.attribute:
            if a.type == 5:  # GRAPH
                out |= _ops(a.g)
            for g in a.graphs:
                out |= _ops(g)
    return out


def node_cases() -> list[Case]:
    """The node test cases of the installed onnx package, built in memory."""
    from onnx.backend.test.case import node

    with warnings.catch_warnings(), contextlib.redirect_stderr(io.StringIO()):
        warnings.simplefilter("ignore")
        cases = node.collect_testcases(None)
    out = []
    for c in cases:
        if c.model is None or not c.data_sets:
            continue
        ops = frozenset(_ops(c.model.graph))
        out.append(Case(c.name, c.model, [(list(i), list(o)) for i, o in c.data_sets], c.rtol, c.atol, ops))
    return out


MODEL_KINDS = ("simple", "pytorch-converted", "pytorch-operator", "real")


def _data_dir() -> str:
    import onnx

    return os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data")


def _read_value(path: str, type_proto: Any) -> Any:
    import onnx
    from onnx import numpy_helper

    with open(path, "rb") as f:
        raw = f.read()
    if type_proto.HasField("sequence_type"):
        seq = onnx.SequenceProto()
        seq.ParseFromString(raw)
        return numpy_helper.to_list(seq)
    if type_proto.HasField("optional_type"):
        opt = onnx.OptionalProto()
        opt.ParseFromString(raw)
        return numpy_helper.to_optional(opt)
    t = onnx.TensorProto()
    t.ParseFromString(raw)
    return numpy_helper.to_array(t)


def _dummy_input(vi: Any) -> Any:
    """``onnx.backend.test``'s input for the light models: ``arange(n) / n`` in float32."""
    import numpy as np

    shape = tuple(d.dim_value if d.HasField("dim_value") else 1 for d in vi.type.tensor_type.shape.dim)
    n = int(np.prod(shape))
    return (np.arange(n).reshape(shape) / n).astype(np.float32)


def model_cases(kinds: Iterable[str] = MODEL_KINDS) -> list[Case]:
    """The cases the installed onnx package stores as files (model and data sets), named
    ``<kind>/<test name>``; the real models are the light ones the wheel ships."""
    import json

    import onnx

    root = _data_dir()
    out = []
    for kind in kinds:
        kdir = os.path.join(root, kind)
        for name in sorted(os.listdir(kdir)) if os.path.isdir(kdir) else []:
            cdir = os.path.join(kdir, name)
            if not os.path.isdir(cdir):
                continue
            meta: dict[str, Any] = {}
            if os.path.exists(os.path.join(cdir, "data.json")):
                with open(os.path.join(cdir, "data.json")) as f:
                    meta = json.load(f)
            rtol, atol = float(meta.get("rtol", 1e-3)), float(meta.get("atol", 1e-7))
            url = meta.get("url")
            if os.path.exists(os.path.join(cdir, "model.onnx")):
                model = onnx.load(os.path.join(cdir, "model.onnx"))
                data_sets = []
                for ds in sorted(glob.glob(os.path.join(cdir, "test_data_set*"))):
                    n_in = len(glob.glob(os.path.join(ds, "input_*.pb")))
                    n_out = len(glob.glob(os.path.join(ds, "output_*.pb")))
                    ins = [_read_value(os.path.join(ds, f"input_{i}.pb"), model.graph.input[i].type)
                           for i in range(n_in)]
                    outs = [_read_value(os.path.join(ds, f"output_{i}.pb"), model.graph.output[i].type)
                            for i in range(n_out)]
                    data_sets.append((ins, outs))
            elif url and url.startswith("onnx/backend/test/data/light/"):
                path = os.path.join(root, "light", os.path.basename(url))
                model = onnx.load(path)
                inits = {t.name for t in model.graph.initializer}
                ins = [_dummy_input(vi) for vi in model.graph.input if vi.name not in inits]
                prefix = os.path.splitext(path)[0]
                outs = [_read_value(f"{prefix}_output_{i}.pb", model.graph.output[i].type)
                        for i in range(len(model.graph.output))]
                data_sets = [(ins, outs)]
            else:
                continue
            out.append(Case(f"{kind}/{name}", model, data_sets, rtol, atol, frozenset(_ops(model.graph))))
    return out


# The families of the issue-29 table, by the op a case is named after (first match wins);
# the stored model kinds are families of their own, and the rest is "other".
FAMILIES: tuple[tuple[str, str], ...] = (
    ("control_flow", r"^test_(if|loop|scan)(\d|_|$)"),
    ("rnn", r"^test_(lstm|gru|rnn|simple_rnn)_"),
    ("sequence_optional", r"^test_(sequence|split_to_sequence|concat_from_sequence|optional|identity_(sequence|opt))"),
    ("data_dependent", r"^test_(unique|compress|nonzero|nonmaxsuppression)"),
    ("shape_indexing", r"^test_(scatter|gather|reversesequence|slice|reshape|squeeze|unsqueeze|transpose|expand|tile"
                       r"|(constant|edge|reflect|wrap)_pad|shape|size|split|concat|flatten|onehot|depthtospace"
                       r"|spacetodepth|where|tril|triu|eyelike|tensorscatter)"),
    ("resize_image", r"^test_(resize|gridsample|affine_grid|upsample|roialign|center_crop_pad|image_decoder)"),
    ("reduction_scan", r"^test_(reduce|cumsum|cumprod|argmax|argmin|top_k|logsoftmax|softmax|hardmax)"),
    ("conv_pool", r"^test_(conv|basic_conv|convtranspose|averagepool|maxpool|lppool|globalaveragepool|globalmaxpool"
                  r"|col2im|maxunpool|basic_deform|deform_conv|qlinearconv|convinteger)"),
)


def family(name: str) -> str:
    """The family of a case: its stored kind (``simple``, ``real``...) or one of :data:`FAMILIES`."""
    if "/" in name:
        return name.split("/", 1)[0]
    for fam, pat in FAMILIES:
        if re.search(pat, name):
            return fam
    return "other"


def is_core(case: Case) -> bool:
    from nexus.frontend.onnx.ops import CORE_OPS

    return case.ops <= CORE_OPS


def _assert_similar(refs: list[Any], outs: list[Any], rtol: float, atol: float) -> None:
    """The runner's ``assert_similar_outputs``, but a sequence output is compared element by
    element as one-output lists: the runner recurses with a bare tensor as the list of outputs,
    which raises on a 0-d element (test_loop16_seq_none, for every backend)."""
    from onnx.backend.test.runner import Runner

    if len(refs) != len(outs):
        raise AssertionError(f"{len(outs)} outputs, expected {len(refs)}")
    for ref, out in zip(refs, outs):
        if isinstance(ref, (list, tuple)):
            if not isinstance(out, (list, tuple)) or len(out) != len(ref):
                raise AssertionError(f"expected a sequence of {len(ref)}, got {type(out).__name__}")
            for r, o in zip(ref, out):
                _assert_similar([r], [o], rtol, atol)
        else:
            Runner.assert_similar_outputs([ref], [out], rtol=rtol, atol=atol)


def run_case(backend: Any, case: Case) -> str | None:
    """None when the backend passes the case, else the first line of why not."""
    from onnx.backend.test.runner import _normalize_tensor

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            rep = backend.prepare(case.model, "CPU")
            for inputs, refs in case.data_sets:
                outs = rep.run([_normalize_tensor(x) for x in inputs])
                _assert_similar([_normalize_tensor(x) for x in refs], list(outs), case.rtol, case.atol)
    except BaseException as e:  # noqa: BLE001  (a failing case is data, whatever it raised)
        if isinstance(e, KeyboardInterrupt):
            raise
        text = str(e).strip().splitlines()
        return f"{type(e).__name__}: {text[0] if text else ''}"[:300]
    return None


def nexus_backend() -> Any:
    from nexus.backends.onnx import backend

    return backend.NexusBackend


def ort_backend() -> Any:
    import onnxruntime.backend as ortb

    return ortb


@dataclass
class Report:
    results: dict[str, dict[str, str | None]]  # backend -> case -> failure
    core: set[str]

    def rate(self, backend: str, names: Iterable[str]) -> tuple[int, int]:
        names = list(names)
        return sum(self.results[backend][n] is None for n in names), len(names)

    def table(self) -> str:
        names = list(next(iter(self.results.values())))
        core = [n for n in names if n in self.core]
        lines = ["| backend | all node tests | core-set tests |", "|---|---|---|"]
        for b in self.results:
            pa, na = self.rate(b, names)
            pc, nc = self.rate(b, core)
            pct_a, pct_c = 100 * pa / max(na, 1), 100 * pc / max(nc, 1)
            lines.append(f"| {b} | {pa}/{na} ({pct_a:.1f}%) | {pc}/{nc} ({pct_c:.1f}%) |")
        return "\n".join(lines)

    def family_table(self) -> str:
        names = list(next(iter(self.results.values())))
        fams: dict[str, list[str]] = {}
        for name in names:
            fams.setdefault(family(name), []).append(name)
        order = [f for f, _ in FAMILIES] + list(MODEL_KINDS) + ["other"]
        lines = ["| family | " + " | ".join(self.results) + " |", "|---|" + "---|" * len(self.results)]
        for f in [f for f in order if f in fams] + ["all"]:
            group = names if f == "all" else fams[f]
            cells = []
            for b in self.results:
                passed, total = self.rate(b, group)
                cells.append(f"{passed}/{total}")
            lines.append(f"| {f} | " + " | ".join(cells) + " |")
        return "\n".join(lines)


def run(backends: dict[str, Callable[[], Any]], only_core: bool = False,
        select: Callable[[Case], bool] | None = None, verbose: bool = False, with_models: bool = False) -> Report:
    cases = node_cases() + (model_cases() if with_models else [])
    core = {c.name for c in cases if is_core(c)}
    if only_core:
        cases = [c for c in cases if c.name in core]
    if select is not None:
        cases = [c for c in cases if select(c)]
    results: dict[str, dict[str, str | None]] = {}
    for label, make in backends.items():
        b = make()
        res = results[label] = {}
        t0 = time.perf_counter()
        for c in cases:
            res[c.name] = run_case(b, c)
            if verbose and res[c.name] is not None:
                print(f"{label} FAIL {c.name} [{' '.join(sorted(c.ops))}]: {res[c.name]}", file=sys.stderr)
        if verbose:
            print(f"{label}: {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    return Report(results, core)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--core", action="store_true", help="only the cases whose ops are all in the core set")
    p.add_argument("--no-ort", action="store_true", help="skip ONNX Runtime")
    p.add_argument("-k", default=None, help="only cases whose name contains this")
    p.add_argument("-v", action="store_true", help="print each failure (stderr)")
    p.add_argument("--all", action="store_true",
                   help="add the stored cases: simple, pytorch-converted, pytorch-operator, the light real models")
    p.add_argument("--families", action="store_true", help="also print the pass counts per family")
    a = p.parse_args(argv)
    backends: dict[str, Callable[[], Any]] = {"nexus": nexus_backend}
    if not a.no_ort:
        backends["onnxruntime"] = ort_backend
    os.environ.setdefault("ORT_LOGGING_LEVEL", "3")
    rep = run(backends, a.core, (lambda c: a.k in c.name) if a.k else None, a.v, a.all)
    print(rep.table())
    if a.families:
        print()
        print(rep.family_table())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
