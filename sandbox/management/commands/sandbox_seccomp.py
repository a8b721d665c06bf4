from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from sandbox.seccomp import (
    DENIED_SYSCALLS,
    PROFILE_PATH,
    seccomp_profile_derive,
    seccomp_profile_write,
)


class Command(BaseCommand):
    # Maintenance of a data file in the repository: no settings or database involved.
    requires_system_checks: list[str] = []
    help = (
        "Regenerate sandbox/seccomp.json from moby's profiles/seccomp/default.json (Docker's "
        "default profile) minus the syscalls the sandbox refuses. --check only compares and "
        "exits 1 when the shipped file differs from what the source gives."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("source", type=Path, help="A copy of moby's default.json.")
        parser.add_argument(
            "--output", type=Path, default=PROFILE_PATH, help=f"Default: {PROFILE_PATH}."
        )
        parser.add_argument(
            "--check", action="store_true", help="Compare instead of writing; exit 1 on a change."
        )

    def handle(self, *args: Any, **options: Any) -> None:
        source: Path = options["source"]
        output: Path = options["output"]
        try:
            default = json.loads(source.read_text(encoding="utf-8"))
            profile = seccomp_profile_derive(default)
        except (OSError, ValueError) as exc:
            raise CommandError(f"{source}: {exc}") from exc
        if options["check"]:
            try:
                shipped = json.loads(output.read_text(encoding="utf-8"))
            except (OSError, ValueError) as exc:
                raise CommandError(f"{output}: {exc}") from exc
            if shipped != profile:
                raise CommandError(f"{output} differs from what {source} gives")
            self.stdout.write(f"{output} is what {source} gives")
            return
        seccomp_profile_write(profile, output)
        self.stdout.write(
            self.style.SUCCESS(
                f"Wrote {output}: {len(profile['syscalls'])} rules, without "
                f"{', '.join(sorted(DENIED_SYSCALLS))}"
            )
        )
