"""Neural-network ops against PyTorch (torch.nn.functional) on random inputs."""

from __future__ import annotations

import numpy as np
import pytest

from nexus.ir.opdef import OpTypeError
from nexus.ops.check import apply_op
from nexus.testing.extras import require

torch = require("torch", "torch")
F = torch.nn.functional
RNG = np.random.default_rng(4)
TOL = {np.float32: 1e-4, np.float64: 1e-10, np.float16: 1e-2}


def rand(shape: tuple, dtype: type = np.float32) -> np.ndarray:
    return RNG.standard_normal(shape).astype(dtype)


def t(x: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.asarray(x, dtype=np.float64))


def close(got: np.ndarray, want: torch.Tensor, dtype: type) -> None:
    assert got.dtype == np.dtype(dtype), got.dtype
    np.testing.assert_allclose(got.astype(np.float64), want.numpy(), rtol=TOL[dtype], atol=TOL[dtype])


CONV2D = [
    # x shape, w shape, stride, pad, dilation, groups
    ((2, 3, 7, 6), (4, 3, 3, 3), 1, 0, 1, 1),
    ((1, 4, 8, 8), (6, 2, 3, 2), 2, 1, 1, 2),
    ((2, 2, 9, 9), (2, 1, 3, 3), 1, 2, 2, 2),
    ((1, 3, 5, 5), (2, 3, 1, 1), 3, 0, 1, 1),
    ((0, 3, 5, 5), (2, 3, 2, 2), 1, 0, 1, 1),
]


@pytest.mark.parametrize("xs,ws,stride,pad,dil,groups", CONV2D)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("bias", [True, False])
def test_conv2d(xs: tuple, ws: tuple, stride: int, pad: int, dil: int, groups: int, dtype: type, bias: bool) -> None:
    x, w = rand(xs, dtype), rand(ws, dtype)
    b = rand((ws[0],), dtype) if bias else None
    args = [x, w] + ([b] if bias else [])
    got = apply_op("Conv", *args, strides=(stride, stride), pads=(pad,) * 4, dilations=(dil, dil), group=groups)
    want = F.conv2d(t(x), t(w), None if b is None else t(b), stride=stride, padding=pad, dilation=dil, groups=groups)
    close(got, want, dtype)


@pytest.mark.parametrize("stride,pads,dil,groups", [(1, (0, 0), 1, 1), (2, (1, 2), 1, 1), (1, (2, 0), 3, 2)])
def test_conv1d_asymmetric_pads(stride: int, pads: tuple, dil: int, groups: int) -> None:
    x, w, b = rand((2, 4, 11)), rand((6, 4 // groups, 3)), rand((6,))
    got = apply_op("Conv", x, w, b, strides=(stride,), pads=pads, dilations=(dil,), group=groups)
    want = F.conv1d(F.pad(t(x), pads), t(w), t(b), stride=stride, dilation=dil, groups=groups)
    close(got, want, np.float32)


def test_conv_f16_keeps_dtype() -> None:
    x, w = rand((1, 2, 5, 5), np.float16), rand((3, 2, 3, 3), np.float16)
    close(apply_op("Conv", x, w), F.conv2d(t(x), t(w)), np.float16)


@pytest.mark.parametrize("xs,ws,stride,pad,opad,dil,groups", [
    ((2, 3, 4, 5), (3, 2, 3, 3), 1, 0, 0, 1, 1),
    ((1, 4, 3, 3), (4, 3, 3, 2), 2, 1, 1, 1, 2),
    ((1, 2, 4, 4), (2, 2, 2, 3), 3, 0, 2, 2, 1),
])
@pytest.mark.parametrize("bias", [True, False])
def test_conv_transpose2d(xs: tuple, ws: tuple, stride: int, pad: int, opad: int, dil: int, groups: int,
                          bias: bool) -> None:
    x, w = rand(xs), rand(ws)
    b = rand((ws[1] * groups,)) if bias else None
    args = [x, w] + ([b] if bias else [])
    got = apply_op("ConvTranspose", *args, strides=(stride, stride), pads=(pad,) * 4, dilations=(dil, dil),
                   group=groups, output_padding=(opad, opad))
    want = F.conv_transpose2d(t(x), t(w), None if b is None else t(b), stride=stride, padding=pad,
                              output_padding=opad, groups=groups, dilation=dil)
    close(got, want, np.float32)


@pytest.mark.parametrize("k,stride,pad,dil,ceil", [(2, 2, 0, 1, False), (3, 2, 1, 1, True), (3, 1, 1, 2, False),
                                                   (2, 3, 1, 1, True), (3, 3, 0, 1, True)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_max_pool2d(k: int, stride: int, pad: int, dil: int, ceil: bool, dtype: type) -> None:
    x = rand((2, 3, 8, 7), dtype)
    got = apply_op("MaxPool", x, kernel_shape=(k, k), strides=(stride, stride), pads=(pad,) * 4,
                   dilations=(dil, dil), ceil_mode=ceil)
    close(got, F.max_pool2d(t(x), k, stride, pad, dil, ceil_mode=ceil), dtype)


@pytest.mark.parametrize("k,stride,pad,dil,ceil", [(2, 2, 0, 1, False), (3, 2, 1, 1, True), (3, 1, 1, 2, False),
                                                   (2, 3, 1, 1, True)])
def test_max_pool_indices(k: int, stride: int, pad: int, dil: int, ceil: bool) -> None:
    x = rand((2, 3, 8, 7), np.float64)
    got = apply_op("MaxPoolIndices", x, kernel_shape=(k, k), strides=(stride, stride), pads=(pad,) * 4,
                   dilations=(dil, dil), ceil_mode=ceil)
    _, idx = F.max_pool2d(t(x), k, stride, pad, dil, ceil_mode=ceil, return_indices=True)
    # PyTorch counts within each (n, c) plane; ONNX over the whole tensor.
    plane = np.arange(2 * 3).reshape(2, 3, 1, 1) * (8 * 7)
    assert got.dtype == np.int64
    np.testing.assert_array_equal(got, idx.numpy() + plane)


def test_max_pool1d() -> None:
    x = rand((2, 3, 10))
    close(apply_op("MaxPool", x, kernel_shape=(3,), strides=(2,)), F.max_pool1d(t(x), 3, 2), np.float32)


@pytest.mark.parametrize("k,stride,pad,ceil", [(2, 2, 0, False), (3, 2, 1, True), (3, 1, 1, False),
                                              (2, 3, 1, True), (3, 3, 1, True)])
@pytest.mark.parametrize("include", [True, False])
def test_avg_pool2d(k: int, stride: int, pad: int, ceil: bool, include: bool) -> None:
    x = rand((2, 3, 8, 7))
    got = apply_op("AveragePool", x, kernel_shape=(k, k), strides=(stride, stride), pads=(pad,) * 4,
                   ceil_mode=ceil, count_include_pad=include)
    want = F.avg_pool2d(t(x), k, stride, pad, ceil_mode=ceil, count_include_pad=include)
    close(got, want, np.float32)


@pytest.mark.parametrize("shape", [(2, 3, 4, 5), (1, 2, 7), (2, 1, 2, 3, 2)])
def test_global_average_pool(shape: tuple) -> None:
    x = rand(shape)
    want = t(x).mean(dim=tuple(range(2, len(shape))), keepdim=True)
    close(apply_op("GlobalAveragePool", x), want, np.float32)


@pytest.mark.parametrize("shape", [(2, 3, 4, 5), (4, 3), (2, 3, 6)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_batch_norm_inference(shape: tuple, dtype: type) -> None:
    x = rand(shape, dtype)
    c = shape[1]
    scale, bias, mean = rand((c,), dtype), rand((c,), dtype), rand((c,), dtype)
    var = RNG.uniform(0.5, 2, c).astype(dtype)
    got = apply_op("BatchNormalization", x, scale, bias, mean, var, epsilon=1e-3)
    want = F.batch_norm(t(x), t(mean), t(var), t(scale), t(bias), training=False, eps=1e-3)
    close(got, want, dtype)


@pytest.mark.parametrize("shape,axis", [((2, 3, 4), -1), ((2, 3, 4), 1), ((5, 8), -1)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
@pytest.mark.parametrize("bias", [True, False])
def test_layer_norm(shape: tuple, axis: int, dtype: type, bias: bool) -> None:
    x = rand(shape, dtype)
    norm = shape[axis % len(shape):]
    scale, b = rand(norm, dtype), rand(norm, dtype)
    args = [x, scale] + ([b] if bias else [])
    got = apply_op("LayerNormalization", *args, axis=axis, epsilon=1e-5)
    want = F.layer_norm(t(x), norm, t(scale), t(b) if bias else None, eps=1e-5)
    close(got, want, dtype)


def test_dropout_is_identity_at_inference() -> None:
    x = rand((3, 4))
    np.testing.assert_array_equal(apply_op("Dropout", x, ratio=0.3), x)


RESIZES = [
    # torch mode, torch align_corners, our mode, coordinate mode, nearest mode
    ("nearest", None, "nearest", "asymmetric", "floor"),
    ("nearest-exact", None, "nearest", "half_pixel", "round_prefer_ceil"),
    ("bilinear", False, "linear", "half_pixel", "round_prefer_floor"),
    ("bilinear", True, "linear", "align_corners", "round_prefer_floor"),
]


@pytest.mark.parametrize("tmode,align,mode,coord,nearest", RESIZES)
@pytest.mark.parametrize("size", [(8, 10), (3, 2), (5, 5), (1, 7)])
def test_resize_2d(tmode: str, align, mode: str, coord: str, nearest: str, size: tuple) -> None:  # type: ignore
    x = rand((2, 3, 5, 5))
    sizes = np.array([2, 3, *size], np.int64)
    got = apply_op("Resize", x, sizes, mode=mode, coordinate_transformation_mode=coord, nearest_mode=nearest,
                   const=(1,))
    want = F.interpolate(t(x), size=size, mode=tmode, align_corners=align)
    close(got, want, np.float32)


def test_resize_linear_matches_onnxruntime_half_pixel() -> None:
    onnx = require("onnx", "onnx")
    rt = require("onnxruntime", "onnx")
    from onnx import TensorProto, helper

    x = rand((1, 2, 4, 6))
    sizes = np.array([1, 2, 7, 3], np.int64)
    node = helper.make_node("Resize", ["x", "", "", "s"], ["y"], mode="linear",
                            coordinate_transformation_mode="half_pixel")
    model = helper.make_model(helper.make_graph(
        [node], "r", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape),
                      helper.make_tensor_value_info("s", TensorProto.INT64, [4])],
        [onnx.ValueInfoProto(name="y")]), opset_imports=[helper.make_opsetid("", 18)])
    sess = rt.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    (want,) = sess.run(None, {"x": x, "s": sizes})
    got = apply_op("Resize", x, sizes, mode="linear", coordinate_transformation_mode="half_pixel", const=(1,))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("op,args,attrs,msg", [
    ("Conv", [np.zeros((1, 3, 5, 5), np.float32), np.zeros((2, 2, 3, 3), np.float32)], {},
     "x has 3 channels, w expects 2 per group"),
    ("Conv", [np.zeros((1, 4, 5, 5), np.float32), np.zeros((3, 2, 3, 3), np.float32)], {"group": 2},
     "do not divide into 2 groups"),
    ("Conv", [np.zeros((1, 3, 5), np.float32), np.zeros((2, 3, 3, 3), np.float32)], {}, "same rank"),
    ("Conv", [np.zeros((1, 3, 5, 5), np.int32), np.zeros((2, 3, 3, 3), np.int32)], {}, "input 0 has dtype i32"),
    ("MaxPool", [np.zeros((1, 3, 5, 5), np.float32)], {"kernel_shape": (3,)}, "does not fit"),
    ("BatchNormalization", [np.zeros((2, 3), np.float32)] + [np.zeros(4, np.float32)] * 4, {},
     r"scale must be \[C\] = \[3\]"),
    ("Resize", [np.zeros((2, 3), np.float32), np.array([2, 3, 4])], {}, "sizes has 3 entries"),
])
def test_errors(op: str, args: list, attrs: dict, msg: str) -> None:
    with pytest.raises(OpTypeError, match=msg):
        apply_op(op, *args, **attrs)
