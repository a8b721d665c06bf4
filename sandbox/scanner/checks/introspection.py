"""Reaching interpreter internals by attribute (blocked): ``introspection.dunder`` for the
policy's dunder attributes, ``__dict__``/``vars()`` of a module or builtin and
``object.__getattribute__``; ``introspection.frame`` for frame, traceback and code attributes.

Attribute names are checked wherever they appear: ``x.attr``, the name ``__builtins__``,
literal subscripts (``globals()["__builtins__"]``) and the fields of ``str.format`` templates
(``"{0.__globals__}"``); other checkers hand names they fold to ``check_attribute_name``.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Mapping
from typing import Any

from sandbox.scanner.checks.base import Checker
from sandbox.scanner.formats import field_lookups, format_fields
from sandbox.scanner.report import BLOCKED
from sandbox.scanner.rules import display

_DUNDER_REASON = (
    "Access to {name} is blocked: it reaches interpreter internals (globals, builtins, code "
    "objects or the class tree), a known way out of a Python sandbox. Use the object's public "
    "interface instead."
)
_FRAME_ATTRIBUTE_REASON = (
    "Access to {name} is blocked: frames, tracebacks and code objects expose the "
    "interpreter's globals and builtins, a known way out of a Python sandbox. Pass the values "
    "you need explicitly instead."
)
_FORMAT_METHODS = frozenset({"format", "format_map", "vformat"})


class Introspection(Checker):
    calls = frozenset({"builtins.vars"})
    methods = _FORMAT_METHODS | {"get_field"}

    def handlers(self) -> Mapping[type[ast.AST], Callable[[Any], None]]:
        return {
            ast.Name: self._on_name,
            ast.Attribute: self._on_attribute,
            ast.Subscript: self._on_subscript,
            ast.Constant: self._on_constant,
        }

    def check_attribute_name(self, name: str, node: ast.AST, receiver: ast.expr | None) -> None:
        """Report looking up attribute ``name`` at ``node``; ``receiver`` is the object it is
        looked up on, when known (``__dict__`` and ``__getattribute__`` depend on it)."""
        ctx = self.ctx
        policy = ctx.policy
        if name in policy.dunder_attributes:
            ctx.add("introspection.dunder", BLOCKED, node, _DUNDER_REASON.format(name=name))
        elif name in policy.frame_attributes:
            reason = _FRAME_ATTRIBUTE_REASON.format(name=name)
            ctx.add("introspection.frame", BLOCKED, node, reason)
        elif receiver is not None and name == "__dict__":
            quals = ctx.names.qualnames(receiver)
            if quals:
                shown = display(min(quals))
                reason = (
                    f"{shown}.__dict__ is blocked: reading the namespace of a module or builtin "
                    f"bypasses the import checks. Use {shown}.<name> directly instead."
                )
                ctx.add("introspection.dunder", BLOCKED, node, reason)
        elif receiver is not None and name == "__getattribute__":
            quals = ctx.names.qualnames(receiver) & {"builtins.object", "builtins.type"}
            if quals:
                shown = display(min(quals))
                reason = (
                    f"{shown}.__getattribute__ is blocked: it bypasses attribute checks and is a "
                    "known way out of a Python sandbox. Use normal attribute access instead."
                )
                ctx.add("introspection.dunder", BLOCKED, node, reason)

    def on_call(self, node: ast.Call, quals: frozenset[str]) -> None:
        if "builtins.vars" in quals and len(node.args) == 1:
            self.check_attribute_name("__dict__", node, node.args[0])
        func = node.func
        if not isinstance(func, ast.Attribute):
            return
        fold_str = self.ctx.values.fold_str
        if func.attr == "get_field" and node.args:
            field_name = fold_str(node.args[0])
            if field_name is not None:
                self._check_template(f"{{{field_name}}}", node)
        elif func.attr in _FORMAT_METHODS:
            template = fold_str(func.value)
            if template is not None:
                self._check_template(template, node)
            if node.args and not isinstance(node.args[0], ast.Constant):
                first = fold_str(node.args[0])
                if first is not None:
                    self._check_template(first, node)

    def _check_template(self, template: str, node: ast.AST) -> None:
        """Attribute lookups inside ``str.format`` fields (``"{0.__globals__}"``)."""
        for field_name, _ in format_fields(template):
            for name in field_lookups(field_name):
                self.check_attribute_name(name, node, None)

    def _on_name(self, node: ast.Name) -> None:
        if node.id in self.ctx.policy.dunder_attributes:
            reason = _DUNDER_REASON.format(name=node.id)
            self.ctx.add("introspection.dunder", BLOCKED, node, reason)

    def _on_attribute(self, node: ast.Attribute) -> None:
        self.check_attribute_name(node.attr, node, node.value)

    def _on_subscript(self, node: ast.Subscript) -> None:
        keys = self.ctx.values.str_values(node.slice)
        policy = self.ctx.policy
        for key in keys or ():
            if key in policy.dunder_attributes or key in policy.frame_attributes:
                self.check_attribute_name(key, node, None)

    def _on_constant(self, node: ast.Constant) -> None:
        if isinstance(node.value, str) and "{" in node.value:
            self._check_template(node.value, node)
