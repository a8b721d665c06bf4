"""The seccomp profile of the sandbox containers: Docker's default profile without the syscalls
that untrusted code has no use for and that widen the kernel's attack surface or reach other
processes.

``sandbox/seccomp.json`` is data derived from moby's ``profiles/seccomp/default.json`` (the
profile the engine applies when none is given) by ``seccomp_profile_derive``; the management
command ``sandbox_seccomp <default.json>`` writes it, and ``docs/sandbox-seccomp.md`` says which
moby release it comes from and how to refresh it. The Docker backend sends the file's content
with every container it creates (``security_opt`` ``seccomp=<json>``), so the protection does
not depend on the engine's version.
"""

from __future__ import annotations

import copy
import json
from functools import lru_cache
from pathlib import Path
from typing import Any

#: Allowed by Docker's default profile (some only with a capability the sandbox drops anyway);
#: refused here with the profile's default action (EPERM). ``io_uring_*`` is allowed by Docker
#: 20.10's profile and has been a steady source of kernel exploits; ``ptrace`` and
#: ``process_vm_*`` reach other processes (pid 1 runs as the same user); the rest are kernel
#: surfaces (keyrings, BPF, userfaultfd, perf) that Python code does not need.
DENIED_SYSCALLS: frozenset[str] = frozenset(
    {
        "io_uring_setup",
        "io_uring_enter",
        "io_uring_register",
        "ptrace",
        "process_vm_readv",
        "process_vm_writev",
        "keyctl",
        "add_key",
        "request_key",
        "bpf",
        "userfaultfd",
        "perf_event_open",
    }
)

PROFILE_PATH = Path(__file__).with_name("seccomp.json")


def seccomp_profile_derive(default: dict[str, Any]) -> dict[str, Any]:
    """Docker's default profile ``default`` (moby's ``default.json`` as parsed JSON) with every
    name in ``DENIED_SYSCALLS`` removed from its rules; rules left without names are dropped.
    The default action must refuse what no rule allows, else removing a rule would allow more:
    raises ``ValueError`` when it does not (or when the input is not a profile)."""
    if not isinstance(default.get("syscalls"), list):
        raise ValueError("not a seccomp profile: no 'syscalls' list")
    if default.get("defaultAction") not in {"SCMP_ACT_ERRNO", "SCMP_ACT_KILL"}:
        raise ValueError(
            f"the profile's defaultAction is {default.get('defaultAction')!r}: removing a rule "
            "would not refuse its syscalls"
        )
    profile = copy.deepcopy(default)
    rules = []
    for rule in profile["syscalls"]:
        names = [name for name in rule.get("names", []) if name not in DENIED_SYSCALLS]
        if names:
            rules.append({**rule, "names": names})
    profile["syscalls"] = rules
    return profile


def seccomp_profile_write(profile: dict[str, Any], path: Path = PROFILE_PATH) -> None:
    """Write ``profile`` in moby's own layout (tab-indented), so a refresh diffs cleanly."""
    path.write_text(json.dumps(profile, indent="\t") + "\n", encoding="utf-8")


@lru_cache(maxsize=1)
def seccomp_profile_json() -> str:
    """The shipped profile as compact JSON, the form ``security_opt`` takes."""
    profile = json.loads(PROFILE_PATH.read_text(encoding="utf-8"))
    return json.dumps(profile, separators=(",", ":"))
