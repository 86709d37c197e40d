"""PyTorch import of the ops real models need (issue 28): group norm, vector norms (weight
norm), scaled dot-product attention kept whole (torch's own decomposition of it cannot be
traced in GPT-2's attention), the import of a program torch cannot decompose, and GPT-2 and
wav2vec2 from transformers where it is installed.  torch eager is the oracle throughout."""

from __future__ import annotations

import math
import warnings
from typing import Any

import numpy as np
import pytest

import nexus as nx
from nexus.frontend.torch import importer
from nexus.frontend.torch.importer import TorchImportError, from_torch
from nexus.testing.extras import require

torch = require("torch", "torch")
nn = torch.nn
F = nn.functional
Dim = torch.export.Dim
THIS = __file__.rsplit("/", 1)[-1]


def _import(fn: Any, args: tuple[Any, ...], dyn: Any = None, **kw: Any) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        g = from_torch(fn, args, dyn, **kw)
    nx.verify(g)
    assert nx.parse(nx.print_graph(g)) is not None
    return g


def _agree(g: Any, fn: Any, args: tuple[Any, ...], rtol: float = 1e-5, atol: float = 1e-6) -> None:
    with torch.no_grad():
        want = fn(*args)
    got = g(*[a.numpy() if isinstance(a, torch.Tensor) else a for a in args])
    wants = want if isinstance(want, (tuple, list)) else (want,)
    gots = got if isinstance(got, (tuple, list)) else (got,)
    assert len(gots) == len(wants)
    for a, b in zip(gots, wants):
        np.testing.assert_allclose(a, b.numpy(), rtol=rtol, atol=atol)


def _ops(g: Any) -> set[str]:
    return {n.op.name for b in g.blocks for n in b.nodes}


# --- group norm ------------------------------------------------------------------------------
@pytest.mark.parametrize("shape, groups, affine", [
    ((2, 6, 5), 3, True), ((2, 8, 3, 4), 2, True), ((3, 4, 2, 2, 3), 4, False), ((2, 6), 1, True),
])
def test_group_norm_matches_torch(shape: tuple[int, ...], groups: int, affine: bool) -> None:
    torch.manual_seed(0)
    m = nn.GroupNorm(groups, shape[1], eps=1e-3, affine=affine).eval()
    if affine:
        with torch.no_grad():
            m.weight.uniform_(0.5, 2.0)
            m.bias.uniform_(-1.0, 1.0)
    x = torch.randn(*shape) * 3 + 1
    g = _import(m, (x,))
    assert "LayerNormalization" in _ops(g)  # built from Nexus's layer norm, not a new op
    _agree(g, m, (x,))


def test_group_norm_with_dynamic_batch_and_length() -> None:
    torch.manual_seed(1)
    m = nn.Sequential(nn.Conv1d(2, 8, 3), nn.GroupNorm(4, 8)).eval()
    g = _import(m, (torch.randn(2, 2, 10),), ({0: Dim("batch", max=16), 2: Dim("time", min=4, max=100)},))
    for shape in ((1, 2, 7), (5, 2, 31)):
        _agree(g, m, (torch.randn(*shape),))


def test_group_norm_exports_as_instance_normalization_that_onnxruntime_agrees_with() -> None:
    require("onnxruntime", "onnx")
    import onnxruntime as ort

    torch.manual_seed(2)
    m = nn.Sequential(nn.Conv1d(2, 8, 3), nn.GroupNorm(4, 8), nn.GELU(), nn.GroupNorm(8, 8, affine=False)).eval()
    with torch.no_grad():
        m[1].weight.uniform_(0.5, 2.0)
        m[1].bias.uniform_(-1.0, 1.0)
    g = _import(m, (torch.randn(2, 2, 10),), ({0: Dim("batch", max=16)},))
    model = nx.to_onnx(g)
    ops = [n.op_type for n in model.graph.node]
    assert ops.count("InstanceNormalization") == 2 and "LayerNormalization" not in ops
    s = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for b in (1, 5):
        x = torch.randn(b, 2, 10) * 3 + 1
        with torch.no_grad():
            want = m(x).numpy()
        np.testing.assert_allclose(s.run(None, {s.get_inputs()[0].name: x.numpy()})[0], want, rtol=1e-4, atol=1e-5)


# --- vector norms ----------------------------------------------------------------------------
@pytest.mark.filterwarnings("ignore:divide by zero encountered in power")  # |0| ** -1.5 is inf, as in torch
@pytest.mark.parametrize("ord", [2, 1, math.inf, -math.inf, 0, 3, 0.5, -1.5])
def test_vector_norm_every_ord(ord: float) -> None:
    def f(x: Any) -> Any:
        return (torch.linalg.vector_norm(x, ord), torch.linalg.vector_norm(x, ord, dim=1),
                torch.linalg.vector_norm(x, ord, dim=(0, 2), keepdim=True),
                torch.linalg.vector_norm(x, ord, dim=-1, dtype=torch.float64))

    torch.manual_seed(2)
    x = torch.randn(3, 4, 5)
    x[0, 1, 2] = 0.0  # a zero: counted by ord 0, infinite |x|^p for p < 0
    x[1, :, 3] = 0.0
    g = _import(f, (x,))
    _agree(g, f, (x,), rtol=1e-5, atol=1e-6)


def test_weight_norm_conv_as_in_wav2vec2() -> None:
    torch.manual_seed(3)
    conv = nn.Conv1d(8, 8, 5, padding=2, groups=2)
    m = nn.Sequential(nn.utils.parametrizations.weight_norm(conv, name="weight", dim=2), nn.GELU()).eval()
    x = torch.randn(2, 8, 12)
    g = _import(m, (x,))
    _agree(g, m, (x,))


# --- scaled dot-product attention ------------------------------------------------------------
def _qkv(b: int, h: int, lq: int, lk: int, e: int, hk: int | None = None,
         dtype: Any = torch.float32) -> tuple[Any, ...]:
    hk = h if hk is None else hk
    return (torch.randn(b, h, lq, e, dtype=dtype), torch.randn(b, hk, lk, e, dtype=dtype),
            torch.randn(b, hk, lk, e + 1, dtype=dtype))


def _bool_mask(shape: tuple[int, ...], empty_row: bool) -> Any:
    m = torch.rand(*shape) > 0.4
    if empty_row:
        m[..., 1, :] = False  # a query that sees no key: torch gives 0, not NaN
    return m


ATTENTION: dict[str, Any] = {
    "plain": (lambda: _qkv(2, 2, 5, 5, 8), None, {}),
    "causal": (lambda: _qkv(2, 2, 5, 5, 8), None, {"is_causal": True}),
    "causal_fewer_queries": (lambda: _qkv(1, 2, 3, 7, 4), None, {"is_causal": True}),
    "causal_more_queries": (lambda: _qkv(1, 2, 6, 4, 4), None, {"is_causal": True}),
    "bool_mask": (lambda: _qkv(2, 2, 4, 6, 8), lambda: _bool_mask((4, 6), True), {}),
    "bool_mask_per_batch": (lambda: _qkv(2, 3, 4, 6, 8), lambda: _bool_mask((2, 1, 4, 6), True), {}),
    "float_mask": (lambda: _qkv(2, 2, 4, 6, 8), lambda: torch.randn(2, 2, 4, 6), {"scale": 0.7}),
    "float_mask_inf_row": (lambda: _qkv(2, 2, 4, 6, 8),
                           lambda: torch.where(_bool_mask((4, 6), True), 0.0, -math.inf), {}),
    "scale": (lambda: _qkv(2, 2, 5, 3, 8), None, {"scale": 0.05}),
    "gqa": (lambda: _qkv(2, 6, 5, 5, 4, hk=2), None, {"enable_gqa": True, "is_causal": True}),
    "f64": (lambda: _qkv(1, 2, 4, 4, 8, dtype=torch.float64), None, {"is_causal": True}),
}


@pytest.mark.parametrize("case", list(ATTENTION))
def test_attention_is_kept_whole_and_matches_torch(case: str) -> None:
    make, make_mask, kw = ATTENTION[case]
    torch.manual_seed(4)
    q, k, v = make()
    args: tuple[Any, ...] = (q, k, v)

    def f(q: Any, k: Any, v: Any, mask: Any = None) -> Any:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, **kw)

    if make_mask is not None:
        args = (q, k, v, make_mask())
    g = _import(f, args)
    assert "Softmax" in _ops(g)
    tol = {"rtol": 1e-12, "atol": 1e-12} if q.dtype == torch.float64 else {}
    _agree(g, f, args, **tol)
    with torch.no_grad():
        assert not torch.isnan(f(*args)).any()


def test_attention_overloads_torch_dispatches_to() -> None:
    aten = torch.ops.aten

    def f(q: Any, k: Any, v: Any, mask: Any) -> Any:
        bias = torch.zeros(mask.shape).masked_fill(~mask, -math.inf)
        out, weights = aten._scaled_dot_product_attention_math(q, k, v, bias, scale=0.3)
        added = aten._scaled_dot_product_attention_math(q, k, v, mask)[0]  # a boolean mask is added as 0 / 1
        flash = aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, is_causal=True)[0]
        return out, weights, added, flash, aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, attn_mask=bias)[0]

    torch.manual_seed(9)
    q, k, v = _qkv(2, 2, 4, 4, 8)
    args = (q, k, v[..., :8].contiguous(), _bool_mask((4, 4), True))
    g = _import(f, args)
    _agree(g, f, args)


class _MaskedAttention(nn.Module):
    """Attention under a boolean mask built from constants and expanded to the batch, as
    transformers builds its padding mask under torch.export (``arange(n) >= start``):
    all True for ``start=0``, so it hides nothing."""

    def __init__(self, start: int, additive: bool = False) -> None:
        super().__init__()
        self.start, self.additive = start, additive

    def forward(self, q: Any, k: Any, v: Any) -> Any:
        n = q.shape[2]
        mask = (torch.arange(n) >= self.start)[None, None, :, None]
        if self.additive:
            mask = torch.where(mask, 0.0, -math.inf)
        mask = mask.expand(q.shape[0], -1, n, n)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


@pytest.mark.parametrize("start, additive, dropped", [(0, False, True), (0, True, True), (2, False, False),
                                                      (2, True, False)])
def test_attention_mask_known_to_hide_nothing_is_dropped(start: int, additive: bool, dropped: bool) -> None:
    torch.manual_seed(7)
    m = _MaskedAttention(start, additive).eval()
    g = _import(m, _qkv(2, 2, 5, 5, 8), ({0: Dim("batch", max=8)},) * 3)
    (softmax,) = [n for b in g.blocks for n in b.nodes if n.op.name == "Softmax"]
    assert (softmax.input(0).op.name == "MatMul") == dropped  # no Where or Add on the scores: nothing hidden
    for b in (1, 3):
        _agree(g, m, _qkv(b, 2, 5, 5, 8))


def test_causal_attention_with_dynamic_lengths() -> None:
    def f(q: Any, k: Any, v: Any) -> Any:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)

    torch.manual_seed(5)
    seq = Dim("seq", min=2, max=64)
    dyn = ({0: Dim("batch", max=8), 2: seq},) * 3
    g = _import(f, _qkv(2, 2, 5, 5, 8)[:2] + (torch.randn(2, 2, 5, 8),), dyn)
    for b, n in ((1, 3), (3, 11)):
        _agree(g, f, (torch.randn(b, 2, n, 8), torch.randn(b, 2, n, 8), torch.randn(b, 2, n, 8)))


def test_attention_with_dropout_or_mask_and_causal_is_refused() -> None:
    q, k, v = _qkv(1, 1, 3, 3, 4)

    def drop(q: Any, k: Any, v: Any) -> Any:
        return F.scaled_dot_product_attention(q, k, v, dropout_p=0.5)  # line D

    with pytest.raises(TorchImportError, match=r"dropout_p=0\.5.*") as info:
        _import(drop, (q, k, v))
    assert "scaled_dot_product_attention" in str(info.value) and THIS in str(info.value)


class _GPT2Attention(nn.Module):
    """GPT-2's attention block as transformers writes it: heads split by view/transpose,
    sdpa with a boolean mask, heads merged, then Conv1D's addmm on a .view (which torch's
    own decomposition of sdpa, with its output's strides, cannot trace)."""

    def __init__(self, e: int = 16, heads: int = 2) -> None:
        super().__init__()
        self.heads = heads
        self.w = nn.Parameter(torch.randn(e, e) * 0.2)
        self.b = nn.Parameter(torch.randn(e) * 0.1)

    def forward(self, x: Any, mask: Any) -> Any:
        b, n, e = x.shape
        q = x.view(b, n, self.heads, e // self.heads).transpose(1, 2)
        o = F.scaled_dot_product_attention(q, q * 0.5, q, attn_mask=mask)
        o = o.transpose(1, 2).reshape(b, n, e).contiguous()
        return torch.addmm(self.b, o.view(-1, e), self.w).view(b, n, e)


def test_attention_torch_cannot_decompose_imports() -> None:
    torch.manual_seed(6)
    m = _GPT2Attention().eval()
    x, mask = torch.randn(2, 5, 16), torch.ones(2, 1, 5, 5, dtype=torch.bool).tril()
    g = _import(m, (x, mask))
    _agree(g, m, (x, mask))


def test_a_program_torch_cannot_decompose_is_imported_as_exported(monkeypatch: Any) -> None:
    def fail(ep: Any) -> Any:
        raise RuntimeError("torch's decomposition failed here\nmore lines")

    monkeypatch.setattr(importer, "decompositions", fail)
    torch.manual_seed(7)
    model = nn.Sequential(nn.Linear(6, 8), nn.LayerNorm(8), nn.GroupNorm(2, 8), nn.GELU(), nn.Dropout(0.1)).eval()
    x = torch.randn(3, 6)
    g = _import(model, (x,))  # linear, layer_norm, group_norm, gelu, dropout as exported, not decomposed
    _agree(g, model, (x,))
    with pytest.raises(TorchImportError, match="dropout in training mode"):
        _import(model.train(), (x,))

    def f(x: Any) -> Any:
        return torch.atan2(x, x + 1)

    with pytest.raises(TorchImportError, match="aten.atan2") as info:
        _import(f, (x,))
    assert "torch could not decompose the program" in str(info.value)
    assert "RuntimeError: torch's decomposition failed here" in str(info.value)


def test_cat_skips_empty_1d_tensors_as_torch_does() -> None:
    def f(x: Any) -> Any:
        return torch.cat([x.new_zeros(0), x, x.new_zeros(0)], dim=-2)  # an empty KV cache's first update

    x = torch.randn(2, 3, 4)
    _agree(_import(f, (x,)), f, (x,))


# --- transformers models ---------------------------------------------------------------------
def _transformers() -> Any:
    """transformers, imported as the model suite does: beside a CPU-only torch, the torchvision
    it imports needs a step first (bench/model_zoo.py)."""
    require("transformers", "models")
    from bench.model_zoo import transformers

    return transformers()


def _gpt2() -> tuple[Any, Any, Any]:
    transformers = _transformers()
    cfg = transformers.GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=100, n_positions=64,
                                  bos_token_id=0, eos_token_id=0)
    model = transformers.GPT2Model(cfg).eval()

    class Hidden(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, ids: Any) -> Any:
            return self.model(input_ids=ids).last_hidden_state

    dyn = ({0: Dim("batch", max=8), 1: Dim("seq", min=2, max=64)},)
    return Hidden().eval(), (torch.randint(0, 100, (2, 8)),), dyn


def _wav2vec2() -> tuple[Any, Any, Any]:
    transformers = _transformers()
    cfg = transformers.Wav2Vec2Config(hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                      intermediate_size=64, conv_dim=(16, 16), conv_stride=(5, 2),
                                      conv_kernel=(10, 3), num_conv_pos_embeddings=16,
                                      num_conv_pos_embedding_groups=4, feat_extract_norm="group")
    model = transformers.Wav2Vec2Model(cfg).eval()

    class Hidden(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, audio: Any) -> Any:
            return self.model(audio).last_hidden_state

    dyn = ({0: Dim("batch", max=8), 1: Dim("time", min=1600, max=16000)},)
    return Hidden().eval(), (torch.randn(2, 1600),), dyn


@pytest.mark.parametrize("name", ["gpt2", "wav2vec2"])
def test_transformers_models_match_torch(name: str) -> None:
    torch.manual_seed(8)
    model, args, dyn = {"gpt2": _gpt2, "wav2vec2": _wav2vec2}[name]()
    g = _import(model, args, dyn)
    inputs = [(torch.randint(0, 100, (3, 5)),), (torch.randint(0, 100, (1, 17)),)] if name == "gpt2" else \
        [(torch.randn(3, 2000),), (torch.randn(1, 1600),)]
    for a in inputs:
        _agree(g, model, a, rtol=1e-4, atol=1e-5)


# --- ops kept whole for the runtimes that fuse them ------------------------------------------
def test_hard_activations_and_matmul_stay_whole_and_agree_on_every_backend() -> None:
    """hardswish and hardsigmoid arrive as one op each (ONNX Runtime fuses them into the
    convolution before them); ``matmul`` of a 3-D by a shared 2-D weight stays one MatMul
    (torch's decomposition expands the weight to every batch for a bmm)."""

    class M(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = nn.Parameter(torch.randn(6, 5))

        def forward(self, x: Any) -> Any:
            y = torch.matmul(nn.functional.hardswish(x * 4).permute(1, 0, 2), self.w)
            return nn.functional.hardsigmoid(y)

    m = M().eval()
    x = torch.randn(3, 4, 6)
    g = _import(m, (x,))
    assert {"HardSwish", "HardSigmoid"} <= _ops(g) and not {"Expand", "Maximum"} & _ops(g)
    _agree(g, m, (x,))
    for backend in ("xla", "onnxruntime"):
        require({"xla": "jax", "onnxruntime": "onnxruntime"}[backend], {"xla": "xla", "onnxruntime": "onnx"}[backend])
        _agree(nx.compile(g, backend=backend), m, (x,))
    onnx_ops = {n.op_type for n in nx.to_onnx(g).graph.node}
    assert {"HardSwish", "HardSigmoid", "MatMul"} <= onnx_ops
