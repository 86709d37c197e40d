"""PyTorch import beyond the acceptance models: nested control flow, dtype promotion,
functions, constants, the errors (every unsupported op at once, with its line), and
``.pt2`` files (converted by ``nexus convert``; pickled or compiled content refused)."""

from __future__ import annotations

import json
import warnings
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import nexus as nx
from nexus.frontend.torch.importer import TorchImportError, from_torch
from nexus.testing.extras import require

torch = require("torch", "torch")
nn = torch.nn
Dim = torch.export.Dim
while_loop = torch._higher_order_ops.while_loop
THIS = Path(__file__).name


def _import(fn: Any, args: tuple[Any, ...], dyn: Any = None, **kw: Any) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return from_torch(fn, args, dyn, **kw)


class NestedLoops(nn.Module):
    """A while_loop whose body holds a torch.cond, and a cond inside a cond."""

    def forward(self, x: Any, n: Any) -> Any:
        def cond(i: Any, acc: Any) -> Any:
            return i < n

        def body(i: Any, acc: Any) -> Any:
            def even(a: Any) -> Any:
                return a * 2.0

            def odd(a: Any) -> Any:
                def big(b: Any) -> Any:
                    return b - 1.0

                def small(b: Any) -> Any:
                    return b + 3.0

                return torch.cond(a.sum() > 10.0, big, small, (a,))

            return i + 1, torch.cond(i % 2 == 0, even, odd, (acc,))

        _, out = while_loop(cond, body, (torch.zeros((), dtype=torch.int64), x))
        return out


def test_nested_cond_inside_while_loop() -> None:
    model = NestedLoops()
    g = _import(model, (torch.ones(2, 3), torch.tensor(3)), ({0: Dim("batch", max=32)}, None))
    nx.verify(g)
    assert nx.print_graph(g).count("Cond") >= 3
    for b, n in ((1, 0), (2, 4), (5, 7)):
        x = torch.randn(b, 3)
        want = model(x, torch.tensor(n)).numpy()
        np.testing.assert_allclose(g(x.numpy(), np.array(n)), want, rtol=1e-6)


def test_data_dependent_sizes() -> None:
    def f(x: Any) -> Any:
        sel = x[x.sum(1) > 0]                  # a boolean mask: torch's size u0
        return sel * 2, torch.nonzero(x > 0.5), sel.shape[0] + torch.zeros(())

    g = _import(f, (torch.randn(6, 3),), ({0: Dim("batch", max=64)},))
    nx.verify(g)
    shapes = [t.shape for t in g.result_types]
    assert shapes[0][1] == 3 and shapes[1][1] == 2 and not isinstance(shapes[0][0], int)
    for b in (1, 5, 9):
        x = torch.randn(b, 3)
        for got, want in zip(g(x.numpy()), f(x)):
            np.testing.assert_array_equal(got, want.numpy())


def test_promotion_follows_torch() -> None:
    def f(i: Any, x: Any) -> Any:
        a = i + 1.5               # int tensor + float scalar -> float
        b = i / 2                 # true division of ints -> float
        c = (i > x).to(torch.float32)  # int vs float comparison
        d = torch.div(i, 3, rounding_mode="floor") + torch.div(-i, 3, rounding_mode="trunc")
        e = torch.where(x > 0, x, 0)  # a Python int in a float where
        return a, b, c, d, e * x.shape[0]

    i, x = torch.arange(-4, 4).reshape(2, 4), torch.randn(2, 4)
    g = _import(f, (i, x))
    nx.verify(g)
    # nodes point at the lines of f that made them
    assert {n.loc.line for n in g.nodes() if n.loc is not None and n.loc.file.endswith(THIS)} >= \
        {f.__code__.co_firstlineno + k for k in range(1, 6)}
    for got, want in zip(g(i.numpy(), x.numpy()), f(i, x)):
        assert str(got.dtype) == str(want.dtype).replace("torch.", "")
        np.testing.assert_allclose(got, want.numpy(), rtol=1e-6)


def test_parameters_are_named_constants_by_default() -> None:
    lin = nn.Linear(3, 2)
    text = nx.print_graph(_import(lin, (torch.randn(4, 3),)))
    assert "weight" in text and "bias" in text
    g = _import(lin, (torch.randn(4, 3),), params="arguments")
    assert [str(t) for t in g.arg_types] == ["f32[4, 3]", "f32[2, 3]", "f32[2]"]


def test_keywords_and_nested_outputs() -> None:
    def f(x: Any, *, a: Any, b: Any) -> Any:
        return x + a * 2 - b, [x * a, {"neg": -b}]

    x, a, b = torch.randn(2), torch.randn(2), torch.randn(2)
    prog = _import(f, (x,), kwargs={"a": a, "b": b}, program=True)
    got, want = prog(x, b=b, a=a), f(x, a=a, b=b)  # keywords in another order
    assert isinstance(got, tuple) and isinstance(got[1], list) and set(got[1][1]) == {"neg"}
    np.testing.assert_allclose(got[0], want[0].numpy())
    np.testing.assert_allclose(got[1][0], want[1][0].numpy())
    np.testing.assert_allclose(got[1][1]["neg"], want[1][1]["neg"].numpy())


def test_every_unsupported_op_is_listed_with_its_line() -> None:
    def f(x: Any) -> Any:
        y = torch.atan2(x, x + 1)  # line A

        def t(v: Any) -> Any:
            return torch.lgamma(v)  # line B

        def e(v: Any) -> Any:
            return v.clone()

        return torch.cond(x.sum() > 0, t, e, (y,))

    with pytest.raises(TorchImportError) as info:
        _import(f, (torch.randn(3),))
    msg = str(info.value)
    assert "2 op(s)" in msg and "aten.atan2" in msg and "aten.lgamma" in msg
    assert msg.count(THIS) == 2, msg


def test_training_mode_batch_norm_is_refused() -> None:
    with pytest.raises(TorchImportError, match="mutates"):
        _import(nn.BatchNorm1d(3).train(), (torch.randn(4, 3),))


# --- .pt2 files ------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def pt2(tmp_path_factory: Any) -> tuple[Path, Any]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(2, 4, 3), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 4 * 4, 3)).eval()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ep = torch.export.export(model, (torch.randn(2, 2, 6, 6),), dynamic_shapes=({0: Dim("batch", max=16)},))
        path = tmp_path_factory.mktemp("pt2") / "model.pt2"
        torch.export.save(ep, str(path))
    return path, model


def test_nexus_convert_pt2(pt2: tuple[Path, Any], tmp_path: Path) -> None:
    from nexus.cli.main import main

    path, model = pt2
    out = tmp_path / "model.nx"
    assert main(["convert", str(path), "-o", str(out)]) == 0
    g = nx.load(str(out))
    for b in (1, 5):
        x = torch.randn(b, 2, 6, 6)
        with torch.no_grad():
            np.testing.assert_allclose(g(x.numpy()), model(x).numpy(), rtol=1e-5, atol=1e-6)


def _rewrite(src: Path, dst: Path, edit: Any) -> Path:
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w") as zout:
        for item in zin.infolist():
            data = edit(item.filename, zin.read(item.filename))
            if data is not None:
                zout.writestr(item, data)
        extra = edit("<extra>", b"")
        if extra is not None:
            zout.writestr(extra[0], extra[1])
    return dst


def test_pickled_or_compiled_payloads_are_refused(pt2: tuple[Path, Any], tmp_path: Path, capsys: Any) -> None:
    from nexus.cli.main import main
    from nexus.frontend.torch.pt2 import load_pt2

    path, _ = pt2
    top = zipfile.ZipFile(path).namelist()[0].split("/")[0]

    def pickled(name: str, data: bytes) -> Any:
        if name.endswith("weights_config.json"):
            cfg = json.loads(data)
            next(iter(cfg["config"].values()))["use_pickle"] = True
            return json.dumps(cfg).encode()
        return None if name == "<extra>" else data

    def compiled(name: str, data: bytes) -> Any:
        return (f"{top}/data/aotinductor/model/model.so", b"\x7fELF") if name == "<extra>" else data

    for edit, words in ((pickled, "stored pickled"), (compiled, "aotinductor")):
        bad = _rewrite(path, tmp_path / f"{edit.__name__}.pt2", edit)
        with pytest.raises(TorchImportError, match=words):
            load_pt2(bad)
        assert main(["convert", str(bad), "-o", str(tmp_path / "x.nx")]) == 1
        assert words in capsys.readouterr().err
    junk = tmp_path / "junk.pt2"
    junk.write_bytes(b"not a zip")
    with pytest.raises(TorchImportError, match="not a .pt2"):
        load_pt2(junk)


# --- the op table against PyTorch ----------------------------------------------------------
def _ops_mix(x: Any) -> Any:
    F = nn.functional
    return (torch.var(x, dim=1), x.std(), x.amax(-1), torch.topk(x, 2, dim=1)[0], x.max(dim=1)[1],
            F.pad(x, (1, 2)), x.flip(0), torch.cumsum(x, 1), x.argmax(), torch.stack([x, x], 1), x.repeat(2, 1),
            x[:, [0, 2]], F.silu(x), F.gelu(x, approximate="tanh"), x.transpose(0, 1), x.sort(1, descending=True)[1],
            F.softmax(x, 0), x.clamp(-0.5, 0.5), torch.where(x > 0, x, -x).prod(1),
            x[torch.tensor([[0], [1]]), torch.tensor([1, 2, 4])])  # two index tensors, broadcast


def test_op_mix_matches_pytorch() -> None:
    g = _import(_ops_mix, (torch.randn(4, 5),), ({0: Dim("batch", min=2, max=9)},))
    nx.verify(g)
    for b in (2, 7):
        x = torch.randn(b, 5)
        for got, want in zip(g(x.numpy()), _ops_mix(x)):
            np.testing.assert_allclose(got, want.numpy(), rtol=1e-5, atol=1e-6)


def test_log1p_expm1_softplus_keep_precision() -> None:
    F = nn.functional

    def f(x: Any, y: Any) -> Any:
        return torch.log1p(x), torch.expm1(y), F.softplus(y)

    mags = torch.logspace(-30, 1.9, 60)
    x = torch.cat([mags, -mags.clamp(max=0.99), torch.zeros(1)])  # log1p's domain: x > -1
    y = torch.cat([mags, -mags * 50, torch.zeros(1)])
    g = _import(f, (x, y))
    for got, want in zip(g(x.numpy(), y.numpy()), f(x, y)):
        finite = torch.isfinite(want)
        np.testing.assert_allclose(got[finite.numpy()], want[finite].numpy(), rtol=2e-6, atol=0)


def test_causal_attention_and_embedding_transformer() -> None:
    F = nn.functional

    class Attn(nn.Module):
        def forward(self, q: Any, k: Any, v: Any) -> Any:
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)

    torch.manual_seed(4)
    qkv = tuple(torch.randn(2, 2, 5, 8) for _ in range(3))
    g = _import(Attn(), qkv, ({0: Dim("batch", max=9)},) * 3)
    qkv = tuple(torch.randn(3, 2, 5, 8) for _ in range(3))
    np.testing.assert_allclose(g(*[t.numpy() for t in qkv]), Attn()(*qkv).numpy(), rtol=1e-5, atol=1e-6)

    class Tagger(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.emb = nn.Embedding(20, 16)
            self.layer = nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True, norm_first=True,
                                                    activation="gelu")

        def forward(self, ids: Any) -> Any:
            return self.layer(self.emb(ids))

    model = Tagger().eval()
    g = _import(model, (torch.randint(0, 20, (2, 7)),), ({0: Dim("batch", max=32), 1: Dim("seq", max=64)},))
    assert str(g.result_types[0]) == "f32[batch, seq, 16]"
    ids = torch.randint(0, 20, (3, 11))
    with torch.no_grad():
        np.testing.assert_allclose(g(ids.numpy()), model(ids).numpy(), rtol=1e-5, atol=1e-6)


def test_docs_examples_run(tmp_path: Path, monkeypatch: Any) -> None:
    import importlib

    from nexus.testing.docs import examples_file

    # a real module, which torch.export's tracing of the examples' classes can import
    module = examples_file(Path(__file__).parent.parent / "docs" / "torch.md", tmp_path).stem
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)  # the examples write files (model.pt2): not into the checkout
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        importlib.import_module(module)


def test_a_missing_pt2_file_is_named_as_missing(tmp_path: Path) -> None:
    from nexus.frontend.torch.pt2 import read_pt2

    with pytest.raises(TorchImportError, match="no such file"):
        read_pt2(str(tmp_path / "model.pt2"))
