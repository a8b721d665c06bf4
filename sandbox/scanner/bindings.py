"""The first pass: what every name of the code may be bound to, flow-insensitively.

A binding anywhere counts everywhere (``import os as o`` in a function makes ``o`` stand for
``os`` in the whole code), so the scan errs on the side of finding more.
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from typing import Any

_OTHER_BINDERS = (
    ast.arg,
    ast.FunctionDef,
    ast.AsyncFunctionDef,
    ast.ClassDef,
    ast.ExceptHandler,
    ast.MatchAs,
    ast.MatchStar,
    ast.MatchMapping,
)


class Bindings:
    """The bindings of one scan.

    ``imports``: name -> the qualified names imported as it; ``assigned``: name -> every
    expression assigned to it (the context expression for ``with ... as name``); ``rebound``:
    names bound some other way (parameters, definitions, loop and unpacking targets, relative
    imports), whose value is unknown; ``star_modules``: modules imported with ``*``;
    ``called``: ids of the expressions that are called (``f`` in ``f(x)``).
    """

    def __init__(self) -> None:
        self.imports: dict[str, set[str]] = {}
        self.assigned: dict[str, list[ast.expr]] = {}
        self.rebound: set[str] = set()
        self.star_modules: list[str] = []
        self.called: set[int] = set()

    def inherited(self) -> Bindings:
        """A copy for code that runs in this code's namespace (an ``exec`` string), without
        ``called``, which is about this tree's nodes."""
        child = Bindings()
        child.imports = {name: set(quals) for name, quals in self.imports.items()}
        child.assigned = {name: list(values) for name, values in self.assigned.items()}
        child.rebound = set(self.rebound)
        child.star_modules = list(self.star_modules)
        return child

    def literal_bindings(self, name: str) -> list[ast.expr] | None:
        """The values assigned to ``name`` when those are its only bindings."""
        if name in self.rebound or name in self.imports or name not in self.assigned:
            return None
        return self.assigned[name]

    def collect(self, nodes: list[ast.AST]) -> list[ast.Call]:
        """Record the bindings made by ``nodes`` (every node of a tree). Returns the calls."""
        handled: set[int] = set()  # names already bound as assignment targets
        calls: list[ast.Call] = []
        binders: dict[type[ast.AST], Callable[[Any, set[int]], None]] = {
            ast.Import: self._bind_import_statement,
            ast.ImportFrom: self._bind_import_from,
            ast.Assign: self._bind_assign,
            ast.AnnAssign: self._bind_single,
            ast.NamedExpr: self._bind_single,
            ast.withitem: self._bind_with,
            **dict.fromkeys(_OTHER_BINDERS, self._bind_other),
        }
        called, rebound = self.called, self.rebound
        for node in nodes:
            if type(node) is ast.Name:
                if type(node.ctx) is not ast.Load and id(node) not in handled:
                    rebound.add(node.id)
            elif type(node) is ast.Call:
                called.add(id(node.func))
                calls.append(node)
            else:
                binder = binders.get(type(node))
                if binder is not None:
                    binder(node, handled)
        return calls

    def _bind_import_statement(self, node: ast.Import, handled: set[int]) -> None:
        for alias in node.names:
            if alias.asname:
                self._bind_import(alias.asname, alias.name)
            else:
                root = alias.name.partition(".")[0]
                self._bind_import(root, root)

    def _bind_import_from(self, node: ast.ImportFrom, handled: set[int]) -> None:
        for alias in node.names:
            if node.level or not node.module:
                self.rebound.add(alias.asname or alias.name)
            elif alias.name == "*":
                self.star_modules.append(node.module)
            else:
                self._bind_import(alias.asname or alias.name, f"{node.module}.{alias.name}")

    def _bind_assign(self, node: ast.Assign, handled: set[int]) -> None:
        for target in node.targets:
            self._bind_assignment(target, node.value, handled)

    def _bind_single(self, node: ast.AnnAssign | ast.NamedExpr, handled: set[int]) -> None:
        if node.value is not None and isinstance(node.target, ast.Name):
            self.assigned.setdefault(node.target.id, []).append(node.value)
            handled.add(id(node.target))

    def _bind_with(self, node: ast.withitem, handled: set[int]) -> None:
        # Only the context expression is known; it stands in for what __enter__ returns,
        # which is right for TemporaryDirectory() and harmless for the rest.
        if isinstance(node.optional_vars, ast.Name):
            self.assigned.setdefault(node.optional_vars.id, []).append(node.context_expr)
            handled.add(id(node.optional_vars))

    def _bind_other(self, node: ast.AST, handled: set[int]) -> None:
        name = getattr(node, "arg", None) or getattr(node, "name", None)
        name = name or getattr(node, "rest", None)
        if isinstance(name, str):
            self.rebound.add(name)

    def _bind_import(self, name: str, qualname: str) -> None:
        self.imports.setdefault(name, set()).add(qualname)

    def _bind_assignment(self, target: ast.expr, value: ast.expr, handled: set[int]) -> None:
        if isinstance(target, ast.Name):
            self.assigned.setdefault(target.id, []).append(value)
            handled.add(id(target))
        elif (
            isinstance(target, ast.Tuple | ast.List)
            and isinstance(value, ast.Tuple | ast.List)
            and len(target.elts) == len(value.elts)
            and not any(isinstance(e, ast.Starred) for e in (*target.elts, *value.elts))
        ):
            for sub_target, sub_value in zip(target.elts, value.elts, strict=True):
                self._bind_assignment(sub_target, sub_value, handled)
