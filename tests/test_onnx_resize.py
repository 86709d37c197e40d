"""ONNX Resize on Nexus (opset 19: nearest/linear/cubic, antialias, axes,
keep_aspect_ratio_policy, every coordinate_transformation_mode, scales and sizes) against
ONNX Runtime and the ONNX reference implementation on random inputs.  The adjoint is
checked against finite differences in tests/test_autodiff_vjp_rules.py."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pytest

from nexus.testing.extras import require

onnx = require("onnx", "onnx")
ort = require("onnxruntime", "onnx")
from onnx import TensorProto as T  # noqa: E402
from onnx import helper as h  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

from nexus.frontend.onnx.importer import from_onnx  # noqa: E402

R = np.random.default_rng(7)


def resize_model(shape: list[int], attrs: dict[str, Any], scales: list[float] | None = None,
                 sizes: list[int] | None = None, roi: list[float] | None = None) -> Any:
    inits = []
    names = ["x", "", "", ""]
    for i, (name, value, dt) in enumerate((("roi", roi, np.float32), ("scales", scales, np.float32),
                                           ("sizes", sizes, np.int64)), 1):
        if value is not None:
            inits.append(onnx.numpy_helper.from_array(np.array(value, dt), name))
            names[i] = name
    while names[-1] == "":
        names.pop()
    node = h.make_node("Resize", names, ["y"], **attrs)
    g = h.make_graph([node], "m", [h.make_tensor_value_info("x", T.FLOAT, shape)],
                     [h.make_tensor_value_info("y", T.FLOAT, None)], inits)
    return h.make_model(g, opset_imports=[h.make_opsetid("", 19)])


def compare(m: Any, x: np.ndarray, with_ref: bool = True, with_ort: bool = True) -> None:
    got = np.asarray(from_onnx(m)(x))
    if with_ref:
        want = ReferenceEvaluator(m).run(None, {"x": x})[0]
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    if with_ort:
        ort_out = ort.InferenceSession(m.SerializeToString()).run(None, {"x": x})[0]
        np.testing.assert_allclose(got, ort_out, rtol=1e-4, atol=1e-4)


COORDS = ["half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "asymmetric", "align_corners"]
SCALES = [[1, 1, 1.7, 0.6], [1, 1, 0.5, 2.0], [1, 1, 3.0, 1.0]]


@pytest.mark.parametrize("mode,ctm,scales", list(itertools.product(["nearest", "linear", "cubic"], COORDS, SCALES)))
def test_scales_against_reference(mode: str, ctm: str, scales: list[float]) -> None:
    x = R.normal(size=(1, 2, 5, 4)).astype(np.float32)
    # align_corners divides by the output length scale * input (the reference, whose outputs
    # are the conformance data); ONNX Runtime divides by its floor, so it differs where
    # that is not an integer.
    exact = all(float(s * n).is_integer() for s, n in zip(scales, [1, 2, 5, 4]))
    m = resize_model([1, 2, 5, 4], {"mode": mode, "coordinate_transformation_mode": ctm}, scales=scales)
    compare(m, x, with_ort=ctm != "align_corners" or exact)


@pytest.mark.parametrize("mode,antialias,exclude,a", [
    ("linear", 1, 0, -0.75), ("cubic", 1, 0, -0.75), ("cubic", 0, 1, -0.5), ("cubic", 1, 1, -0.5)])
@pytest.mark.parametrize("sizes", [[1, 1, 3, 2], [1, 1, 4, 11]])
def test_antialias_and_exclude_outside(mode: str, antialias: int, exclude: int, a: float, sizes: list[int]) -> None:
    x = R.normal(size=(1, 1, 9, 7)).astype(np.float32)
    attrs = {"mode": mode, "antialias": antialias, "exclude_outside": exclude, "cubic_coeff_a": a}
    compare(resize_model([1, 1, 9, 7], attrs, sizes=sizes), x)


@pytest.mark.parametrize("policy", ["not_larger", "not_smaller"])
@pytest.mark.parametrize("axes", [[2, 3], [3, 2]])
def test_axes_and_keep_aspect_ratio(policy: str, axes: list[int]) -> None:
    x = R.normal(size=(2, 1, 4, 6)).astype(np.float32)
    m = resize_model([2, 1, 4, 6], {"mode": "linear", "axes": axes, "keep_aspect_ratio_policy": policy},
                     sizes=[7, 5])
    compare(m, x)


def test_negative_axes_count_from_the_end() -> None:
    # Neither oracle takes negative axes (the reference raises, ONNX Runtime 1.32 returns
    # the input): the oracle is the reference on the same model with axes [3, 2].
    x = R.normal(size=(2, 1, 4, 6)).astype(np.float32)
    neg = resize_model([2, 1, 4, 6], {"mode": "cubic", "axes": [-1, -2]}, sizes=[7, 5])
    pos = resize_model([2, 1, 4, 6], {"mode": "cubic", "axes": [3, 2]}, sizes=[7, 5])
    want = ReferenceEvaluator(pos).run(None, {"x": x})[0]
    np.testing.assert_allclose(from_onnx(neg)(x), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
def test_tf_crop_and_resize(mode: str) -> None:
    x = R.normal(size=(1, 1, 5, 5)).astype(np.float32)
    m = resize_model([1, 1, 5, 5], {"mode": mode, "coordinate_transformation_mode": "tf_crop_and_resize",
                                    "extrapolation_value": 3.5},
                     sizes=[1, 1, 4, 6], roi=[0, 0, -0.25, 0.3, 1, 1, 0.75, 1.4])
    compare(m, x)


def test_resize_attributes_round_trip_through_the_text_form() -> None:
    import nexus as nx

    m = resize_model([1, 1, 4, 4], {"mode": "cubic", "antialias": 1, "cubic_coeff_a": -0.5}, sizes=[1, 1, 2, 3])
    g = from_onnx(m)
    text = nx.print_graph(g)
    assert "antialias = true" in text and "cubic_coeff_a = -0.5" in text
    x = R.normal(size=(1, 1, 4, 4)).astype(np.float32)
    np.testing.assert_allclose(nx.parse(text)(x), ReferenceEvaluator(m).run(None, {"x": x})[0], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("attrs,match", [
    ({"mode": "bicubic"}, "mode must be one of"),
    ({"mode": "nearest", "antialias": True}, "antialias applies to linear and cubic"),
    ({"mode": "linear", "scales": [1.0, 2.0]}, "scales has 2 entries"),
    ({"mode": "linear", "roi": [0.0] * 4}, "roi has 4 entries"),
    ({"mode": "linear", "scales": [1.0, 1.0, 0.0, 1.0]}, "scales must be positive"),
])
def test_bad_resize_attributes_are_type_errors(attrs: dict[str, Any], match: str) -> None:
    from nexus.ir.opdef import OpTypeError, get_op
    from nexus.ir.types import TensorType

    op = get_op("Resize")
    ins = [TensorType("f32", (1, 1, 4, 4)), TensorType("i64", (4,))]
    with pytest.raises(OpTypeError, match=match):
        op.type_rule(ins, op.complete_attrs(attrs), [None, np.array([1, 1, 2, 2])])


def test_unsupported_resize_is_one_clear_error() -> None:
    from nexus.frontend.onnx.data import OnnxImportError

    m = resize_model([1, 1, 4, 4], {"mode": "bicubic"}, sizes=[1, 1, 2, 3])
    with pytest.raises(OnnxImportError, match="Resize mode 'bicubic' is not supported"):
        from_onnx(m)


@pytest.mark.parametrize("attrs,kw", [
    ({"mode": "cubic", "antialias": 1, "cubic_coeff_a": -0.5}, {"sizes": [1, 1, 3, 7]}),
    ({"mode": "linear"}, {"scales": [1, 1, 1.7, 0.6]}),
    ({"mode": "nearest", "coordinate_transformation_mode": "tf_crop_and_resize", "extrapolation_value": 2.0},
     {"sizes": [1, 1, 4, 6], "roi": [0, 0, -0.25, 0.3, 1, 1, 0.75, 1.4]}),
])
def test_export_round_trip_matches_onnxruntime(attrs: dict[str, Any], kw: dict[str, Any]) -> None:
    """ONNX Runtime on import -> export equals ONNX Runtime on the original."""
    import nexus as nx

    m = resize_model([1, 1, 5, 5], attrs, **kw)
    x = R.normal(size=(1, 1, 5, 5)).astype(np.float32)
    want = ort.InferenceSession(m.SerializeToString()).run(None, {"x": x})[0]
    exported = nx.to_onnx(from_onnx(m))
    got = ort.InferenceSession(exported.SerializeToString()).run(None, {exported.graph.input[0].name: x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
