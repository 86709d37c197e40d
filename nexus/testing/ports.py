"""NumPy programs ported to ``@nx.script`` unchanged but for the decorator (issue 17),
shared by the tests (tests/test_script_programs.py) and the benchmark (bench/w10_ports.py).
Each script's ``.fn`` is the plain NumPy function: the oracle, and the peer."""

from __future__ import annotations

from typing import Any

import numpy as np

import nexus as nx


# --- greedy non-maximum suppression, `keep[n] = i` -------------------------------------------
@nx.script
def nms(boxes, scores, thresh: float):
    order = np.argsort(-scores)
    keep = np.zeros(len(scores), dtype=np.int64)
    suppressed = np.zeros(len(scores), dtype=np.bool_)
    n = 0
    for k in range(len(order)):
        i = order[k]
        if suppressed[i]:
            continue
        keep[n] = i
        n += 1
        for kk in range(k + 1, len(order)):
            j = order[kk]
            xx1 = max(boxes[i, 0], boxes[j, 0])
            yy1 = max(boxes[i, 1], boxes[j, 1])
            xx2 = min(boxes[i, 2], boxes[j, 2])
            yy2 = min(boxes[i, 3], boxes[j, 3])
            inter = max(0.0, xx2 - xx1) * max(0.0, yy2 - yy1)
            area_i = (boxes[i, 2] - boxes[i, 0]) * (boxes[i, 3] - boxes[i, 1])
            area_j = (boxes[j, 2] - boxes[j, 0]) * (boxes[j, 3] - boxes[j, 1])
            if inter / (area_i + area_j - inter) > thresh:
                suppressed[j] = True
    return keep[:n]


def boxes(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    """n random boxes (x1, y1, x2, y2) in a 14 x 14 square and their scores."""
    xy = rng.uniform(0, 10, (n, 2))
    wh = rng.uniform(1, 4, (n, 2))
    return np.concatenate([xy, xy + wh], axis=1), rng.uniform(0, 1, n)


# --- Viterbi decoder, `dp[t, s] = ...` ------------------------------------------------------
@nx.script
def viterbi(log_init, log_trans, log_emit, obs):
    T = len(obs)
    S = log_init.shape[0]
    dp = np.zeros((T, S))
    bp = np.zeros((T, S), dtype=np.int64)
    dp[0] = log_init + log_emit[:, obs[0]]
    for t in range(1, T):
        for s in range(S):
            scores = dp[t - 1] + log_trans[:, s]
            bp[t, s] = np.argmax(scores)
            dp[t, s] = scores[bp[t, s]] + log_emit[s, obs[t]]
    path = np.zeros(T, dtype=np.int64)
    path[T - 1] = np.argmax(dp[T - 1])
    for t in range(T - 2, -1, -1):
        path[t] = bp[t + 1, path[t + 1]]
    return path, np.max(dp[T - 1])


def hmm(rng: np.random.Generator, S: int, V: int, T: int) -> tuple[np.ndarray, ...]:
    """A random HMM with S states and V symbols (log probabilities) and T observations."""

    def logp(*shape: int) -> np.ndarray:
        p = rng.uniform(0.1, 1, shape)
        return np.log(p / p.sum(axis=-1, keepdims=True))
    return logp(S), logp(S, S), logp(S, V), rng.integers(0, V, T)


def ort_nms_session(score_threshold: bool = False) -> Any:
    """ONNX Runtime's NonMaxSuppression alone in a model (one thread), the oracle and peer of
    the NMS ports: inputs b [1, n, 4] (y1, x1, y2, x2), s [1, 1, n], m [1] (max boxes), i [1]
    (IoU threshold) and, with ``score_threshold``, t [1]; output sel [k, 3]."""
    import onnx
    import onnxruntime as rt
    from onnx import TensorProto, helper

    names = ["b", "s", "m", "i"] + (["t"] if score_threshold else [])
    shapes: dict[str, list[int | None]] = {"b": [1, None, 4], "s": [1, 1, None], "m": [1], "i": [1], "t": [1]}
    inputs = [helper.make_tensor_value_info(k, TensorProto.INT64 if k == "m" else TensorProto.FLOAT, shapes[k])
              for k in names]
    node = helper.make_node("NonMaxSuppression", names, ["sel"])
    model = helper.make_model(helper.make_graph([node], "nms", inputs, [onnx.ValueInfoProto(name="sel")]),
                              opset_imports=[helper.make_opsetid("", 18)])
    opts = rt.SessionOptions()
    opts.intra_op_num_threads = 1
    return rt.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
