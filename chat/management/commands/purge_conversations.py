"""``manage.py purge_conversations``: delete for good the conversations deleted longer ago than
``CHAT_UNDO_DELETE_S`` (a user's next delete does it too, for that user's; run this from cron
on a server whose users may not delete again)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand

from chat.services import conversations_purge


class Command(BaseCommand):
    help = "Delete for good the conversations whose undo delay has passed."

    def handle(self, *args: Any, **options: Any) -> None:
        purged = conversations_purge()
        self.stdout.write(f"{purged} conversation(s) purged")
