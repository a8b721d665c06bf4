"""Code and names chosen at run time: the ``dynamic`` category.

Warnings: ``dynamic.import`` (import by name, ``sys.modules[<computed>]``), ``dynamic.getattr``
(attribute access with a computed name, getattr-like functions passed around as values);
blocked: ``dynamic.module_getattr`` (a computed name on a module with blocked members). Literal
names are folded and checked as the import or attribute they spell (through ``ListedNames``
and ``Introspection``), and a literal code string given to ``eval``/``exec``/... is scanned
in the code's namespace, its findings reported on the call.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Mapping
from typing import Any

from sandbox.scanner.checks.base import Checker, Context
from sandbox.scanner.checks.introspection import Introspection
from sandbox.scanner.checks.listed import ListedNames
from sandbox.scanner.names import VALUE_GETTERS
from sandbox.scanner.nodes import argument, position
from sandbox.scanner.report import BLOCKED, WARNING, Finding
from sandbox.scanner.rules import display

# Functions that run a string of Python code, and the keyword names of that string.
_DYNAMIC_EVALUATORS = frozenset(
    {
        "builtins.eval",
        "builtins.exec",
        "builtins.compile",
        "timeit.timeit",
        "timeit.repeat",
        "timeit.Timer",
        "cProfile.run",
        "profile.run",
        "pdb.run",
    }
)
_CODE_KEYWORDS = frozenset({"source", "stmt", "setup", "statement", "cmd"})
# Code strings nested deeper than this in code strings are not scanned.
_MAX_EVAL_DEPTH = 3
_ATTRGETTERS = frozenset({"operator.attrgetter", "operator.methodcaller"})


class DynamicCode(Checker):
    methods = frozenset({"__getattribute__", "__import__"})

    def __init__(self, ctx: Context, *, listed: ListedNames, attributes: Introspection) -> None:
        super().__init__(ctx)
        self.listed = listed
        self.attributes = attributes
        policy = ctx.policy
        self.calls = (
            policy.getattr_functions | policy.import_functions | _ATTRGETTERS | _DYNAMIC_EVALUATORS
        )
        self._by_name = policy.getattr_functions | policy.import_functions

    def handlers(self) -> Mapping[type[ast.AST], Callable[[Any], None]]:
        return {
            ast.Name: self._on_name,
            ast.Attribute: self._on_attribute,
            ast.Subscript: self._on_subscript,
        }

    def on_call(self, node: ast.Call, quals: frozenset[str]) -> None:
        method = node.func.attr if isinstance(node.func, ast.Attribute) else None
        policy = self.ctx.policy
        if quals & policy.getattr_functions or method == "__getattribute__":
            self._check_getattr(node, quals)
        if quals & policy.import_functions or method == "__import__":
            self._check_dynamic_import(node, quals)
        if quals & _ATTRGETTERS:
            self._check_attrgetter(node, "operator.methodcaller" in quals)
        if quals & _DYNAMIC_EVALUATORS:
            self._scan_literal_code(node, quals)

    def _on_name(self, node: ast.Name) -> None:
        if type(node.ctx) is ast.Load:
            quals = self.ctx.names.name_qualnames(node.id)
            if not quals.isdisjoint(self._by_name):
                self._check_reference(node, quals)

    def _on_attribute(self, node: ast.Attribute) -> None:
        if type(node.ctx) is ast.Load:
            quals = self.ctx.names.qualnames(node)
            if not quals.isdisjoint(self._by_name):
                self._check_reference(node, quals)

    def _check_reference(self, node: ast.expr, quals: frozenset[str]) -> None:
        """Warn about getattr-like and import functions passed around instead of called."""
        if id(node) in self.ctx.bindings.called:
            return
        if quals & self.ctx.policy.getattr_functions:
            reason = (
                f"{display(min(quals))} is used as a value, so the attribute names it will "
                "look up can't be checked; call it directly with a literal name."
            )
            self.ctx.add("dynamic.getattr", WARNING, node, reason)
        if quals & self.ctx.policy.import_functions:
            reason = (
                f"{display(min(quals))} is used as a value, so the modules it will import "
                "can't be checked; use plain import statements."
            )
            self.ctx.add("dynamic.import", WARNING, node, reason)

    def _on_subscript(self, node: ast.Subscript) -> None:
        names = self.ctx.names
        if (
            self.ctx.values.str_values(node.slice) is None
            and not (isinstance(node.slice, ast.Name) and node.slice.id == "__name__")
            and "sys.modules" in names.qualnames(node.value)
        ):
            reason = (
                "sys.modules[...] with a computed key can reach any loaded module, so it can't "
                "be checked; use a plain import statement."
            )
            self.ctx.add("dynamic.import", WARNING, node, reason)

    def _check_getattr(self, node: ast.Call, quals: frozenset[str]) -> None:
        ctx = self.ctx
        func = node.func
        receiver: ast.expr | None
        if isinstance(func, ast.Attribute) and func.attr == "__getattribute__":
            receiver = node.args[0] if len(node.args) == 2 else func.value
            name_node = node.args[-1] if node.args else None
            label, reaches_values = "__getattribute__", True
        else:
            receiver = node.args[0] if node.args else None
            name_node = argument(node, 1, "name")
            label = display(min(quals & ctx.policy.getattr_functions))
            reaches_values = label.rpartition(".")[2] in VALUE_GETTERS
        names = ctx.values.str_values(name_node)
        if names is not None:
            for name in names:
                self.attributes.check_attribute_name(name, node, receiver)
            if reaches_values:
                self.listed.check_qualnames(node)
            return
        if name_node is None:
            return
        receiver_quals = ctx.names.qualnames(receiver) if receiver is not None else frozenset()
        blocked_parent = receiver_quals & ctx.rules.blocked_parents
        if reaches_values and blocked_parent:
            shown = display(min(blocked_parent))
            reason = (
                f"{label}() on {shown} with a computed attribute name is blocked: it can reach "
                f"blocked functions of {shown}. Use a literal attribute name instead."
            )
            ctx.add("dynamic.module_getattr", BLOCKED, node, reason)
            return
        reason = (
            f"{label}() with a computed attribute name can't be checked; use a literal "
            "attribute name where possible. The code still runs."
        )
        ctx.add("dynamic.getattr", WARNING, node, reason)

    def _check_dynamic_import(self, node: ast.Call, quals: frozenset[str]) -> None:
        label = display(min(quals & self.ctx.policy.import_functions, default="__import__"))
        names = self.ctx.values.str_values(argument(node, 0, "name"))
        if names is None:
            reason = (
                f"{label}() imports a module whose name is computed at run time, so it can't "
                "be checked; use a plain import statement. The code still runs."
            )
            self.ctx.add("dynamic.import", WARNING, node, reason)
            return
        for name in names:
            module = name.replace(":", ".")
            if not module.startswith("."):
                self.listed.check_module(module, node)
            reason = (
                f"{label}({name!r}) imports a module by name; use a plain import statement "
                "instead. The code still runs."
            )
            self.ctx.add("dynamic.import", WARNING, node, reason)

    def _check_attrgetter(self, node: ast.Call, method_caller: bool) -> None:
        for arg in node.args[:1] if method_caller else node.args:
            names = self.ctx.values.str_values(arg)
            if names is None:
                reason = (
                    "operator.attrgetter/methodcaller with a computed name can't be checked; "
                    "use a literal attribute name where possible. The code still runs."
                )
                self.ctx.add("dynamic.getattr", WARNING, node, reason)
                continue
            for name in names:
                for part in name.split("."):
                    self.attributes.check_attribute_name(part, node, None)

    def _scan_literal_code(self, node: ast.Call, quals: frozenset[str]) -> None:
        ctx = self.ctx
        if ctx.depth >= _MAX_EVAL_DEPTH:
            return
        arguments = node.args[:1] + [kw.value for kw in node.keywords if kw.arg in _CODE_KEYWORDS]
        label = display(min(quals & _DYNAMIC_EVALUATORS))
        line, col = position(node)
        for code in arguments:
            source = ctx.values.fold_str(code)
            if source is None or "\x00" in source:
                continue
            try:
                tree = ast.parse(source)
            except (SyntaxError, ValueError, RecursionError, MemoryError):
                continue
            for finding in ctx.scan_nested(tree):
                reason = f"In the code passed to {label}(): {finding.reason}"
                ctx.findings.append(Finding(finding.rule_id, finding.level, line, col, reason))
