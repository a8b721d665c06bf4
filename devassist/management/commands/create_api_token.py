from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser

from devassist.exceptions import DomainError
from devassist.tokens import api_token_create


class Command(BaseCommand):
    help = "Create an API token for USERNAME and print it once (only its hash is stored)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("username")
        parser.add_argument("--name", default="cli", help="A label to recognise the token by.")

    def handle(self, *args: Any, **options: Any) -> None:
        user = get_user_model().objects.filter(username=options["username"]).first()
        if user is None:
            raise CommandError(f"no user named {options['username']!r}")
        try:
            token, raw = api_token_create(user=user, name=options["name"])
        except DomainError as exc:
            raise CommandError(exc.message) from exc
        self.stderr.write(
            f"Created token {token.name!r} for {options['username']}. "
            "Copy it now, it is not shown again:"
        )
        self.stdout.write(raw)
