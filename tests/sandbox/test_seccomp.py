"""The shipped seccomp profile and the command that derives it from Docker's default profile.

What the profile refuses inside a real container is tested in test_docker.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from django.core.management import CommandError, call_command

from sandbox.seccomp import (
    DENIED_SYSCALLS,
    PROFILE_PATH,
    seccomp_profile_derive,
    seccomp_profile_json,
)

#: The shape of moby's default.json, shortened: an allow list, a kernel-gated rule, a
#: capability-gated rule.
UPSTREAM: dict[str, Any] = {
    "defaultAction": "SCMP_ACT_ERRNO",
    "archMap": [{"architecture": "SCMP_ARCH_X86_64", "subArchitectures": ["SCMP_ARCH_X86"]}],
    "syscalls": [
        {
            "names": ["read", "io_uring_setup", "write", "io_uring_enter"],
            "action": "SCMP_ACT_ALLOW",
        },
        {"names": ["ptrace"], "action": "SCMP_ACT_ALLOW", "includes": {"minKernel": "4.8"}},
        {
            "names": ["kcmp", "process_vm_readv", "process_vm_writev"],
            "action": "SCMP_ACT_ALLOW",
            "includes": {"caps": ["CAP_SYS_PTRACE"]},
        },
    ],
}


def names(profile: dict) -> set[str]:
    return {name for rule in profile["syscalls"] for name in rule["names"]}


def test_the_shipped_profile_allows_none_of_the_denied_syscalls():
    profile = json.loads(PROFILE_PATH.read_text())
    assert names(profile) & DENIED_SYSCALLS == set()
    assert profile["defaultAction"] == "SCMP_ACT_ERRNO"
    # Still Docker's profile: what ordinary Python needs is there.
    assert {"read", "write", "openat", "clone", "execve", "futex", "mmap"} <= names(profile)
    assert json.loads(seccomp_profile_json()) == profile


def test_deriving_removes_only_the_denied_names_and_drops_emptied_rules():
    profile = seccomp_profile_derive(UPSTREAM)
    assert profile["syscalls"] == [
        {"names": ["read", "write"], "action": "SCMP_ACT_ALLOW"},
        {"names": ["kcmp"], "action": "SCMP_ACT_ALLOW", "includes": {"caps": ["CAP_SYS_PTRACE"]}},
    ]
    assert profile["archMap"] == UPSTREAM["archMap"]
    assert "io_uring_setup" in UPSTREAM["syscalls"][0]["names"]  # the input is left alone


@pytest.mark.parametrize(
    "upstream",
    [
        {"defaultAction": "SCMP_ACT_ALLOW", "syscalls": []},
        {"defaultAction": "SCMP_ACT_ERRNO"},
        {"defaultAction": "SCMP_ACT_ERRNO", "syscalls": {"names": []}},
    ],
)
def test_a_profile_that_would_not_refuse_removed_syscalls_is_rejected(upstream):
    with pytest.raises(ValueError, match=r"defaultAction|not a seccomp profile"):
        seccomp_profile_derive(upstream)


def test_the_command_writes_the_derived_profile_and_checks_it(tmp_path: Path):
    source = tmp_path / "default.json"
    source.write_text(json.dumps(UPSTREAM))
    output = tmp_path / "seccomp.json"
    call_command("sandbox_seccomp", str(source), "--output", str(output))
    written = output.read_text()
    assert json.loads(written) == seccomp_profile_derive(UPSTREAM)
    assert written.startswith('{\n\t"defaultAction"')  # moby's own layout
    call_command("sandbox_seccomp", str(source), "--output", str(output), "--check")

    output.write_text(json.dumps(UPSTREAM))
    with pytest.raises(CommandError, match="differs"):
        call_command("sandbox_seccomp", str(source), "--output", str(output), "--check")


@pytest.mark.parametrize("content", ["not json", '{"defaultAction": "SCMP_ACT_ALLOW"}'])
def test_the_command_refuses_a_source_that_is_not_a_usable_profile(tmp_path: Path, content):
    source = tmp_path / "default.json"
    source.write_text(content)
    output = tmp_path / "seccomp.json"
    with pytest.raises(CommandError, match=str(source)):
        call_command("sandbox_seccomp", str(source), "--output", str(output))
    assert not output.exists()
