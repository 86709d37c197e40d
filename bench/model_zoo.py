"""The models of the suite (``python -m bench.models``), built offline from their classes with
random weights: torchvision CNNs and a small ViT, transformers with small configs, torch.nn
RNNs, and models with control flow (a greedy decoder, a dynamic-length RNN and a detector's
non-maximum suppression, written with ``torch._higher_order_ops.while_loop``).

Each :class:`Model` builds its module and its example inputs at a batch size; the suite
imports it through ``nx.from_torch`` and ``nx.from_onnx`` (of ``torch.onnx.export``), checks
both against torch eager and times every backend beside torch eager and ONNX Runtime.

torchvision from the package index links CUDA libraries and, beside a CPU-only torch, fails
at import (``operator torchvision::nms does not exist``): its ``_meta_registrations``
register fake kernels for two C ops that only its extension defines.  The models need none
of its C ops, so :func:`torchvision` defines the two schemas (with no kernel) before the
import when the extension did not load them.  It changes nothing where the extension loads.
transformers imports torchvision when it is installed, so its models take the same step.
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

IMAGE = 128  # the CNNs' input size: 224 makes the python backend's rows take minutes


@dataclass(frozen=True)
class Model:
    """One model of the suite."""

    name: str
    family: str  # "torchvision", "transformers", "torch.nn" or "control"
    build: Callable[[], Any]  # -> an nn.Module in eval mode
    inputs: Callable[[int], tuple[Any, ...]]  # batch size -> example inputs
    batch_dims: tuple[int | None, ...] = (0,)  # per input: the batch dim, None where there is none
    needs: str = "torch"  # the module it needs beyond torch
    control: bool = False  # has loops or branches (the peers run them op by op)

    def available(self) -> str | None:
        """Why the model cannot be built here, or None."""
        for mod in {"torch", self.needs}:
            if importlib.util.find_spec(mod) is None:
                return f"{mod} is not installed (pip install 'nexus-ir[models]')"
        return None


_SHIM: list[Any] = []


def torchvision() -> Any:
    """``import torchvision``, usable beside a CPU-only torch (see the module docstring)."""
    import torch

    try:
        torch.ops.torchvision.nms.default  # noqa: B018  (the extension loaded: nothing to do)
    except (AttributeError, RuntimeError):
        if not _SHIM:
            lib = torch.library.Library("torchvision", "FRAGMENT")
            for op in ("nms", "qnms"):
                lib.define(f"{op}(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
            _SHIM.append(lib)  # kept alive: a Library drops its definitions when collected
    return importlib.import_module("torchvision")


def transformers() -> Any:
    """``import transformers``, after :func:`torchvision` where torchvision is installed (its
    models import torchvision then, and fail beside a CPU-only torch without the step)."""
    if importlib.util.find_spec("torchvision") is not None:
        torchvision()
    return importlib.import_module("transformers")


def _images(batch: int) -> tuple[Any, ...]:
    import torch

    return (torch.randn(batch, 3, IMAGE, IMAGE),)


def _vision(name: str, **kw: Any) -> Callable[[], Any]:
    def build() -> Any:
        return getattr(torchvision().models, name)(weights=None, **kw).eval()

    return build


def _vit() -> Any:
    vt = torchvision().models.vision_transformer
    return vt.VisionTransformer(image_size=64, patch_size=8, num_layers=2, num_heads=4, hidden_dim=128,
                                mlp_dim=256, num_classes=100).eval()


def _hidden(model: Any, names: tuple[str, ...]) -> Any:
    """A transformers model called with its inputs by name, ``last_hidden_state`` out."""
    import torch

    class Hidden(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, first: Any, second: Any = None) -> Any:  # torch.export wants named inputs
            out = self.model(**dict(zip(names, (first, second))), use_cache=False, return_dict=True)
            return out.last_hidden_state

    return Hidden().eval()


def _hf(config: str, model: str, names: tuple[str, ...] = ("input_ids",), **kw: Any) -> Callable[[], Any]:
    def build() -> Any:
        import torch

        tf = transformers()
        torch.manual_seed(0)
        return _hidden(getattr(tf, model)(getattr(tf, config)(**kw)).eval(), names)

    return build


def _tokens(*lengths: int) -> Callable[[int], tuple[Any, ...]]:
    def inputs(batch: int) -> tuple[Any, ...]:
        import torch

        g = torch.Generator().manual_seed(batch)
        return tuple(torch.randint(0, 1000, (batch, n), generator=g) for n in lengths)

    return inputs


def _whisper_inputs(batch: int) -> tuple[Any, ...]:
    import torch

    return torch.randn(batch, 80, 200), torch.randint(0, 1000, (batch, 8))


_SMALL = dict(vocab_size=1000)
_BERT = dict(_SMALL, hidden_size=128, num_hidden_layers=2, num_attention_heads=4, intermediate_size=256,
             max_position_embeddings=128)
_GPT2 = dict(_SMALL, n_positions=128, n_embd=128, n_layer=2, n_head=4, bos_token_id=1, eos_token_id=2)
_LLAMA = dict(_SMALL, hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4,
              num_key_value_heads=2, max_position_embeddings=128)
_BART = dict(_SMALL, d_model=128, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
             decoder_attention_heads=4, encoder_ffn_dim=256, decoder_ffn_dim=256, max_position_embeddings=128)
_WHISPER = dict(_SMALL, num_mel_bins=80, d_model=128, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
                decoder_attention_heads=4, encoder_ffn_dim=256, decoder_ffn_dim=256, max_source_positions=100,
                max_target_positions=64, pad_token_id=0, bos_token_id=1, eos_token_id=2, decoder_start_token_id=1)
_WAV2VEC2 = dict(vocab_size=32, hidden_size=128, num_hidden_layers=2, num_attention_heads=4, intermediate_size=256,
                 conv_dim=(64, 64, 64), conv_stride=(5, 2, 2), conv_kernel=(10, 3, 3), num_conv_pos_embeddings=16,
                 num_conv_pos_embedding_groups=4, feat_extract_norm="group")


def _wav2vec2() -> Any:
    """wav2vec2's encoder: group-normed conv feature extractor, weight-normed grouped conv
    position embedding, two attention layers."""
    import torch

    tf = transformers()
    torch.manual_seed(0)
    model = tf.Wav2Vec2Model(tf.Wav2Vec2Config(**_WAV2VEC2)).eval()

    class Hidden(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, audio: Any) -> Any:
            return self.model(audio, return_dict=True).last_hidden_state

    return Hidden().eval()


def _audio(batch: int) -> tuple[Any, ...]:
    import torch

    return (torch.randn(batch, 8000, generator=torch.Generator().manual_seed(batch)),)


def _rnn(kind: str) -> Callable[[], Any]:
    def build() -> Any:
        import torch

        torch.manual_seed(0)
        rnn = getattr(torch.nn, kind)(32, 64, num_layers=2, batch_first=True)

        class Net(torch.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.rnn = rnn

            def forward(self, x: Any) -> Any:
                return self.rnn(x)[0]

        return Net().eval()

    return build


def _sequence(batch: int) -> tuple[Any, ...]:
    import torch

    return (torch.randn(batch, 20, 32),)


def _decoder() -> Any:
    """Greedy decoding: embed the last token, one tanh cell, the argmax of the logits, for
    ``n`` steps (a run-time count: a loop in every importer's output)."""
    import torch
    from torch._higher_order_ops.while_loop import while_loop

    class Decoder(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            torch.manual_seed(0)
            self.emb, self.cell = torch.nn.Embedding(1000, 128), torch.nn.Linear(256, 128)
            self.out = torch.nn.Linear(128, 1000)

        def forward(self, h: Any, tok: Any, n: Any) -> Any:
            def cond(i: Any, h: Any, tok: Any) -> Any:
                return i < n

            def body(i: Any, h: Any, tok: Any) -> Any:
                h = torch.tanh(self.cell(torch.cat([self.emb(tok), h], -1)))
                return i + 1, h, self.out(h).argmax(-1)

            return while_loop(cond, body, (torch.zeros((), dtype=torch.int64), h, tok))[1:]

    return Decoder().eval()


def _decoder_inputs(batch: int) -> tuple[Any, ...]:
    import torch

    return torch.randn(batch, 128), torch.arange(batch) % 1000, torch.tensor(32)


def _dynamic_rnn() -> Any:
    """An RNN cell stepped over the first ``n`` steps of its input (a run-time length)."""
    import torch
    from torch._higher_order_ops.while_loop import while_loop

    class DynamicRNN(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            torch.manual_seed(0)
            self.cell = torch.nn.RNNCell(32, 64)

        def forward(self, x: Any, n: Any) -> Any:
            def cond(i: Any, h: Any) -> Any:
                return i < n

            def body(i: Any, h: Any) -> Any:
                step = torch.index_select(x, 1, i.reshape(1)).squeeze(1)
                return i + 1, self.cell(step, h)

            h0 = torch.zeros(x.shape[0], 64)
            return while_loop(cond, body, (torch.zeros((), dtype=torch.int64), h0))[1]

    return DynamicRNN().eval()


def _dynamic_rnn_inputs(batch: int) -> tuple[Any, ...]:
    import torch

    return torch.randn(batch, 50, 32), torch.tensor(40)


def _detector() -> Any:
    """A one-stage detector's head and post-processing: three strided convolutions, a 1x1
    head giving box offsets and a score per anchor (3 sizes on a 16x16 grid), the top
    ``CANDIDATES`` boxes by score, a score threshold, greedy non-maximum suppression as a
    loop over the candidates (IoU > 0.5 to a kept, higher-scored box suppresses), and the
    best ``DETECTIONS`` kept boxes gathered (zero boxes and scores where fewer are kept).

    torchvision.ops.nms needs torchvision's C extension, which the index's torchvision lacks
    beside a CPU-only torch; the loop is what a detector exported with its NMS inside
    becomes in ONNX anyway (a ``Loop`` that ONNX Runtime runs op by op)."""
    import torch
    from torch._higher_order_ops.while_loop import while_loop

    a, grid, k, top_k = 3, IMAGE // 8, CANDIDATES, DETECTIONS
    nn = torch.nn

    class Detector(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            torch.manual_seed(0)
            self.backbone = nn.Sequential(nn.Conv2d(3, 16, 3, 2, 1), nn.ReLU(), nn.Conv2d(16, 32, 3, 2, 1), nn.ReLU(),
                                          nn.Conv2d(32, 64, 3, 2, 1), nn.ReLU())
            self.head = nn.Conv2d(64, a * 5, 1)
            centre = torch.arange(grid) * 8.0 + 4
            ys, xs = torch.meshgrid(centre, centre, indexing="ij")
            size = torch.tensor([16.0, 32.0, 64.0]).repeat_interleave(grid * grid)
            self.register_buffer("anchors", torch.stack([xs.flatten().repeat(a), ys.flatten().repeat(a), size, size],
                                                        -1))

        def forward(self, x: Any) -> Any:
            o = self.head(self.backbone(x))
            o = o.reshape(-1, a, 5, grid * grid).permute(0, 1, 3, 2).reshape(-1, a * grid * grid, 5)
            an = self.anchors
            cx, cy = an[:, 0] + o[..., 0] * an[:, 2] * 0.1, an[:, 1] + o[..., 1] * an[:, 3] * 0.1
            w = an[:, 2] * torch.exp(o[..., 2].clamp(max=4.0) * 0.2)
            h = an[:, 3] * torch.exp(o[..., 3].clamp(max=4.0) * 0.2)
            boxes = torch.stack([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2], -1)
            s, idx = torch.sigmoid(o[..., 4]).topk(k, dim=1)  # highest score first
            b = torch.gather(boxes, 1, idx.unsqueeze(-1).expand(-1, -1, 4))
            x0, y0, x1, y1 = b.unbind(-1)
            area = (x1 - x0) * (y1 - y0)
            iw = (torch.minimum(x1[:, :, None], x1[:, None, :]) - torch.maximum(x0[:, :, None], x0[:, None, :]))
            ih = (torch.minimum(y1[:, :, None], y1[:, None, :]) - torch.maximum(y0[:, :, None], y0[:, None, :]))
            inter = iw.clamp(min=0) * ih.clamp(min=0)
            over = inter / (area[:, :, None] + area[:, None, :] - inter) > 0.5  # [batch, k, k]
            later = torch.arange(k)

            def cond(i: Any, removed: Any) -> Any:
                return i < k

            def body(i: Any, removed: Any) -> Any:
                at = i.reshape(1)
                alive = ~torch.index_select(removed, 1, at)  # candidate i is kept
                return i + 1, removed | (torch.index_select(over, 1, at).squeeze(1) & alive & (later > i))

            _, removed = while_loop(cond, body, (torch.zeros((), dtype=torch.int64), s <= 0.05))
            best, at = torch.where(removed, 0.0, s).topk(top_k, dim=1)
            return torch.gather(b, 1, at.unsqueeze(-1).expand(-1, -1, 4)) * (best > 0).unsqueeze(-1), best

    return Detector().eval()


CANDIDATES, DETECTIONS = 200, 50


MODELS: dict[str, Model] = {m.name: m for m in [
    Model("resnet18", "torchvision", _vision("resnet18"), _images, needs="torchvision"),
    Model("mobilenet_v3_small", "torchvision", _vision("mobilenet_v3_small"), _images, needs="torchvision"),
    Model("efficientnet_b0", "torchvision", _vision("efficientnet_b0"), _images, needs="torchvision"),
    Model("densenet121", "torchvision", _vision("densenet121"), _images, needs="torchvision"),
    Model("squeezenet1_1", "torchvision", _vision("squeezenet1_1"), _images, needs="torchvision"),
    Model("vit", "torchvision", _vit, lambda b: (__import__("torch").randn(b, 3, 64, 64),), needs="torchvision"),
    Model("bert", "transformers", _hf("BertConfig", "BertModel", **_BERT), _tokens(64), needs="transformers"),
    Model("gpt2", "transformers", _hf("GPT2Config", "GPT2Model", **_GPT2), _tokens(64), needs="transformers"),
    Model("llama", "transformers", _hf("LlamaConfig", "LlamaModel", **_LLAMA), _tokens(64), needs="transformers"),
    Model("bart", "transformers", _hf("BartConfig", "BartModel", ("input_ids", "decoder_input_ids"), **_BART),
          _tokens(32, 16), (0, 0), needs="transformers"),
    Model("whisper", "transformers", _hf("WhisperConfig", "WhisperModel", ("input_features", "decoder_input_ids"),
                                      **_WHISPER), _whisper_inputs, (0, 0),
          needs="transformers"),
    Model("wav2vec2", "transformers", _wav2vec2, _audio, needs="transformers"),
    Model("lstm", "torch.nn", _rnn("LSTM"), _sequence),
    Model("gru", "torch.nn", _rnn("GRU"), _sequence),
    Model("greedy_decoder", "control", _decoder, _decoder_inputs, (0, 0, None), control=True),
    Model("dynamic_rnn", "control", _dynamic_rnn, _dynamic_rnn_inputs, (0, None), control=True),
    Model("detector_nms", "control", _detector, _images, control=True),
]}
