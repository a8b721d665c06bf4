"""Input the scan refuses to read (blocked): ``input.nul_byte``, ``input.too_large`` and
``input.encoding`` before parsing, ``input.too_complex`` when the parser or the scan runs out
of stack."""

from __future__ import annotations

from sandbox.scanner.policy import ScanPolicy
from sandbox.scanner.report import BLOCKED, Finding


def input_findings(code: str, policy: ScanPolicy) -> list[Finding]:
    """The reasons not to parse ``code`` at all; empty when it may be parsed."""
    findings = []
    nul = code.find("\x00")
    if nul >= 0:
        line = code.count("\n", 0, nul) + 1
        reason = (
            "The code contains a NUL byte, which Python source can't contain; remove it "
            "(write '\\0' or '\\x00' inside a string literal if you need one)."
        )
        findings.append(Finding("input.nul_byte", BLOCKED, line, 0, reason))
    # Counting UTF-8 bytes costs an encode; a text longer in characters is too large anyway.
    size = (
        len(code)
        if len(code) > policy.max_code_bytes
        else len(code.encode("utf-8", "surrogatepass"))
    )
    if size > policy.max_code_bytes:
        reason = (
            f"The code is {size:,} bytes; the limit is {policy.max_code_bytes:,} bytes. Split "
            "the work into smaller steps, or put large data in a file under /tmp and read it."
        )
        findings.append(Finding("input.too_large", BLOCKED, 0, 0, reason))
    if not findings:
        try:
            code.encode("utf-8")
        except UnicodeEncodeError as exc:
            line = code.count("\n", 0, exc.start) + 1
            reason = (
                "The code contains characters that can't be encoded as UTF-8 (a lone "
                "surrogate); remove them."
            )
            findings.append(Finding("input.encoding", BLOCKED, line, 0, reason))
    return findings


def too_complex() -> Finding:
    """The finding for code nested too deeply to parse or to scan."""
    reason = (
        "The code is nested too deeply to be checked; split long expressions and deeply "
        "nested blocks into smaller statements or functions."
    )
    return Finding("input.too_complex", BLOCKED, 0, 0, reason)
