"""Write ``static/chat/pygments.css``, the code highlighting of the light and dark themes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand

from devassist.markdown import pygments_css


class Command(BaseCommand):
    help = "Regenerate static/chat/pygments.css from the Pygments styles in devassist.markdown."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument(
            "--check",
            action="store_true",
            help="Write nothing; exit 1 if the file differs from what would be written.",
        )

    def handle(self, *args: Any, check: bool = False, **options: Any) -> None:
        path = Path(settings.BASE_DIR) / "static" / "chat" / "pygments.css"
        css = pygments_css()
        if check:
            if path.read_text() != css:
                self.stderr.write(f"{path} is out of date: run manage.py pygments_css")
                raise SystemExit(1)
            return
        path.write_text(css)
        self.stdout.write(f"Wrote {path}")
