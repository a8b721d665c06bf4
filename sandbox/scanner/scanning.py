"""``scan()``: the input checks, the parse, two passes over the tree, and the report.

The first pass records every binding (``bindings.py``); the second calls the checkers on every
node, children before parents, so the memoised resolvers they share never recurse deeply.
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from typing import Any

from sandbox.scanner.bindings import Bindings
from sandbox.scanner.checks.base import Checker, Context
from sandbox.scanner.checks.dynamic import DynamicCode
from sandbox.scanner.checks.files import FileAccess
from sandbox.scanner.checks.input import input_findings, too_complex
from sandbox.scanner.checks.introspection import Introspection
from sandbox.scanner.checks.listed import ListedNames
from sandbox.scanner.checks.resources import Resources
from sandbox.scanner.names import NameResolver
from sandbox.scanner.nodes import walk
from sandbox.scanner.paths import PathResolver, WorkingDir
from sandbox.scanner.policy import DEFAULT_POLICY, ScanPolicy
from sandbox.scanner.report import WARNING, Finding, ScanReport, build_report
from sandbox.scanner.rules import compile_rules


class TreeScan:
    """One scan of one parsed tree; ``findings`` holds what it found so far (also when ``run``
    raised ``RecursionError``). ``bindings`` and ``cwd`` are inherited by the scan of an
    ``exec``/``eval`` string, which runs in the same namespace; ``depth`` counts those."""

    def __init__(
        self,
        policy: ScanPolicy,
        *,
        depth: int = 0,
        bindings: Bindings | None = None,
        cwd: WorkingDir | None = None,
    ) -> None:
        self.policy = policy
        self.depth = depth
        self.bindings = bindings if bindings is not None else Bindings()
        self.cwd = cwd if cwd is not None else WorkingDir(policy.working_dir)
        self.findings: list[Finding] = []

    def run(self, tree: ast.AST) -> None:
        """Scan ``tree``, adding to ``findings``. May raise ``RecursionError``."""
        nodes = walk(tree)
        calls = self.bindings.collect(nodes)
        names = NameResolver(self.bindings, getattr_functions=self.policy.getattr_functions)
        self.cwd = self.cwd.after(calls, names)
        ctx = Context(
            policy=self.policy,
            rules=compile_rules(self.policy),
            bindings=self.bindings,
            names=names,
            values=names.values,
            paths=PathResolver(self.bindings, names, names.values, self.cwd),
            depth=self.depth,
            findings=self.findings,
            scan_nested=self._scan_nested,
        )
        listed, attributes = ListedNames(ctx), Introspection(ctx)
        self._check(
            nodes,
            names,
            [
                listed,
                attributes,
                DynamicCode(ctx, listed=listed, attributes=attributes),
                FileAccess(ctx),
                Resources(ctx),
            ],
        )

    @staticmethod
    def _check(nodes: list[ast.AST], names: NameResolver, checkers: list[Checker]) -> None:
        """The second pass: every node to the checkers that handle its type, each call to the
        checkers that declared its function or method name, in ``checkers`` order."""
        handlers: dict[type[ast.AST], list[Callable[[Any], None]]] = {}
        for checker in checkers:
            for kind, handler in checker.handlers().items():
                handlers.setdefault(kind, []).append(handler)
        # Reversed breadth-first order visits children before parents, so the memoised
        # resolvers never recurse deeply.
        for node in reversed(nodes):
            if type(node) is ast.Call:
                func = node.func
                quals = names.qualnames(func)
                method = func.attr if type(func) is ast.Attribute else None
                for checker in checkers:
                    if method in checker.methods or not quals.isdisjoint(checker.calls):
                        checker.on_call(node, quals)
            else:
                for handler in handlers.get(type(node), ()):
                    handler(node)

    def _scan_nested(self, tree: ast.Module) -> list[Finding]:
        inner = TreeScan(
            self.policy, depth=self.depth + 1, bindings=self.bindings.inherited(), cwd=self.cwd
        )
        inner.run(tree)
        return inner.findings


def scan(code: str, policy: ScanPolicy = DEFAULT_POLICY) -> ScanReport:
    """Check ``code`` against ``policy`` without running it; never raises for a ``str``.

    Oversized input, NUL bytes and text that isn't valid UTF-8 are refused before parsing
    (blocked ``input.*`` findings). A syntax error is reported as a ``syntax_error`` warning
    and nothing else is checked, since Python will refuse the code itself.
    """
    findings = input_findings(code, policy)
    if not findings:
        findings = _tree_findings(code, policy)
    return build_report(
        findings, disabled_rules=policy.disabled_rules, limit=policy.max_report_findings
    )


def _tree_findings(code: str, policy: ScanPolicy) -> list[Finding]:
    try:
        tree = ast.parse(code)
    except SyntaxError as exc:
        message = exc.msg or "invalid syntax"
        reason = f"Syntax error: {message}. Python will report it when the code runs; fix it."
        column = max((exc.offset or 1) - 1, 0)
        return [Finding("syntax_error", WARNING, exc.lineno or 0, column, reason)]
    except (RecursionError, MemoryError):
        return [too_complex()]
    scanner = TreeScan(policy)
    try:
        scanner.run(tree)
    except RecursionError:
        scanner.findings.append(too_complex())
    return scanner.findings
