"""AST safety scan of model-written Python, run before the code reaches the sandbox.

The Docker container is the security boundary. This scan is not one: it rejects clearly
dangerous code early, with a reason the language model can act on, and lets everything else
through to the container. It is a pure package (standard library only, no Django, no Docker).

``scan(code, policy)`` never raises for any ``str`` input and never executes the code. It
resolves names flow-insensitively: an alias bound anywhere (``import os as o``,
``s = os.system``, ``from os import *``) counts everywhere in the code.

Layout: ``policy`` (the configurable lists and limits), ``rules`` (the rule table compiled
from them), ``report`` (findings and the report), ``bindings``/``names`` (name resolution),
``folding`` (literal strings and integer sizes), ``paths`` (file paths), ``checks/`` (one
checker per category of rules) and ``scanning`` (``scan()`` and the walk that drives them).
"""

from __future__ import annotations

from sandbox.scanner.policy import DEFAULT_POLICY, ScanPolicy
from sandbox.scanner.report import BLOCKED, WARNING, Finding, Level, ScanReport
from sandbox.scanner.scanning import scan

__all__ = [
    "BLOCKED",
    "DEFAULT_POLICY",
    "WARNING",
    "Finding",
    "Level",
    "ScanPolicy",
    "ScanReport",
    "scan",
]
