"""The model suite's import half (``bench/model_zoo.py``; its timing half is
``python -m bench.models``): each model imports through ``nx.from_torch`` and ``nx.from_onnx``
with a symbolic batch and agrees with torch eager on the python and auto backends, at two
batch sizes.  The default run takes the models that import in seconds; ``NEXUS_MODELS=1`` adds
the rest (the big CNNs and the encoder-decoders)."""

from __future__ import annotations

import os
from typing import Any

import pytest

from nexus.testing.extras import require

require("torch", "torch")
require("onnxruntime", "onnx")
from bench.model_zoo import MODELS, torchvision, transformers  # noqa: E402
from bench.models import RTOL, error, import_model  # noqa: E402
from nexus.frontend.onnx.data import OnnxImportError  # noqa: E402

FAST = ("squeezenet1_1", "vit", "bert", "gpt2", "llama", "wav2vec2", "lstm", "gru", "greedy_decoder", "dynamic_rnn",
        "detector_nms")
# Models whose torch.onnx export uses ONNX ops that have no import rule yet (none now; LSTM and GRU
# import as loops, issue 29).
ONNX_GAPS: dict[str, str] = {}


def _params() -> list[Any]:
    out = []
    for name in MODELS:
        marks = [] if name in FAST else [pytest.mark.slow, pytest.mark.skipif(
            not os.environ.get("NEXUS_MODELS"), reason="a big model (~10-60 s); NEXUS_MODELS=1 runs it")]
        out.append(pytest.param(name, marks=marks, id=name))
    return out


@pytest.mark.parametrize("name", _params())
def test_model_imports_both_ways_and_agrees_with_torch(name: str) -> None:
    import torch

    import nexus as nx

    m = MODELS[name]
    if m.needs != "torch":
        if m.available() is None:  # beside a CPU-only torch, the step before anything imports torchvision
            (transformers if m.needs == "transformers" else torchvision)()
        require(m.needs, "models")
    torch.set_num_threads(1)
    if name in ONNX_GAPS:
        with pytest.raises(OnnxImportError, match=ONNX_GAPS[name].split()[-1]):
            import_model(m)
        # the PyTorch importer alone
        args = m.inputs(2)
        g = nx.from_torch(m.build(), args, dynamic_shapes=({0: torch.export.Dim("batch")},))
        graphs = {"from_torch": (g, list(range(len(args))))}
        module = m.build()
    else:
        imp = import_model(m)
        module = imp.module
        graphs = {"from_torch": (imp.from_torch, list(range(len(m.inputs(1))))),
                  "from_onnx": (imp.from_onnx, imp.onnx_inputs)}
    exes = {(how, backend): (nx.compile(g, backend=backend), taken)
            for how, (g, taken) in graphs.items() for backend in ("python", "auto")}
    for batch in (1, 3):  # one executable for both: the batch is symbolic
        args = m.inputs(batch)
        with torch.no_grad():
            out = module(*args)
        refs = [o.numpy() for o in (out if isinstance(out, tuple) else (out,))]
        for (how, backend), (exe, taken) in exes.items():
            got = exe(*[args[k].numpy() for k in taken])
            assert error(got, refs) <= RTOL, f"{name} {how} on {backend}, batch {batch}"
