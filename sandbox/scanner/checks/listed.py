"""Uses of the modules, functions and methods the policy lists: the ``process``, ``network``
and ``native`` categories (blocked), and the listed eval (``dynamic.eval``, a warning), frame
and gc (``introspection.frame``/``introspection.gc``, blocked) functions.

Imports, references (``sp`` after ``import subprocess as sp``), attribute chains, subscripts
(``sys.modules["os"]``) and module-returning calls (``__import__("socket")``) are all checked
against the rule table; a listed method name (``.create_connection()``) only on a receiver
the scan can't name.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Mapping
from typing import Any

from sandbox.scanner.checks.base import Checker
from sandbox.scanner.names import MODULE_RETURNING


class ListedNames(Checker):
    calls = MODULE_RETURNING

    def handlers(self) -> Mapping[type[ast.AST], Callable[[Any], None]]:
        return {
            ast.Import: self._on_import,
            ast.ImportFrom: self._on_import_from,
            ast.Name: self._on_name,
            ast.Attribute: self._on_attribute,
            ast.Subscript: self.check_qualnames,
        }

    def check_qualnames(self, node: ast.expr, quals: frozenset[str] | None = None) -> None:
        """Report the rule of every name ``node`` may stand for (``quals`` if given)."""
        names = self.ctx.rules.names
        for qualname in self.ctx.names.qualnames(node) if quals is None else quals:
            rule = names.get(qualname)
            if rule is not None:
                self.ctx.add_rule(rule, node)

    def check_module(self, module: str, node: ast.AST) -> None:
        """Report the first rule covering ``module`` or one of its parent packages."""
        parts = module.split(".")
        for end in range(1, len(parts) + 1):
            rule = self.ctx.rules.names.get(".".join(parts[:end]))
            if rule is not None:
                self.ctx.add_rule(rule, node)
                return

    def on_call(self, node: ast.Call, quals: frozenset[str]) -> None:
        self.check_qualnames(node)

    def _on_import(self, node: ast.Import) -> None:
        for alias in node.names:
            self.check_module(alias.name, alias)

    def _on_import_from(self, node: ast.ImportFrom) -> None:
        if node.level or not node.module:
            return
        for alias in node.names:
            if alias.name == "*":
                self.check_module(node.module, alias)
            else:
                self.check_module(f"{node.module}.{alias.name}", alias)

    def _on_name(self, node: ast.Name) -> None:
        if type(node.ctx) is ast.Load:
            quals = self.ctx.names.name_qualnames(node.id)
            if quals:
                self.check_qualnames(node, quals)

    def _on_attribute(self, node: ast.Attribute) -> None:
        quals = self.ctx.names.qualnames(node)
        if quals:
            self.check_qualnames(node, quals)
        else:
            rule = self.ctx.rules.methods.get(node.attr)
            if rule is not None:
                self.ctx.add_rule(rule, node)
