"""Differential fuzzing of @nx.script against plain Python (nexus.testing.py_gen): random
functions with nested control flow must give the same results both ways."""

from __future__ import annotations

from nexus.testing.py_gen import Gen, fuzz


def test_500_random_programs_match_python() -> None:
    failures = fuzz(500, seed=2026, max_depth=2, runs=2, stop_after=1)
    assert not failures, str(failures[0])


def test_optimized_graphs_match_python() -> None:
    failures = fuzz(40, seed=77, max_depth=2, runs=2, optimize=True, stop_after=1)
    assert not failures, str(failures[0])


def test_generator_makes_the_promised_constructs() -> None:
    import random

    text = "".join(Gen(random.Random(s)).program().split("def f(")[1] for s in range(40))
    for construct in ("while ", "for ", "break", "continue", "elif ", "else:", " and ", " or ", "return ",
                      "_absdiff(", ", ", "+=", "range(", "_tri(", "_steps(", " & ", " | ", " ^ ", "(~", " << ",
                      " >> ", ") & ("):
        assert construct in text, construct



def test_programs_with_partial_assignments_match_python() -> None:
    """Issue 30's constructs: variables assigned on some paths (Python's UnboundLocalError
    where a read meets none), paths returning None, enumerate/zip/reversed loops with
    negative and run-time steps, a global tuple."""
    stats: dict[str, int] = {}
    failures = fuzz(60, seed=30, max_depth=2, runs=3, stop_after=1, partial=True, stats=stats)
    assert not failures, str(failures[0])
    assert stats.get("python: UnboundLocalError", 0) >= 5, stats


def test_generator_makes_the_partial_constructs() -> None:
    import random

    text = "".join(Gen(random.Random(s), partial=True).program().split("def f(")[1] for s in range(60))
    for construct in ("enumerate(", "zip(", "reversed(", "_T[", "start=", ", -"):
        assert construct in text, construct


def test_programs_with_ragged_lists_match_python() -> None:
    """Lists of slices of different lengths (sequences in a script), read by len, an index,
    a for loop and np.concatenate."""
    failures = fuzz(30, seed=29, arrays_every=1, max_depth=2, runs=2, stop_after=1, partial=True, ragged=True)
    assert not failures, str(failures[0])


def test_generator_makes_ragged_lists() -> None:
    import random

    text = "".join(Gen(random.Random(s), ragged=True).program().split("def f(")[1] for s in range(40))
    for construct in ("rg", ".append(np.tanh(rg", "np.concatenate(rg", "float(len(rg", "in rg"):
        assert construct in text, construct
