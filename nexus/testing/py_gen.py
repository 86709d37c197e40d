"""Differential fuzzer for ``@nx.script``: random Python functions run as plain Python
and as scripts must agree.

Programs have nested ``if``/``elif``/``else``, ``while`` and ``for`` loops (bounded),
``break``/``continue`` at any depth, early returns, ``and``/``or`` (with Python's value
semantics on ints), chained comparisons, conditional expressions, tuple assignment,
``+=``, inlined helpers with several returns, bitwise operators on ints (and bools), over
ints, floats and small float arrays, with subscript assignments into them (``w[i] = ...``,
slices, masks, int arrays, ``+=``) and NumPy calls (flip, cumsum, clip, sort, where, roll, pad,
repeat, cumprod, linalg.norm...).
The generator tracks which variables are definitely
assigned and keeps every variable at one type, so each program is valid Python that a
script must accept.  Values stay small (loop-carried ints are wrapped with ``%``, left
shifts move by at most 4 bits), so int64 never overflows.

With ``partial`` (issue 30; on in the CLI, ``--no-partial`` gives the programs of before)
variables may be read where they are assigned on some paths only (after one branch, or
a loop that may run zero times, or a loop's own targets), some paths fall off the end
or say ``return`` / ``return None`` (Python returns None), ``for`` loops run over
``enumerate``/``zip``/``reversed`` of ranges (negative and run-time steps) and of an
array's rows, a global tuple ``_T`` gives constants, variables hold ``(int, float)``
tuples or an int or None (read through ``is None`` tests), ``in`` over tuples and
``divmod``, and ``raise`` statements (a builtin exception class, alone or called with
constant arguments; under a condition, or ending a branch) appear.  Where Python raises
UnboundLocalError the script must raise it too, naming the variable; where a ``raise``
raises, the script must raise the same class with the same arguments; where it returns
None the script must return None, on the python backend and on the one given with
``--backend``.

With ``ragged`` (``--ragged``) programs also build lists of slices of different lengths,
which a script holds as sequences (``seq<...>``), and read them by ``len``, an index, a
``for`` loop and ``np.concatenate``; the python backend runs them (llvm and xla refuse
sequences, so ``--ragged`` goes with the default backend).

CLI: ``python -m nexus.testing.py_gen --count 20000 [--seed S] [--optimize] [--backend llvm]``
prints each disagreement (the program, the inputs, both results) and a summary.  With
``--backend NAME`` each script is compiled with ``nx.compile(f, backend=NAME)`` and the
compiled function is what must agree with Python (for ``llvm`` the summary also counts
the programs that ran as native code and those partitioned, with the ops that stayed out).
"""

from __future__ import annotations

import argparse
import math
import random
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

INT, FLOAT, ARR, BOOL, LIST, TUP = "int", "float", "arr", "bool", "list", "tuple"  # TUP: (int, float)
RAGGED = "ragged"  # a list of slices of different lengths (a sequence in a script)
OPT = "opt"  # an int or None, read through `is None` tests only
# The exception classes the generated `raise` statements raise.
RAISED = (ValueError, IndexError, RuntimeError, ZeroDivisionError, AssertionError, KeyError, OverflowError)

HELPERS = '''
def _absdiff(p, q):
    if p > q:
        return p - q
    return q - p


def _clamp(p, lo, hi):
    if p < lo:
        return lo
    elif p > hi:
        return hi
    return p


@script
def _tri(n: int):
    t = 0
    for j in range(n % 5):
        t += j
    return t


def _steps(n):
    s = 0
    k = n % 4
    while k > 0:
        s = s + k
        k = k - 1
    return s, k
'''


@dataclass
class Env:
    """Variables definitely assigned here, by name -> type; ``maybe``: those assigned on
    some paths only (a read raises UnboundLocalError on the others)."""

    vars: dict[str, str]
    maybe: dict[str, str] = field(default_factory=dict)

    def of(self, t: str) -> list[str]:
        return [n for n, ty in self.vars.items() if ty == t]

    def maybe_of(self, t: str) -> list[str]:
        return [n for n, ty in self.maybe.items() if ty == t and n not in self.vars]

    def join(self, before: Env, paths: list[Env], definite: dict[str, str]) -> None:
        """After a join of ``paths`` (from ``before``): ``definite`` are assigned on all;
        the others assigned on some, with one type everywhere, may be read (lists aside)."""
        seen: dict[str, set[str]] = {}
        for e in [before, *paths]:
            for n, t in [*e.vars.items(), *e.maybe.items()]:
                seen.setdefault(n, set()).add(t)
        self.vars = dict(definite)
        self.maybe = {n: next(iter(ts)) for n, ts in seen.items()
                      if n not in definite and len(ts) == 1 and LIST not in ts and RAGGED not in ts}

    def targets(self, t: str) -> list[str]:
        # Loop counters (w_*) are never reassigned: the loops stay bounded.
        return [n for n in self.of(t) if not n.startswith("w_")]

    def copy(self) -> Env:
        return Env(dict(self.vars), dict(self.maybe))


@dataclass
class Gen:
    rng: random.Random
    arrays: bool = True
    # With float32 arrays, array elements are np.float32 (a different type from the
    # Python floats), so elements and row loops are only generated for float64 arrays.
    f32: bool = False
    max_depth: int = 3
    # Subscript assignments and the NumPy calls of issue 17 (off: the programs of before).
    numpy: bool = True
    # Issue 30: variables assigned on some paths only (read where Python may raise
    # UnboundLocalError), paths falling off the end or returning None, enumerate/zip/
    # reversed loops with negative and run-time steps, a global tuple of constants, tuple
    # variables, `in` over tuples and divmod.
    partial: bool = False
    # Lists of slices of different lengths (sequences in a script): appended in loops,
    # read by len, an index, a for loop and np.concatenate (off: the programs of before).
    ragged: bool = False
    counter: int = 0
    lines: list[str] = field(default_factory=list)

    # --- expressions ----------------------------------------------------------------------
    def fresh(self, prefix: str) -> str:
        self.counter += 1
        return f"{prefix}{self.counter}"

    def int_expr(self, env: Env, d: int = 2) -> str:
        r = self.rng
        names = env.of(INT)
        if d <= 0 or r.random() < 0.3:
            maybe = env.maybe_of(INT) if self.partial else []
            if maybe and r.random() < 0.08:
                return r.choice(maybe)
            if self.partial and r.random() < 0.05:
                return r.choice(["_T[0]", "_T[1]", "_T[-2]"])
            tups = self.tuples(env)
            if tups and r.random() < 0.1:
                return f"{r.choice(tups)}[0]"
            opts = self.optionals(env)
            if opts and r.random() < 0.1:
                n = r.choice(opts)
                return f"({n} if {n} is not None else {r.randint(-4, 9)})"
            if names and r.random() < 0.7:
                return r.choice(names)
            return str(r.randint(-4, 9))
        k = r.randrange(20)
        a = lambda: self.int_expr(env, d - 1)  # noqa: E731
        if k == 0:
            return f"({a()} + {a()})"
        if k == 1:
            return f"({a()} - {a()})"
        if k == 2:
            return f"({self.int_expr(env, 0)} * {self.int_expr(env, 0)})"
        if k == 3:
            return f"({a()} // {r.choice([2, 3, -2, 5, 7])})"
        if k == 4:
            return f"({a()} % {r.choice([2, 3, 5, -3, 7])})"
        if k == 5:
            return f"(-{a()})"
        if k == 6:
            return f"abs({a()})"
        if k == 7:
            return f"{r.choice(['min', 'max'])}({a()}, {a()})"
        if k == 8:
            return f"({a()} if {self.cond(env, d - 1)} else {a()})"
        if k == 9:
            return f"({a()} {r.choice(['and', 'or'])} {a()})"
        if k == 10:
            return f"_absdiff({a()}, {a()})"
        if k == 11:
            return f"_clamp({a()}, -3, 5)"
        if k == 12 and self.arrays and env.of(ARR):
            return f"len({r.choice(env.of(ARR))})"
        if k == 13:
            return f"int({self.float_expr(env, 0)} // 1.0)"
        if k == 14:
            return f"_steps({a()})[{r.randint(0, 1)}]"
        if k == 15:
            if self.partial and r.random() < 0.3:
                return f"divmod({a()}, {r.choice([2, 3, -2, 5])})[{r.randint(0, 1)}]"
            return f"_tri({a()})"
        if k >= 16:
            return self.bitwise_expr(env, d, k - 16)
        return a()

    def bitwise_expr(self, env: Env, d: int, k: int) -> str:
        """``& | ^ ~ << >>`` on ints, and ``& | ^`` of a bool with an int (an int, as in
        Python).  Left shifts move by at most 4 bits, so int64 does not overflow where
        Python's ints would grow; right shifts take any count, past 63 and (rarely)
        negative too, where both raise."""
        r = self.rng
        a = lambda: self.int_expr(env, d - 1)  # noqa: E731
        if k == 0:
            left = f"({self.int_expr(env, 0)} < {self.int_expr(env, 0)})" if r.random() < 0.2 else a()
            return f"({left} {r.choice(['&', '|', '^'])} {a()})"
        if k == 1:
            return f"(~{a()})"
        if k == 2:
            count = r.choice([str(r.randint(0, 4)), f"({a()} % 5)"])
            return f"({a()} << {count})"
        count = r.choice([str(r.randint(0, 3)), str(r.randint(60, 70)), f"({a()} % 70)",
                          f"({a()} & 7)", a() if r.random() < 0.1 else "1"])
        return f"({a()} >> {count})"

    def float_expr(self, env: Env, d: int = 2) -> str:
        r = self.rng
        names = env.of(FLOAT)
        if d <= 0 or r.random() < 0.3:
            maybe = env.maybe_of(FLOAT) if self.partial else []
            if maybe and r.random() < 0.08:
                return r.choice(maybe)
            if self.partial and r.random() < 0.03:
                return "_T[2]"
            tups = self.tuples(env)
            if tups and r.random() < 0.1:
                return f"{r.choice(tups)}[1]"
            if names and r.random() < 0.7:
                return r.choice(names)
            return r.choice(["0.5", "-1.25", "2.0", "0.0", "3.75", "-0.5"])
        k = r.randrange(13)
        a = lambda: self.float_expr(env, d - 1)  # noqa: E731
        if k == 0:
            return f"({a()} + {a()})"
        if k == 1:
            return f"({a()} - {self.int_expr(env, d - 1)})"
        if k == 2:
            return f"({a()} * {r.choice(['0.5', '-1.5', '1.25', '2.0'])})"
        if k == 3:
            return f"({a()} / {r.choice(['2.0', '-4.0', '0.25', '3'])})"
        if k == 4:
            return f"({self.int_expr(env, d - 1)} / {r.choice([2, 3, -5])})"
        if k == 5:
            return f"abs({a()})"
        if k == 6:
            return f"{r.choice(['min', 'max'])}({a()}, {a()})"
        if k == 7:
            return f"({a()} if {self.cond(env, d - 1)} else {a()})"
        if k == 8:
            return f"float({self.int_expr(env, d - 1)})"
        if k == 9 and self.arrays and not self.f32 and env.of(ARR):
            return f"{r.choice(env.of(ARR))}[{self.int_expr(env, 0)} % 3]"
        if k == 10:
            return f"({a()} // {r.choice(['2.0', '0.5', '3.0'])})"
        if k == 11:
            # np.tanh, not math.tanh: libm's tanh and NumPy's differ by an ulp at times, and
            # loops like x = (x * x * y) % 97.5 amplify an ulp to any size (found by a long run).
            # float(...): np.tanh gives an np.float64, which NumPy 2 promotes strongly (a
            # float32 array plus it is float64); a script's floats are Python floats.
            return f"float(np.tanh({a()}))"
        return f"({a()} * {a()})"

    def arr_expr(self, env: Env, d: int = 2) -> str:
        r = self.rng
        names = env.of(ARR)
        if d <= 0 or r.random() < 0.3 or not names:
            maybe = env.maybe_of(ARR) if self.partial else []
            if maybe and r.random() < 0.08:
                return r.choice(maybe)
            return r.choice(names) if names else "v"
        k = r.randrange(5)
        a = lambda: self.arr_expr(env, d - 1)  # noqa: E731
        if k == 0:
            return f"({a()} + {self.float_expr(env, 0)})"
        if k == 1:
            return f"({a()} * {r.choice(['0.5', '-1.0', '2'])})"
        if k == 2:
            return f"({a()} - {a()})"
        if k == 3:
            return f"np.tanh({a()})"
        return f"({a()} + {self.int_expr(env, 0)})"

    def cond(self, env: Env, d: int = 2) -> str:
        r = self.rng
        k = r.randrange(8)
        if d <= 0 or k < 3:
            return f"{self.int_expr(env, 1)} {r.choice(['<', '<=', '>', '>=', '==', '!='])} {self.int_expr(env, 1)}"
        if k == 3:
            return f"{self.float_expr(env, 1)} {r.choice(['<', '>', '<=', '>='])} {self.float_expr(env, 1)}"
        if k == 4:
            return f"({self.cond(env, d - 1)} {r.choice(['and', 'or'])} {self.cond(env, d - 1)})"
        if k == 5:
            return f"not {self.cond(env, d - 1)}"
        if k == 6:
            return f"{self.int_expr(env, 0)} < {self.int_expr(env, 1)} <= {self.int_expr(env, 0)}"
        if r.random() < 0.3:  # bool & bool: the logical op
            return f"({self.cond(env, 0)}) {r.choice(['&', '|', '^'])} ({self.cond(env, 0)})"
        if self.partial and r.random() < 0.2:
            opts = self.optionals(env)
            if opts and r.random() < 0.4:
                return f"{r.choice(opts)} {r.choice(['is', 'is not'])} None"
            return f"{self.int_expr(env, 1)} {r.choice(['in', 'not in'])} ({r.randint(-2, 3)}, {self.int_expr(env, 0)})"
        if r.random() < 0.3:
            return f"({self.int_expr(env, 1)} & {r.choice([1, 3, 4, 6])}) == 0"
        return f"{self.int_expr(env, 1)} % 2 == 0"

    def tuples(self, env: Env) -> list[str]:
        """The (int, float) tuple variables readable here (maybe assigned, rarely)."""
        if not self.partial:
            return []
        maybe = env.maybe_of(TUP)
        return env.of(TUP) + (maybe if maybe and self.rng.random() < 0.1 else [])

    def optionals(self, env: Env) -> list[str]:
        """The variables holding an int or None readable here (maybe assigned, rarely)."""
        if not self.partial:
            return []
        maybe = env.maybe_of(OPT)
        return env.of(OPT) + (maybe if maybe and self.rng.random() < 0.1 else [])

    def expr(self, t: str, env: Env) -> str:
        return {INT: self.int_expr, FLOAT: self.float_expr, ARR: self.arr_expr}[t](env)

    def wrap(self, t: str, e: str, in_loop: bool) -> str:
        if not in_loop:
            return e
        if t == INT:
            return f"({e}) % 211 - 100"
        if t == FLOAT:
            return f"({e}) % 97.5 - 40.0"
        return f"np.tanh({e})"

    # --- statements -------------------------------------------------------------------------
    def block(self, env: Env, ind: str, depth: int, loops: int, n: int) -> bool:
        """Emit ``n`` statements; returns True when the block always leaves (return/break)."""
        for _ in range(n):
            if self.stmt(env, ind, depth, loops):
                return True
        return False

    def stmt(self, env: Env, ind: str, depth: int, loops: int) -> bool:
        r = self.rng
        if self.ragged and self.arrays and not self.f32 and r.random() < 0.1:
            self.ragged_stmt(env, ind, loops)
            return False
        k = r.randrange(12 if depth < self.max_depth else 5)
        types = [INT, FLOAT] + ([ARR] if self.arrays else [])
        if k <= 1:
            t = r.choice(types)
            if t == ARR and self.numpy and r.random() < 0.4:
                self.set_item(env, ind, loops)
                return False
            if t == ARR and self.numpy and r.random() < 0.3:
                self.list_stmt(env, ind, loops)
                return False
            if self.partial and r.random() < 0.12:
                self.tuple_stmt(env, ind, loops)
                return False
            if self.partial and r.random() < 0.08:  # an int or None (numba's Optional)
                opts = env.targets(OPT)
                name = r.choice(opts) if opts and r.random() < 0.6 else self.fresh("n")
                value = "None" if r.random() < 0.5 else self.wrap(INT, self.int_expr(env), loops > 0)
                self.lines.append(f"{ind}{name} = {value}")
                env.vars[name] = OPT
                return False
            names = env.targets(t)
            name = r.choice(names) if names and r.random() < 0.6 else self.fresh({INT: "i", FLOAT: "f", ARR: "w"}[t])
            self.lines.append(f"{ind}{name} = {self.wrap(t, self.expr(t, env), loops > 0)}")
            env.vars[name] = t
            return False
        if k == 2:
            t = r.choice([INT, FLOAT])
            names = env.targets(t)
            if names and loops == 0:
                self.lines.append(f"{ind}{r.choice(names)} += {self.expr(t, env)}")
            return False
        if k == 3:
            ta, tb = r.choice(types), r.choice(types)
            na = self.pick_or_new(env, ta)
            nb = self.pick_or_new(env, tb)
            if na == nb:
                return False
            if r.random() < 0.3 and na in env.vars and nb in env.vars and ta == tb:
                self.lines.append(f"{ind}{na}, {nb} = {nb}, {na}")
                env.vars[na], env.vars[nb] = env.vars[nb], env.vars[na]
                return False
            self.lines.append(f"{ind}{na}, {nb} = {self.wrap(ta, self.expr(ta, env), loops > 0)}, "
                              f"{self.wrap(tb, self.expr(tb, env), loops > 0)}")
            env.vars[na], env.vars[nb] = ta, tb
            return False
        if k == 4:
            if loops and r.random() < 0.5:
                word = r.choice(["break", "continue"])
                self.lines.append(f"{ind}if {self.cond(env)}:")
                self.lines.append(f"{ind}    {word}")
                return False
            if self.partial and r.random() < 0.25:  # `raise` (numba's subset), under a condition or not
                if depth > 0 and r.random() < 0.3:
                    self.lines.append(f"{ind}{self.raise_stmt()}")
                    return True
                self.lines.append(f"{ind}if {self.cond(env)}:")
                self.lines.append(f"{ind}    {self.raise_stmt()}")
            elif r.random() < 0.3:
                self.lines.append(f"{ind}if {self.cond(env)}:")
                none = self.partial and r.random() < 0.1  # Python returns None there
                self.lines.append(f"{ind}    return{r.choice(['', ' None']) if none else ' ' + self.ret(env)}")
            elif r.random() < 0.1:
                self.lines.append(f"{ind}assert {self.cond(env, 1)}, 'generated check'")
            return False
        if k <= 7:
            return self.if_stmt(env, ind, depth, loops)
        if k <= 9:
            self.for_stmt(env, ind, depth, loops)
            return False
        if k == 10:
            self.while_stmt(env, ind, depth, loops)
            return False
        if k == 11 and loops:
            self.lines.append(f"{ind}{r.choice(['break', 'continue'])}")
            return True
        return False

    def raise_stmt(self) -> str:
        """``raise E``, ``raise E()``, ``raise E("raised N")`` or ``raise E("raised",
        N)``: arguments that no error of Python's own has (see :func:`generated_raise`)."""
        r = self.rng
        cls = r.choice(RAISED).__name__
        self.counter += 1
        return f"raise {cls}" + r.choice(["", "()", f"('raised {self.counter}')",
                                          f"('raised', {self.counter})"])

    def set_item(self, env: Env, ind: str, loops: int) -> None:
        """``w[...] = ...`` on a copy: a script's write never reaches another name (NumPy's
        would, through an alias such as ``w = v``), so the array is copied first."""
        r = self.rng
        names = env.targets(ARR)
        name = r.choice(names) if names and r.random() < 0.6 else self.fresh("w")
        src = self.arr_expr(env) if name not in env.vars else name
        self.lines.append(f"{ind}{name} = np.copy({src})")
        env.vars[name] = ARR
        for _ in range(r.randint(1, 3)):
            i = f"({self.int_expr(env, 1)}) % 3{r.choice(['', ' - 3'])}"
            k = r.randrange(6)
            if k == 0:
                target = f"{name}[{i}]"
            elif k == 1:
                lo, hi = r.randint(-4, 3), r.randint(-3, 4)
                target = f"{name}[{lo}:{hi}{r.choice(['', ':2', ':-1'])}]"
            elif k == 2:
                target = f"{name}[{name} > {self.float_expr(env, 0)}]"
            elif k == 3:
                target = f"{name}[np.array([{i}, {self.int_expr(env, 0)} % 3])]"
            elif k == 4:
                target = f"{name}[::-1]"
            else:
                target = f"{name}[{i}:]"
            op = r.choice(["=", "=", "+=", "*="])
            value = self.float_expr(env, 1) if r.random() < 0.7 else f"np.clip({self.float_expr(env, 0)}, -2.0, 2.0)"
            self.lines.append(f"{ind}{target} {op} {self.wrap(FLOAT, value, loops > 0)}")
        if r.random() < 0.5:
            fn = r.choice(["np.flip({})", "np.cumsum({})", "np.clip({}, -1.0, 1.0)", "np.sort({})",
                           "np.maximum({}, 0.0)", "{}.reshape(-1)", "np.where({0} > 0, {0}, 0.0)",
                           "np.roll({}, 1)", "np.roll({}, -2)", "np.pad({}, (1, 0))[:-1]",
                           "np.pad({}, (0, 2), mode='edge')[:-2]", "np.repeat({}, 2)[::2]",
                           "np.cumprod(np.clip({}, -1.0, 1.0))", "{0} / (1.0 + np.linalg.norm({0}))"])
            self.lines.append(f"{ind}{name} = {self.wrap(ARR, fn.format(name), loops > 0)}")

    def tuple_stmt(self, env: Env, ind: str, loops: int) -> None:
        """A tuple variable ``t = (int, float)``, or one unpacked into an int and a float."""
        r = self.rng
        names = env.of(TUP)
        if names and r.random() < 0.4:
            ni, nf = self.pick_or_new(env, INT), self.pick_or_new(env, FLOAT)
            self.lines.append(f"{ind}{ni}, {nf} = {r.choice(names)}")
            env.vars[ni], env.vars[nf] = INT, FLOAT
            return
        name = r.choice(names) if names and r.random() < 0.5 else self.fresh("t")
        self.lines.append(f"{ind}{name} = ({self.wrap(INT, self.int_expr(env), loops > 0)}, "
                          f"{self.wrap(FLOAT, self.float_expr(env), loops > 0)})")
        env.vars[name] = TUP

    def list_stmt(self, env: Env, ind: str, loops: int) -> None:
        """A list of arrays: made (never empty, never aliased: ``b = a`` would share the
        list in Python but copy the value in a script), appended to, and read back into
        an array."""
        r = self.rng
        names = env.of(LIST)
        if not names or r.random() < 0.25:
            name = self.fresh("ls")
            items = ", ".join(self.arr_expr(env, 1) for _ in range(r.randint(1, 2)))
            self.lines.append(f"{ind}{name} = [{items}]")
            env.vars[name] = LIST
            if r.random() < 0.5:  # grown by a loop at once, from its own last item
                k = self.fresh("k")
                self.lines.append(f"{ind}for {k} in range(({self.int_expr(env, 1)}) % 6):")
                self.lines.append(f"{ind}    {name}.append(np.tanh({name}[-1] * 0.5 + {k}))")
        else:
            name = r.choice(names)
            self.lines.append(f"{ind}{name}.append({self.wrap(ARR, self.arr_expr(env), loops > 0)})")
        if r.random() < 0.6:
            read = r.choice([f"np.stack({name}).sum(axis=0)", f"{name}[-1]", f"{name}[0] * len({name})",
                             f"{name}[({self.int_expr(env, 1)}) % len({name})]",
                             f"np.stack({name})[len({name}) // 2]"])
            w = self.pick_or_new(env, ARR)
            self.lines.append(f"{ind}{w} = {self.wrap(ARR, read, loops > 0)}")
            env.vars[w] = ARR

    def ragged_stmt(self, env: Env, ind: str, loops: int) -> None:
        """A list of slices of different lengths (never empty, never aliased): made, grown
        by a loop from its own last item or appended to once, and read back into a float."""
        r = self.rng
        names = env.of(RAGGED)
        if not names or r.random() < 0.3:
            name = self.fresh("rg")
            self.lines.append(f"{ind}{name} = [{self.arr_expr(env, 1)}]")
            env.vars[name] = RAGGED
            if r.random() < 0.7:
                k = self.fresh("k")
                self.lines.append(f"{ind}for {k} in range(({self.int_expr(env, 1)}) % 5):")
                self.lines.append(f"{ind}    {name}.append(np.tanh({name}[-1][:({k} + {self.int_expr(env, 1)}) % 4] "
                                  "+ 0.5))")
        else:
            name = r.choice(names)
            self.lines.append(f"{ind}{name}.append({self.wrap(ARR, self.arr_expr(env), loops > 0)}"
                              f"[:({self.int_expr(env, 1)}) % 4])")
        f = self.pick_or_new(env, FLOAT)
        which = r.randrange(4)
        if which == 3:  # a for loop over the items
            q = self.fresh("q")
            self.lines.append(f"{ind}{f} = 0.0")
            self.lines.append(f"{ind}for {q} in {name}:")
            self.lines.append(f"{ind}    {f} = {f} + float({q}.sum()) * 0.5")
        else:
            read = [f"float(len({name}))", f"float({name}[({self.int_expr(env, 1)}) % len({name})].sum())",
                    f"float(np.concatenate({name}).sum())"][which]
            self.lines.append(f"{ind}{f} = {self.wrap(FLOAT, read, loops > 0)}")
        env.vars[f] = FLOAT

    def pick_or_new(self, env: Env, t: str) -> str:
        names = env.targets(t)
        if names and self.rng.random() < 0.6:
            return self.rng.choice(names)
        return self.fresh({INT: "i", FLOAT: "f", ARR: "w"}[t])

    def if_stmt(self, env: Env, ind: str, depth: int, loops: int) -> bool:
        r = self.rng
        branches: list[Env] = []
        left_all = True
        kw = "if"
        n_elif = r.choice([0, 0, 1, 2])
        for _ in range(1 + n_elif):
            self.lines.append(f"{ind}{kw} {self.cond(env)}:")
            b = env.copy()
            mark = len(self.lines)
            left = self.block(b, ind + "    ", depth + 1, loops, r.randint(1, 3))
            if len(self.lines) == mark:
                self.lines.append(f"{ind}    pass")
            if not left:
                branches.append(b)
            left_all = left_all and left
            kw = "elif"
        if r.random() < 0.6:
            self.lines.append(f"{ind}else:")
            b = env.copy()
            mark = len(self.lines)
            left = self.block(b, ind + "    ", depth + 1, loops, r.randint(1, 3))
            if len(self.lines) == mark:
                self.lines.append(f"{ind}    pass")
            if not left:
                branches.append(b)
            left_all = left_all and left
        else:
            branches.append(env.copy())
            left_all = False
        if left_all:
            return True
        common = {n: t for n, t in branches[0].vars.items() if all(b.vars.get(n) == t for b in branches)}
        # Variables assigned with a new type on some path must not be read afterwards.
        if self.partial:
            env.join(env.copy(), branches, common)
        else:
            env.vars = {n: t for n, t in common.items()}
        return False

    def loop_body(self, env: Env, ind: str, depth: int, loops: int) -> Env:
        b = env.copy()
        mark = len(self.lines)
        self.block(b, ind, depth + 1, loops + 1, self.rng.randint(1, 4))
        if len(self.lines) == mark:
            self.lines.append(f"{ind}pass")
        # Types must not change across iterations: drop names retyped inside.
        for n, t in b.vars.items():
            if n in env.vars and env.vars[n] != t:
                del env.vars[n]
        return b

    def after_loop(self, env: Env, inner: Env, body: Env) -> None:
        """The names the loop may not have assigned (it may run zero times) are dropped, or
        with ``partial`` kept as maybe assigned (the loop's own targets too)."""
        before = env.copy()
        for n in list(env.vars):
            if n not in inner.vars:
                del env.vars[n]
        if self.partial:
            definite = dict(env.vars)
            dropped = {n for n in before.vars if n not in definite}  # retyped inside: never read
            env.join(before, [inner, body], definite)
            for n in dropped:
                env.maybe.pop(n, None)

    def for_stmt(self, env: Env, ind: str, depth: int, loops: int) -> None:
        r = self.rng
        var = self.fresh("k")
        if self.arrays and not self.f32 and env.of(ARR) and r.random() < 0.2:
            src = r.choice(env.of(ARR))
            self.lines.append(f"{ind}for {var} in {src}:")
            inner = env.copy()
            inner.vars[var] = FLOAT
        else:
            args = r.choice([
                f"{r.randint(0, 4)}",
                f"{self.int_expr(env, 1)} % 5",
                f"{r.randint(-2, 2)}, {r.randint(0, 5)}",
                f"{r.randint(3, 6)}, {r.randint(-2, 1)}, -{r.randint(1, 2)}",
                f"0, {self.int_expr(env, 0)} % 6, {r.randint(1, 3)}",
            ])
            self.lines.append(f"{ind}for {var} in range({args}):")
            inner = env.copy()
            inner.vars[var] = INT
        if self.partial and r.random() < 0.4:
            self.lines.pop()
            inner = env.copy()
            self.lines.append(f"{ind}for {self.sequence_loop(env, inner)}:")
        body = self.loop_body(inner, ind + "    ", depth, loops)
        self.after_loop(env, inner, body)
        if r.random() < 0.15:
            self.loop_else(env, ind, loops)

    def int_range(self, env: Env) -> str:
        """The arguments of a small ``range``: negative and run-time steps too."""
        r = self.rng
        lo = r.choice([str(r.randint(-3, 6)), f"{self.int_expr(env, 0)} % 7"])
        hi = r.choice([str(r.randint(-3, 6)), f"{self.int_expr(env, 0)} % 7 - 2"])
        step = r.choice(["1", "-1", "2", "-2", "-3", f"({self.int_expr(env, 0)} % 3 + 1)",
                         f"-({self.int_expr(env, 0)} % 2 + 1)"])
        return r.choice([f"{lo}", f"{lo}, {hi}", f"{lo}, {hi}, {step}"])

    def sequence_loop(self, env: Env, inner: Env) -> str:
        """``targets in iterable`` of enumerate/zip/reversed over ranges and rows of ``v``;
        binds the targets in ``inner``."""
        r = self.rng
        rows = self.arrays and not self.f32 and bool(env.of(ARR))

        def seq() -> tuple[str, str]:
            if rows and r.random() < 0.3:
                src = r.choice(env.of(ARR))
                return (f"reversed({src})" if r.random() < 0.4 else src), FLOAT
            rng_ = f"range({self.int_range(env)})"
            return (f"reversed({rng_})" if r.random() < 0.4 else rng_), INT

        k = r.randrange(4)
        a, b = self.fresh("k"), self.fresh("k")
        if k == 0:
            it, t = seq()
            inner.vars[a] = t
            return f"{a} in {it}"
        if k == 1:
            it, t = seq()
            start = r.choice(["", f", {r.randint(-3, 3)}", f", start={self.int_expr(env, 0)} % 5"])
            inner.vars[a], inner.vars[b] = INT, t
            return f"{a}, {b} in enumerate({it}{start})"
        if k == 2:
            (i1, t1), (i2, t2) = seq(), seq()
            inner.vars[a], inner.vars[b] = t1, t2
            return f"{a}, {b} in zip({i1}, {i2})"
        c = self.fresh("k")
        (i1, t1), (i2, t2) = seq(), seq()
        inner.vars[a], inner.vars[b], inner.vars[c] = INT, t1, t2
        return f"{a}, ({b}, {c}) in enumerate(zip({i1}, {i2}))"

    def loop_else(self, env: Env, ind: str, loops: int) -> None:
        """A loop's ``else:`` assigning an int; wrapped inside an outer loop, where it runs
        again and again (``b = b * b`` there once overflowed int64)."""
        self.lines.append(f"{ind}else:")
        self.lines.append(f"{ind}    {self.pick_int_target(env)} = {self.wrap(INT, self.int_expr(env, 1), loops > 0)}")

    def pick_int_target(self, env: Env) -> str:
        names = env.targets(INT)
        return self.rng.choice(names) if names else "a"

    def while_stmt(self, env: Env, ind: str, depth: int, loops: int) -> None:
        r = self.rng
        w = self.fresh("w_")
        self.lines.append(f"{ind}{w} = 0")
        env.vars[w] = INT
        extra = f" and {self.cond(env, 1)}" if r.random() < 0.6 else ""
        self.lines.append(f"{ind}while {w} < {r.randint(0, 5)}{extra}:")
        inner = env.copy()
        self.lines.append(f"{ind}    {w} = {w} + 1")
        body = self.loop_body(inner, ind + "    ", depth, loops)
        self.after_loop(env, inner, body)
        if r.random() < 0.15:
            self.loop_else(env, ind, loops)

    def ret(self, env: Env) -> str:
        out = f"{self.int_expr(env)}, {self.float_expr(env)}"
        if self.arrays:
            out += f", {self.arr_expr(env)}"
        return out

    def program(self, name: str = "f") -> str:
        self.lines = []
        annotate = self.rng.random() < 0.5
        params = ["a: int", "b: int", "x: float", "y: float"] if annotate else ["a", "b", "x", "y"]
        env = Env({"a": INT, "b": INT, "x": FLOAT, "y": FLOAT})
        if self.arrays:
            params.append("v")
            env.vars["v"] = ARR
        self.lines.append(f"def {name}({', '.join(params)}):")
        left = self.block(env, "    ", 0, 0, self.rng.randint(2, 6))
        if not left:
            if self.partial and self.rng.random() < 0.1:  # falls off its end (None) on some paths
                self.lines.append(f"    if {self.cond(env)}:")
                self.lines.append(f"        return {self.ret(env)}")
            else:
                self.lines.append(f"    return {self.ret(env)}")
        helpers = HELPERS + ("\n_T = (2, -1, 0.5)\n" if self.partial else "")
        return "import math\nimport numpy as np\n" + helpers + "\n\n" + "\n".join(self.lines) + "\n"


# --- running and comparing ----------------------------------------------------------------------
def random_inputs(rng: random.Random, arrays: bool, f32: bool = False) -> tuple[Any, ...]:
    args: list[Any] = [rng.randint(-20, 20), rng.randint(-20, 20),
                       rng.choice([0.0, -2.5, 1.5, rng.uniform(-10, 10)]), rng.uniform(-10, 10)]
    if arrays:
        args.append(np.array([rng.uniform(-3, 3) for _ in range(3)], dtype=np.float32 if f32 else np.float64))
    return tuple(args)


def same(a: Any, b: Any) -> bool:
    """Exact for ints and bools, close for floats and arrays (nan equals nan)."""
    if isinstance(a, tuple) or isinstance(b, tuple):
        return isinstance(a, tuple) and isinstance(b, tuple) and len(a) == len(b) and all(
            same(x, y) for x, y in zip(a, b))
    if isinstance(a, (np.ndarray, np.floating)) or isinstance(b, (np.ndarray, np.floating)):
        # NumPy values keep their dtype: float32 results compare at float32 precision.
        if np.asarray(a).dtype != np.asarray(b).dtype:
            return False
        tol = 1e-5 if np.asarray(a).dtype == np.float32 else 1e-9
        a2, b2 = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
        return a2.shape == b2.shape and bool(np.allclose(a2, b2, rtol=tol, atol=tol, equal_nan=True))
    if isinstance(a, bool) or isinstance(a, int):
        return type(a) is type(b) and a == b
    if isinstance(a, float):
        if not isinstance(b, float):
            return False
        if math.isnan(a) or math.isnan(b):
            return math.isnan(a) and math.isnan(b)
        return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9)
    return bool(a == b)


@dataclass
class Failure:
    program: str
    inputs: tuple[Any, ...]
    expected: Any
    got: Any

    def __str__(self) -> str:
        return (f"--- program ---\n{self.program}--- inputs: {self.inputs!r}\n"
                f"--- python: {self.expected!r}\n--- script: {self.got!r}\n")


def _outcome(fn: Callable[..., Any], args: tuple[Any, ...]) -> tuple[bool, Any]:
    try:
        return True, fn(*args)
    except Exception as e:  # noqa: BLE001  (an exception is an outcome to compare)
        return False, e


def check_program(src: str, rng: random.Random, arrays: bool, runs: int = 3,
                  optimize: bool = False, f32: bool = False, backend: str = "python",
                  stats: dict[str, int] | None = None) -> Failure | None:
    """Script ``src`` and compare it with plain Python on ``runs`` random inputs; with
    another ``backend``, also compile the script there and compare it with both (``stats``
    counts the executables' kinds).  Runs where plain Python raised are not compared on
    the other backend (xla cannot raise on an integer division by zero, see
    ``nexus.backends.xla``)."""
    from nexus.frontend.script import script, script_source

    # `@script` helpers are scripts (Call nodes) in the script version and plain
    # functions in the Python one, so that the oracle never runs a graph.
    py: dict[str, Any] = {"script": lambda fn: fn}
    exec(compile(src, "<py_gen program>", "exec"), py)  # noqa: S102  (our generated program)
    try:
        sf = script_source(src, "f", {"script": script})
    except Exception:  # noqa: BLE001
        return Failure(src, (), "a script", traceback.format_exc(limit=3))
    exe = None
    if backend != "python":
        from nexus.backends import compile as compile_on

        # strict_float: XLA would reassociate float arithmetic with constants, a last-bit
        # difference that the programs' `% 97.5` loops magnify (see nexus.backends.xla).
        exe = compile_on(sf, backend=backend, **({"strict_float": True} if backend == "xla" else {}))
    for _ in range(runs):
        args = random_inputs(rng, arrays, f32)
        ok_py, want = _outcome(py["f"], tuple(a.copy() if isinstance(a, np.ndarray) else a for a in args))
        ok_nx, got = _outcome(sf, args)
        python_error = _python_error_agrees(ok_py, want, ok_nx, got)
        if python_error is not None:  # Python raised UnboundLocalError or in a `raise`, or returned None
            key = "returned None" if ok_py else "raise" if generated_raise(want) else "UnboundLocalError"
            if stats is not None:
                stats[f"python: {key}"] = stats.get(f"python: {key}", 0) + 1
            if not python_error:
                if not ok_nx:
                    got = "".join(traceback.format_exception(got, limit=4))
                return Failure(src, args, want, got)
            if exe is not None:  # the backend must raise the same (xla too: it carries its checks out)
                ok_be, got_be = _outcome(exe, args)
                if _refused(backend, ok_be, got_be, stats):
                    continue
                if not _python_error_agrees(ok_py, want, ok_be, got_be):
                    if not ok_be:
                        got_be = "".join(traceback.format_exception(got_be, limit=6))
                    return Failure(src, args, want, f"backend {backend}: {got_be!r} (python backend: {got!r})")
                if stats is not None:
                    stats[f"{backend}: {key}"] = stats.get(f"{backend}: {key}", 0) + 1
            continue
        if exe is not None and ok_py:
            ok_be, got_be = _outcome(exe, args)
            agrees = ok_be and same(want, got_be) and (not ok_nx or same(got, got_be))
            if not agrees and not _refused(backend, ok_be, got_be, stats):
                if not ok_be:
                    got_be = "".join(traceback.format_exception(got_be, limit=6))
                return Failure(src, args, want, f"backend {backend}: {got_be!r} (python backend: {got!r})")
        if ok_py and ok_nx and same(want, got):
            bad = trivial_phis(sf.graph_for(*args))
            if bad:
                return Failure(src, args, want, f"trivial Phis left in the graph: {bad}")
            if optimize:
                failure = _check_optimized(sf, args, want, src)
                if failure is not None:
                    return failure
            continue
        if not ok_py and not ok_nx:
            continue  # both raised (e.g. an index out of range)
        if not ok_nx:
            got = "".join(traceback.format_exception(got, limit=4))
        return Failure(src, args, want, got)
    if stats is not None and exe is not None:
        _count_kinds(exe, stats)
    return None


def generated_raise(e: BaseException) -> bool:
    """Whether ``e`` is one a generated ``raise`` or ``assert`` statement raised (not
    Python's own error, which has a message of its own)."""
    return type(e) in RAISED and (not e.args or str(e.args[0]).startswith(("raised", "generated check")))


def _refused(backend: str, ok: bool, got: Any, stats: dict[str, int] | None) -> bool:
    """Whether the backend refused the call by name (a node it cannot run for these
    arguments: no rule, a static-shape limit), which is not a disagreement; counted in
    ``stats`` under ``<backend>: refused (<error>)``."""
    from nexus.backends.base import MissingLoweringError, NativeRefused

    kinds: tuple[type[BaseException], ...] = (MissingLoweringError, NativeRefused)
    if backend == "xla":
        from nexus.backends.xla.trace import XlaLoweringError

        kinds += (XlaLoweringError,)
    if ok or not isinstance(got, kinds):
        return False
    if stats is not None:
        key = f"{backend}: refused ({type(got).__name__})"
        stats[key] = stats.get(key, 0) + 1
    return True


def _python_error_agrees(ok_py: bool, want: Any, ok_nx: bool, got: Any) -> bool | None:
    """Where Python raised UnboundLocalError (a read of a variable unassigned on the path
    taken), raised in a ``raise`` statement, or fell off the function's end (None):
    whether the script did the same (UnboundLocalError naming the variable; the same
    exception class and arguments; None).  None for the other outcomes."""
    if not ok_py and generated_raise(want):
        return not ok_nx and type(got) is type(want) and got.args == want.args
    if not ok_py and isinstance(want, UnboundLocalError):
        name = str(want).split("'")[1] if "'" in str(want) else ""
        return not ok_nx and isinstance(got, UnboundLocalError) and f"'{name}'" in str(got)
    if ok_py and want is None:
        return ok_nx and got is None
    return None


def _count_kinds(run: Any, stats: dict[str, int]) -> None:
    """Tally the compiled executables by class (native vs partitioned) and the ops that
    stayed out of partitioned ones."""
    for exe in getattr(run, "_exes", {}).values():
        stats[type(exe).__name__] = stats.get(type(exe).__name__, 0) + 1
        for op, n in getattr(exe, "stayed_out", {}).items():
            stats[f"stayed out: {op}"] = stats.get(f"stayed out: {op}", 0) + n


def trivial_phis(g: Any) -> list[Any]:
    """Phis whose inputs are all one value or the Phi itself (Braun et al. remove them)."""
    out = []
    for n in g.nodes():
        if n.op.name == "Phi" and len({id(v) for v in n.inputs if v is not n}) <= 1:
            out.append(n)
    return out


def _check_optimized(sf: Any, args: tuple[Any, ...], want: Any, src: str) -> Failure | None:
    from nexus.backends.python import run
    from nexus.frontend.script.annotations import python_converter
    from nexus.passes import optimize

    g = sf.graph_for(*args)
    try:
        opt = optimize(g.clone()[0])
        out = run(opt, *args)
        types = opt.result_types
        got = (tuple(python_converter(t)(v) for v, t in zip(out, types)) if len(types) > 1
               else python_converter(types[0])(out))
    except Exception:  # noqa: BLE001
        return Failure(src, args, want, "optimized graph: " + traceback.format_exc(limit=4))
    if not same(want, got):
        return Failure(src, args, want, f"optimized graph: {got!r}")
    return None


def fuzz(count: int, seed: int = 0, arrays_every: int = 2, optimize: bool = False,
         stop_after: int | None = None, verbose: bool = False, max_depth: int = 3,
         runs: int = 3, progress: int = 0, backend: str = "python",
         stats: dict[str, int] | None = None, numpy: bool = True, partial: bool = False,
         ragged: bool = False, start: int = 0) -> list[Failure]:
    """Generate and check ``count`` programs (numbers ``start`` on: each program's
    generator is seeded by ``seed`` and its number alone, so ``--start K --count 1``
    replays program K of a long run); returns the failures.  ``max_depth`` bounds the
    nesting of statements (2 gives programs of about 15 lines)."""
    failures: list[Failure] = []
    t0 = time.perf_counter()
    for k in range(start, start + count):
        if progress and k > start and (k - start) % progress == 0:
            print(f"... {k} programs, {len(failures)} failures, {time.perf_counter() - t0:.0f} s",
                  file=sys.stderr, flush=True)
        rng = random.Random(seed * 1_000_003 + k)
        arrays = k % arrays_every == 0
        f32 = arrays and k % 4 == 2
        src = Gen(rng, arrays=arrays, f32=f32, max_depth=max_depth, numpy=numpy, partial=partial,
                  ragged=ragged).program()
        failure = check_program(src, rng, arrays, runs=runs, optimize=optimize, f32=f32, backend=backend,
                                stats=stats)
        if failure is not None:
            failures.append(failure)
            if verbose:
                print(f"=== failure {len(failures)} (program {k}) ===\n{failure}", flush=True)
            if stop_after is not None and len(failures) >= stop_after:
                break
    return failures


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="Differential fuzzer: random Python functions vs @nx.script")
    p.add_argument("--count", type=int, default=1000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--optimize", action="store_true", help="also run nx.optimize on each graph")
    p.add_argument("--start", type=int, default=0,
                   help="the number of the first program (--start K --count 1 replays program K alone)")
    p.add_argument("--stop-after", type=int, default=None, help="stop after this many failures")
    p.add_argument("--backend", default="python",
                   help="also compile each script on this backend (e.g. xla, llvm) and compare it with both")
    p.add_argument("--arrays-every", type=int, default=2, help="every k-th program has an array argument")
    p.add_argument("--no-numpy", action="store_true", help="no subscript assignments or NumPy calls")
    p.add_argument("--no-partial", action="store_true",
                   help="none of issue 30's constructs (variables assigned on some paths, None returns, "
                        "enumerate/zip/reversed loops, tuples): the programs of before")
    p.add_argument("--ragged", action="store_true",
                   help="also lists of slices of different lengths (sequences in a script; python backend only)")
    args = p.parse_args(argv)
    t0 = time.perf_counter()
    stats: dict[str, int] = {}
    failures = fuzz(args.count, args.seed, arrays_every=args.arrays_every, optimize=args.optimize,
                    stop_after=args.stop_after, verbose=True, progress=100, backend=args.backend, stats=stats,
                    numpy=not args.no_numpy, partial=not args.no_partial, ragged=args.ragged, start=args.start)
    dt = time.perf_counter() - t0
    print(f"{args.count} programs, {len(failures)} failures, {dt:.1f} s (backend {args.backend})")
    for key, n in sorted(stats.items()):
        print(f"  {key}: {n}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
