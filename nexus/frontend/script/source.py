"""Getting a function's source and AST for ``@nx.script``, and the checks that can be made
on the AST alone (unsupported constructs fail at decoration, quoting the line)."""

from __future__ import annotations

import ast
import inspect
import linecache
import textwrap
import types
from dataclasses import dataclass, field

from nexus.frontend.script.errors import ScriptError, SourceText, error_at


@dataclass(frozen=True)
class ParsedFunction:
    """A function's AST with its source text, and the names it assigns (its locals)."""

    src: SourceText
    fdef: ast.FunctionDef
    assigned: frozenset[str]
    # Per loop statement (by id; the AST lives as long as this record): the names it binds.
    loop_names: dict[int, frozenset[str]] = field(default_factory=dict, compare=False, hash=False)

    def names_bound_in(self, stmt: ast.stmt) -> frozenset[str]:
        """The names ``stmt`` (a loop) binds anywhere inside it: only these can need a
        Phi at its header."""
        out = self.loop_names.get(id(stmt))
        if out is None:
            out = self.loop_names[id(stmt)] = stored_names(stmt)
        return out


_CACHE: dict[types.CodeType, ParsedFunction] = {}


def parse_function(fn: types.FunctionType) -> ParsedFunction:
    """Parse ``fn``'s source (cached per code object) and check it for unsupported
    constructs.  Raises ScriptError."""
    code = fn.__code__
    hit = _CACHE.get(code)
    if hit is not None:
        return hit
    src, tree = _source_and_tree(fn)
    fdef = _find_def(tree, fn.__name__)
    if fdef is None:
        raise ScriptError(f"cannot find the definition of `{fn.__name__}` in its source", src.file,
                          src.line_offset + 1, 0, hint="define the function with `def` in a .py file")
    assigned = check_supported(fdef, src)
    parsed = ParsedFunction(src, fdef, frozenset(assigned))
    _CACHE[code] = parsed
    return parsed


def _source_and_tree(fn: types.FunctionType) -> tuple[SourceText, ast.Module]:
    code = fn.__code__
    file = code.co_filename
    first = code.co_firstlineno
    lines = linecache.getlines(file, fn.__globals__)
    if lines and first <= len(lines):
        # Fast path: the def's block by indentation (inspect.getsource tokenizes the file).
        text, indent = _block_at(lines, first - 1)
        try:
            tree = ast.parse(text)
            src = SourceText(file, tuple(text.splitlines()), first - 1, indent, fn.__name__)
            return src, tree
        except SyntaxError:
            pass
    try:
        raw, start = inspect.getsourcelines(fn)
    except (OSError, TypeError) as e:
        raise ScriptError(f"cannot read the source of `{fn.__name__}`: {e}", file, first, 0,
                          hint="@nx.script needs functions defined in a file (not in exec'd strings "
                               "or the interactive prompt); use nx.script_source(text, name) for source text") from None
    text = "".join(raw)
    indent = len(text) - len(text.lstrip(" "))
    text = textwrap.dedent(text)
    tree = ast.parse(text)
    return SourceText(file, tuple(text.splitlines()), max(start, 1) - 1, indent, fn.__name__), tree


def _block_at(lines: list[str], start: int) -> tuple[str, int]:
    head = lines[start]
    indent = len(head) - len(head.lstrip(" "))
    out = [head[indent:]]
    seen_def = head.lstrip().startswith(("def ", "async def "))
    for line in lines[start + 1:]:
        stripped = line.strip()
        if not seen_def:
            out.append(line[indent:] if len(line) > indent else line.lstrip(" "))
            seen_def = stripped.startswith(("def ", "async def "))
            continue
        if stripped and not stripped.startswith("#"):
            if len(line) - len(line.lstrip(" ")) <= indent:
                break
        out.append(line[indent:] if line[:indent].strip() == "" else line.lstrip(" "))
    while out and not out[-1].strip():
        out.pop()
    return "".join(out) + ("\n" if out and not out[-1].endswith("\n") else ""), indent


def source_from_text(text: str, name: str, file: str) -> tuple[SourceText, ast.FunctionDef]:
    """Parse ``text`` holding ``def name(...)`` (for generated programs)."""
    text = textwrap.dedent(text)
    tree = ast.parse(text)
    fdef = _find_def(tree, name)
    src = SourceText(file, tuple(text.splitlines()), 0, 0, name)
    if fdef is None:
        raise ScriptError(f"no `def {name}` in the given source", file, 1, 0)
    return src, fdef


def _find_def(tree: ast.Module, name: str) -> ast.FunctionDef | None:
    for stmt in tree.body:
        if isinstance(stmt, ast.FunctionDef) and stmt.name == name:
            return stmt
    for sub in ast.walk(tree):
        if isinstance(sub, ast.FunctionDef) and sub.name == name:
            return sub
    return None


def assigned_names(fdef: ast.FunctionDef) -> set[str]:
    """Python's rule: a name bound anywhere in the body is local to the function."""
    out = {a.arg for a in fdef.args.args}
    for node in ast.walk(fdef):
        if node is fdef:
            continue
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            out.add(node.id)
    return out


# --- unsupported constructs ------------------------------------------------------------------
_UNSUPPORTED: dict[type, tuple[str, str]] = {
    ast.Try: ("`try` statements are not supported",
              "check conditions with `if` or `assert cond, \"message\"` instead of catching exceptions"),
    ast.AsyncWith: ("`async with` is not supported", "write synchronous code"),
    ast.AsyncFor: ("`async for` is not supported", "use `for i in range(n)`"),
    ast.Await: ("`await` is not supported", "write synchronous code"),
    ast.Lambda: ("`lambda` is not supported", "define a helper with `def` at module level; scripts inline it"),
    ast.GeneratorExp: ("generator expressions are not supported",
                       "write a `for i in range(n)` loop that updates a variable"),
    ast.ListComp: ("list comprehensions are not supported",
                   "write a `for i in range(n)` loop that updates a tensor"),
    ast.SetComp: ("set comprehensions are not supported", "write a `for` loop"),
    ast.DictComp: ("dict comprehensions are not supported", "write a `for` loop"),
    ast.Yield: ("generators (`yield`) are not supported", "return the values (several with `return a, b`)"),
    ast.YieldFrom: ("generators (`yield from`) are not supported", "return the values"),
    ast.Global: ("`global` is not supported (scripts cannot change module state)",
                 "pass the value in as an argument and return the new value"),
    ast.Nonlocal: ("`nonlocal` is not supported", "pass the value in as an argument and return the new value"),
    ast.ClassDef: ("class definitions are not supported inside a script", "define the class at module level"),
    ast.FunctionDef: ("nested function definitions are not supported",
                      "define the helper at module level; undecorated helpers are inlined"),
    ast.AsyncFunctionDef: ("async functions are not supported", "define a plain function"),
    ast.JoinedStr: ("f-strings are not supported", "use a plain string literal"),
    ast.Delete: ("`del` is not supported", "just stop using the variable"),
    ast.Import: ("`import` inside a script is not supported", "import at module level; scripts see module globals"),
    ast.ImportFrom: ("`import` inside a script is not supported",
                     "import at module level; scripts see module globals"),
    ast.NamedExpr: ("assignment expressions (`:=`) are not supported", "assign on a line of its own first"),
    ast.Starred: ("`*` unpacking is not supported", "pass or assign the values one by one"),
    ast.Match: ("`match` statements are not supported", "use `if`/`elif`/`else`"),
    ast.Dict: ("dict literals are not supported", "use separate variables"),
    ast.Set: ("set literals are not supported", "use separate variables"),
}


def check_supported(fdef: ast.FunctionDef, src: SourceText) -> set[str]:
    """Raise ScriptError at the first construct (in source order) a script cannot have;
    returns the names the function assigns (one walk over the AST does both)."""
    args = fdef.args
    if args.vararg is not None:
        raise error_at(src, args.vararg, "`*args` parameters are not supported", "list the parameters one by one")
    if args.kwarg is not None:
        raise error_at(src, args.kwarg, "`**kwargs` parameters are not supported", "list the parameters one by one")
    # Keyword-only parameters with defaults declare states (`*, h=nx.state(...)`);
    # ScriptFunction checks that the defaults are states.
    no_default = [a for a, d in zip(args.kwonlyargs, args.kw_defaults) if d is None]
    if no_default or args.posonlyargs:
        first = (no_default or args.posonlyargs)[0]
        raise error_at(src, first, "keyword-only and positional-only parameters are not supported",
                       "use plain positional parameters (a keyword-only one may declare a state: "
                       "`*, h=nx.state(\"h\", np.zeros(4))`)")
    if args.defaults:
        raise error_at(src, args.defaults[0], "default parameter values are not supported",
                       "pass every argument at the call")
    found: list[tuple[int, int, ast.AST, str, str]] = []
    assigned = {a.arg for a in args.args}
    # ast.walk's breadth-first order (ties in `found` keep it), without its generators and
    # without visiting the context/operator singletons (Load, Store, Add...).
    for node in _walk(fdef)[1:]:
        cls = node.__class__
        if cls is ast.Name:
            if node.ctx.__class__ is ast.Store:  # type: ignore[attr-defined]
                assigned.add(node.id)  # type: ignore[attr-defined]
            continue
        entry = _UNSUPPORTED.get(cls)
        if entry is not None:
            found.append((getattr(node, "lineno", 0), getattr(node, "col_offset", 0), node, *entry))
        elif cls is ast.With and not all(_is_placement(item) for item in node.items):  # type: ignore[attr-defined]
            found.append((node.lineno, node.col_offset, node,  # type: ignore[attr-defined]
                          "`with` statements are not supported, except placement",
                          "only `with nx.device(\"/CPU:0\")` and `with nx.machine(\"host1\")` are supported"))
        elif isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                for sub in ast.walk(t):
                    if isinstance(sub, ast.Attribute) and isinstance(sub.ctx, ast.Store):
                        found.append((sub.lineno, sub.col_offset, sub, "setting attributes is not supported",
                                      "use a local variable and return it"))
    if found:
        found.sort(key=lambda f: (f[0], f[1]))
        _, _, where, msg, hint = found[0]
        raise error_at(src, where, msg, hint)
    return assigned


def _is_placement(item: ast.withitem) -> bool:
    """``nx.device(...)`` / ``nx.machine(...)`` (or a bare ``device(...)``), bound to nothing."""
    call = item.context_expr
    if item.optional_vars is not None or not isinstance(call, ast.Call):
        return False
    fn = call.func
    name = fn.attr if isinstance(fn, ast.Attribute) else fn.id if isinstance(fn, ast.Name) else ""
    return name in ("device", "machine")


# Fields that hold only singletons without children (expression contexts, operators).
_LEAF_FIELDS = frozenset({"ctx", "op", "ops"})
_FIELDS: dict[type, tuple[str, ...]] = {}


def _walk(root: ast.AST) -> list[ast.AST]:
    """``list(ast.walk(root))`` (same breadth-first order) without the context and
    operator nodes (Load, Store, Add...), which are a third of a typical tree."""
    queue = [root]
    append = queue.append
    fields_of = _FIELDS
    i = 0
    while i < len(queue):
        node = queue[i]
        i += 1
        cls = node.__class__
        fields = fields_of.get(cls)
        if fields is None:
            fields = fields_of[cls] = tuple(f for f in cls._fields if f not in _LEAF_FIELDS)
        for f in fields:
            v = getattr(node, f, None)
            if v.__class__ is list:
                for item in v:
                    if isinstance(item, ast.AST):
                        append(item)
            elif isinstance(v, ast.AST):
                append(v)
    return queue


def stored_names(node: ast.AST) -> frozenset[str]:
    """Every name bound (stored) anywhere inside ``node``."""
    return frozenset(n.id for n in _walk(node)  # type: ignore[attr-defined]
                     if n.__class__ is ast.Name and n.ctx.__class__ is not ast.Load)  # type: ignore[attr-defined]
