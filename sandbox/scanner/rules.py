"""The rule table compiled from a policy's module and function lists, one category at a time.

A listed name becomes a rule with a stable id (``process.os.system``, ``network.socket``,
``native.ctypes``; ``dynamic.eval``, ``introspection.frame`` and ``introspection.gc`` for the
listed eval, frame and gc functions), a level and the reason the model reads.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from sandbox.scanner.policy import ScanPolicy
from sandbox.scanner.report import BLOCKED, WARNING, Level

_CATEGORY_REASONS = {
    "process": (
        "{name} is blocked: the sandbox cannot start processes or run shell commands. "
        "Compute the result in Python instead."
    ),
    "network": (
        "{name} is blocked: network access is disabled in the sandbox. "
        "Work with data from the conversation or files under /tmp instead."
    ),
    "native": (
        "{name} is blocked: native code and raw memory access are disabled in the sandbox. "
        "Use pure Python and the standard library instead."
    ),
}
_FRAME_FUNCTION_REASON = (
    "{name} is blocked: frames and tracing expose the interpreter's globals and builtins, a "
    "known way out of a Python sandbox. Pass the values you need explicitly instead."
)
_GC_REASON = (
    "{name} is blocked: it hands out arbitrary live objects of the interpreter, a known way "
    "out of a Python sandbox. Keep references to the objects you need instead."
)
_EVAL_REASON = (
    "{name} runs code that can't be checked in advance; prefer ordinary Python "
    "(ast.literal_eval or json.loads for data). The code still runs."
)


@dataclass(frozen=True)
class Rule:
    rule_id: str
    level: Level
    reason: str


@dataclass(frozen=True)
class RuleTable:
    """``names``: the rule of every listed qualified name; ``methods``: the rules of listed
    method names, for receivers the scan can't name; ``blocked_parents``: every package or
    module with a blocked member, and ``builtins``."""

    names: dict[str, Rule]
    methods: dict[str, Rule]
    blocked_parents: frozenset[str]


@functools.lru_cache(maxsize=16)
def compile_rules(policy: ScanPolicy) -> RuleTable:
    """The rule table of ``policy`` (cached: policies are frozen and few)."""
    names: dict[str, Rule] = {}
    methods: dict[str, Rule] = {}
    for qualname in policy.eval_functions:
        reason = _EVAL_REASON.format(name=display(qualname))
        names[qualname] = Rule("dynamic.eval", WARNING, reason)
    for qualname in policy.gc_functions:
        names[qualname] = Rule("introspection.gc", BLOCKED, _GC_REASON.format(name=qualname))
    for qualname in policy.frame_functions:
        reason = _FRAME_FUNCTION_REASON.format(name=qualname)
        names[qualname] = Rule("introspection.frame", BLOCKED, reason)
    groups: tuple[tuple[str, frozenset[str], frozenset[str]], ...] = (
        ("native", policy.native_modules | policy.native_functions, frozenset()),
        ("network", policy.network_modules | policy.network_functions, policy.network_methods),
        ("process", policy.process_modules | policy.process_functions, policy.process_methods),
    )
    for category, entries, method_names in groups:
        template = _CATEGORY_REASONS[category]
        for qualname in entries:
            reason = template.format(name=qualname)
            names[qualname] = Rule(f"{category}.{qualname}", BLOCKED, reason)
        for method in method_names:
            reason = template.format(name=f".{method}()")
            methods[method] = Rule(f"{category}.{method}", BLOCKED, reason)
    parents = {
        qualname.rsplit(".", i)[0]
        for qualname, rule in names.items()
        if rule.level == BLOCKED
        for i in range(1, qualname.count(".") + 1)
    }
    parents.add("builtins")
    return RuleTable(names, methods, frozenset(parents))


def display(qualname: str) -> str:
    """A qualified name as the code would spell it (builtins without their module)."""
    return qualname.removeprefix("builtins.")
