"""``manage.py purge_conversations``: delete for good the conversations deleted longer ago than
``CHAT_UNDO_DELETE_S`` (the chat does it too, for the user who opens it; run this from cron on
a server whose users may not come back)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand

from chat.services import conversations_purge


class Command(BaseCommand):
    help = "Delete for good the conversations whose undo delay has passed."

    def handle(self, *args: Any, **options: Any) -> None:
        purged = conversations_purge()
        self.stdout.write(f"{purged} conversation(s) purged")
