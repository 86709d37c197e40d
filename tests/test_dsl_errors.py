"""Misuse of the DSL gives a clear error naming the user's line (and the variable)."""

from __future__ import annotations

import inspect

import pytest

import nexus as nx


def line_of(marker: str, fn) -> int:  # type: ignore[no-untyped-def]
    lines, start = inspect.getsourcelines(fn)
    return start + next(i for i, text in enumerate(lines) if marker in text)


def test_break_outside_a_loop() -> None:
    def build() -> None:
        with nx.function("f"):
            nx.break_()  # HERE

    with pytest.raises(nx.DSLError, match=r"break_\(\) is only allowed inside") as e:
        build()
    assert f":{line_of('# HERE', build)}:" in str(e.value)


def test_then_outside_if_cond() -> None:
    def build() -> None:
        with nx.function("f"):
            with nx.then():  # HERE
                pass

    with pytest.raises(nx.DSLError, match=r"then\(\) must be used directly inside") as e:
        build()
    assert f":{line_of('# HERE', build)}:" in str(e.value)


def test_else_twice() -> None:
    def build() -> None:
        with nx.function("f"):
            x = nx.constant(1.0)
            with nx.if_cond(x > 0.0):
                with nx.else_():
                    pass
                with nx.else_():  # HERE
                    pass

    with pytest.raises(nx.DSLError, match=r"else_\(\) is used twice") as e:
        build()
    assert f":{line_of('# HERE', build)}:" in str(e.value)


def test_value_defined_in_one_branch_only_names_the_variable() -> None:
    def build() -> None:
        with nx.function("f") as f:
            x = nx.constant(1.0)
            with nx.if_cond(x > 0.0):
                with nx.then():
                    only_then = x + 1.0
            f.returns(only_then * 2.0)  # HERE

    with pytest.raises(nx.DSLError, match="variable 'only_then' is assigned on only some paths") as e:
        build()
    assert f":{line_of('# HERE', build)}:" in str(e.value)


def test_value_defined_only_inside_a_loop() -> None:
    def build() -> None:
        with nx.function("f") as f:
            i = nx.constant(0)
            with nx.while_loop(i < 3):
                inner = i * 2
                i = i + 1
            f.returns(inner)

    with pytest.raises(nx.DSLError, match="variable 'inner' is assigned inside the while_loop"):
        build()


def test_mixing_two_graphs() -> None:
    def build() -> None:
        with nx.function("a"):
            x = nx.constant(1.0)
        with nx.function("b"):
            y = nx.constant(2.0)
            nx.add(x, y)  # HERE

    with pytest.raises(nx.DSLError, match="belongs to graph @a") as e:
        build()
    assert f":{line_of('# HERE', build)}:" in str(e.value)


def test_code_inside_if_cond_outside_branches() -> None:
    def build() -> None:
        with nx.function("f"):
            x = nx.constant(1.0)
            with nx.if_cond(x > 0.0):
                x = x + 1.0

    with pytest.raises(nx.DSLError, match=r"put code in `with nx.then\(\):`"):
        build()


def test_python_truth_value_and_python_number_in_loop() -> None:
    def truthy() -> None:
        with nx.function("f"):
            x = nx.constant(1.0)
            if x > 0.0:
                pass

    with pytest.raises(nx.DSLError, match="no Python truth value"):
        truthy()



def test_python_numbers_as_loop_variables() -> None:
    # the body assigns `n` (seen in the source): it becomes a loop-carried graph value
    with nx.function("f") as f:
        x = nx.constant(1.0)
        n = 0
        with nx.while_loop(x < 10.0):
            x = x * 2.0
            n = n + 1
        f.returns(x, n)
    assert tuple(f.graph()) == (16.0, 4)

    # a condition written on the `with` line is re-evaluated like Python's `while`
    with nx.function("g") as g:
        i = 0
        with nx.while_loop(nx.less(i, 3)):
            i = i + 1
        g.returns(i)
    assert g.graph() == 3

    # ... but a condition built earlier from a Python number cannot follow it
    def literal_condition() -> None:
        with nx.function("g"):
            i = 0
            cond = nx.less(i, 3)
            with nx.while_loop(cond):
                i = i + 1

    with pytest.raises(nx.DSLError, match="built from the Python number i = 0"):
        literal_condition()

    # without the source, the update is caught after the first iteration
    source = (
        "with nx.function('h') as f:\n"
        "    x = nx.constant(1.0)\n"
        "    n = 0\n"
        "    with nx.while_loop(x < 10.0):\n"
        "        x = x * 2.0\n"
        "        n = n + 1\n"
    )
    with pytest.raises(nx.DSLError, match="variable 'n' holds the Python number 0"):
        exec(compile(source, "<no source>", "exec"), {"nx": nx})


def test_value_escaping_its_region_through_a_container() -> None:
    def build() -> None:
        with nx.function("f") as f:
            i = nx.constant(0)
            kept = []
            with nx.while_loop(i < 3):
                kept.append(i * 2)
                i = i + 1
            f.returns(kept[0])

    with pytest.raises(nx.DSLError, match="created inside the while_loop .* which has ended"):
        build()


def test_type_errors_point_at_the_line() -> None:
    def build() -> None:
        with nx.function("f"):
            a = nx.constant(1, dtype="i32")
            b = nx.constant(1.0)
            nx.add(a, b)  # HERE

    with pytest.raises(nx.DSLError, match="dtype mismatch") as e:
        build()
    assert f":{line_of('# HERE', build)}:" in str(e.value)


def test_branch_types_must_agree() -> None:
    def build() -> None:
        with nx.function("f") as f:
            x = nx.constant(1.0)
            with nx.if_cond(x > 0.0):
                with nx.then():
                    y = nx.constant(1, dtype="i32")
                with nx.else_():
                    y = nx.constant(1.0)
            f.returns(y)

    with pytest.raises(nx.DSLError, match="variable 'y' has values of different types"):
        build()


def test_python_return_inside_a_region_is_rejected() -> None:
    with pytest.raises(nx.DSLError, match="use nx.return_"):
        @nx.graph(x="f32")
        def f(x):
            with nx.if_cond(x > 0.0):
                with nx.then():
                    return x
            return -x


def test_ops_outside_a_graph() -> None:
    with pytest.raises(nx.DSLError, match="no graph is being built"):
        nx.add(1.0, 2.0)


def test_a_failed_build_leaves_no_state_behind() -> None:
    def broken() -> None:
        with nx.function("broken") as f:
            x = nx.constant(1.0)
            with nx.while_loop(x < 3.0):
                with nx.if_cond(x > 0.0):
                    with nx.then():
                        raise KeyError("user bug")
            f.returns(x)

    with pytest.raises(KeyError, match="user bug"):
        broken()
    with nx.function("fine") as f:
        x = nx.constant(1.0)
        with nx.while_loop(x < 3.0):
            x = x + 1.0
        f.returns(x)
    assert f.graph() == 3.0
    with pytest.raises(nx.DSLError, match="no graph is being built"):
        nx.constant(1.0)
