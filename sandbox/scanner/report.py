"""Findings and the report of one scan: what the sandbox service returns and the model reads."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal

Level = Literal["blocked", "warning"]
BLOCKED: Level = "blocked"
WARNING: Level = "warning"

CLEAN_TEXT = "No safety issues detected."


@dataclass(frozen=True)
class Finding:
    """One rule match. ``line`` is 1-based (0 for the whole input), ``col`` a 0-based offset."""

    rule_id: str
    level: Level
    line: int
    col: int
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _sort_key(finding: Finding) -> tuple[int, int, int, str]:
    return (0 if finding.level == BLOCKED else 1, finding.line, finding.col, finding.rule_id)


@dataclass(frozen=True)
class ScanReport:
    """The findings of one scan: blocked ones first, then warnings, each group by line.

    ``omitted`` counts findings left out because of ``ScanPolicy.max_report_findings``; they
    are never blocked ones unless more blocked findings than the cap were found.
    """

    findings: tuple[Finding, ...] = ()
    omitted: int = 0

    @property
    def blocked(self) -> bool:
        """True when the code must not run."""
        return any(f.level == BLOCKED for f in self.findings)

    @property
    def warnings(self) -> tuple[Finding, ...]:
        return tuple(f for f in self.findings if f.level == WARNING)

    @property
    def text(self) -> str:
        """The report as the model sees it; exactly ``CLEAN_TEXT`` when there is nothing."""
        if not self.findings:
            return CLEAN_TEXT
        header = "Safety check BLOCKED:" if self.blocked else "Safety check WARNING:"
        lines = [header]
        for f in sorted(self.findings, key=_sort_key):
            lines.append(f"  [{f.level.upper()}] (line {f.line}) {f.reason}")
        if self.omitted:
            lines.append(f"  ... {self.omitted} more finding(s) not shown")
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        return {
            "blocked": self.blocked,
            "text": self.text,
            "findings": [f.to_dict() for f in self.findings],
        }


def build_report(
    findings: Iterable[Finding], *, disabled_rules: frozenset[str], limit: int
) -> ScanReport:
    """The report of ``findings``, sorted as ``ScanReport`` promises, without the findings of
    ``disabled_rules`` (a rule id also disables the ids under it: ``network`` drops
    ``network.socket``), each (rule, level, line, reason) once, and at most ``limit`` kept."""
    unique: dict[tuple[str, str, int, str], Finding] = {}
    for finding in sorted(findings, key=_sort_key):
        rule_id = finding.rule_id
        if disabled_rules and any(
            rule_id == d or rule_id.startswith(f"{d}.") for d in disabled_rules
        ):
            continue
        unique.setdefault((rule_id, finding.level, finding.line, finding.reason), finding)
    kept = list(unique.values())
    return ScanReport(tuple(kept[:limit]), max(0, len(kept) - limit))
