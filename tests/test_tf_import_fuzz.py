"""TensorFlow GraphDef import on randomly broken graphs: the fixtures with inputs rewired,
ops swapped for control-flow ops, inputs dropped, control edges and frame names changed.
Each import either gives a graph that verifies or one TfImportError, never another
exception.  The long run: ``python -m tests.test_tf_import_fuzz [COUNT] [SEED]``."""

from __future__ import annotations

import glob
import os
import random

import nexus as nx
from nexus.testing.extras import require

require("tensorboard", "tf")
from google.protobuf import text_format  # noqa: E402
from tensorboard.compat.proto import graph_pb2  # noqa: E402

from nexus.frontend.tf.proto import TfImportError  # noqa: E402

HERE = os.path.join(os.path.dirname(__file__), "fixtures", "tf")
OPS = ["Switch", "Merge", "Enter", "Exit", "NextIteration", "LoopCond", "Identity", "AddV2", "NoOp"]


def mutate(gd: graph_pb2.GraphDef, rng: random.Random) -> None:
    nodes = list(gd.node)
    names = [n.name for n in nodes]
    for _ in range(rng.randint(1, 3)):
        n = rng.choice(nodes)
        r = rng.random()
        if r < 0.3 and n.input:
            n.input[rng.randrange(len(n.input))] = rng.choice(names) + rng.choice(["", ":1", ":0"])
        elif r < 0.45:
            n.op = rng.choice(OPS)
        elif r < 0.6 and n.input:
            del n.input[rng.randrange(len(n.input))]
        elif r < 0.7:
            n.input.append("^" + rng.choice(names))
        elif r < 0.8 and "frame_name" in n.attr:
            n.attr["frame_name"].s = rng.choice(names).encode()
        else:
            a, b = rng.sample(range(len(nodes)), 2)
            ia, ib = list(nodes[a].input), list(nodes[b].input)
            nodes[a].input[:], nodes[b].input[:] = ib, ia


def run(seed: int, count: int) -> None:
    rng = random.Random(seed)
    texts = {f: open(f).read() for f in sorted(glob.glob(os.path.join(HERE, "*.pbtxt")))}
    for _ in range(count):
        f = rng.choice(sorted(texts))
        gd = graph_pb2.GraphDef()
        text_format.Parse(texts[f], gd)
        mutate(gd, rng)
        try:
            g = nx.from_tf(gd.SerializeToString())
        except TfImportError:
            continue
        nx.verify(g)


def test_broken_graphs_give_one_error() -> None:
    run(0, 60)


if __name__ == "__main__":
    import sys
    import time

    n = int(sys.argv[1]) if len(sys.argv) > 1 else 3000
    start = time.perf_counter()
    run(int(sys.argv[2]) if len(sys.argv) > 2 else 1, n)
    print(f"{n} broken graphs: each verified or one TfImportError, {time.perf_counter() - start:.1f} s")
