"""TensorFlow GraphDefs (tests/fixtures/tf, made by TensorFlow 2.21) through the xla
backend: the RNNs and ops_v1 compute their sizes from ``tf.shape(x)`` (ShapeOf, Cast,
Gather, Range), which must stay static while compiling; TF2's gradient pushes to a list
that grows every iteration of a loop with a run-time trip count (padded to a bound, which
XLA compiles) and pops it by a Slice whose bounds are run-time values (a padded window).
The oracle is TensorFlow's outputs committed beside each GraphDef."""

from __future__ import annotations

import os

import numpy as np
import pytest

import nexus as nx
from nexus.testing.extras import require

require("jax", "xla")
require("tensorboard", "tf")

HERE = os.path.join(os.path.dirname(__file__), "fixtures", "tf")


def fixture(name: str) -> tuple[nx.Graph, list[np.ndarray], list[np.ndarray]]:
    z = np.load(os.path.join(HERE, name + ".npz"))
    ins = [str(s) for s in z["input_names"]]
    outs = [str(s) for s in z["output_names"]]
    g = nx.from_tf(os.path.join(HERE, str(z["graph"]) + ".pbtxt"), ins, outs)
    return g, [z[f"in{k}"] for k in range(len(ins))], [z[f"out{k}"] for k in range(len(outs))]


@pytest.mark.parametrize("name", ["rnn_v1", "rnn_v2", "ops_v1"])
def test_sizes_from_tf_shape_stay_static(name: str) -> None:
    g, args, want = fixture(name)
    exe = nx.compile(g, backend="xla")
    got = exe(*args)
    got = got if isinstance(got, tuple) else (got,)
    assert len(got) == len(want)
    for a, b in zip(got, want):
        assert np.asarray(a).dtype == b.dtype
        np.testing.assert_allclose(np.asarray(a), b, rtol=2e-5, atol=2e-6)


def test_a_list_growing_in_a_run_time_loop_compiles_and_agrees() -> None:
    """The gradient pops the padded list by run-time Slices (nexus.backends.xla.slicing)."""
    g, args, want = fixture("grad_v2")
    got = nx.compile(g, backend="xla")(*args)
    got = got if isinstance(got, tuple) else (got,)
    assert len(got) == len(want)
    for a, b in zip(got, want):
        np.testing.assert_allclose(np.asarray(a), b, rtol=2e-5, atol=2e-6)
