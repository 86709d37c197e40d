"""Hostile inputs for the ``nexus`` command, and a runner that watches what it opens.

``build(folder)`` writes one directory per case (``model.nx``, maybe a payload): the cases
of issue 18 (symlinks out of the directory, devices, FIFOs, numbers and shapes past the
limits, huge lines, dims that are slow to simplify...), valid models with unusual text
(CRLF, a byte-order mark, a graph named ``x²``) and truncated and bit-flipped copies of
valid models.  ``run_case`` runs one subcommand on one case in a child process that
records, with ``sys.addaudithook``, every file it opens outside the case's directory and
the Python installation.

    python -m nexus.testing.cli_corpus            # every case under every subcommand
    python -m nexus.testing.cli_corpus --sample 20

The test suite runs a sample (tests/test_cli_robustness.py).
"""

from __future__ import annotations

import argparse
import os
import random
import struct
import subprocess
import sys
import time
from dataclasses import dataclass

import numpy as np

from nexus.io import payload_path, save
from nexus.ir.graph import Graph
from nexus.ir.printer import print_graph

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
COMMANDS: list[list[str]] = [["show"], ["show", "--types"], ["verify"], ["run"], ["viz", "-o", "{dir}/out.svg"],
                             ["opt"], ["convert", "-o", "{dir}/out.onnx"]]
TIME_LIMIT = 60.0
AUDIT_EXIT = 97


@dataclass(frozen=True)
class Case:
    name: str
    folder: str
    hostile: bool  # must fail (status 1 or 2); otherwise it may also succeed

    @property
    def model(self) -> str:
        return os.path.join(self.folder, "model.nx")


@dataclass(frozen=True)
class Outcome:
    status: int
    stderr: str
    seconds: float
    opened_outside: list[str]


def _payload_model() -> Graph:
    g = Graph("consts")
    w = g.add("Constant", [], g.start_block, {"value": np.arange(40, dtype=np.float32).reshape(8, 5)}, name="w")
    g.end_block.append_input(g.add("Return", [w], g.start_block))
    return g


def _header_file(header: str, body: bytes = b"") -> bytes:
    text = header.encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + body


def build(root: str, seed: int = 0) -> list[Case]:
    """Write the corpus under ``root``; its cases."""
    from nexus.seeds import ALL

    cases: list[Case] = []
    outside = os.path.join(root, "_outside")
    os.makedirs(outside, exist_ok=True)
    save(_payload_model(), os.path.join(outside, "model.nx"))
    valid_text = open(os.path.join(outside, "model.nx"), "rb").read()
    valid_payload = open(payload_path(os.path.join(outside, "model.nx")), "rb").read()

    def case(name: str, hostile: bool, text: bytes | None = None, payload: bytes | None = None) -> str:
        folder = os.path.join(root, name)
        os.makedirs(folder, exist_ok=True)
        if text is not None:
            with open(os.path.join(folder, "model.nx"), "wb") as f:
                f.write(text)
        if payload is not None:
            with open(os.path.join(folder, "model.nx.safetensors"), "wb") as f:
                f.write(payload)
        cases.append(Case(name, folder, hostile))
        return os.path.join(folder, "model.nx")

    for seed_name, make in ALL.items():
        case(f"seed_{seed_name}", False, print_graph(make()).encode())
    case("payload", False, valid_text, valid_payload)
    case("crlf_bom", False, b"\xef\xbb\xbf" + valid_text.replace(b"\n", b"\r\n"), valid_payload)
    ifelse = print_graph(ALL["ifelse"]())
    case("odd_name", False, ifelse.replace("graph @ifelse {", 'graph @"x\u00b2" {', 1).encode())
    # Files that are not what they seem.
    os.symlink("/etc/passwd", payload_path(case("payload_to_passwd", True, valid_text)))
    os.symlink(payload_path(os.path.join(outside, "model.nx")), payload_path(case("payload_outside", True, valid_text)))
    os.symlink("/dev/zero", case("model_dev_zero", True))
    os.symlink("/dev/zero", payload_path(case("payload_dev_zero", True, valid_text)))
    os.mkfifo(case("model_fifo", True))
    os.mkfifo(payload_path(case("payload_fifo", True, valid_text)))
    os.makedirs(case("model_is_dir", True), exist_ok=True)
    # Numbers, shapes and dims past the limits.
    big = "1" * 5000
    case("loc_digits", True, f'graph @g {{\n^b0:\n  %s = Start : () loc("f":{big}:1)\n}}\n'.encode())
    case("attr_digits", True, ("graph @g {\n^b0:\n  %s = Start : ()\n  %c = Constant {value = tensor<i64: "
                               + big + ">} : i64\n}\n").encode())
    case("shape_2_70", True, valid_text, _header_file('{"consts.w.value": {"dtype": "F32", "shape": [0, '
                                                      + str(2**70) + '], "data_offsets": [0, 0]}}'))
    case("dims_100", True, valid_text, _header_file('{"consts.w.value": {"dtype": "F32", "shape": ['
                                                    + ", ".join(["1"] * 100) + '], "data_offsets": [0, 4]}}',
                                                    b"\0" * 4))
    case("huge_line", True, b"graph @g {\n^b0:\n  %s = Start : () " + b"x" * 1_000_000 + b"\n}\n")
    slow = "*".join(f"(N{i}+{i})" for i in range(24))
    case("slow_dim", False, ifelse.replace(": f32\n", f": f32[{slow}]\n", 1).encode())
    deep = "floor((" * 60 + "N" + "+1)/2)" * 60
    case("deep_dim", True, ifelse.replace(": f32\n", f": f32[{deep}]\n", 1).encode())
    # Truncated and bit-flipped copies of valid models.
    rng = random.Random(seed)
    for i in range(6):
        cut = rng.randrange(1, len(valid_text))
        case(f"text_cut_{i}", True, valid_text[:cut], valid_payload)
        cut = rng.randrange(0, len(valid_payload))
        case(f"payload_cut_{i}", True, valid_text, valid_payload[:cut])
    for i in range(8):
        text, blob = bytearray(valid_text), bytearray(valid_payload)
        target = text if i % 2 == 0 else blob
        for _ in range(1 + i // 2):
            target[rng.randrange(len(target))] ^= 1 << rng.randrange(8)
        case(f"flip_{i}", False, bytes(text), bytes(blob))
    return cases


_CHILD = f"""
import os, sys
AUDIT_EXIT = {AUDIT_EXIT}
allowed = [os.path.realpath(p) for p in sys.argv[1].split(os.pathsep)]
outside = []

def hook(event, args):
    if event != "open" or not args or not isinstance(args[0], (str, bytes)):
        return
    path = os.path.realpath(os.fsdecode(args[0]))
    if path != os.devnull and not any(path == a or path.startswith(a + os.sep) for a in allowed):
        outside.append(path)

sys.addaudithook(hook)

def report():
    if outside:
        sys.stderr.write("AUDIT: opened " + " ".join(sorted(set(outside))) + "\\n")
        sys.stderr.flush()
        os._exit(AUDIT_EXIT)

import atexit
atexit.register(report)
from nexus.cli.main import main
status = main(sys.argv[2:])
sys.exit(status)
"""


def run_case(case: Case, command: list[str]) -> Outcome:
    """Run ``nexus COMMAND MODEL`` on ``case`` in an audited child process."""
    allowed = [case.folder, sys.prefix, sys.base_prefix, sys.exec_prefix, ROOT, "/proc", "/sys"]
    argv = [a.format(dir=case.folder) for a in command] + [case.model]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")])}
    t0 = time.monotonic()
    try:
        proc = subprocess.run([sys.executable, "-c", _CHILD, os.pathsep.join(allowed), *argv], capture_output=True,
                              text=True, errors="replace", timeout=TIME_LIMIT, env=env, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return Outcome(-1, f"timed out after {TIME_LIMIT} s", TIME_LIMIT, [])
    opened = [ln[len("AUDIT: opened "):] for ln in proc.stderr.splitlines() if ln.startswith("AUDIT: opened ")]
    return Outcome(proc.returncode, proc.stderr, time.monotonic() - t0, opened)


def problems(case: Case, command: list[str], out: Outcome) -> list[str]:
    """What is wrong with ``out`` (empty when the run behaved)."""
    bad: list[str] = []
    allowed = (1, 2) if case.hostile else (0, 1, 2)
    if out.status not in allowed:
        bad.append(f"exit status {out.status} (expected {' or '.join(map(str, allowed))})")
    if "Traceback" in out.stderr:
        bad.append("a traceback on stderr")
    lines = out.stderr.splitlines()
    if out.status in (1, 2):
        # One report: a first line naming the problem ("nexus: ..." or argparse's usage
        # error); a parse error adds the quoted window and its caret, an invalid graph
        # the surrounding nodes.
        if not lines or not (lines[0].startswith("nexus") or lines[0].startswith("usage:")):
            bad.append(f"stderr does not start with one error line: {out.stderr[:200]!r}")
        elif sum(ln.startswith("nexus") for ln in lines) != 1 or len(out.stderr) > 8000:
            bad.append(f"more than one error report on stderr ({len(lines)} lines)")
    if out.seconds >= TIME_LIMIT:
        bad.append(f"took {out.seconds:.0f} s")
    if out.opened_outside:
        bad.append(f"opened files outside the model's directory: {out.opened_outside}")
    return bad


def all_runs(cases: list[Case]) -> list[tuple[Case, list[str]]]:
    return [(c, cmd) for c in cases for cmd in COMMANDS]


def sample(cases: list[Case], count: int, seed: int = 0) -> list[tuple[Case, list[str]]]:
    """``count`` runs: every hostile case of issue 18 once (the subcommand rotating), then
    random others."""
    runs = all_runs(cases)
    firsts = [(c, COMMANDS[i % len(COMMANDS)]) for i, c in enumerate(cases)
              if not c.name.startswith(("text_cut", "payload_cut", "flip"))]
    rest = [r for r in runs if r not in firsts]
    random.Random(seed).shuffle(rest)
    return (firsts + rest)[:max(count, 0)] if count < len(firsts) else firsts + rest[:count - len(firsts)]


def main(argv: list[str] | None = None) -> int:
    import tempfile

    p = argparse.ArgumentParser(prog="python -m nexus.testing.cli_corpus", description=__doc__.split("\n\n")[0])
    p.add_argument("--sample", type=int, default=None, help="run this many (default: every case and subcommand)")
    args = p.parse_args(argv)
    failed = 0
    with tempfile.TemporaryDirectory() as tmp:
        cases = build(tmp)
        runs = all_runs(cases) if args.sample is None else sample(cases, args.sample)
        t0 = time.monotonic()
        for case, cmd in runs:
            out = run_case(case, cmd)
            bad = problems(case, cmd, out)
            if bad:
                failed += 1
                print(f"FAIL {case.name} nexus {' '.join(cmd)}: {'; '.join(bad)}\n  {out.stderr[:300]!r}")
        print(f"{len(runs)} runs over {len(cases)} cases in {time.monotonic() - t0:.0f} s: {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
