"""``nexus convert``: ONNX -> .nx -> ONNX, run by ONNX Runtime against the original."""

from __future__ import annotations

from typing import Any

import numpy as np

import nexus as nx
from nexus.cli.main import main
from nexus.testing.extras import require

onnx = require("onnx", "onnx")
ort = require("onnxruntime", "onnx")


def test_convert_both_ways(tmp_path: Any, capsys: Any) -> None:
    from tests.test_onnx_export import rnn_model

    src = tmp_path / "rnn.onnx"
    src.write_bytes(rnn_model().SerializeToString())
    assert main(["convert", str(src), "-o", str(tmp_path / "rnn.nx")]) == 0
    g = nx.load(tmp_path / "rnn.nx")
    assert main(["convert", str(tmp_path / "rnn.nx"), "-o", str(tmp_path / "back.onnx")]) == 0
    xs = np.random.default_rng(2).standard_normal((4, 3)).astype(np.float32)
    h0 = np.ones(4, np.float32)
    want = ort.InferenceSession(str(src)).run(None, {"xs": xs, "h0": h0})
    sess = ort.InferenceSession(str(tmp_path / "back.onnx"))
    got = sess.run(None, {i.name: v for i, v in zip(sess.get_inputs(), (xs, h0))})
    for a, b, c in zip(got, want, g(xs, h0)):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(c, b, rtol=1e-5, atol=1e-6)


def test_convert_reports_a_bad_model(tmp_path: Any, capsys: Any) -> None:
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\x08\x07\x12\xff\xff")
    assert main(["convert", str(bad), "-o", str(tmp_path / "x.nx")]) == 1
    err = capsys.readouterr().err
    assert "not a valid ONNX model" in err and "Traceback" not in err
