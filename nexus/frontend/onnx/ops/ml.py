"""ONNX import rules: the ai.onnx.ml ops that are plain tensor functions."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from nexus.frontend.onnx.data import OnnxImportError
from nexus.frontend.onnx.ops import Ins, _cast, _like, _rank, _req, _t, converts
from nexus.ir.node import Node

if TYPE_CHECKING:
    from nexus.frontend.onnx.importer import Importer


@converts("ai.onnx.ml.Binarizer")
def _binarizer(imp: Importer, ins: Ins, attrs: dict[str, Any]) -> list[Node | None]:
    """1 where x > threshold, else 0, in x's dtype."""
    x = _req(ins[0], "X")
    return [_cast(imp, imp.emit("Greater", [x, _like(imp, float(attrs.get("threshold", 0.0)), x)]), _t(x).dtype)]


@converts("ai.onnx.ml.ArrayFeatureExtractor")
def _array_feature_extractor(imp: Importer, ins: Ins, attrs: dict[str, Any]) -> list[Node | None]:
    """x[..., indices] (the indices flattened); a vector x gives one row [1, k], as ONNX
    Runtime and the reference do."""
    x, idx = _req(ins[0], "X"), _req(ins[1], "Y")
    flat = imp.emit("Reshape", [_cast(imp, idx, "i64"), imp.const(np.array([-1], np.int64))])
    y = imp.emit("Gather", [x, flat], {"axis": _rank(x) - 1})
    return [imp.emit("Unsqueeze", [y], {"axes": (0,)}) if _rank(x) == 1 else y]


_LEQ, _LT, _GTE, _GT, _EQ, _NEQ, _MEMBER = range(7)


@converts("ai.onnx.ml.TreeEnsemble")
def _tree_ensemble(imp: Importer, ins: Ins, attrs: dict[str, Any]) -> list[Node | None]:
    """The trees are attributes, so each unrolls at import: one bool [N] per split node, one
    mask per leaf (the AND of its path), and the leaves' weights summed into the targets by
    one MatMul of the masks with a constant [leaves, n_targets] (SUM, AVERAGE) or, per tree,
    the hit target's weight kept by Where (MIN, MAX; a target no tree reaches is 0, as in
    ONNX Runtime, where onnx.reference leaves the dtype's largest or smallest value)."""
    x = _req(ins[0], "X")
    if _rank(x) != 2:
        raise OnnxImportError(f"TreeEnsemble: X must be [N, features], got {_t(x)}")
    if int(attrs.get("post_transform", 0)) != 0:
        raise OnnxImportError("TreeEnsemble: only post_transform NONE (0) is supported")
    agg = int(attrs.get("aggregate_function", 1))
    if agg not in (0, 1, 2, 3):
        raise OnnxImportError(f"TreeEnsemble: aggregate_function {agg} is not one of 0..3")
    splits = np.asarray(attrs["nodes_splits"], np.float64).reshape(-1)
    feats, modes = list(attrs["nodes_featureids"]), [int(v) for v in np.asarray(attrs["nodes_modes"]).reshape(-1)]
    true_ids, false_ids = list(attrs["nodes_truenodeids"]), list(attrs["nodes_falsenodeids"])
    true_leaf, false_leaf = list(attrs["nodes_trueleafs"]), list(attrs["nodes_falseleafs"])
    targets, weights = list(attrs["leaf_targetids"]), np.asarray(attrs["leaf_weights"], np.float64).reshape(-1)
    roots, n_targets = list(attrs["tree_roots"]), int(attrs["n_targets"])
    if not roots:
        raise OnnxImportError("TreeEnsemble: tree_roots is empty")
    missing = list(attrs.get("nodes_missing_value_tracks_true") or [0] * len(modes))
    members = iter(np.asarray(attrs.get("membership_values", np.zeros(0)), np.float64).reshape(-1))
    sets: dict[int, list[float]] = {}
    for i, mode in enumerate(modes):  # the membership sets, NaN-separated, in node order
        if mode == _MEMBER:
            sets[i] = []
            for v in members:
                if np.isnan(v):
                    break
                sets[i].append(float(v))
    dtype = _t(x).dtype
    xs = _cast(imp, x, "f64")

    def f64(v: Any) -> Node:
        return imp.const(np.asarray(v, np.float64))

    conds: dict[int, Node] = {}

    def cond(i: int) -> Node:  # [N] bool: node i sends the sample to its true branch
        if i not in conds:
            v = imp.emit("Gather", [xs, imp.const(np.array(feats[i], np.int64))], {"axis": 1})
            s = f64(splits[i])
            mode = modes[i]
            if mode == _MEMBER:
                eqs = [imp.emit("Equal", [v, f64(m)]) for m in sets[i]] or [imp.emit("Less", [v, f64(-np.inf)])]
                c = eqs[0]
                for e in eqs[1:]:
                    c = imp.emit("Or", [c, e])
            elif mode in (_LEQ, _GTE):
                c = imp.emit("Or", [imp.emit("Less" if mode == _LEQ else "Greater", [v, s]), imp.emit("Equal", [v, s])])
            elif mode in (_LT, _GT, _EQ):
                c = imp.emit({_LT: "Less", _GT: "Greater", _EQ: "Equal"}[mode], [v, s])
            elif mode == _NEQ:
                c = imp.emit("Not", [imp.emit("Equal", [v, s])])
            else:
                raise OnnxImportError(f"TreeEnsemble: node {i} has mode {mode}, not one of 0..6")
            if missing[i]:
                c = imp.emit("Or", [c, imp.emit("Not", [imp.emit("Equal", [v, v])])])
            conds[i] = c
        return conds[i]

    def leaves(i: int, is_leaf: bool, path: Node | None, depth: int) -> list[tuple[Node | None, int]]:
        if is_leaf:
            return [(path, i)]
        if depth > len(modes):
            raise OnnxImportError("TreeEnsemble: the nodes form a cycle")
        c = cond(i)
        yes = c if path is None else imp.emit("And", [path, c])
        not_c = imp.emit("Not", [c])
        no = not_c if path is None else imp.emit("And", [path, not_c])
        return (leaves(true_ids[i], bool(true_leaf[i]), yes, depth + 1)
                + leaves(false_ids[i], bool(false_leaf[i]), no, depth + 1))

    n_rows = imp.emit("Gather", [imp.emit("ShapeOf", [x]), imp.const(np.array([0], np.int64))], {"axis": 0})
    every = imp.emit("ConstantOfShape", [n_rows], {"value": np.array([True])})

    def tree(root: int) -> tuple[Node, np.ndarray, np.ndarray]:  # masks [N, leaves] f64, leaf x target weights, hits
        is_leaf = bool(true_leaf[root] and false_leaf[root] and true_ids[root] == false_ids[root])
        found = leaves(root, is_leaf, None, 0)
        masks = [imp.emit("Unsqueeze", [_cast(imp, every if p is None else p, "f64")], {"axes": (1,)})
                 for p, _ in found]
        w, hits = np.zeros((len(found), n_targets)), np.zeros((len(found), n_targets))
        for k, (_, leaf) in enumerate(found):
            w[k, targets[leaf]], hits[k, targets[leaf]] = weights[leaf], 1.0
        return (masks[0] if len(masks) == 1 else imp.emit("Concat", masks, {"axis": 1})), w, hits

    trees = [tree(r) for r in roots]
    if agg in (0, 1):
        masks = trees[0][0] if len(trees) == 1 else imp.emit("Concat", [t[0] for t in trees], {"axis": 1})
        y = imp.emit("MatMul", [masks, f64(np.concatenate([t[1] for t in trees]))])
        if agg == 0:
            y = imp.emit("Div", [y, f64(float(len(trees)))])
    else:  # a target no tree reaches stays 0, as ONNX Runtime has it (onnx.reference: the dtype's max or min)
        def reached(masks: Node, w: np.ndarray, hits: np.ndarray) -> tuple[Node, Node]:
            return (imp.emit("MatMul", [masks, f64(w)]),
                    imp.emit("Greater", [imp.emit("MatMul", [masks, f64(hits)]), f64(0.0)]))

        y, seen = reached(*trees[0])
        for t in trees[1:]:
            value, hit = reached(*t)
            both_ = imp.emit("Where", [seen, imp.emit("Minimum" if agg == 2 else "Maximum", [y, value]), value])
            y, seen = imp.emit("Where", [hit, both_, y]), imp.emit("Or", [seen, hit])
        y = imp.emit("Where", [seen, y, f64(0.0)])
    return [_cast(imp, y, dtype)]

