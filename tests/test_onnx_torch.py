"""Real models: a small CNN and a small transformer block exported from PyTorch
(``torch.onnx.export``) import, run on Nexus and match PyTorch."""

from __future__ import annotations

import io
import warnings
from typing import Any

import numpy as np

import nexus as nx
from nexus.testing.extras import require

torch = require("torch", "torch")
require("onnx", "onnx")


def export(model: Any, *args: Any, dynamic: dict[str, dict[int, str]] | None = None) -> bytes:
    buf = io.BytesIO()
    names = [f"in{k}" for k in range(len(args))]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        # dynamo=False: the TorchScript exporter, which needs no onnxscript
        torch.onnx.export(model, args, buf, dynamo=False, input_names=names, output_names=["out"],
                          dynamic_axes=dynamic, opset_version=17)
    return buf.getvalue()


class CNN(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.c1 = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(8)
        self.c2 = torch.nn.Conv2d(8, 16, 3, stride=2, groups=2)
        self.fc = torch.nn.Linear(16, 10)

    def forward(self, x: Any) -> Any:
        x = torch.relu(self.bn(self.c1(x)))
        x = torch.nn.functional.max_pool2d(x, 2)
        x = torch.nn.functional.leaky_relu(self.c2(x), 0.1)
        x = torch.nn.functional.adaptive_avg_pool2d(x, 1).flatten(1)
        return torch.softmax(self.fc(x), -1)


def test_small_cnn_matches_pytorch() -> None:
    torch.manual_seed(0)
    model = CNN().eval()
    with torch.no_grad():
        model.bn.running_mean.uniform_(-0.5, 0.5)
        model.bn.running_var.uniform_(0.5, 2.0)
    x = torch.randn(2, 3, 16, 16)
    g = nx.from_onnx(export(model, x, dynamic={"in0": {0: "batch"}}))
    assert str(g.args[0].type).startswith("f32[batch, 3")
    for batch in (2, 5):
        xb = torch.randn(batch, 3, 16, 16)
        np.testing.assert_allclose(g(xb.numpy()), model(xb).detach().numpy(), rtol=1e-4, atol=1e-5)


class Block(torch.nn.Module):
    """Pre-norm transformer block: self-attention with a causal mask, then a GELU MLP."""

    def __init__(self, d: int = 16, heads: int = 4) -> None:
        super().__init__()
        self.ln1, self.ln2 = torch.nn.LayerNorm(d), torch.nn.LayerNorm(d)
        self.attn = torch.nn.MultiheadAttention(d, heads, batch_first=True)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(d, 4 * d), torch.nn.GELU(), torch.nn.Linear(4 * d, d))

    def forward(self, x: Any) -> Any:
        n = x.shape[1]
        mask = torch.triu(torch.ones(n, n, dtype=torch.bool), diagonal=1)
        h = self.ln1(x)
        a, _ = self.attn(h, h, h, attn_mask=mask, need_weights=False)
        x = x + a
        return x + self.mlp(self.ln2(x))


def test_small_transformer_block_matches_pytorch() -> None:
    torch.manual_seed(0)
    model = Block().eval()
    x = torch.randn(2, 7, 16)
    g = nx.from_onnx(export(model, x))
    np.testing.assert_allclose(g(x.numpy()), model(x).detach().numpy(), rtol=1e-4, atol=1e-5)
