"""What every checker shares and promises.

A checker reports the findings of one category of rules. The scan calls its ``handlers`` for
every node of their types, children before parents, and its ``on_call`` for the calls whose
function may be one of ``calls`` or whose method name is in ``methods`` (other calls are
skipped before any checker sees them). Checkers only read the bindings and resolvers of the
``Context`` and add findings to it.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from sandbox.scanner.bindings import Bindings
from sandbox.scanner.folding import Folder
from sandbox.scanner.names import NameResolver
from sandbox.scanner.nodes import position
from sandbox.scanner.paths import PathResolver
from sandbox.scanner.policy import ScanPolicy
from sandbox.scanner.report import Finding, Level
from sandbox.scanner.rules import Rule, RuleTable


@dataclass(frozen=True)
class Context:
    """One tree scan as its checkers see it. ``depth`` counts the ``exec``/``eval`` strings
    this tree is nested in; ``scan_nested`` scans such a string's tree in this code's
    namespace and returns its findings (without adding them)."""

    policy: ScanPolicy
    rules: RuleTable
    bindings: Bindings
    names: NameResolver
    values: Folder
    paths: PathResolver
    depth: int
    findings: list[Finding]
    scan_nested: Callable[[ast.Module], list[Finding]]

    def add(self, rule_id: str, level: Level, node: ast.AST | None, reason: str) -> None:
        """Report a finding at ``node`` (line 0 for None: the whole input)."""
        line, col = position(node) if node is not None else (0, 0)
        self.findings.append(Finding(rule_id, level, line, col, reason))

    def add_rule(self, rule: Rule, node: ast.AST) -> None:
        self.add(rule.rule_id, rule.level, node, rule.reason)


class Checker:
    """The base of the checkers: no handlers and no calls unless a checker declares them."""

    calls: frozenset[str] = frozenset()
    methods: frozenset[str] = frozenset()

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx

    def handlers(self) -> Mapping[type[ast.AST], Callable[[Any], None]]:
        """Node type -> the method that checks such nodes (``ast.Call`` goes to ``on_call``)."""
        return {}

    def on_call(self, node: ast.Call, quals: frozenset[str]) -> None:
        """Check ``node``, a call whose function may be any of ``quals``."""
