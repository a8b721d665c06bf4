from __future__ import annotations

import os
import secrets
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandParser

from devassist.tokens import demo_user_ensure


class Command(BaseCommand):
    help = (
        "Create the demo superuser when it is missing and print its credentials. The password "
        "is random, kept in var/demo_password (mode 0600) and printed on every run."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--username", default="demo")

    def handle(self, *args: Any, **options: Any) -> None:
        password_file = settings.VAR_DIR / "demo_password"
        if password_file.exists():
            password = password_file.read_text().strip()
        else:
            password = secrets.token_urlsafe(12)
            settings.VAR_DIR.mkdir(parents=True, exist_ok=True)
            fd = os.open(password_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as handle:
                handle.write(password)
        user, created = demo_user_ensure(username=options["username"], password=password)
        if created or user.check_password(password):
            self.stdout.write(
                self.style.SUCCESS(
                    f"Demo login: username {options['username']}  password {password}"
                )
            )
        else:
            self.stdout.write(
                f"User {options['username']!r} exists with a password of its own; "
                "reset it with `python manage.py changepassword`."
            )
